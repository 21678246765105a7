"""`StackConfig`: every section together, the checks that span sections, and which keys act only under another
key's value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..facts import catalog, contract
from .base import (
    GKE_CLUSTER_NAMING,
    PROJECT,
    SERVICE_ACCOUNT_ID_RULES,
    ConfigError,
    Section,
    _check_name,
    _fail,
    check_bucket_name,
    default_cluster_name,
)
from .cloud import ClusterConfig, GcpConfig, NetworkConfig, SystemPoolConfig, TransferPoolConfig, _check_ranges
from .gpu import GpuConfig
from .images import ImagesConfig
from .model import ModelConfig
from .operations import BenchmarkConfig, CostConfig, KubernetesConfig, LifecycleConfig, MonitoringConfig
from .router import RouterConfig
from .storage import StorageConfig
from .tpu import TpuConfig

SECTIONS: dict[str, type[Section]] = {
    cls.prefix: cls for cls in (GcpConfig, NetworkConfig, ClusterConfig, SystemPoolConfig, TransferPoolConfig,
                                GpuConfig, TpuConfig, KubernetesConfig, MonitoringConfig, StorageConfig,
                                ModelConfig, RouterConfig, BenchmarkConfig, LifecycleConfig, CostConfig,
                                ImagesConfig)
}



SESSION_SHAPE = ("systemPromptTokens", "turnsPerConversation", "inputTokensPerTurn", "outputTokensPerTurn")
"""The benchmark keys that size one session, which must fit the served context."""

class StackConfig(BaseModel):
    """The whole stack's settings. `track` picks the composition; the stack's name only names things (`stack`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    track: Literal["gpu", "tpu"] = Field(
        description="Accelerator track: gpu (A4X Max + vLLM) or tpu (Ironwood + vLLM-TorchTPU).")
    gcp: GcpConfig
    network: NetworkConfig = NetworkConfig()
    cluster: ClusterConfig = ClusterConfig()
    systemPool: SystemPoolConfig = SystemPoolConfig()
    transferPool: TransferPoolConfig = TransferPoolConfig()
    gpu: GpuConfig = GpuConfig()
    tpu: TpuConfig = TpuConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    storage: StorageConfig = StorageConfig()
    model: ModelConfig = ModelConfig()
    router: RouterConfig = RouterConfig()
    benchmark: BenchmarkConfig = BenchmarkConfig()
    lifecycle: LifecycleConfig = LifecycleConfig()
    cost: CostConfig = CostConfig()
    images: ImagesConfig = ImagesConfig()
    stack: Optional[str] = Field(
        None, description="The Pulumi stack's name (not a config key): every cloud name derives from it "
                          "(default_cluster_name); None, as in tests of one stack alone, stands for the track.")
    bucket_use: Literal["create", "import", "read"] = Field(
        "create", description="What `pulumi up` does with the checkpoint bucket (not a config key): Cloud Storage's "
                              "answer (components/checks/preflight.py bucket_use), or read with storage.bucketExists.")

    @model_validator(mode="after")
    def _check(self) -> StackConfig:
        for key, why, warn in self.inert_keys():
            if not warn:
                section, field = key.split(".", 1)
                _fail(key, getattr(getattr(self, section), field), why)
        if self.track == "gpu":
            self.gpu.check_active()
            machine = self.gpu.spec
            if machine.reservation_only and not self.gpu.reservation:
                _fail("gpu.reservation", None, f"{machine.machine_type} is reservation-only: set the name of "
                                               "your specific reservation")
            zones = machine.zones
        else:
            self.tpu.check_active()
            zones = catalog.IRONWOOD.zones
        machine = self.gpu.spec if self.track == "gpu" else catalog.IRONWOOD
        self.gcp.check_zone(machine.machine_type, zones)
        if self.gcp.zone not in zones and not self.gcp.allowUnlistedZone:
            _fail("gcp.zone", self.gcp.zone, f"{machine.machine_type} is known in {', '.join(zones)} "
                                             f"(source: {machine.zones_source}); if your reservation is elsewhere, "
                                             f"set kimi-k3-1:gcp.allowUnlistedZone=true")
        if self.benchmark.enabled and self.transferPool.nodeCount == 0:
            _fail("transferPool.nodeCount", 0, "the benchmark Job runs on the transfer pool (its C3 nodes can "
                                               "attach the Hyperdisk ML volume the tokenizer is read from); use 1")
        if (self.benchmark.enabled or self.router.calibrate) and self.router.mode == "gateway" \
                and not self.router.clientUrl:
            _fail("router.clientUrl", None, "router.mode=gateway has no router Service to load: give the Gateway's "
                                            "address, e.g. http://10.0.0.10")
        if self.track == "gpu" and self.model.speculative == "nextn":
            _fail("model.speculative", "nextn", "vLLM has no NEXTN drafter; use mtp or dflash on the gpu track")
        self._check_derived_names()
        self._check_address_space()
        # A session shape the stack sets is checked whether or not this `up` runs the benchmark: `python -m tools
        # bench` turns it on for a second `up`, once the cluster exists. Left at their defaults, they bound nothing.
        if self.benchmark.enabled or set(self.benchmark.changed()) & set(SESSION_SHAPE):
            self._check_session()
        return self

    def inert_keys(self) -> list[tuple[str, str, bool]]:
        """(key, why it has no effect, warn-only) for every key set away from its default that this stack's track or
        profile never reads. Section `track`, field `for_track` metadata and INERT_WHEN are the data."""
        found: list[tuple[str, str, bool]] = []
        for prefix, section_type in SECTIONS.items():
            section = getattr(self, prefix)
            for field in section.changed():
                extra = section_type.model_fields[field].json_schema_extra or {}
                track = section_type.track or (extra.get("track") if isinstance(extra, dict) else None)
                if track and track != self.track:
                    found.append((f"{prefix}.{field}", f"a {track}-track key; this stack's track is {self.track!r}, "
                                                       f"which never reads it: remove it from this stack file",
                                  bool(isinstance(extra, dict) and extra.get("warn"))))
        for key, when in INERT_WHEN.items():
            section, field = key.split(".", 1)
            if field in getattr(self, section).changed() and (why := when(self)):
                found.append((key, f"has no effect while {why}: remove it or change that key", False))
        return found

    @property
    def warnings(self) -> list[str]:
        """One line per key that has no effect but may legitimately sit in a file both tracks share, and per
        committed placeholder still in place (`pulumi up` would fail on it only after creating resources)."""
        lines = [f"warning: {PROJECT}:{key} has no effect: {why.split(': remove', 1)[0]}"
                 for key, why, warn in self.inert_keys() if warn]
        published = f"https://huggingface.co/{catalog.KIMI_K3_CONFIG_REPO}/blob/main/config.json"
        for field in GEOMETRY_FIELDS:
            if field in self.model.changed():
                default = type(self.model).model_fields[field].default
                lines.append(f"warning: {PROJECT}:model.{field} = {getattr(self.model, field)!r} is not Kimi K3's "
                             f"published {default!r} ({published}); the engines read the checkpoint's config.json, "
                             f"not this key, so only the plan's figures follow it, and `pulumi up` stops before any "
                             f"accelerator exists if the staged config.json disagrees (components/weights/geometry.py)")
        for key, placeholder in PLACEHOLDERS.items():
            section, field = key.split(".", 1)
            if (self.track == section or section == "gcp") and getattr(getattr(self, section), field) == placeholder:
                lines.append(f"warning: {PROJECT}:{key} is still the committed placeholder {placeholder!r}: set "
                             f"yours before `pulumi up`")
        return lines

    def _check_derived_names(self) -> None:
        """Names derived from a key are checked as themselves but blamed on that key, shown by their own name."""
        _check_name("cluster.name", self.cluster_name, 40, GKE_CLUSTER_NAMING)
        account = f"{self.cluster_name}-nodes"  # the node service account's ID
        try:
            _check_name("cluster.name", account, 30, SERVICE_ACCOUNT_ID_RULES)
        except ConfigError as err:
            _fail("cluster.name", self.cluster.name, f"the node service account ID {account!r} derived from it "
                                                     f"{err.problem}; use a cluster name of at most 24 characters")
        if self.storage.bucketName is None:
            try:
                check_bucket_name("storage.bucketName", self.bucket_name)
            except ConfigError as err:
                _fail("gcp.project", self.gcp.project,
                      f"the default storage.bucketName {self.bucket_name!r} derived from it is {err.problem}; "
                      f"set storage.bucketName")

    def _check_address_space(self) -> None:
        """The node range must hold every node, the pod range one per-node range per node; the staging ranges
        as many staging nodes as storage.stagingPods may ask for."""
        nodes = self.systemPool.nodeCount + self.transferPool.nodeCount + (
            self.gpu.node_count if self.track == "gpu" else self.tpu.slices * self.tpu.hosts_per_slice)
        _check_ranges("network.nodesCidr", self.network.nodesCidr, "network.podsCidr", self.network.podsCidr,
                      nodes, f"the stack creates {nodes} nodes")
        most = catalog.STAGING_MAX_PODS
        _check_ranges("network.stagingNodesCidr", self.network.stagingNodesCidr, "network.stagingPodsCidr",
                      self.network.stagingPodsCidr, most, f"storage.stagingPods may ask for {most} staging nodes")

    def _check_session(self) -> None:
        """The benchmark's session (SESSION_SHAPE) fits the served context."""
        b = self.benchmark
        session = b.systemPromptTokens + b.turnsPerConversation * (b.inputTokensPerTurn + b.outputTokensPerTurn)
        if session <= self.context_length:
            return
        changed = b.changed()
        field = next((f for f in ("outputTokensPerTurn", "inputTokensPerTurn", "turnsPerConversation",
                                  "systemPromptTokens") if f in changed), None)
        if field is None and self.model.contextLength is not None:
            key, value = "model.contextLength", self.model.contextLength
        else:
            key = f"benchmark.{field or 'turnsPerConversation'}"
            value = getattr(b, key.split(".")[1])
        served = "model.contextLength" if self.model.contextLength is not None else \
            f"model.contextLength's {self.track} default"
        _fail(key, value, f"a benchmark session of {b.systemPromptTokens} system + {b.turnsPerConversation} turns x "
                          f"({b.inputTokensPerTurn} in + {b.outputTokensPerTurn} out) = {session:,} tokens exceeds the "
                          f"served context of {self.context_length:,} tokens ({served})"
                          + ("" if b.enabled else "; checked with benchmark.enabled false too: `python -m tools "
                             "bench` turns it on once the cluster exists"))

    @property
    def cluster_name(self) -> str:
        """cluster.name, else derived from the stack's name: the network, subnets, routers, NATs, addresses, service
        accounts, resource policies and image repository are named after it, so two stacks never share one."""
        return self.cluster.name or default_cluster_name(self.stack or self.track)

    @property
    def bucket_name(self) -> str:
        return self.storage.bucketName or f"{self.gcp.project}-{catalog.GUIDE_NAME}-weights"

    @property
    def client_url(self) -> str:
        """Where in-cluster clients (benchmark, calibration) send requests."""
        return self.router.clientUrl or f"http://{catalog.GUIDE_NAME}-epp:{contract.ROUTER_SERVICE_PORT}"

    @property
    def context_length(self) -> int:
        return self.model.contextLength or (catalog.KIMI.max_positions if self.track == "gpu" else 480 * 1024)


GEOMETRY_FIELDS = ("architecture", "mlaLatentDim", "kdaHeads", "kdaHeadDim", "kdaConvKernel", "kdaLayers",
                   "mlaLayers")
"""model.* keys that restate the checkpoint's config.json (components/weights/geometry.py compares them at `pulumi up`);
their defaults are Kimi K3's published values, K3.1 Pro's own are not published."""

PLACEHOLDERS = {
    "gcp.project": "my-gcp-project",
    "gpu.reservation": "my-a4x-max-reservation",
    "tpu.reservation": "my-tpu7x-reservation",
}
"""The values the committed Pulumi.gpu.yaml / Pulumi.tpu.yaml carry, marked `# CHANGE` there."""

INERT_WHEN: dict[str, Callable[[StackConfig], Optional[str]]] = {
    # Keys that only act under another key's value: key -> why it is inert now, or None when it acts.
    "tpu.sglangImage": lambda c: f"tpu.engine is {c.tpu.engine!r}" if c.tpu.engine != "sglang-torchtpu" else None,
    "router.gatewayClass": lambda c: "router.mode is 'standalone'" if c.router.mode != "gateway" else None,
    "model.draftModelPath": lambda c: (f"model.speculative is {c.model.speculative!r}"
                                       if c.model.speculative not in ("nextn", "dflash") else None),
    "model.speculativeTokens": lambda c: "model.speculative is 'off'" if c.model.speculative == "off" else None,
}

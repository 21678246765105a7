"""llm-d router: the EPP Helm chart with values layered base -> monitoring -> track, the scheduling
config per track, and in gateway mode a GKE Gateway with an HTTPRoute to the InferencePool.

Layers mirror llm-d's `recipes/router/base.values.yaml`, `features/monitoring.values.yaml` and the
guide's override file (https://github.com/llm-d/llm-d-router/blob/v0.10.0/config/charts/README.md), as typed data
instead of files.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml

from ..cloud.base import Args, Component, StrInput
from ..config import StackConfig
from ..facts import catalog, contract
from ..facts.versions import (
    CALIBRATION_IMAGE,
    EPP_CONFIG_API_VERSION,
    EPP_IMAGE,
    ROUTER_GATEWAY_CHART,
    ROUTER_STANDALONE_CHART,
    ChartRef,
)
from ..plan import autoscaling, engines, images, prefixcache, replay
from ..plan import capacity as plan_capacity
from ..plan.capacity import ServingCapacity
from ..platform import hardening

RELEASE_NAME = catalog.GUIDE_NAME
"""The chart names the EPP Service `<release>-epp` and the InferencePool `<release>`
(https://github.com/llm-d/llm-d-router/blob/v0.10.0/config/charts/routerlib/templates/_helpers.tpl)."""
EPP_SERVICE = f"{RELEASE_NAME}-epp"
"""The chart's EPP Service; `StackConfig.client_url` builds the same name from the guide name."""
PLUGINS_FILE = f"{catalog.GUIDE_NAME}.yaml"
PROXY_RESOURCES = {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}
"""The standalone chart's Envoy sidecar. Its default (4 CPU, 8Gi, like the EPP's) makes the router pod request
8 CPU, more than an n2-standard-8 system node's allocatable 7.91 (tools/preview/scheduling.py): the pod would stay
Pending. Envoy only forwards to one EPP and the model servers, so half a node's worth is not needed."""
SCREENER = "disaggregatedset-rollout-screener"
GATEWAY_NAME = "llm-d-inference-gateway"


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's values merge: maps merge key by key, anything else is replaced by the later layer."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def chart_ref(cfg: StackConfig) -> ChartRef:
    return ROUTER_GATEWAY_CHART if cfg.router.mode == "gateway" else ROUTER_STANDALONE_CHART


# --------------------------------------------------------------------------- scheduling
PREFIX_PRODUCER = "approx-prefix-cache-producer"
TOKEN_PRODUCER = "token-producer"
KV_EVENT_CONSUMERS = frozenset({"precise-prefix-cache-producer", "precise-prefix-cache-scorer"})
"""The plugins of llm-d-router v0.10.0 that subscribe to engine KV-cache events, the only ones importing its
pkg/kvevents (registered in cmd/epp/runner/runner.go L631, L633): the precise producer
(pkg/epp/framework/plugins/requestcontrol/dataproducer/preciseprefixcache/producer.go L185-198, extractor.go L69-86)
and the older precise scorer (pkg/epp/framework/plugins/scheduling/scorer/preciseprefixcache/precise_prefix_cache.go
L47). The approximate producer this config runs reads none (docs/capacity.md "Prefix routing")."""
RENDER_SERVICE = f"{catalog.GUIDE_NAME}-render"
"""ClusterIP Service in front of the engines' own render endpoint, which the router's token producer calls."""


def renders_on_engine(cfg: StackConfig) -> bool:
    """Whether the stack's engine serves `/v1/completions/render`: vLLM on both tracks (components/plan/engines.py
    render_flags; vLLM-TorchTPU's vLLM 0.29.0 registers it on every `vllm serve`); the unreleased SGLang-TorchTPU has
    no such endpoint, so the router falls back to its byte estimate there."""
    return cfg.track == "gpu" or cfg.tpu.engine == "vllm-torchtpu"


def render_selector(cfg: StackConfig) -> dict[str, str]:
    """The pods the render Service sends to: GPU prefill engines (the ones started with --enable-scale-out), TPU
    leaders (the only pods with the serving labels)."""
    labels = dict(contract.SERVING_LABELS)
    if cfg.track == "gpu":
        labels[contract.ROLE_LABEL] = "prefill"
    return labels


def render_url(cfg: StackConfig) -> str:
    """The Service by its short name: the EPP runs in the same namespace (as the calibration Job reaches the EPP)."""
    return f"http://{RENDER_SERVICE}:{contract.MODEL_SERVER_PORT}"


def token_producer(cfg: StackConfig) -> Optional[dict[str, Any]]:
    """Real token IDs for the prefix model: the router renders each request on a serving engine, so its blocks are
    the engine's tokens, chat template included (`vllm` backend, llm-d-router v0.10.0 pkg/epp/framework/plugins/
    requestcontrol/dataproducer/tokenizer/tokenizer.go L299-308, vllm_http.go L61-72; `modelName` is stamped into
    every render call, L143). Without it the router packs 4 request bytes into each pseudo-token, which "never match
    engine KV blocks" (tokenizer/estimate.go L39-40). None where the engine has no render endpoint."""
    if not renders_on_engine(cfg):
        return None
    return {"type": TOKEN_PRODUCER, "parameters": {"modelName": catalog.KIMI.hf_id, "vllm": {"url": render_url(cfg)}}}


TTFT_PENALTY_MS = int(replay.TTFT_PENALTY_MS)
"""`maxTTFTPenaltyMs` of the prefix-cache-affinity filter (default 18000, prefixcacheaffinity/plugin.go L93-101),
chosen by the session replay (components/plan/replay.py TTFT_PENALTY_MS says why)."""


def router_block_tokens(cfg: StackConfig) -> int:
    """The approximate producer hashes in the unit the engines' hits land on (components/plan/engines.py
    prefix_match_unit): 128 tokens on GPU, the block on TPU."""
    return engines.prefix_match_unit(cfg)


def lru_capacity(cfg: StackConfig) -> int:
    """`lruCapacityPerServer` in router blocks: the prefix tokens one endpoint's engine keeps for the benchmark's
    sessions across HBM and host DRAM, as the engines count them (components/plan/prefixcache.py
    lru_capacity_per_server), over the router's block."""
    return prefixcache.lru_capacity_per_server(cfg)


def prefix_producer(cfg: StackConfig, capacity: ServingCapacity) -> dict[str, Any]:
    """Approximate prefix model in the engine-effective block (components/plan/kvblocks.py), sized across HBM and host
    DRAM. autoTune stays off: it would read the right block size from the engine's `vllm:cache_config_info`, but
    count HBM blocks only (https://github.com/llm-d/llm-d-router/issues/1650,
    https://github.com/llm-d/llm-d/blob/5e758d8/guides/models/qwen3-coder-480b/router/qwen3-coder-480b.values.yaml).
    What it can and cannot predict: docs/capacity.md "Prefix routing"."""
    block = router_block_tokens(cfg)
    return {"type": PREFIX_PRODUCER, "parameters": {
        "autoTune": False,
        "blockSizeTokens": block,
        "lruCapacityPerServer": lru_capacity(cfg),
        "maxPrefixTokensToMatch": cfg.context_length,
        "maxPrefixBlocksToMatch": -(-cfg.context_length // block),
    }}


def rollout_screener(cfg: StackConfig) -> dict[str, Any]:
    """Pins each request to one DisaggregatedSet revision during a rollout, so prefill and decode never pair
    across revisions (llm-d's DisaggregatedSet router values,
    https://github.com/llm-d/llm-d/blob/785dfec/guides/models/deepseek-v4/router/deepseek-v4.values.yaml). Spelled
    as the pinned router parses it (`requireRoles.values`; llm-d-router v0.10.0 pkg/epp/framework/plugins/
    requestcontrol/screener/disaggregatedsetrollout/config.go); Alpha, so the EPP needs
    --allow-experimental-plugins (track_layer). The DisaggregatedSet controller labels every pod with the set's
    name, role and revision (kubernetes-sigs/lws v0.10.0 api/disaggregatedset/v1/disaggregatedset_types.go)."""
    name = contract.disaggregated_set_name(cfg.kubernetes.namespace)
    return {"type": SCREENER, "parameters": {
        "scope": {"labelSelector": f"disaggregatedset.x-k8s.io/name={name}"},
        "revisionGating": {"mode": "max-role", "requireRoles": {"values": ["prefill", "decode"]}},
    }}


SLICE_AFFINITY = "same-slice-prefill"


def slice_affinity(cfg: StackConfig) -> list[dict[str, Any]]:
    """Keep P->D inside one slice, so the KV transfer stays on the rack's NVLink. The EPP picks the decode pod
    first, then the prefill profile's `topology-affinity-filter` keeps only prefill pods whose `Rack` equals the
    decode pick's; `topology-extractor` reads `Rack` from a pod label we name: the slice label the
    DisaggregatedSet controller sets, which placement makes one rack per slice (llm-d-router v0.10.0
    pkg/epp/framework/plugins/datalayer/extractor/topology/extractor.go, scheduling/filter/topologyaffinity/
    README.md; Alpha, so the EPP runs with --allow-experimental-plugins). It fails open: with no prefill pod
    of the decode's slice ready, a pair crosses racks and NIXL moves the KV over the RDMA NICs instead
    (docs/scaling.md)."""
    return [
        {"type": "topology-extractor", "parameters": {"rack": contract.DISAGGREGATED_SLICE_LABEL}},
        {"type": "topology-affinity-filter", "name": SLICE_AFFINITY, "parameters": {"minAffinity": "rack"}},
    ]


def endpoint_picker_config(cfg: StackConfig, capacity: ServingCapacity) -> dict[str, Any]:
    """Session- and load-aware scheduling: prefix affinity until saturated, then token load (seed post)."""
    tokens = token_producer(cfg)
    shared = [
        *([tokens] if tokens else []),
        prefix_producer(cfg, capacity),
        {"type": "prefix-cache-affinity-filter",
         "parameters": {"peakPrefillThroughput": plan_capacity.peak_prefill_throughput(cfg),
                        "maxTTFTPenaltyMs": TTFT_PENALTY_MS}},
        {"type": "token-load-scorer"},
        # Feeds token-load-scorer and the affinity filter; exact only with one EPP replica
        # (https://github.com/llm-d/llm-d/blob/5e758d8/guides/models/nemotron-3-ultra/router/nemotron-3-ultra.values.yaml).
        {"type": "inflight-load-producer"},
    ]
    affinity_then_load = [{"pluginRef": "prefix-cache-affinity-filter"}, {"pluginRef": "token-load-scorer"}]
    if cfg.track == "tpu":
        plugins = shared
        profiles = [{"name": "default", "plugins": affinity_then_load}]
    else:
        plugins = [
            rollout_screener(cfg),
            {"type": "always-disagg-pd-decider"},
            {"type": "disagg-profile-handler", "parameters": {"deciders": {"prefill": "always-disagg-pd-decider"}}},
            {"type": "prefill-filter"},
            {"type": "decode-filter"},
            {"type": "active-request-scorer"},
            *slice_affinity(cfg),
            *shared,
        ]
        profiles = [
            {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}, {"pluginRef": SLICE_AFFINITY},
                                            *affinity_then_load]},
            {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}, {"pluginRef": "active-request-scorer"}]},
        ]
    config = {"apiVersion": EPP_CONFIG_API_VERSION, "kind": "EndpointPickerConfig",
              "plugins": plugins, "schedulingProfiles": profiles}
    if cfg.autoscaling_on:
        # Flow control on: the router holds what the pool cannot take yet, at the autoscaler's set point, and the
        # autoscaler reads that queue (components/plan/autoscaling.py flow_control).
        fc = autoscaling.flow_control(cfg)
        config = {**config, "featureGates": fc["featureGates"], "plugins": [*plugins, *fc["plugins"]],
                  "flowControl": fc["flowControl"]}
    return config


# --------------------------------------------------------------------------- values layers
def base_layer() -> dict[str, Any]:
    registry, repository, tag = EPP_IMAGE
    return {"router": {
        "epp": {
            "replicas": 1,  # in-flight token accounting is per EPP process
            "flags": {"v": 2},
            "image": {"registry": registry, "repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"},
            "resources": {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"memory": "16Gi"}},
        },
        "inferencePool": {"failureMode": "FailOpen"},
        "modelServers": {"protocol": "http"},
    }}


def monitoring_layer() -> dict[str, Any]:
    """Metrics without auth so the PodMonitoring of components.observe.monitoring can scrape the EPP; the chart's own
    scrape object stays off so nothing is scraped twice. (Its `interval` and `provider` only shape that scrape
    object, so they are not passed: tests/tools/preview/test_charts.py fails on values the chart does not read.)"""
    return {"router": {"monitoring": {"prometheus": {"enabled": False, "auth": {"enabled": False}}}}}


def target_ports(cfg: StackConfig) -> list[int]:
    """One InferencePool target port per engine of a serving pod: the router's datastore makes one endpoint per
    (pod, target port) (llm-d-router v0.10.0 pkg/epp/datastore/datastore.go L332-345, `RankIndex` the port's
    position); on GPU the prefill engines and the decode sidecar's listeners sit on 8000 + rank. At most 8
    (contract.MAX_TARGET_PORTS, the CRD's limit)."""
    if cfg.track != "gpu":
        return [contract.MODEL_SERVER_PORT]
    ports = contract.engine_ports(contract.MODEL_SERVER_PORT, engines.engines_per_pod(cfg))
    if len(ports) > contract.MAX_TARGET_PORTS:
        raise ValueError(f"{len(ports)} engines per pod exceed the InferencePool's {contract.MAX_TARGET_PORTS} "
                         "target ports")
    return ports


def track_layer(cfg: StackConfig, capacity: ServingCapacity) -> dict[str, Any]:
    router: dict[str, Any] = {
        "modelServers": {
            # vLLM semantics on both tracks by default (its metrics and leader-only endpoints on TPU).
            "type": "vllm" if cfg.track == "gpu" else engines.tpu_engine_type(cfg),
            "matchLabels": dict(contract.SERVING_LABELS),
            "targetPorts": [{"number": port} for port in target_ports(cfg)],
        },
        "epp": {
            # The rollout screener is an Alpha plugin (llm-d-router v0.10.0 pkg/epp/framework/plugins/README.md).
            **({"flags": {"allow-experimental-plugins": True}} if cfg.track == "gpu" else {}),
            "pluginsConfigFile": PLUGINS_FILE,
            "pluginsCustomConfig": {PLUGINS_FILE: yaml.safe_dump(endpoint_picker_config(cfg, capacity),
                                                                 sort_keys=False)},
        },
    }
    layer: dict[str, Any] = {"router": router}
    if cfg.router.mode == "standalone":
        router["extraServicePorts"] = [{"name": "http", "port": contract.ROUTER_SERVICE_PORT, "protocol": "TCP",
                                        "targetPort": contract.ROUTER_PROXY_PORT}]
        router["proxy"] = {"resources": PROXY_RESOURCES}
    else:
        # No `provider.name: gke`: its HealthCheckPolicy sets `port` without `portSpecification`, which the
        # HealthCheckPolicy CRD's CEL rule rejects (tests/test_crd_cel.py); both GKE policies are made below.
        layer["httpRoute"] = {"create": False}  # created below, typed and schema-checked
    return layer


def digest_layer(cfg: StackConfig) -> dict[str, Any]:
    """Configured image digests (components/plan/images.py): the chart renders `repository:tag`, so the tag
    carries them."""
    router: dict[str, Any] = {}
    if images.digest(cfg.images, "epp"):
        router["epp"] = {"image": {"tag": images.tag(cfg.images, "epp")}}
    if images.digest(cfg.images, "envoy") and cfg.router.mode == "standalone":
        router["proxy"] = {"presets": {"envoy": {"image": images.ref(cfg.images, "envoy")}}}
    return {"router": router} if router else {}


def router_values(cfg: StackConfig, capacity: ServingCapacity) -> dict[str, Any]:
    layers = [base_layer()]
    if cfg.monitoring.enabled:
        layers.append(monitoring_layer())
    layers += [track_layer(cfg, capacity), digest_layer(cfg)]
    values: dict[str, Any] = {}
    for layer in layers:
        values = deep_merge(values, layer)
    return values


# --------------------------------------------------------------------------- component
class RouterArgs(Args):
    namespace: StrInput
    config: StackConfig
    capacity: ServingCapacity
    proxy_only_subnet: Optional[pulumi.Resource] = None
    """Regional Gateways need the proxy-only subnet before they can program a load balancer."""


class Router(Component):
    def __init__(self, name: str, args: RouterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("router", "Router", name, opts)
        cfg = args.config
        ref = chart_ref(cfg)
        self.chart = k8s.helm.v4.Chart(
            f"{name}-chart",
            name=RELEASE_NAME,
            chart=ref.chart,
            version=ref.version,
            namespace=args.namespace,
            values=router_values(cfg, args.capacity),
            opts=self.child(),
        )
        self.render = None
        if renders_on_engine(cfg):
            self.render = k8s.core.v1.Service(
                f"{name}-render",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=RENDER_SERVICE, namespace=args.namespace),
                spec=k8s.core.v1.ServiceSpecArgs(
                    type="ClusterIP",
                    selector=render_selector(cfg),
                    ports=[k8s.core.v1.ServicePortArgs(name="http", port=contract.MODEL_SERVER_PORT,
                                                       target_port=contract.MODEL_SERVER_PORT, protocol="TCP")],
                ),
                opts=self.child(),
            )
        self.gateway = self.route = None
        if cfg.router.mode == "gateway":
            self.gateway = k8s.apiextensions.CustomResource(
                f"{name}-gateway",
                api_version="gateway.networking.k8s.io/v1",
                kind="Gateway",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=GATEWAY_NAME, namespace=args.namespace),
                spec={"gatewayClassName": cfg.router.gatewayClass, "listeners": [{
                    "name": "http", "port": contract.ROUTER_SERVICE_PORT, "protocol": "HTTP",
                    "allowedRoutes": {"namespaces": {"from": "Same"}}}]},
                opts=self.child(depends_on=[args.proxy_only_subnet] if args.proxy_only_subnet else None),
            )
            self.route = k8s.apiextensions.CustomResource(
                f"{name}-route",
                api_version="gateway.networking.k8s.io/v1",
                kind="HTTPRoute",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=RELEASE_NAME, namespace=args.namespace),
                spec={
                    "parentRefs": [{"name": GATEWAY_NAME}],
                    "rules": [{
                        "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                        "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                         "name": RELEASE_NAME}],
                    }],
                },
                # The InferencePool it targets comes with the chart.
                opts=self.child(depends_on=[self.chart, self.gateway]),
            )
            self.policies = [
                k8s.apiextensions.CustomResource(
                    f"{name}-{suffix}",
                    api_version="networking.gke.io/v1",
                    kind=kind,
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=RELEASE_NAME, namespace=args.namespace),
                    spec={"targetRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                        "name": RELEASE_NAME}, "default": default},
                    opts=self.child(depends_on=[self.chart]),
                )
                for suffix, kind, default in gke_pool_policies()
            ]
        self.finish(release=RELEASE_NAME, service=EPP_SERVICE)


def gke_pool_policies() -> list[tuple[str, str, dict[str, Any]]]:
    """What the gateway chart's `provider.name: gke` adds (llm-d-router v0.10.0
    config/charts/llm-d-router-gateway/templates/gke.yaml, https://github.com/llm-d/llm-d-router/blob/v0.10.0/
    config/charts/llm-d-router-gateway/templates/gke.yaml): a fast HTTP health check of the model servers and a
    5-minute backend timeout with request logging. The health check names its port with `USE_FIXED_PORT`, as
    the HealthCheckPolicy CRD requires for an explicit port (its CEL rules; the chart's gRPC branch does so)."""
    health = {"timeoutSec": 2, "checkIntervalSec": 2, "config": {"type": "HTTP", "httpHealthCheck": {
        "portSpecification": "USE_FIXED_PORT", "port": contract.MODEL_SERVER_PORT, "requestPath": "/health"}}}
    backend = {"timeoutSec": 300, "logging": {"enabled": True}}
    return [("health-check", "HealthCheckPolicy", health), ("backend-policy", "GCPBackendPolicy", backend)]


CALIBRATION_SCRIPT = """\
import concurrent.futures, json, os, statistics, time, urllib.request

endpoint = os.environ["ENDPOINT"].rstrip("/")
chunk = int(os.environ["CHUNK_TOKENS"])
samples = int(os.environ.get("SAMPLES", "8"))
endpoints = int(os.environ["ROUTER_ENDPOINTS"])
model = os.environ["MODEL"]


def ttft(tag):
    # A fresh prefix each time, so every request is a full-chunk prefill; about one token per common word.
    prompt = f"calibration run {tag} " + "lorem ipsum " * (chunk // 2)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 1, "stream": False}).encode()
    request = urllib.request.Request(f"{endpoint}/v1/completions", body, {"Content-Type": "application/json"})
    start = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as response:
        response.read()
    return time.monotonic() - start


# llm-d's method: one unloaded chunk at a time (one engine, the rest of its group idle).
unloaded = statistics.median(ttft(i) for i in range(samples))
# Every endpoint busy at once, as the router sees them under load: one fresh chunk per endpoint per wave (the
# router spreads fresh prompts by in-flight tokens), the median of the waves' request times.
loaded = []
with concurrent.futures.ThreadPoolExecutor(max_workers=endpoints) as pool:
    for wave in range(samples):
        loaded += list(pool.map(ttft, (f"{wave}-{i}" for i in range(endpoints))))
print(json.dumps({"chunk_tokens": chunk, "router_endpoints": endpoints, "median_ttft_s_unloaded": unloaded,
                  "median_ttft_s_loaded": statistics.median(loaded),
                  "peakPrefillThroughput": round(chunk / statistics.median(loaded)),
                  "peakPrefillThroughput_unloaded": round(chunk / unloaded)}))
"""


class CalibrationArgs(Args):
    namespace: StrInput
    endpoint: str
    """Base URL of the router as clients reach it."""
    image: str = CALIBRATION_IMAGE
    """Plain Python image, optionally with its digest (components/plan/images.py)."""
    chunk_tokens: int
    """Prompt size of each sample; llm-d's method divides it by the median TTFT
    (https://github.com/llm-d/llm-d/tree/main/guides/recipes/router/calibration)."""
    router_endpoints: int = 1
    """Endpoints the router picks prefill engines from: the loaded waves send one chunk per endpoint at once."""


class PrefillCalibration(Component):
    """Optional Job that measures peakPrefillThroughput through the router, unloaded (llm-d's method: one chunk at a
    time, which one engine serves with the rest of its group idle) and loaded (one chunk per router endpoint at once,
    every endpoint busy, as the router's TTFT estimate assumes under load); read its log and set
    `kimi-k3-1:router.peakPrefillThroughput` to the loaded figure."""

    def __init__(self, name: str, args: CalibrationArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("router", "PrefillCalibration", name, opts)
        script = k8s.core.v1.ConfigMap(
            f"{name}-script",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{catalog.GUIDE_NAME}-calibration", namespace=args.namespace),
            data={"calibrate.py": CALIBRATION_SCRIPT},
            opts=self.child(),
        )
        env = {"ENDPOINT": args.endpoint, "MODEL": catalog.KIMI.hf_id,
               "CHUNK_TOKENS": str(args.chunk_tokens), "ROUTER_ENDPOINTS": str(args.router_endpoints),
               "PYTHONDONTWRITEBYTECODE": "1"}
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{catalog.GUIDE_NAME}-calibration", namespace=args.namespace,
                                                annotations={"pulumi.com/skipAwait": "true"}),
            spec=k8s.batch.v1.JobSpecArgs(
                backoff_limit=1,
                ttl_seconds_after_finished=86400,
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=dict(contract.LOAD_CLIENT_LABELS)),
                    spec=k8s.core.v1.PodSpecArgs(
                        restart_policy="Never",
                        automount_service_account_token=False,
                        security_context=hardening.pod_context(),
                        containers=[k8s.core.v1.ContainerArgs(
                            name="calibrate", image=args.image, command=["python3", "/calibration/calibrate.py"],
                            env=[k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in env.items()],
                            volume_mounts=[k8s.core.v1.VolumeMountArgs(name="script", mount_path="/calibration",
                                                                       read_only=True)],
                            resources=k8s.core.v1.ResourceRequirementsArgs(requests={"cpu": "500m", "memory": "256Mi"},
                                                                           limits={"cpu": "1", "memory": "512Mi"}),
                            image_pull_policy="Always",  # a one-off Job: pull what the tag (or digest) names now
                            security_context=hardening.container_context(),
                        )],
                        volumes=[k8s.core.v1.VolumeArgs(name="script", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
                            name=script.metadata.name))],
                    ),
                ),
            ),
            opts=self.child(),
        )
        self.finish(job=self.job.metadata.name)

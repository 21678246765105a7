"""Typed stack configuration: every user setting, its type, default and the checks that need no cloud.

Keys live under the project namespace as flat dotted names (`kimi-k3-1:tpu.topology`), because a
Pulumi.yaml config schema only types scalars and arrays. `load_config()` turns the raw key/value map
into `StackConfig`; any problem becomes one `ConfigError` naming the full key, the value and what
would be valid. `Pulumi.yaml`'s `config:` block is generated from these models
(`python -m tools schema --write`) and a test keeps the two identical.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
import typing
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, Literal, Optional
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from . import catalog, cidrs, contract, imageref, machines

PROJECT = "kimi-k3-1"
"""Pulumi project name, and so the config namespace."""

PROVIDER_NAMESPACES = ("gcp", "kubernetes", "pulumi")
"""Config namespaces besides the project's that a stack file may use: the providers this program creates
(their own settings, e.g. `gcp:project`) and Pulumi's (`pulumi:tags`); any other is a typo
(https://www.pulumi.com/docs/iac/concepts/config/)."""

EXPLICIT_PROVIDERS = {
    "gcp": f"gcp from {PROJECT}:gcp.project and {PROJECT}:gcp.region",
    "kubernetes": "kubernetes from the kubeconfig of the cluster the stack creates",
}
"""Provider namespaces whose stack keys this program never reads: stacks/base.py and components/cluster.py pass
every resource and invoke an explicit provider (tests/test_config_mistakes.py checks the plan has no default one)."""
DEFAULT_PROVIDER_CONFIG = "https://www.pulumi.com/docs/iac/concepts/resources/providers/#default-provider-configuration"

SECRET_KEYS = ("hfToken",)
"""Keys that only ever arrive as secrets; read with `pulumi.Config.require_secret`, never validated into
models, so their values cannot appear in an error message."""


class ConfigError(Exception):
    """A user error in stack config: reported on one line, without a traceback. `key` is a project key
    (shown with the project namespace) unless it already carries a namespace of its own."""

    def __init__(self, key: str, value: Any, problem: str):
        self.key, self.value, self.problem = key, value, problem
        shown = "(unset)" if value is None else json.dumps(value, default=str) if not isinstance(value, str) \
            else repr(value)
        full = key if ":" in key else f"{PROJECT}:{key}"
        super().__init__(f"{_shorten(full, 120)} = {_shorten(shown, SHOWN_CHARS)}: {_shorten(problem, 500)}")


SHOWN_CHARS = 80
"""A value longer than this is shortened in the middle in a message (a pasted file, a runaway script's output)."""


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit // 2]}...({len(text):,} characters)...{text[-(limit // 4):]}"


def _fail(key: str, value: Any, problem: str) -> None:
    raise ConfigError(key, value, problem)


class Section(BaseModel):
    """A group of keys sharing a prefix (`tpu.`); unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)
    prefix: ClassVar[str] = ""
    track: ClassVar[Optional[str]] = None
    """The track every key of the section belongs to (None: both); set on the other track, a key is an error."""

    def key(self, field: str) -> str:
        return f"{self.prefix}.{to_camel(field)}"

    def changed(self) -> list[str]:
        """Fields whose value differs from their default: what the user set (the CLI hands the program every
        Pulumi.yaml default, so a value equal to its default cannot be told from an unset one)."""
        return [f for f, info in type(self).model_fields.items()
                if not info.is_required() and getattr(self, f) != info.default]

    def blame(self, *fields: str) -> str:
        """The first of `fields` the user changed (else the first): the key a cross-field error names."""
        changed = self.changed()
        return next((f for f in fields if f in changed), fields[0])


def for_track(track: str, warn: bool = False) -> dict[str, Any]:
    """Field metadata: the key only acts on `track`'s stacks. `warn`: a file shared by both tracks legitimately
    carries it (prices, digests), so on the other track it is one warning line, not an error."""
    return {"track": track, "warn": warn}


_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
GCE_NAMING = "https://cloud.google.com/compute/docs/naming-resources"
"""Compute Engine names (reservations, blocks, machine types, networks): 1-63 characters matching
[a-z]([-a-z0-9]*[a-z0-9])?."""
GKE_CLUSTER_NAMING = "https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters"
"""GKE cluster names: up to 40 lowercase letters, digits and hyphens, starting with a letter, ending alphanumeric."""
PROJECT_ID_RULES = "https://cloud.google.com/resource-manager/docs/creating-managing-projects"
BUCKET_NAMING = "https://cloud.google.com/storage/docs/naming-buckets"
SERVICE_ACCOUNT_ID_RULES = "https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/create"
"""Service account IDs: 6-30 characters of a-z, 0-9 and '-'."""


def _check_name(key: str, value: str, max_len: int, rules: str = GCE_NAMING) -> None:
    """GCP resource names: lowercase letters, digits, hyphens; start with a letter; bounded length."""
    if len(value) > max_len or not _NAME.match(value):
        _fail(key, value, f"must be 1-{max_len} characters of a-z, 0-9 and '-', start with a letter "
                          f"and not end with '-' ({rules})")


def _check_project_id(key: str, value: str) -> None:
    if not re.fullmatch(r"[a-z][-a-z0-9]{4,28}[a-z0-9]", value):
        _fail(key, value, f"a project ID is 6-30 characters of a-z, 0-9 and '-', starting with a letter and not "
                          f"ending with '-' ({PROJECT_ID_RULES})")


def check_bucket_name(key: str, value: str) -> None:
    """Cloud Storage's bucket name requirements, all of them, so `pulumi up` cannot fail on one."""
    problem = None
    parts = value.split(".")
    if not re.fullmatch(r"[a-z0-9][-_.a-z0-9]*[a-z0-9]", value):
        problem = "only a-z, 0-9, '-', '_' and '.', starting and ending with a letter or digit"
    elif not 3 <= len(value) <= (222 if "." in value else 63) or any(not 1 <= len(p) <= 63 for p in parts):
        problem = "3-63 characters (up to 222 with dots, each dot-separated part 1-63)"
    elif re.fullmatch(r"\d{1,3}(\.\d{1,3}){3}", value):
        problem = "must not look like an IP address"
    elif value.startswith("goog") or re.search(r"g[o0][o0]g[l1]e", value):
        problem = "must not begin with 'goog' or contain 'google' or a close misspelling"
    if problem:
        _fail(key, value, f"not a valid bucket name: {problem} ({BUCKET_NAMING})")


class GcpConfig(Section):
    prefix: ClassVar[str] = "gcp"
    project: str = Field(description="Google Cloud project ID that owns every resource.")
    region: str = Field("us-central1", description="Region of the cluster control plane, bucket and workload policies.")
    zone: str = Field(
        description="Zone of the accelerator node pools and the Hyperdisk ML volume (must hold your reservation).")
    allowUnlistedZone: bool = Field(
        False, description="Accept a zone outside the catalog's table (A4X Max zones are unpublished: use the zone "
                           "your reservation is in).")

    @model_validator(mode="after")
    def _check(self) -> GcpConfig:
        _check_project_id(self.key("project"), self.project)
        if not re.fullmatch(r"[a-z]+-[a-z]+[0-9]+", self.region):
            _fail(self.key("region"), self.region, "expected a region such as 'us-central1'")
        if catalog.COMPUTE_ZONES.get(self.region) is None:
            _fail(self.key("region"), self.region,
                  f"this program's zone table (components/catalog.py COMPUTE_ZONES, from "
                  f"{catalog.COMPUTE_ZONES_SOURCE}) has no zones of this region; it knows "
                  f"{', '.join(catalog.COMPUTE_ZONES)}, add the region there")
        return self

    def check_zone(self, accelerator: str, accelerator_zones: tuple[str, ...]) -> None:
        """The zone is one of the region's, and a suggestion is one the track's accelerator check accepts too
        (the track is known only to the whole stack's check)."""
        zones = catalog.COMPUTE_ZONES[self.region]
        fitting = [z for z in zones if z in accelerator_zones]
        hint = (f"{accelerator} is known in {', '.join(fitting)}" if fitting else
                f"{accelerator} is known in no zone of {self.region} ({', '.join(accelerator_zones)}: change "
                f"gcp.region too, or set kimi-k3-1:gcp.allowUnlistedZone=true for your reservation's zone)")
        zone_region = re.sub(r"-(ai)?[0-9]*[a-z]$", "", self.zone)
        if zone_region != self.region:
            _fail(self.key("zone"), self.zone, f"must be a zone of gcp.region {self.region!r}; {hint}")
        if self.zone not in zones:
            _fail(self.key("zone"), self.zone, f"not a zone of {self.region}: {', '.join(zones)} "
                                                f"({catalog.COMPUTE_ZONES_SOURCE}); {hint}")


def _ipv4_cidr(key: str, value: str, example: str) -> ipaddress.IPv4Network:
    """An IPv4 range written with its prefix length (a bare address would be read as a /32)."""
    try:
        net = ipaddress.IPv4Network(value)
    except ValueError:
        _fail(key, value, f"expected an IPv4 CIDR such as '{example}'")
    if "/" not in value:
        _fail(key, value, f"give the prefix length, e.g. '{value}/{example.rsplit('/', 1)[1]}': an address alone is a "
                          "single address (/32)")
    return net


class NetworkConfig(Section):
    prefix: ClassVar[str] = "network"
    nodesCidr: str = Field("10.0.0.0/20", description="Primary range of the node subnet.")
    podsCidr: str = Field("10.4.0.0/14", description="Secondary range for pods.")
    servicesCidr: str = Field("10.8.0.0/20", description="Secondary range for services.")
    proxyOnlyCidr: str = Field(
        "10.9.0.0/23", description="Proxy-only subnet (REGIONAL_MANAGED_PROXY) for regional Gateways.")
    stagingNodesCidr: str = Field(
        "10.9.2.0/24", description="Subnet of the staging pool's nodes, which leave through a NAT of their own "
                                   "(one address per staging pod, docs/weights.md).")
    stagingPodsCidr: str = Field(
        "10.9.16.0/20", description="Secondary range of the staging subnet for the staging pool's pods.")

    @model_validator(mode="after")
    def _check(self) -> NetworkConfig:
        nets: dict[str, ipaddress.IPv4Network] = {}
        for field in type(self).model_fields:
            value = getattr(self, field)
            nets[field] = _ipv4_cidr(self.key(field), value, "10.0.0.0/20")
        if nets["proxyOnlyCidr"].prefixlen > 26:
            _fail(self.key("proxyOnlyCidr"), self.proxyOnlyCidr,
                  "a proxy-only subnet needs at least a /26 (/23 recommended)")
        fields = list(nets)
        for i, a in enumerate(fields):
            for b in fields[i + 1:]:
                if nets[a].overlaps(nets[b]):
                    # Name the range the user set (the other one is then the default it runs into).
                    mine, other = (b, a) if self.blame(b, a) == b else (a, b)
                    _fail(self.key(mine), getattr(self, mine), f"overlaps network.{other} "
                                                               f"{getattr(self, other)!r}; ranges must be disjoint")
        return self


class ClusterConfig(Section):
    prefix: ClassVar[str] = "cluster"
    name: Optional[str] = Field(None, description="GKE cluster name (default: kimi-k3-1-<track>).")
    releaseChannel: Literal["RAPID", "REGULAR", "STABLE", "EXTENDED"] = Field(
        "REGULAR", description="GKE release channel; a maintenance exclusion blocks minor and node upgrades.")
    versionPrefix: str = Field(catalog.GKE_VERSION_PREFIX,
                               description="GKE minor line to run, e.g. '1.35.'; must reach the pinned minimum.")
    deletionProtection: bool = Field(False, description="Block cluster deletion (leave off for benchmark stacks).")
    controlPlaneAccess: Literal["dns", "ip"] = Field(
        "dns", description="dns: reach the API server by its DNS endpoint, authorized by IAM (works from CI runners); "
                           "ip: by its IP, only from authorizedNetworks.")
    authorizedNetworks: list[str] = Field(
        [], description="CIDRs allowed on the IP endpoint (required for controlPlaneAccess=ip).")
    maintenanceWindowStart: str = Field(
        "03:00", description="Daily maintenance window start (UTC HH:MM); pulumi_gcp needs a window beside exclusions.")
    maintenanceExclusionStart: str = Field(
        "2026-11-01T00:00:00Z", description="RFC3339 start of the no-minor-or-node-upgrades exclusion.")

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        if self.name is not None:
            _check_name(self.key("name"), self.name, 40, GKE_CLUSTER_NAMING)
        if not re.fullmatch(r"1\.[0-9]+\.", self.versionPrefix):
            _fail(self.key("versionPrefix"), self.versionPrefix, "expected a minor line such as '1.35.'")
        minimum = catalog.parse_gke_version(catalog.GKE_MIN_VERSION)[:2]
        if catalog.parse_gke_version(self.versionPrefix) < minimum:
            _fail(self.key("versionPrefix"), self.versionPrefix,
                  f"both tracks need GKE >= {catalog.GKE_MIN_VERSION}; use '1.{minimum[1]}.' or newer")
        if self.controlPlaneAccess == "ip" and not self.authorizedNetworks:
            _fail(self.key("authorizedNetworks"), self.authorizedNetworks,
                  "controlPlaneAccess=ip needs at least one CIDR you run pulumi from, e.g. [\"203.0.113.7/32\"]")
        for cidr in self.authorizedNetworks:
            net = _ipv4_cidr(self.key("authorizedNetworks"), cidr, "203.0.113.7/32")
            if net.prefixlen == 0:
                _fail(self.key("authorizedNetworks"), cidr, "0.0.0.0/0 opens the control plane to the internet")
            if cidrs.reaches_internet(cidr):
                _fail(self.key("authorizedNetworks"), cidr,
                      f"public ranges wider than a /{cidrs.WIDEST_PUBLIC_PREFIX} open the control plane to the "
                      "internet; list the addresses you run pulumi from")
        if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", self.maintenanceWindowStart):
            _fail(self.key("maintenanceWindowStart"), self.maintenanceWindowStart,
                  "expected UTC 'HH:MM' such as '03:00'")
        _check_rfc3339(self.key("maintenanceExclusionStart"), self.maintenanceExclusionStart)
        return self


_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)")
_GO_TIME_TEXT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? [+-]\d{4} \S+")


def _check_ranges(nodes_key: str, nodes_cidr: str, pods_key: str, pods_cidr: str, nodes: int, demand: str) -> None:
    """A subnet's primary range holds `nodes` nodes and its pod range a per-node range for each."""
    node_net = ipaddress.IPv4Network(nodes_cidr)
    usable = node_net.num_addresses - cidrs.SUBNET_RESERVED_ADDRESSES
    if usable < nodes:
        _fail(nodes_key, nodes_cidr,
              f"a /{node_net.prefixlen} holds {usable} node addresses ({cidrs.SUBNET_RESERVED_ADDRESSES} of "
              f"{node_net.num_addresses} are reserved) but {demand}; use a /"
              f"{cidrs.prefix_for(nodes + cidrs.SUBNET_RESERVED_ADDRESSES)} or wider")
    pods = ipaddress.IPv4Network(pods_cidr)
    per_node = 2 ** (32 - cidrs.POD_RANGE_PREFIX_PER_NODE)
    if pods.num_addresses // per_node < nodes:
        _fail(pods_key, pods_cidr,
              f"GKE gives each node a /{cidrs.POD_RANGE_PREFIX_PER_NODE} of it ({cidrs.MAX_PODS_PER_NODE} pods "
              f"per node, {cidrs.POD_RANGE_SOURCE}), so a /{pods.prefixlen} serves "
              f"{pods.num_addresses // per_node} nodes but {demand}; use a /{cidrs.prefix_for(nodes * per_node)} "
              "or wider")


def _check_rfc3339(key: str, value: str) -> None:
    """RFC 3339 date-time (https://www.rfc-editor.org/rfc/rfc3339#section-5.6), any offset or fraction, as GKE's
    maintenance exclusions take it."""
    if _GO_TIME_TEXT.fullmatch(value):
        # The CLI reads an unquoted YAML timestamp as a time and hands it over as Go's Time.String() text
        # (pulumi/pulumi sdk/go/common/resource/config/object.go unmarshalObject, `case time.Time`).
        _fail(key, value, "an unquoted YAML timestamp reaches the program as this text; quote it in the stack "
                          "file, e.g. '2026-11-01T00:00:00Z'")
    match = _RFC3339.fullmatch(value)
    try:
        if not match:
            raise ValueError
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        _fail(key, value, "expected an RFC 3339 date-time such as '2026-11-01T00:00:00Z' or "
                          "'2026-11-01T09:00:00+09:00'")


class NodePoolConfig(Section):
    machineType: str
    nodeCount: int = Field(ge=1, le=16)

    @model_validator(mode="after")
    def _check(self) -> NodePoolConfig:
        _check_name(self.key("machineType"), self.machineType, 63)
        if machines.cpu_series(self.machineType) is None:
            known = ", ".join(t for s in machines.CPU_SERIES.values() for t in s.machine_types())
            series = self.machineType.split("-", 1)[0]
            why = (f"{series.upper()} attaches Hyperdisk only and this program has no {series.upper()} shapes yet"
                   if series in machines.HYPERDISK_ONLY_SERIES else "not in this program's machine table")
            _fail(self.key("machineType"), self.machineType,
                  f"{why} (components/machines.py CPU_SERIES: vCPUs, memory and boot disk per series); use one of "
                  f"{known}")
        return self


class SystemPoolConfig(NodePoolConfig):
    prefix: ClassVar[str] = "systemPool"
    machineType: str = Field("n2-standard-8", description="CPU pool for controllers, the router and monitoring.")
    nodeCount: int = Field(2, ge=1, le=16, description="Nodes in the CPU system pool (in the serving zone).")


class TransferPoolConfig(NodePoolConfig):
    prefix: ClassVar[str] = "transferPool"
    machineType: str = Field(
        "c3-standard-44", description="Pool for the Volume Populator transfer Job (24 vCPU request).")
    nodeCount: int = Field(1, ge=0, le=16, description="Nodes in the transfer pool (0 once the volume is hydrated).")

    @model_validator(mode="after")
    def _check_fits_the_job(self) -> TransferPoolConfig:
        """The populator's Job is created by GKE, not by this program, so the plan's scheduling proof cannot see it:
        a node too small for its CPU request leaves the volume unhydrated and every engine waiting."""
        if self.nodeCount == 0 or machines.cpu_series(self.machineType) is None:
            return self
        offered = machines.allocatable(machines.MACHINES[self.machineType]).cpu_milli / 1000
        if offered < catalog.TRANSFER_JOB_CPU_REQUEST:
            _fail(self.key("machineType"), self.machineType,
                  f"the Volume Populator's transfer Job requests {catalog.TRANSFER_JOB_CPU_REQUEST} vCPU and a "
                  f"{self.machineType} node offers {offered:.2f} allocatable, so the Job never schedules; use a "
                  f"machine type with at least {catalog.TRANSFER_JOB_CPU_REQUEST + 4} vCPUs (default c3-standard-44)")
        return self


class GpuConfig(Section):
    prefix: ClassVar[str] = "gpu"
    track: ClassVar[Optional[str]] = "gpu"
    machine: Literal["a4x-max", "a4x"] = Field(
        "a4x-max", description="a4x-max (GB300, default) or a4x (GB200 fallback).")
    reservation: Optional[str] = Field(
        None, description="Specific reservation name (A4X machines are reservation-only).")
    reservationProject: Optional[str] = Field(
        None, description="Project owning a shared reservation (default: gcp.project).")
    reservationBlock: Optional[str] = Field(None, description="Optional reservation block name.")
    reservationSubBlocks: list[str] = Field(
        [], description="Optional reservation sub-blocks (NVL72 racks), one per slice in order; needs "
                        "reservationBlock. Unset: Compute Engine picks a rack of the reservation for each slice.")
    slices: int = Field(
        1, ge=1, le=16, description="Serving units: each slice is a complete prefill/decode set on its own NVL72 "
                                    "rack (one node pool per slice), all behind one router.")
    prefillGroups: int = Field(3, ge=1, le=16, description="Prefill LeaderWorkerSet groups (seed: 3P).")
    decodeGroups: int = Field(1, ge=1, le=16, description="Decode LeaderWorkerSet groups (seed: 1D).")
    prefillNodesPerGroup: int = Field(4, ge=1, le=18, description="Nodes per prefill group (4 GPUs each).")
    decodeNodesPerGroup: int = Field(4, ge=1, le=18, description="Nodes per decode group (4 GPUs each).")
    tensorParallel: int = Field(
        1, ge=1, description="vLLM TP per engine; each pod runs GPUs/TP data-parallel engines (llm-d DP+EP form).")
    gpuMemoryPercent: int = Field(90, ge=50, le=98, description="vLLM --gpu-memory-utilization, in percent.")
    hostOffloadPercent: int = Field(
        50, ge=0, le=80, description="Share of each node's Grace DRAM given to the KV offload tier, in percent.")

    @property
    def spec(self) -> catalog.GpuMachine:
        return catalog.GPU_MACHINES[self.machine]

    @property
    def data_parallel_local(self) -> int:
        return self.spec.gpus_per_node // self.tensorParallel

    @property
    def slice_nodes(self) -> int:
        """Nodes of one slice (one rack's node pool): every prefill and decode group of it."""
        return self.prefillGroups * self.prefillNodesPerGroup + self.decodeGroups * self.decodeNodesPerGroup

    @property
    def node_count(self) -> int:
        """GPU nodes of the whole stack, every slice."""
        return self.slices * self.slice_nodes

    @model_validator(mode="after")
    def _check(self) -> GpuConfig:
        _check_reservation(self)
        return self

    def check_active(self) -> None:
        """Rules between keys, for a GPU stack only (a TPU stack's gpu.* keys are refused as having no effect)."""
        if self.slice_nodes > catalog.NVL72_MAX_NODES:
            field = self.blame("prefillNodesPerGroup", "prefillGroups", "decodeNodesPerGroup", "decodeGroups")
            _fail(self.key(field), getattr(self, field),
                  f"a slice of {self.prefillGroups}x{self.prefillNodesPerGroup} prefill + {self.decodeGroups}x"
                  f"{self.decodeNodesPerGroup} decode = {self.slice_nodes} pods x {self.spec.gpus_per_node} GPUs = "
                  f"{self.slice_nodes * self.spec.gpus_per_node} GPUs; one NVL72 domain holds "
                  f"{catalog.NVL72_MAX_NODES} nodes, {catalog.NVL72_MAX_NODES * self.spec.gpus_per_node} GPUs "
                  "(add gpu.slices instead)")
        for role in ("prefill", "decode"):
            nodes = getattr(self, f"{role}NodesPerGroup")
            ep = nodes * self.spec.gpus_per_node  # vLLM: EP = TP x DP = every GPU of the group
            if catalog.KIMI.routed_experts % ep:
                fits = [n for n in range(1, catalog.NVL72_MAX_NODES + 1)
                        if catalog.KIMI.routed_experts % (n * self.spec.gpus_per_node) == 0]
                _fail(self.key(f"{role}NodesPerGroup"), nodes,
                      f"{ep} expert-parallel ranks do not divide the {catalog.KIMI.routed_experts} routed experts "
                      f"(EP = TP x DP: https://github.com/vllm-project/vllm/blob/0170256/docs/serving/"
                      f"expert_parallel_deployment.md); use one of {', '.join(map(str, fits))} nodes")
        if self.spec.gpus_per_node % self.tensorParallel:
            _fail(self.key("tensorParallel"), self.tensorParallel,
                  f"must divide the {self.spec.gpus_per_node} GPUs of a node (one pod runs GPUs/TP engines)")
        self._check_racks()

    def _check_racks(self) -> None:
        """Each slice needs a rack of its own: the DisaggregatedSet's placement (components/modelservers.py
        PLACEMENT) admits one slice per NVL72 sub-block, so two slices' pools in one sub-block wedge the second."""
        key, blocks = self.key("reservationSubBlocks"), self.reservationSubBlocks
        if blocks and not self.reservationBlock:
            _fail(key, blocks, "naming sub-blocks needs gpu.reservationBlock too (the block that holds them)")
        if len(set(blocks)) != len(blocks):
            _fail(key, blocks, "each slice needs its own NVL72 rack: name every sub-block once")
        if blocks and len(blocks) < self.slices:
            field = self.blame("slices", "reservationSubBlocks")
            _fail(self.key(field), getattr(self, field),
                  f"gpu.slices = {self.slices} needs one sub-block per slice; gpu.reservationSubBlocks names "
                  f"{len(blocks)} (name {self.slices}, or lower gpu.slices to {len(blocks)})")
        if not blocks and self.slices > 1 and 2 * self.slice_nodes <= catalog.NVL72_MAX_NODES:
            _fail(self.key("slices"), self.slices,
                  f"slices of {self.slice_nodes} nodes: Compute Engine may place two slices' pools in one "
                  f"{catalog.NVL72_MAX_NODES}-node sub-block, where placement admits only one slice; name one "
                  f"sub-block per slice in gpu.reservationSubBlocks")


def _check_reservation(section: Section) -> None:
    """Reservation names go into a reservation URL (projects/P/reservations/R[/reservationBlocks/B...]): each
    part must be a Compute Engine name, the project a project ID."""
    for field in ("reservation", "reservationBlock"):
        value = getattr(section, field, None)
        if value is not None:
            _check_name(section.key(field), value, 63)
    for value in getattr(section, "reservationSubBlocks", []):
        _check_name(section.key("reservationSubBlocks"), value, 63)
    if section.reservationProject is not None:
        _check_project_id(section.key("reservationProject"), section.reservationProject)


class TpuConfig(Section):
    prefix: ClassVar[str] = "tpu"
    track: ClassVar[Optional[str]] = "tpu"
    topology: str = Field(
        "2x2x4", description="Ironwood slice topology per node pool (seed: 2x2x4 = 16 chips on 4 hosts).")
    slices: int = Field(2, ge=1, le=8, description="Slices = node pools = engine replicas (seed: 2).")
    reservation: Optional[str] = Field(None, description="Specific reservation name for the slices.")
    reservationHosts: Optional[int] = Field(
        None, ge=1, description="Optional: tpu7x VMs your reservation holds; when set, tpu.slices x hosts per "
                                "slice must fit in it.")
    reservationProject: Optional[str] = Field(
        None, description="Project owning a shared reservation (default: gcp.project).")
    spot: bool = Field(False, description="Use Spot capacity instead of a reservation.")
    tensorParallel: int = Field(
        32, ge=1, description="Tensor-parallel ranks per replica: every TensorCore of the slice (seed: 32 on 2x2x4).")
    expertParallel: int = Field(
        8, ge=1, description="SGLang-TorchTPU --ep-size (seed: 8); must divide tpu.tensorParallel. vLLM-TorchTPU has "
                             "no separate size: --enable-expert-parallel spreads the experts over all TP ranks.")
    memFractionPercent: int = Field(
        85, ge=50, le=95, description="Share of each TensorCore's HBM the engine may use, in percent (vLLM "
                                      "--gpu-memory-utilization; SGLang --mem-fraction-static).")
    hicacheRatio: int = Field(
        2, ge=1, le=8, description="Host-DRAM KV tier as a multiple of the HBM KV pool (seed: HiCache ratio 2); "
                                   "vLLM-TorchTPU gets it in bytes as TPURaidenOffloadingConnector cpu_bytes_to_use.")
    engine: Literal["vllm-torchtpu", "sglang-torchtpu"] = Field(
        "vllm-torchtpu", description="vllm-torchtpu: the pinned vLLM-TorchTPU release (registers Kimi K3 for TPU); "
                                     "sglang-torchtpu: an UNRELEASED SGLang-on-TorchTPU build from tpu.sglangImage.")
    sglangImage: Optional[str] = Field(
        None, description="Image of an SGLang-TorchTPU build you supply (required for tpu.engine=sglang-torchtpu; "
                          "no public release exists).")

    def check_active(self) -> None:
        """Rules that apply only when the TPU track is deployed (the CLI hands every stack all defaults)."""
        if self.topology not in catalog.TPU_MULTIHOST_TOPOLOGIES:
            shape = re.fullmatch(r"([0-9]+)x([0-9]+)x([0-9]+)", self.topology)
            if shape and catalog.topology_chips(self.topology) <= catalog.IRONWOOD.chips_per_host:
                why = "a single-host slice: it takes no workload policy, and one host cannot hold the model"
            elif shape:
                why = "this program has no source-backed Ironwood node-pool and engine layout for this shape yet"
            else:
                why = "an Ironwood topology is <x>x<y>x<z> chips"
            _fail(self.key("topology"), self.topology,
                  f"{why}; it deploys the multi-host topologies {', '.join(catalog.TPU_MULTIHOST_TOPOLOGIES)}")
        devices = self.chips_per_slice * catalog.IRONWOOD.tensorcores_per_chip
        if self.tensorParallel != devices:
            field = self.blame("tensorParallel", "topology")
            _fail(self.key(field), getattr(self, field),
                  f"a {self.topology} slice has {self.chips_per_slice} chips x "
                  f"{catalog.IRONWOOD.tensorcores_per_chip} TensorCores = {devices} devices; tpu.tensorParallel "
                  f"({self.tensorParallel}) must be {devices}")
        if self.tensorParallel % self.expertParallel:
            field = self.blame("expertParallel", "tensorParallel")
            _fail(self.key(field), getattr(self, field),
                  f"tpu.expertParallel ({self.expertParallel}) must divide tpu.tensorParallel ({self.tensorParallel})")
        if self.engine == "sglang-torchtpu" and not self.sglangImage:
            _fail(self.key("sglangImage"), None, "tpu.engine=sglang-torchtpu needs the image of your SGLang-TorchTPU "
                                                 "build (no public release exists)")
        if self.spot and self.reservation:
            _fail(self.key("spot"), self.spot, "choose either tpu.reservation or tpu.spot, not both")
        if not self.spot and not self.reservation:
            _fail(self.key("reservation"), None, "Ironwood capacity comes from a reservation: set "
                                                  "tpu.reservation, or tpu.spot=true for Spot capacity")
        if self.spot and self.reservationProject is not None:
            _fail(self.key("reservationProject"), self.reservationProject,
                  "tpu.spot=true uses no reservation; unset tpu.reservationProject")
        if self.spot and self.reservationHosts is not None:
            _fail(self.key("reservationHosts"), self.reservationHosts,
                  "tpu.spot=true uses no reservation; unset tpu.reservationHosts")
        hosts = self.slices * self.hosts_per_slice
        if self.reservationHosts is not None and hosts > self.reservationHosts:
            field = self.blame("slices", "reservationHosts", "topology")
            _fail(self.key(field), getattr(self, field),
                  f"{self.slices} slices x {self.hosts_per_slice} hosts = {hosts} tpu7x VMs, but the reservation "
                  f"holds {self.reservationHosts} (tpu.reservationHosts); use at most "
                  f"{self.reservationHosts // self.hosts_per_slice} slices")

    @property
    def chips_per_slice(self) -> int:
        return catalog.topology_chips(self.topology)

    @property
    def hosts_per_slice(self) -> int:
        return self.chips_per_slice // catalog.IRONWOOD.chips_per_host

    @model_validator(mode="after")
    def _check(self) -> TpuConfig:
        if not re.fullmatch(r"[0-9]+x[0-9]+x[0-9]+", self.topology):
            _fail(self.key("topology"), self.topology, "an Ironwood topology is <x>x<y>x<z> chips, e.g. '2x2x4'")
        if self.sglangImage is not None and (problem := imageref.reference_problem(self.sglangImage)):
            _fail(self.key("sglangImage"), self.sglangImage, problem)
        _check_reservation(self)
        return self


class KubernetesConfig(Section):
    prefix: ClassVar[str] = "kubernetes"
    namespace: str = Field(
        catalog.GUIDE_NAME, description="Namespace of the guide's workloads (router, model servers, weights).")

    @model_validator(mode="after")
    def _check(self) -> KubernetesConfig:
        if len(self.namespace) > 63 or not _NAME.match(self.namespace):
            _fail(self.key("namespace"), self.namespace, "a namespace is 1-63 characters of a-z, 0-9 and '-' "
                  "(https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-label-names)")
        owner = catalog.RESERVED_NAMESPACES.get(self.namespace) or catalog.CHART_NAMESPACES.get(self.namespace) or next(
            (why for prefix, why in catalog.RESERVED_NAMESPACE_PREFIXES.items() if self.namespace.startswith(prefix)),
            None)
        if owner:
            _fail(self.key("namespace"), self.namespace,
                  f"belongs to {owner}; the stack gives its namespace a default-deny NetworkPolicy and a quota, so "
                  f"pick a namespace of its own, e.g. '{catalog.GUIDE_NAME}'")
        return self


_CHANNEL = re.compile(r"^projects/[^/\s]+/notificationChannels/[^/\s]+$")


class MonitoringConfig(Section):
    prefix: ClassVar[str] = "monitoring"
    enabled: bool = Field(True, description="Create PodMonitoring objects so Managed Prometheus scrapes the "
                                            "model servers and the router, and the Cloud Monitoring dashboard "
                                            "and alert policies that read them.")
    notificationChannels: list[str] = Field(
        [], description="Existing notification channels the alert policies notify "
                        "(projects/<project>/notificationChannels/<id>); empty: alerts show in the console only.")
    alertErrorPercent: int = Field(5, ge=1, le=100, description="Alert when more than this percent of router "
                                                                "requests fail for 10 minutes.")
    alertKvCachePercent: int = Field(95, ge=50, le=100, description="Alert when KV-cache usage stays above this "
                                                                    "percent for 15 minutes.")

    @model_validator(mode="after")
    def _check(self) -> MonitoringConfig:
        for channel in self.notificationChannels:
            if not _CHANNEL.match(channel):
                _fail(self.key("notificationChannels"), channel,
                      "expected a channel resource name such as 'projects/my-project/notificationChannels/123' "
                      "(create the channel in Cloud Monitoring first)")
        return self


class BenchmarkConfig(Section):
    prefix: ClassVar[str] = "benchmark"
    enabled: bool = Field(False, description="Create the inference-perf Job (the driver turns it on for one run).")
    conversations: int = Field(
        64, ge=1, description="Multi-turn sessions replayed in all; `concurrency` run at once and each slot starts "
                              "its next session as one ends (inference-perf conversation replay).")
    turnsPerConversation: int = Field(8, ge=1, description="Turns per session.")
    systemPromptTokens: int = Field(
        32768, ge=0, description="Shared system prompt per session: the long prefix the router keeps warm.")
    inputTokensPerTurn: int = Field(2048, ge=1, description="New user tokens per turn.")
    outputTokensPerTurn: int = Field(512, ge=1, description="Generated tokens per turn.")
    concurrency: int = Field(32, ge=1, description="Sessions in flight at once (conversation slots).")
    runId: Optional[str] = Field(
        None, description="Folder name of this run's reports under benchmarks/<stack>/ (the driver sets it).")

    @model_validator(mode="after")
    def _check(self) -> BenchmarkConfig:
        # The run id is a folder name in the bucket and a label value (components/naming.py): refused, not rewritten.
        if self.runId is not None and not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,62}", self.runId):
            _fail(self.key("runId"), self.runId, "1-63 characters of a-z, 0-9, '-' and '_', starting with a letter or "
                                                 "digit (a folder name and a label value, kept as written)")
        if self.concurrency > self.conversations:
            # inference-perf's conversation replay runs at most one session per slot: slots beyond the sessions
            # stay idle, and the run measures less load than the key says.
            field = self.blame("concurrency", "conversations")
            _fail(self.key(field), getattr(self, field),
                  f"benchmark.concurrency ({self.concurrency}) exceeds benchmark.conversations "
                  f"({self.conversations}): at most {self.conversations} sessions can be in flight; raise "
                  f"conversations or lower concurrency")
        return self


class LifecycleConfig(Section):
    prefix: ClassVar[str] = "lifecycle"
    maxLifetimeHours: int = Field(
        24, ge=1, description="Label `max-lifetime-hours` on billable resources, so a forgotten stack shows.")
    preflight: bool = Field(
        True, description="First step of `pulumi up`: the read-only Google checks of `python -m tools preflight` "
                          "(project, billing, APIs, org policies, quotas, reservation, bucket); a failed check stops "
                          "`up` before any resource exists. false skips it.")


class CostConfig(Section):
    """Prices the public table lacks (accelerators) or that you negotiated; decimal USD as strings."""

    prefix: ClassVar[str] = "cost"
    gpuNodeHourUsd: Optional[str] = Field(None, description="Price of one GPU node-hour (A4X Max has no list price).",
                                          json_schema_extra=for_track("gpu", warn=True))
    tpuChipHourUsd: Optional[str] = Field(None, description="Price of one Ironwood chip-hour.",
                                          json_schema_extra=for_track("tpu", warn=True))
    cpuNodeHourUsd: Optional[str] = Field(None, description="Price of one CPU node-hour (system and transfer pools).")

    @model_validator(mode="after")
    def _check(self) -> CostConfig:
        for field in type(self).model_fields:
            value = getattr(self, field)
            if value is None:
                continue
            try:
                ok = math.isfinite(float(value)) and float(value) >= 0
            except ValueError:
                ok = False
            if not ok:
                _fail(self.key(field), value, "expected a finite, non-negative decimal such as '42.50' (USD)")
        return self

    def price(self, field: str) -> Optional[float]:
        value = getattr(self, field)
        return None if value is None else float(value)


class StorageConfig(Section):
    prefix: ClassVar[str] = "storage"
    bucketName: Optional[str] = Field(None, description="Checkpoint bucket (default: <project>-kimi-k3-1-weights).")
    checkpointPrefix: str = Field(
        "moonshotai/Kimi-K3.1-Pro/", description="Folder in the bucket holding the checkpoint.")
    softDeleteDays: int = Field(7, description="Bucket soft-delete retention in days: 0 (off) or 7-90.")
    deleteCheckpointOnDestroy: bool = Field(
        False, description="Let `pulumi destroy` delete the bucket and its 1.56 TB checkpoint copy.")
    bucketExists: bool = Field(
        False, description="Use the bucket as it is (kept by an earlier destroy, or made by another stack): "
                           "the stack then grants access to it but does not create or delete it.")
    volumeSizeGi: int = Field(
        1800, description="Hyperdisk ML volume size in GiB (>= checkpoint + 10% headroom).")
    throughputMiBps: Optional[int] = Field(
        None,
        description="Hyperdisk ML provisioned throughput in MiB/s (default: the least at which the volume no "
                    "longer limits any node's load, docs/weights.md).")
    nodeReadMiBps: Optional[int] = Field(
        None, ge=100, description="Read limit of one serving node from the volume in MiB/s (default: the "
                                  "assumption in components/catalog.py; set it from a measurement).")
    stagingWorkers: int = Field(
        16, ge=1, le=64, description="Files the staging Job copies from the Hugging Face Hub into the bucket at once.")
    stagingPods: Optional[int] = Field(
        None, ge=1, le=catalog.STAGING_MAX_PODS,
        description="Pods of the staging Job, one per staging node and one NAT address each (default: enough for "
                    "the 10-minute target, components/staging.py).")

    @model_validator(mode="after")
    def _check(self) -> StorageConfig:
        if self.bucketName is not None:
            check_bucket_name(self.key("bucketName"), self.bucketName)
        prefix = self.checkpointPrefix
        if re.match(r"[a-z][a-z0-9+.-]*://", prefix):
            _fail(self.key("checkpointPrefix"), prefix, "a folder inside storage.bucketName, not a URI: give the "
                                                       "bucket in storage.bucketName and the folder here, e.g. "
                                                       "'models/kimi/'")
        if not prefix.endswith("/") or prefix.startswith("/"):
            _fail(self.key("checkpointPrefix"), prefix, "a folder path such as 'models/kimi/' "
                                                       "(trailing '/', no leading '/')")
        bad_part = any(part in ("", ".", "..") for part in prefix[:-1].split("/"))
        if bad_part or re.search(r"[\x00-\x1f\x7f#\[\]*?]", prefix) or len(prefix.encode()) > 1024 - 64:
            # Object names: no '.'/'..' segments, control characters or wildcard characters; 1024 bytes in all
            # (https://cloud.google.com/storage/docs/objects#naming), leaving room for the checkpoint's file names.
            _fail(self.key("checkpointPrefix"), prefix, "folder names must not be empty, '.' or '..', nor hold "
                                                       "control or wildcard characters (#[]*?) "
                                                       "(https://cloud.google.com/storage/docs/objects#naming)")
        if self.bucketExists and self.deleteCheckpointOnDestroy:
            _fail(self.key("deleteCheckpointOnDestroy"), True,
                  "a bucket the stack only uses (storage.bucketExists=true) is never deleted by it; set one of them")
        if self.softDeleteDays and not 7 <= self.softDeleteDays <= 90:
            # Cloud Storage accepts 0 or 7-90 days (pulumi_gcp BucketSoftDeletePolicyArgs docstring).
            _fail(self.key("softDeleteDays"), self.softDeleteDays, "must be 0 (off) or 7-90 days")
        min_gib = -(-catalog.KIMI.checkpoint_bytes * 11 // 10 // 2**30)
        if not min_gib <= self.volumeSizeGi <= catalog.HYPERDISK_ML_MAX_GIB:
            _fail(self.key("volumeSizeGi"), self.volumeSizeGi,
                  f"must be {min_gib}-{catalog.HYPERDISK_ML_MAX_GIB} GiB (checkpoint 1.56 TB + 10% headroom)")
        if self.throughputMiBps is not None and not (
                catalog.HYPERDISK_ML_MIN_MIBPS <= self.throughputMiBps <= catalog.HYPERDISK_ML_MAX_MIBPS):
            _fail(self.key("throughputMiBps"), self.throughputMiBps,
                  f"Hyperdisk ML takes {catalog.HYPERDISK_ML_MIN_MIBPS}-{catalog.HYPERDISK_ML_MAX_MIBPS} MiB/s")
        return self


class ModelConfig(Section):
    prefix: ClassVar[str] = "model"
    repoId: str = Field(catalog.KIMI.hf_id,
                        description="Hugging Face repository the staging Job copies into the bucket.")
    revision: Optional[str] = Field(
        None, description="Commit of repoId to stage and serve (40 hex characters; default: `main` as the first "
                          "`pulumi up` finds it, then kept until you set one).")
    contextLength: Optional[int] = Field(
        None, description="Served context length (default: 1048576 on gpu, 491520 = 480K on tpu as the seed says).")
    path: str = Field(contract.MODELS_MOUNT_PATH, description="Checkpoint folder inside the pods (the volume's mount).")
    kvCacheDtype: Literal["fp8", "bf16"] = Field("fp8", description="KV cache element type (seed: FP8).")
    speculative: Literal["off", "mtp", "nextn", "dflash"] = Field(
        "off", description="Speculative decoding: the model's MTP head, a NEXTN or DFlash drafter, or off.")
    speculativeTokens: int = Field(3, ge=1, le=8, description="Draft tokens per step.")
    draftModelPath: Optional[str] = Field(None, description="Drafter checkpoint under /models (nextn, dflash).")
    architecture: str = Field(
        "KimiK3ForConditionalGeneration",
        description="config.json `architectures[0]` of the checkpoint; the pinned engine must register it "
                    "(Kimi K3 family: https://huggingface.co/moonshotai/Kimi-K3/blob/main/config.json).")
    mlaLatentDim: int = Field(
        576, ge=1, description="MLA cache elements per token per layer: text_config kv_lora_rank + qk_rope_head_dim "
                               "(Kimi K3: 512 + 64).")
    kdaHeads: int = Field(96, ge=1, description="KDA heads: text_config.linear_attn_config.num_heads (Kimi K3: 96).")
    kdaHeadDim: int = Field(
        128, ge=1, description="KDA head dimension: text_config.linear_attn_config.head_dim (Kimi K3: 128).")
    kdaConvKernel: int = Field(
        4, ge=2,
        description="KDA short convolution: text_config.linear_attn_config.short_conv_kernel_size (Kimi K3: 4).")
    kdaLayers: int = Field(
        69, ge=1, description="KDA layers: len(text_config.linear_attn_config.kda_layers) (Kimi K3: 69).")
    mlaLayers: int = Field(
        24, ge=1, description="MLA layers: len(text_config.linear_attn_config.full_attn_layers) (Kimi K3: 24).")
    mtpLayers: int = Field(
        0, ge=0, le=8,
        description="MTP layers the checkpoint ships: text_config.num_nextn_predict_layers (vLLM's KimiLinearConfig "
                    "takes 0 when config.json omits it); model.speculative=mtp needs at least 1, and `pulumi up` "
                    "checks the value against the revision's config.json.")
    kdaStateDtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="KDA recurrent state element type (vLLM --mamba-ssm-cache-dtype; float32 is its "
                               "default and the only one vLLM-TorchTPU 0.29.0 uses).")

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if not re.fullmatch(r"[A-Za-z0-9][-_.A-Za-z0-9]{0,95}/[A-Za-z0-9][-_.A-Za-z0-9]{0,95}", self.repoId):
            _fail(self.key("repoId"), self.repoId, "a Hugging Face repository id such as 'moonshotai/Kimi-K3.1-Pro'")
        if self.revision is not None and not re.fullmatch(r"[0-9a-f]{40}", self.revision):
            _fail(self.key("revision"), self.revision,
                  "a full 40-character lowercase commit hash (branch and tag names move, so they are not accepted; "
                  "leave it unset to stage the commit `main` points to now)")
        limit = catalog.KIMI.max_positions
        if self.contextLength is not None and not 1024 <= self.contextLength <= limit:
            _fail(self.key("contextLength"), self.contextLength,
                  f"must be 1024-{limit} (the model's max_position_embeddings)")
        if self.path.rstrip("/") != contract.MODELS_MOUNT_PATH:
            _fail(self.key("path"), self.path, f"the checkpoint is the weights volume's root, mounted at "
                                               f"{contract.MODELS_MOUNT_PATH} in every pod; any other folder points "
                                               f"the engine away from the weights")
        if self.speculative in ("nextn", "dflash"):
            if not self.draftModelPath:
                _fail(self.key("draftModelPath"), None, f"model.speculative={self.speculative} needs the drafter's "
                                                        f"folder under {self.path}/")
            parts = self.draftModelPath.split("/")
            if not self.draftModelPath.startswith(self.path.rstrip("/") + "/") or ".." in parts or "." in parts \
                    or "" in parts[1:-1] or self.draftModelPath.rstrip("/") == self.path.rstrip("/"):
                _fail(self.key("draftModelPath"), self.draftModelPath,
                      f"must be a folder inside the read-only weights volume, without '.' or '..' segments, "
                      f"e.g. {self.path}/drafter")
        return self


class RouterConfig(Section):
    prefix: ClassVar[str] = "router"
    mode: Literal["standalone", "gateway"] = Field(
        "standalone", description="standalone: EPP with its Envoy proxy; gateway: GKE Gateway + InferencePool.")
    gatewayClass: Literal["gke-l7-rilb", "gke-l7-regional-external-managed"] = Field(
        "gke-l7-rilb", description="GatewayClass in gateway mode (regional internal by default).")
    peakPrefillThroughput: int = Field(
        15928, ge=1, description="Tokens/s one replica prefills at peak (prefix-cache-affinity-filter); calibrate it.")
    calibrate: bool = Field(False, description="Create the peakPrefillThroughput calibration Job.")
    clientUrl: Optional[str] = Field(
        None, description="URL in-cluster load (benchmark, calibration) is sent to; default the standalone router's "
                          "Service; required in gateway mode, e.g. the Gateway's address.")

    @model_validator(mode="after")
    def _check(self) -> RouterConfig:
        if self.clientUrl is not None:
            try:
                url = urlsplit(self.clientUrl)
                url.port  # noqa: B018 (raises on a port that is not a number)
            except ValueError:
                url = None
            if url is None or url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment:
                _fail(self.key("clientUrl"), self.clientUrl, "an http:// or https:// URL with a host and no query, "
                                                             "e.g. http://10.0.0.10 or http://gateway.example:8080")
        return self


def _digest_field(image: str, track: Optional[str] = None, effect: str = "pods pull tag@digest") -> Any:
    return Field(None, description=f"Digest (sha256:...) of the {image} image tag's multi-platform index "
                                   f"(docs/versions.md); when set, {effect}.",
                 json_schema_extra=for_track(track, warn=True) if track else None)


class ImagesConfig(Section):
    """Optional digests of the pinned images (components/images.py); a tag can move, a digest cannot."""

    prefix: ClassVar[str] = "images"
    vllmDigest: Optional[str] = _digest_field("vLLM", "gpu")
    routingSidecarDigest: Optional[str] = _digest_field("P/D routing sidecar", "gpu")
    eppDigest: Optional[str] = _digest_field("router EPP")
    envoyDigest: Optional[str] = _digest_field("standalone router's Envoy proxy")
    tpuEngineDigest: Optional[str] = _digest_field(
        "TPU engine build's Python 3.12 base", "tpu",
        "the stack builds its vLLM-TorchTPU image FROM tag@digest (the pods always run the build by digest)")
    asapdLiteDigest: Optional[str] = _digest_field("asapd-lite NIC initializer", "gpu")
    calibrationDigest: Optional[str] = _digest_field("calibration Job's Python")
    stagingDigest: Optional[str] = _digest_field("checkpoint staging Job's Python")
    inferencePerfDigest: Optional[str] = _digest_field("inference-perf benchmark")
    lwsDigest: Optional[str] = _digest_field("LeaderWorkerSet controller")
    draDriverDigest: Optional[str] = _digest_field("NVIDIA DRA driver", "gpu")

    @model_validator(mode="after")
    def _check(self) -> ImagesConfig:
        for field in type(self).model_fields:
            value = getattr(self, field)
            if value is not None and (problem := imageref.digest_problem(value)):
                _fail(self.key(field), value, f"{problem} (the image's digest, e.g. from `crane digest <image>`)")
        return self


SECTIONS: dict[str, type[Section]] = {
    cls.prefix: cls for cls in (GcpConfig, NetworkConfig, ClusterConfig, SystemPoolConfig, TransferPoolConfig,
                                GpuConfig, TpuConfig, KubernetesConfig, MonitoringConfig, StorageConfig,
                                ModelConfig, RouterConfig, BenchmarkConfig, LifecycleConfig, CostConfig,
                                ImagesConfig)
}


class StackConfig(BaseModel):
    """The whole stack's settings. `track` picks the composition; the stack's name plays no part."""

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
        if self.benchmark.enabled:
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
                             f"accelerator exists if the staged config.json disagrees (components/geometry.py)")
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
                          f"served context of {self.context_length:,} tokens ({served})")

    @property
    def cluster_name(self) -> str:
        return self.cluster.name or f"{catalog.GUIDE_NAME}-{self.track}"

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
"""model.* keys that restate the checkpoint's config.json (components/geometry.py compares them at `pulumi up`);
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


# --------------------------------------------------------------------------- loading
def declared_keys() -> dict[str, tuple[str, Any, type]]:
    """Every user key -> (description, default or None, Python type); the source of Pulumi.yaml's schema."""
    keys: dict[str, tuple[str, Any, type]] = {
        "track": (StackConfig.model_fields["track"].description, None, str),
    }
    for prefix, section in SECTIONS.items():
        for field, info in section.model_fields.items():
            default = None if info.is_required() else info.default
            keys[f"{prefix}.{field}"] = (info.description, default, info.annotation)
    return keys


def _nest(raw: dict[str, Any]) -> dict[str, Any]:
    """Flat `section.key` strings (as Pulumi hands them over) -> nested dict for the models."""
    nested: dict[str, Any] = {}
    known = declared_keys()
    for key, value in raw.items():
        if key in SECRET_KEYS:
            continue
        if key not in known:
            close = difflib.get_close_matches(key, list(known) + list(SECRET_KEYS), n=1)
            hint = f"did you mean {PROJECT}:{close[0]}?" if close else "see the config table in README.md"
            raise ConfigError(key, value, f"unknown key; {hint}")
        annotation = known[key][2]
        if isinstance(value, str) and "list" in str(annotation):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ConfigError(key, value, "expected a list, e.g. [\"203.0.113.7/32\"]") from None
        else:
            _check_scalar(key, value, numeric=int in (annotation, *typing.get_args(annotation))
                          or key.startswith(f"{CostConfig.prefix}."))
        if type(None) in typing.get_args(annotation) and (value == "" or (value in ("0", 0) and int in typing.get_args(
                annotation))):
            # Pulumi.yaml's stand-in default for "unset": "" (strings) or 0 (integers), tools/preview/schema.py
            value = None
        section, _, field = key.partition(".")
        if field:
            nested.setdefault(section, {})[field] = value
        else:
            nested[key] = value
    return nested


def _check_scalar(key: str, value: Any, numeric: bool) -> None:
    """Pulumi hands a YAML list or map to the program as JSON text, and `.inf`/`.nan` as text a float() accepts:
    neither may reach a key that takes one name or a number (a name may well be `nan`)."""
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, (list, dict)) or (isinstance(text, str) and len(text) > 1
                                              and text[0] in "[{" and text[-1] in "]}"):
        raise ConfigError(key, value, "expected a single value, not a YAML list or map")
    if not numeric:
        return
    if isinstance(text, str) and text.lower().lstrip("+-") in (".inf", ".nan"):
        text = text.replace(".", "")  # YAML's spelling, should it arrive as text
    try:
        number = float(text)
    except (TypeError, ValueError):
        return
    if not math.isfinite(number):
        raise ConfigError(key, value, "expected a finite number")


def check_namespaces(keys: typing.Iterable[str]) -> None:
    """Every stack key must belong to this project or to a namespace the program uses (PROVIDER_NAMESPACES);
    a key under any other namespace would be ignored silently, so it is an error, with a did-you-mean."""
    known = (PROJECT, *PROVIDER_NAMESPACES)
    for full in sorted(keys):
        namespace, sep, rest = full.partition(":")
        if sep and namespace in EXPLICIT_PROVIDERS:
            value = keys.get(full) if isinstance(keys, dict) else None
            raise ConfigError(full, value, f"has no effect: stack settings of a provider configure only its "
                                          f"default provider ({DEFAULT_PROVIDER_CONFIG}), and this program gives every "
                                          f"resource an explicit one ({EXPLICIT_PROVIDERS[namespace]}); remove it")
        if not sep or namespace in known:
            continue
        close = difflib.get_close_matches(namespace, known, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]}:{rest}?" if close else \
            f"this program reads {PROJECT}:, {', '.join(n + ':' for n in PROVIDER_NAMESPACES)} keys only"
        raise ConfigError(full, None, f"unknown namespace {namespace!r}; {hint}")


def _describe_pydantic(err: ValidationError, raw: dict[str, Any]) -> ConfigError:
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    key = ".".join(loc) if loc else "track"
    value = raw.get(key)
    kind = first["type"]
    if kind == "missing":
        info = declared_keys().get(key)
        return ConfigError(key, None, f"required: {info[0] if info else 'set this key'}")
    if kind == "extra_forbidden":
        return ConfigError(key, value, "unknown key; see the config table in README.md")
    ctx = first.get("ctx") or {}
    if "expected" in ctx:
        return ConfigError(key, value, f"expected one of {ctx['expected']}")
    return ConfigError(key, value, first["msg"].lower())


def parse_config(raw: dict[str, Any]) -> StackConfig:
    """Validate a flat map of project keys (namespace stripped) into a StackConfig or raise ConfigError."""
    try:
        return StackConfig.model_validate(_nest(raw))
    except ValidationError as err:
        raise _describe_pydantic(err, raw) from None


def raw_project_config() -> dict[str, Any]:
    """All `kimi-k3-1:*` keys given to this program run, with the namespace stripped.

    Pulumi hands config to the language host as a map (set via `set_all_config` or the
    PULUMI_CONFIG environment variable); `pulumi.Config` can only look keys up, not list them,
    and listing is what lets unknown keys be rejected.
    """
    from pulumi.runtime import config as runtime_config

    try:
        from_env = runtime_config.get_config_env()
    except ValueError as err:  # PULUMI_CONFIG is the CLI's JSON; set by hand it may be anything
        raise ConfigError("environment:PULUMI_CONFIG", None, f"the environment variable is not JSON ({err}): unset "
                                                             'it, or set a JSON object of "project:key": "value" '
                                                             "pairs") from None
    if not isinstance(from_env, dict):
        raise ConfigError("environment:PULUMI_CONFIG", None, "the environment variable must hold a JSON object of "
                                                             '"project:key": "value" pairs: unset it')
    merged = {str(k): v for k, v in {**from_env, **runtime_config.CONFIG.get()}.items()}
    check_namespaces(merged)
    prefix = f"{PROJECT}:"
    return {k[len(prefix):]: v for k, v in merged.items() if k.startswith(prefix)}


def load_config() -> StackConfig:
    raw = raw_project_config()
    for key in SECRET_KEYS:
        if not raw.get(key):
            raise ConfigError(key, None, f"required secret: pulumi config set --secret {key} <value>")
    return parse_config(raw)

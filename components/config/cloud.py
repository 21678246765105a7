"""The Google Cloud side: `gcp.*` (project, region, zone), `network.*` (address ranges), `cluster.*` (GKE) and the
CPU pools (`systemPool.*`, `transferPool.*`)."""

from __future__ import annotations

import ipaddress
import re
from datetime import datetime
from typing import ClassVar, Literal, Optional

from pydantic import Field, model_validator

from ..facts import catalog, cidrs, machines
from .base import GKE_CLUSTER_NAMING, Section, _check_name, _check_project_id, _fail


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
                  f"this program's zone table (components/facts/catalog.py COMPUTE_ZONES, from "
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
    name: Optional[str] = Field(None, description="GKE cluster name, and the start of every cloud name of the stack "
                                                  "(default: kimi-k3-1-<stack>, cut with a hash suffix to 24 "
                                                  "characters where needed).")
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
                  f"{why} (components/facts/machines.py CPU_SERIES: vCPUs, memory and boot disk per series); use one "
                  f"of "
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

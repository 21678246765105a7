"""Counts the cloud or a chart caps and the stack drives: each derived from the config, held against its cap with
the cap's source, at plan time (`__main__.py` runs `check`), for every slice count the config accepts. A stack that
outgrows one stops with one line naming the key, instead of nodes whose pods never start.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

from ..config import ConfigError, StackConfig
from ..facts import catalog, cidrs
from .staging import staging_addresses, staging_pods

DRA_CT_QUOTA = 100
"""The critical-priority pod quota Cluster Toolkit's A4X Max blueprint gives the NVIDIA DRA driver's namespace
(https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/examples/gke-a4x-max-bm/nvidia-dra-driver.yaml
`pods: "100"`): enough for a rack or three, not for a stack of many slices."""
DRA_QUOTA_SOURCE = ("2 x GPU nodes + 1: \"at least 2 times the number of A4X Max nodes in the cluster plus 1\", "
                    "https://docs.cloud.google.com/ai-hypercomputer/docs/create/gke-ai-hypercompute-custom-a4x-max")
"""GKE's A4X Max how-to (Install the NVIDIA Compute Domain CRD and DRA driver): "Replace POD_QUOTA with a number at
least 2 times the number of A4X Max nodes in the cluster plus 1. For example, you must set the variable to at least
37 if you have 18 A4X Max nodes in your cluster." GKE admits system-node-critical / system-cluster-critical pods
outside kube-system only under a ResourceQuota scoped to those classes. The driver (chart nvidia-dra-driver-gpu
25.8.0 values.yaml: kubeletPlugin and controller priorityClassName system-node-critical, webhook
system-cluster-critical) runs a kubelet-plugin pod on every GPU node, the ComputeDomain's IMEX daemon on every GPU
node of the domain, and its controller: 2 x GPU nodes + 1, the size GKE's A4X Max how-to gives the quota. From 4
slices (64 nodes, 129 pods) a fixed 100 breaks that rule."""
NAT_PORTS_PER_ADDRESS = 64512
"""Source ports Cloud NAT can allocate per NAT address (1024-65535, https://cloud.google.com/nat/docs/ports-and-addresses)."""
HYPERDISK_ML_READERS = 2500
HYPERDISK_ML_READERS_SOURCE = "https://docs.cloud.google.com/compute/docs/disks/hyperdisks"
"""VMs one Hyperdisk ML volume attaches to in READ_ONLY_MANY mode: read-only attachment "to up to 2,500 instances"
(the Hyperdisk overview, HYPERDISK_ML_READERS_SOURCE; components/facts/catalog.py HYPERDISK_ML_MAX_MIBPS). Every serving
node and the transfer node mount the one volume."""
TPU7X_SUB_BLOCK_HOSTS = 16
TPU7X_SUB_BLOCK_SOURCE = "https://llm-d.ai/docs/infrastructure/providers/gke/dynamic-slicing"
"""Ironwood capacity comes in 4x4x4 sub-blocks: "provisioned as fixed 4x4x4 sub-blocks (16 tpu7x-standard-4t
nodes, 64 chips)" (llm-d's GKE TPU dynamic-slicing page, TPU7X_SUB_BLOCK_SOURCE); one slice's pool (its ICI
domain) must fit in one."""
SERVICE_RANGE_SOURCE = "https://kubernetes.io/docs/concepts/services-networking/cluster-ip-allocation"
"""Every ClusterIP Service takes one address of the cluster's Service range (network.servicesCidr): "every Service
ClusterIP must be unique", picked "from within the configured IP range" (SERVICE_RANGE_SOURCE)."""


def dra_critical_pods(gpu_nodes: int) -> int:
    """The quota the program gives the DRA driver's namespace: 2 x nodes + 1, never below Cluster Toolkit's 100."""
    return max(DRA_CT_QUOTA, 2 * gpu_nodes + 1)


@dataclass(frozen=True)
class Limit:
    name: str
    demand: int
    cap: int
    key: str
    """The config key that drives the demand (what to change)."""
    source: str

    @property
    def ok(self) -> bool:
        return self.demand <= self.cap

    def line(self) -> str:
        return f"{self.name}: {self.demand} of {self.cap} ({self.source})"


def accelerator_nodes(cfg: StackConfig) -> int:
    return cfg.gpu.node_count if cfg.track == "gpu" else cfg.tpu.slices * cfg.tpu.hosts_per_slice


def node_count(cfg: StackConfig) -> int:
    return cfg.systemPool.nodeCount + cfg.transferPool.nodeCount + accelerator_nodes(cfg)


def limits(cfg: StackConfig) -> list[Limit]:
    """Every capped count the stack drives, with the cap the program or the cloud sets."""
    slices_key = "gpu.slices" if cfg.track == "gpu" else "tpu.slices"
    nodes = node_count(cfg)
    pods_net = ipaddress.ip_network(cfg.network.podsCidr)
    nodes_net = ipaddress.ip_network(cfg.network.nodesCidr)
    found = [
        Limit("pod range: per-node /24 ranges", nodes,
              2 ** max(0, cidrs.POD_RANGE_PREFIX_PER_NODE - pods_net.prefixlen), "network.podsCidr",
              cidrs.POD_RANGE_SOURCE),
        Limit("node range: node addresses", nodes, nodes_net.num_addresses - cidrs.SUBNET_RESERVED_ADDRESSES,
              "network.nodesCidr", "https://cloud.google.com/vpc/docs/subnets#unusable-ip-addresses-in-every-subnet"),
        Limit("staging NAT: ports per VM x staging VMs", staging_pods(cfg) * catalog.NAT_MIN_PORTS_PER_VM_ONE_ADDRESS,
              staging_addresses(cfg) * NAT_PORTS_PER_ADDRESS, "storage.stagingPods",
              "https://cloud.google.com/nat/docs/ports-and-addresses"),
        Limit("Hyperdisk ML volume: read-only attachments", accelerator_nodes(cfg) + cfg.transferPool.nodeCount,
              HYPERDISK_ML_READERS, slices_key, HYPERDISK_ML_READERS_SOURCE),
    ]
    if cfg.track == "tpu":
        found.append(Limit("tpu7x sub-block: hosts of one slice's pool", cfg.tpu.hosts_per_slice,
                           TPU7X_SUB_BLOCK_HOSTS, "tpu.topology", TPU7X_SUB_BLOCK_SOURCE))
    if cfg.track == "gpu":
        found += [
            Limit("NVIDIA DRA driver: critical-priority pods", 2 * cfg.gpu.node_count + 1,
                  dra_critical_pods(cfg.gpu.node_count), slices_key, DRA_QUOTA_SOURCE),
            Limit("NVL72 sub-block: nodes of one slice's pool", cfg.gpu.slice_nodes, catalog.NVL72_MAX_NODES,
                  "gpu.prefillGroups", "https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/"
                  "examples/gke-a4x-max-bm/README.md"),
        ]
    return found


def cluster_ip_services(manifests: Iterable[dict[str, Any]]) -> int:
    """Services of the plan that take an address of the Service range (every one but headless `clusterIP: None`)."""
    return sum(1 for m in manifests if m.get("kind") == "Service" and m.get("apiVersion", "v1") == "v1"
               and str((m.get("spec") or {}).get("clusterIP", "")) != "None")


def service_range(cfg: StackConfig, manifests: Iterable[dict[str, Any]]) -> Limit:
    """The plan's ClusterIP Services (charts' included) against network.servicesCidr: counted on the rendered plan
    (tools/preview/render.py), the only place that sees the charts' objects."""
    net = ipaddress.ip_network(cfg.network.servicesCidr)
    return Limit("service range: ClusterIP Services", cluster_ip_services(manifests), net.num_addresses,
                 "network.servicesCidr", SERVICE_RANGE_SOURCE)


def check(cfg: StackConfig, manifests: Optional[Iterable[dict[str, Any]]] = None) -> list[Limit]:
    """The limits (with the service range when the plan's manifests are given), or ConfigError for the first one
    the stack exceeds."""
    found = limits(cfg) + ([service_range(cfg, manifests)] if manifests is not None else [])
    for limit in found:
        if not limit.ok:
            section, field = limit.key.split(".", 1)
            raise ConfigError(limit.key, getattr(getattr(cfg, section), field),
                              f"{limit.name} would be {limit.demand}, above the cap of {limit.cap} ({limit.source})")
    return found


SUMMARY_HEADING = "limits that grow with the stack (demand of cap):"


def summary_lines(cfg: StackConfig) -> list[str]:
    return [SUMMARY_HEADING, *(f"  {limit.line()}" for limit in limits(cfg))]

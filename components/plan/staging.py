"""How the staging Job copies the checkpoint: its pods, their rate, the binding limit and the time to copy
(the Job itself: components/weights/staging.py). No resources: the plan's cost, limits and timeline read it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..config import StackConfig
from ..facts import catalog

POD_CPU = 4
"""CPU each staging pod requests: the copier's per-byte work (SHA-256, CRC32C, TLS, HTTP or hf_xet) runs on
three threads per file in flight (components/weights/copier/hub.py HubStream); four cores keep COPIER_MBPS_PER_CPU x 4
above what 16 Hub streams bring."""
TARGET_SECONDS = 600
"""Design target for a first-run copy of the checkpoint: 10 minutes, so staging is not longer than creating
the accelerator pools (components/plan/timeline.py)."""
MAX_PODS = catalog.STAGING_MAX_PODS
MACHINE_TYPE = "n2-standard-8"
"""Staging node: 8 vCPU keep POD_CPU allocatable beside GKE's daemons; one pod per node, so the node's NAT
address is the pod's."""
COPIER_MBPS_PER_CPU = 450
"""Measured: MB/s the copier moves per CPU-second on loopback through hf_xet, the path the Job takes for
Xet-backed files and the costlier one (tests/weights/bench_staging.py --xet, 2026-12-01: 2.22 CPU seconds per GB with
start-up, 3 GiB file; over HTTP 1.52); without TLS, so an upper bound; docs/weights.md has the runs."""
HUB_PER_ADDRESS_MBPS = 2200
"""Measured elsewhere: one large host downloads from the Hub with hf_xet at about 2.2 GB/s
(https://github.com/unslothai/unsloth-zoo/issues/972). The Hub limits per client address, token or not
(https://github.com/huggingface/huggingface_hub/issues/3312, https://github.com/NVIDIA/aicr/issues/1116), so
this is what one egress address is assumed to carry."""
GCS_INGEST_MBPS = 25_000
"""Cloud Storage's default bandwidth quota: 200 Gbps per project and region
(https://cloud.google.com/storage/docs/bandwidth-usage)."""


@dataclass(frozen=True)
class StagingModel:
    """The staging Job's expected first-run copy (bucket without the revision): each figure's source in
    `sources`, the binding term in `limit`."""

    pods: int
    workers_per_pod: int
    pod_mbps: float
    aggregate_mbps: float
    seconds: float
    limit: str
    addresses: int
    """Egress addresses the pods leave from (one each, components/cloud/network.py)."""
    sources: dict[str, str]


def staging_pods(cfg: StackConfig, checkpoint_bytes: int = catalog.KIMI.checkpoint_bytes) -> int:
    """storage.stagingPods, else enough pods for the target rate or Cloud Storage's ingest, whichever is lower
    (at most MAX_PODS): with an address per pod the Hub's per-address limit scales with them."""
    if cfg.storage.stagingPods is not None:
        return cfg.storage.stagingPods
    target = checkpoint_bytes / TARGET_SECONDS / 1e6
    return max(1, min(MAX_PODS, math.ceil(min(target, GCS_INGEST_MBPS) / pod_rate_mbps(cfg))))


def staging_addresses(cfg: StackConfig) -> int:
    """NAT addresses of the staging subnet: one per staging pod (each on a node of its own)."""
    return staging_pods(cfg)


def pod_rate_mbps(cfg: StackConfig) -> float:
    return min(cfg.storage.stagingWorkers * catalog.HUB_STREAM_ASSUMED_MBPS, POD_CPU * COPIER_MBPS_PER_CPU)


def staging_model(cfg: StackConfig, checkpoint_bytes: int = catalog.KIMI.checkpoint_bytes,
                  addresses: Optional[int] = None) -> StagingModel:
    """aggregate = min(pods x pod rate, min(pods, addresses) x per-address rate, ingest). `addresses` defaults
    to what the stack creates (staging_addresses); fewer would let the Hub's per-address limit bind."""
    workers = cfg.storage.stagingWorkers
    pod_mbps = pod_rate_mbps(cfg)
    pods = staging_pods(cfg, checkpoint_bytes)
    addresses = staging_addresses(cfg) if addresses is None else addresses
    terms = {"pods": pods * pod_mbps, "Hub per-address limit": min(pods, addresses) * HUB_PER_ADDRESS_MBPS,
             "Cloud Storage ingest": GCS_INGEST_MBPS}
    limit = min(terms, key=terms.get)
    aggregate = terms[limit]
    return StagingModel(
        pods=pods, workers_per_pod=workers, pod_mbps=pod_mbps, aggregate_mbps=aggregate,
        seconds=checkpoint_bytes / (aggregate * 1e6), limit=limit, addresses=addresses,
        sources={
            "pod rate": f"min({workers} streams x {catalog.HUB_STREAM_ASSUMED_MBPS} MB/s assumed "
                        f"(catalog.HUB_STREAM_ASSUMED_MBPS), {POD_CPU} CPU x {COPIER_MBPS_PER_CPU} MB/s measured "
                        "(tests/weights/bench_staging.py))",
            "target": f"{checkpoint_bytes / 1e12:.2f} TB in {TARGET_SECONDS // 60} min (design target)",
            "Hub per-address limit": f"min({pods} pods, {addresses} NAT addresses) x {HUB_PER_ADDRESS_MBPS} MB/s "
                                     "(unsloth-zoo#972)",
            "Cloud Storage ingest": "200 Gbps per project and region (cloud.google.com/storage/docs/bandwidth-usage)",
        })


def proof_readback_seconds(cfg: StackConfig, checkpoint_bytes: int = catalog.KIMI.checkpoint_bytes) -> float:
    """A folder that already holds the revision is proven, not trusted (components/weights/copier: records in the
    bucket are
    never believed): each pod reads its share back and hashes it. Nothing comes from the Hub, so the bound is the
    pods' hashing, assumed at the copy's measured CPU rate (both hash every byte)."""
    return checkpoint_bytes / (staging_pods(cfg, checkpoint_bytes) * POD_CPU * COPIER_MBPS_PER_CPU * 1e6)



"""TPU track: Ironwood tpu7x slices and the LeaderWorkerSet running one engine per slice on them."""

from __future__ import annotations

import pulumi

from components.config import StackConfig
from components.modelservers import (
    TpuLeaderWorkerSet,
    TpuLeaderWorkerSetArgs,
    tpu_engine_image,
    tpu_placement,
    tpu_set_name,
)
from components.nodepools import TpuSlices, TpuSlicesArgs
from components.prepull import ImagePrepull, ImagePrepullArgs

from .base import add_benchmark, add_calibration, build_foundation, export_node_pools


def build(cfg: StackConfig) -> None:
    foundation = build_foundation(cfg)
    tpu = TpuSlices("tpu", foundation.pool_common, TpuSlicesArgs(
        pool_prefix=f"tpu7x-{cfg.tpu.topology}",
        topology=cfg.tpu.topology,
        slices=cfg.tpu.slices,
        hosts_per_slice=cfg.tpu.hosts_per_slice,
        reservation_project=cfg.tpu.reservationProject or cfg.gcp.project,
        reservation=cfg.tpu.reservation,
        spot=cfg.tpu.spot,
    ), foundation.accelerator_opts)
    selector, tolerations = tpu_placement(cfg)
    # Pulls the engine image while the checkpoint is staged and hydrated (off the critical path).
    ImagePrepull("engine-prepull", ImagePrepullArgs(
        namespace=foundation.platform.namespace.metadata.name, image=tpu_engine_image(cfg),
        node_selector=selector, tolerations=tolerations), foundation.in_cluster)
    servers = TpuLeaderWorkerSet("tpu-engine", TpuLeaderWorkerSetArgs(
        namespace=foundation.platform.namespace.metadata.name, name=tpu_set_name(cfg),
        config=cfg, host_pool_bytes_per_node=foundation.capacity.host_bytes_per_node,
        models_claim=foundation.weights.claim.metadata.name),
        pulumi.ResourceOptions(provider=foundation.cluster.provider, depends_on=[
            foundation.platform.lws, foundation.weights.claim, *tpu.pools, foundation.platform.hf_token]))
    add_calibration(foundation, servers)
    add_benchmark(foundation, servers)
    export_node_pools(foundation, tpu.pools)

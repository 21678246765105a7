"""TPU track: Ironwood tpu7x slices on the shared foundation."""

from __future__ import annotations

import pulumi

from components.config import StackConfig
from components.nodepools import TpuSlices, TpuSlicesArgs

from .base import build_foundation, export_node_pools


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
    ), pulumi.ResourceOptions(provider=foundation.gcp_provider))
    export_node_pools(foundation, tpu.pools)

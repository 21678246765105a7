"""GPU track: A4X Max (GB300 NVL72) node pool on the shared foundation."""

from __future__ import annotations

import pulumi

from components.config import StackConfig
from components.dra import GpuDevices, GpuDevicesArgs
from components.nodepools import GpuNodePool, GpuNodePoolArgs

from .base import build_foundation, export_node_pools


def build(cfg: StackConfig) -> None:
    foundation = build_foundation(cfg)
    gpu = GpuNodePool("gpu", foundation.pool_common, GpuNodePoolArgs(
        pool_name=f"{cfg.gpu.machine}-nvl72",
        machine=cfg.gpu.spec,
        node_count=cfg.gpu.node_count,
        reservation_project=cfg.gpu.reservationProject or cfg.gcp.project,
        reservation=cfg.gpu.reservation,
        reservation_block=cfg.gpu.reservationBlock,
        reservation_sub_block=cfg.gpu.reservationSubBlock,
    ), pulumi.ResourceOptions(provider=foundation.gcp_provider))
    GpuDevices("gpu-devices", GpuDevicesArgs(namespace=foundation.platform.namespace.metadata.name,
                                             machine=cfg.gpu.spec), foundation.in_cluster)
    export_node_pools(foundation, [gpu.pool])

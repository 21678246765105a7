"""GPU track: A4X Max (GB300 NVL72) pools, one per slice, DRA/RDMA devices, vLLM prefill/decode DisaggregatedSet."""

from __future__ import annotations

import pulumi

from components.cloud.nodepools import GpuRacks, GpuRacksArgs
from components.config import StackConfig
from components.facts import contract
from components.plan import images, limits
from components.platform.dra import GpuDevices, GpuDevicesArgs
from components.serving.modelservers import VllmDisaggregatedSet, VllmDisaggregatedSetArgs, gpu_placement
from components.serving.prepull import ImagePrepull, ImagePrepullArgs

from .base import add_benchmark, add_calibration, add_scaling, build_foundation, export_node_pools


def build(cfg: StackConfig) -> None:
    foundation = build_foundation(cfg)
    gpu = GpuRacks("gpu", foundation.pool_common, GpuRacksArgs(
        pool_prefix=f"{cfg.gpu.machine}-nvl72",
        machine=cfg.gpu.spec,
        slices=cfg.gpu.slices,
        nodes_per_slice=cfg.gpu.slice_nodes,
        reservation_project=cfg.gpu.reservationProject or cfg.gcp.project,
        reservation=cfg.gpu.reservation,
        reservation_block=cfg.gpu.reservationBlock,
        reservation_sub_blocks=tuple(cfg.gpu.reservationSubBlocks[:cfg.gpu.slices]),
    ), foundation.accelerator_opts)
    namespace = foundation.platform.namespace.metadata.name
    devices = GpuDevices("gpu-devices", GpuDevicesArgs(namespace=namespace, machine=cfg.gpu.spec, images=cfg.images,
                                                         critical_pods=limits.dra_critical_pods(cfg.gpu.node_count)),
                         foundation.on_system_nodes)
    selector, tolerations = gpu_placement(cfg.gpu.spec)
    # Pulls the engine image while the checkpoint is staged and hydrated (off the critical path).
    ImagePrepull("engine-prepull", ImagePrepullArgs(namespace=namespace, image=images.ref(cfg.images, "vllm"),
                                                  node_selector=selector, tolerations=tolerations),
                 foundation.in_cluster)
    servers = VllmDisaggregatedSet("vllm", VllmDisaggregatedSetArgs(
        namespace=namespace, name=contract.disaggregated_set_name(cfg.kubernetes.namespace), config=cfg,
        models_claim=foundation.weights.claim.metadata.name),
        pulumi.ResourceOptions(provider=foundation.cluster.provider, depends_on=[
            # The DisaggregatedSet CRD and webhook, the populated weights, the nodes and the claims its pods
            # reference by name: without them the set cannot become Available within its timeout.
            foundation.platform.lws, foundation.weights.claim, *gpu.pools, devices.compute_domain,
            devices.rdma_claims, foundation.platform.hf_token, *foundation.cache_waits]))
    add_scaling(foundation, servers, contract.disaggregated_set_name(cfg.kubernetes.namespace))
    add_calibration(foundation, servers)
    add_benchmark(foundation, servers)
    export_node_pools(foundation, gpu.pools)

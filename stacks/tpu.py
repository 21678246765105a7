"""TPU track: Ironwood tpu7x slices and the LeaderWorkerSet running one engine per slice on them."""

from __future__ import annotations

import pulumi

from components.cloud.nodepools import TpuSlices, TpuSlicesArgs
from components.config import StackConfig
from components.plan import images
from components.plan.naming import resource_labels
from components.serving.engineimage import EngineImage, EngineImageArgs
from components.serving.modelservers import (
    TpuLeaderWorkerSet,
    TpuLeaderWorkerSetArgs,
    tpu_engine_image,
    tpu_placement,
    tpu_set_name,
)
from components.serving.prepull import ImagePrepull, ImagePrepullArgs

from .base import add_benchmark, add_calibration, add_scaling, build_foundation, export_node_pools


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
    built, waits = None, []
    if cfg.tpu.engine == "vllm-torchtpu":
        # Built once from the lock while the cluster and pools come up; the pods run its digest.
        engine_image = EngineImage("engine-image", EngineImageArgs(
            project=cfg.gcp.project, region=cfg.gcp.region, cluster_name=cfg.cluster_name,
            base_image=images.ref(cfg.images, "tpu-engine"), step_image=images.ref(cfg.images, "build-step"),
            bucket=foundation.bucket.bucket.name,
            node_member=foundation.pool_common.service_account.apply(lambda e: f"serviceAccount:{e}"),
            labels=resource_labels(cfg, pulumi.get_stack())),
            pulumi.ResourceOptions(provider=foundation.gcp_provider, depends_on=foundation.services.resources))
        built, waits = engine_image.image, [engine_image.pull]
        pulumi.export("tpuEngineImage", built)
    image = tpu_engine_image(cfg, built)
    selector, tolerations = tpu_placement(cfg)
    # Pulls the engine image while the checkpoint is staged and hydrated (off the critical path).
    ImagePrepull("engine-prepull", ImagePrepullArgs(
        namespace=foundation.platform.namespace.metadata.name, image=image, by_digest=built is not None,
        node_selector=selector, tolerations=tolerations),
        pulumi.ResourceOptions(provider=foundation.cluster.provider, depends_on=waits))
    servers = TpuLeaderWorkerSet("tpu-engine", TpuLeaderWorkerSetArgs(
        namespace=foundation.platform.namespace.metadata.name, name=tpu_set_name(cfg),
        config=cfg, host_pool_bytes_per_node=foundation.capacity.host_bytes_per_node,
        models_claim=foundation.weights.claim.metadata.name, image=image),
        pulumi.ResourceOptions(provider=foundation.cluster.provider, depends_on=[
            foundation.platform.lws, foundation.weights.claim, *tpu.pools, foundation.platform.hf_token, *waits]))
    add_scaling(foundation, servers, tpu_set_name(cfg))
    add_calibration(foundation, servers)
    add_benchmark(foundation, servers)
    export_node_pools(foundation, tpu.pools)

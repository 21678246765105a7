"""What both tracks share: APIs, network, node identity, cluster, CPU pools, checkpoint bucket."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.cloud.cluster import GkeCluster, GkeClusterArgs
from components.cloud.identity import NodeIdentity, NodeIdentityArgs, workload_principal
from components.cloud.network import STAGING_PODS_RANGE, Network, NetworkArgs
from components.cloud.nodepools import (
    STAGING_POOL,
    STAGING_TAINT,
    CpuPoolArgs,
    CpuPools,
    PoolCommon,
    staging_pool,
    transfer_pool,
)
from components.cloud.services import ProjectServices, ProjectServicesArgs, apis_for
from components.config import StackConfig
from components.facts import catalog, contract, machines, prices
from components.observe.monitoring import Monitoring, MonitoringArgs, router_target, serving_targets
from components.observe.observability import Observability, ObservabilityArgs, Scope, alert_rules, groups
from components.plan import (
    autoscaling,
    capacity,
    cost,
    engines,
    images,
    kvblocks,
    limits,
    loading,
    parallel,
    prefixcache,
)
from components.plan import overview as reader
from components.plan.loading import MIB
from components.plan.naming import label_value, resource_labels
from components.plan.staging import MACHINE_TYPE as STAGING_MACHINE_TYPE
from components.plan.staging import proof_readback_seconds, staging_addresses, staging_model, staging_pods
from components.platform.autoscaler import Autoscaler, AutoscalerArgs
from components.platform.namespace import Platform, PlatformArgs
from components.platform.netpol import NetworkPolicies, NetworkPoliciesArgs
from components.router.router import (
    EPP_SERVICE,
    GATEWAY_NAME,
    CalibrationArgs,
    PrefillCalibration,
    Router,
    RouterArgs,
    router_block_tokens,
)
from components.router.router import lru_capacity as router_lru_capacity
from components.serving import benchmark, compilecache, modelservers
from components.serving.compilecache import CompileCache, CompileCacheArgs
from components.serving.scaling import Scaling, ScalingArgs
from components.weights.bucket import CheckpointBucket, CheckpointBucketArgs
from components.weights.geometry import CheckpointGeometry, CheckpointGeometryArgs
from components.weights.revision import HubRevision, HubRevisionArgs
from components.weights.staging import CheckpointStaging, CheckpointStagingArgs
from components.weights.volume import WeightStaging, WeightStagingArgs


@dataclass
class Foundation:
    cfg: StackConfig
    gcp_provider: gcp.Provider
    services: ProjectServices
    cluster: GkeCluster
    pool_common: PoolCommon
    cpu_pools: CpuPools
    bucket: CheckpointBucket
    platform: Platform
    staging: CheckpointStaging
    weights: WeightStaging
    router: Router
    capacity: capacity.ServingCapacity
    in_cluster: pulumi.ResourceOptions
    """Options for every Kubernetes object: the cluster's provider."""
    on_system_nodes: pulumi.ResourceOptions
    """The provider, and a dependency on the system pool, for controllers that must become Ready."""
    geometry: CheckpointGeometry
    """The staged revision's config.json matched the plan's model geometry; accelerator pools wait for it."""
    autoscaler: Autoscaler | None = None
    """KEDA (autoscaling.enabled): the serving sets' ScaledObjects wait for it (add_scaling)."""
    compile_cache: CompileCache | None = None
    """The engines' compile caches (vLLM and vLLM-TorchTPU engines): the serving sets wait for its grants."""

    @property
    def cache_waits(self) -> list[pulumi.Resource]:
        """What the engine pods' cache mount needs before they start: the bucket's grants and the service account."""
        return [] if self.compile_cache is None else [self.compile_cache.account, *self.compile_cache.grants]

    @property
    def accelerator_opts(self) -> pulumi.ResourceOptions:
        """Accelerator node pools: created only once the checkpoint is known to be one the engine can serve."""
        return pulumi.ResourceOptions(provider=self.gcp_provider, depends_on=[self.geometry])


def build_foundation(cfg: StackConfig) -> Foundation:
    labels = resource_labels(cfg, pulumi.get_stack())
    provider = gcp.Provider("gcp", project=cfg.gcp.project, region=cfg.gcp.region, default_labels=labels)
    in_project = pulumi.ResourceOptions(provider=provider)
    services = ProjectServices("apis", ProjectServicesArgs(project=cfg.gcp.project, apis=apis_for(cfg)), in_project)
    after_apis = pulumi.ResourceOptions(provider=provider, depends_on=services.resources)

    network = Network("net", NetworkArgs(
        name=cfg.cluster_name, region=cfg.gcp.region, nodes_cidr=cfg.network.nodesCidr,
        pods_cidr=cfg.network.podsCidr, services_cidr=cfg.network.servicesCidr,
        proxy_only_cidr=cfg.network.proxyOnlyCidr, staging_nodes_cidr=cfg.network.stagingNodesCidr,
        staging_pods_cidr=cfg.network.stagingPodsCidr, staging_addresses=staging_addresses(cfg)), after_apis)
    nodes = NodeIdentity("nodes", NodeIdentityArgs(project=cfg.gcp.project, account_id=f"{cfg.cluster_name}-nodes"),
                         after_apis)
    cluster = GkeCluster("cluster", GkeClusterArgs(
        name=cfg.cluster_name, project=cfg.gcp.project, region=cfg.gcp.region, zone=cfg.gcp.zone,
        network=network.vpc.id, subnetwork=network.subnet.id, staging_subnetwork=network.staging_subnet.id,
        release_channel=cfg.cluster.releaseChannel,
        version_prefix=cfg.cluster.versionPrefix, authorized_networks=tuple(cfg.cluster.authorizedNetworks),
        dns_endpoint=cfg.cluster.controlPlaneAccess == "dns",
        maintenance_window_start=cfg.cluster.maintenanceWindowStart,
        maintenance_exclusion_start=cfg.cluster.maintenanceExclusionStart,
        deletion_protection=cfg.cluster.deletionProtection, dcgm_metrics=cfg.track == "gpu",
        hpa_metrics=cfg.autoscaling_on,
        shielded_nodes=cfg.track != "gpu" or cfg.gpu.spec.shielded_gke_nodes,
        node_service_account=nodes.email, labels=labels),
        # Nodes must not come up before their service account holds its role.
        pulumi.ResourceOptions(provider=provider, depends_on=[*services.resources, *nodes.grants]))

    common = PoolCommon(cluster=cluster.cluster.id, project=cfg.gcp.project, region=cfg.gcp.region,
                        zone=cfg.gcp.zone, service_account=nodes.email, labels=labels,
                        name_prefix=cfg.cluster_name, subnetwork=network.subnet.id)
    cpu_pools = CpuPools("cpu", common, [
        CpuPoolArgs(pool_name="system", machine_type=cfg.systemPool.machineType, node_count=cfg.systemPool.nodeCount),
        transfer_pool(cfg.transferPool.machineType, cfg.transferPool.nodeCount),
        staging_pool(STAGING_MACHINE_TYPE, staging_pods(cfg), network.staging_subnet.id, STAGING_PODS_RANGE),
    ], in_project)

    project_number = gcp.organizations.get_project_output(
        project_id=cfg.gcp.project, opts=pulumi.InvokeOutputOptions(provider=provider)).number
    # The bucket itself is independent of the cluster (the upload can proceed while GKE is created); its
    # grants name the cluster's Workload Identity pool and so wait for the cluster.
    pool = cluster.cluster.workload_identity_config.apply(lambda c: c.workload_pool)
    bucket = CheckpointBucket("weights", CheckpointBucketArgs(
        name=cfg.bucket_name, project=cfg.gcp.project, location=cfg.gcp.region,
        soft_delete_days=cfg.storage.softDeleteDays, delete_on_destroy=cfg.storage.deleteCheckpointOnDestroy,
        exists=cfg.storage.bucketExists or cfg.bucket_use == "read", adopt=cfg.bucket_use == "import",
        readers=(workload_principal(project_number, pool, cfg.kubernetes.namespace,
                                    contract.TRANSFER_SERVICE_ACCOUNT),),
        results_writers=(workload_principal(project_number, pool, cfg.kubernetes.namespace,
                                            benchmark.SERVICE_ACCOUNT),) if cfg.benchmark.enabled else (),
        results_prefix=f"{benchmark.RESULTS_PREFIX}/",  # every run of the stack writes under it
        labels=labels, owner=cfg.cluster_name), after_apis)

    in_cluster = pulumi.ResourceOptions(provider=cluster.provider)
    # Controllers installed from charts are awaited until Ready, which needs nodes: the system pool.
    on_system_nodes = pulumi.ResourceOptions(provider=cluster.provider, depends_on=[cpu_pools.pools["system"]])
    hf_token = pulumi.Config().require_secret("hfToken")
    platform = Platform("platform", PlatformArgs(
        namespace=cfg.kubernetes.namespace, disaggregated_set=cfg.track == "gpu", images=cfg.images,
        hf_token=hf_token), on_system_nodes)
    # The commit to stage: model.revision, else `main` resolved once by the first `up` and kept in state.
    revision = cfg.model.revision or HubRevision("model-revision", HubRevisionArgs(
        repo_id=cfg.model.repoId, token=hf_token)).revision
    # Before any accelerator: the revision's config.json must match the geometry the plan was computed with and
    # name an architecture the pinned engine registers (components/weights/geometry.py).
    geometry = CheckpointGeometry("model-geometry", CheckpointGeometryArgs(
        repo_id=cfg.model.repoId, revision=revision, token=hf_token, config=cfg))
    # Hugging Face -> bucket on the staging pool, one pod per node, each leaving from its own NAT address: it waits
    # for the cluster, the CPU pools, the staging NAT and the token Secret only, so it copies while the accelerator
    # pools are still being created.
    staged = CheckpointStaging("weights-staging", CheckpointStagingArgs(
        namespace=platform.namespace.metadata.name, bucket=bucket.bucket.name, prefix=cfg.storage.checkpointPrefix,
        owner=cfg.cluster_name,
        repo_id=cfg.model.repoId, revision=revision, workers=cfg.storage.stagingWorkers,
        pods=staging_pods(cfg), project_number=project_number, workload_pool=pool,
        node_pool=cpu_pools.pools[STAGING_POOL].name, tolerations=(STAGING_TAINT,),
        hf_token_secret=platform.hf_token.metadata.name, image=images.ref(cfg.images, "staging")),
        pulumi.ResourceOptions(providers=[provider, cluster.provider],
                               depends_on=[cpu_pools.pools["system"], cpu_pools.pools[STAGING_POOL],
                                           network.staging_nat]))
    staging = capacity.weight_staging(cfg)
    weights = WeightStaging("weights-volume", WeightStagingArgs(
        namespace=platform.namespace.metadata.name, zone=cfg.gcp.zone, checkpoint_uri=staged.uri, revision=revision,
        volume_gib=staging.volume_gib, throughput_mibps=staging.throughput_mibps,
        hydration_timeout_s=loading.hydration_timeout_s(cfg), labels=labels),
        # Hydration copies a verified checkpoint only: after the staging Job completed. The transfer Job also
        # needs its node pool and read access on the bucket.
        pulumi.ResourceOptions(provider=cluster.provider,
                               depends_on=[staged.job, cpu_pools.pools["weights-transfer"], *bucket.grants]))
    if cfg.monitoring.enabled:
        Monitoring("monitoring", MonitoringArgs(
            namespace=platform.namespace.metadata.name, prefix=catalog.GUIDE_NAME,
            targets=(*serving_targets(cfg.track, engines.engines_per_pod(cfg)), router_target())), in_cluster)

    # Ingress to the namespace is denied by default; only the flows serving needs are allowed (docs/security.md).
    NetworkPolicies("netpol", NetworkPoliciesArgs(
        namespace=platform.namespace.metadata.name, config=cfg, api_server=api_server_cidrs(cluster)), in_cluster)

    if cfg.monitoring.enabled:
        observability = Observability("observability", ObservabilityArgs(
            project=cfg.gcp.project, track=cfg.track, cluster=cfg.cluster_name, namespace=cfg.kubernetes.namespace,
            display_name=dashboard_name(cfg), tpu_engine=cfg.tpu.engine,
            hpas=monitoring_scope(cfg).hpas, add_s=monitoring_scope(cfg).add_s,
            notification_channels=tuple(cfg.monitoring.notificationChannels),
            error_ratio=cfg.monitoring.alertErrorPercent / 100, kv_full=cfg.monitoring.alertKvCachePercent / 100,
            labels=labels), after_apis)
        pulumi.export("monitoringDashboardUrl", observability.url)

    autoscaler = None
    if cfg.autoscaling_on:
        autoscaler = Autoscaler("autoscaler", AutoscalerArgs(
            config=cfg, project_number=project_number, workload_pool=pool, api_server=api_server_cidrs(cluster)),
            pulumi.ResourceOptions(providers=[provider, cluster.provider], depends_on=[cpu_pools.pools["system"]]))

    serving = capacity.serving_capacity(cfg)
    router = Router("router", RouterArgs(
        namespace=platform.namespace.metadata.name, config=cfg, capacity=serving,
        proxy_only_subnet=network.proxy_only_subnet), on_system_nodes)

    pulumi.export("clusterName", cluster.cluster.name)
    pulumi.export("clusterEndpoint", cluster.cluster.endpoint)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("bucketUri", bucket.uri)
    pulumi.export("checkpointUri", staged.uri)
    pulumi.export("stagedRevision", staged.revision)
    pulumi.export("stagingJob", staged.job.metadata.name)
    pulumi.export("servingZone", cfg.gcp.zone)
    pulumi.export("namespace", platform.namespace.metadata.name)
    pulumi.export("modelsClaim", weights.claim.metadata.name)
    pulumi.export("weightLoad", loading.load_output(cfg))
    pulumi.export("routerService", EPP_SERVICE)
    pulumi.export("routerMode", cfg.router.mode)
    for key, value in user_outputs(cfg, pulumi.get_stack()).items():
        pulumi.export(key, value)
    costs = cost.hourly_costs(cfg)
    hourly, complete = cost.total(costs)
    pulumi.export("hourlyCostUsd", round(hourly, 2))
    pulumi.export("hourlyCostComplete", complete)
    pulumi.export("hourlyCost", cost.headline(costs))
    pulumi.export("benchmarkResultsUri", pulumi.Output.concat(bucket.uri, "/", results_path(cfg)))
    compile_cache = None
    if cfg.track == "gpu" or cfg.tpu.engine == "vllm-torchtpu":
        compile_cache = CompileCache("compile-cache", CompileCacheArgs(
            config=cfg, namespace=platform.namespace.metadata.name, labels=labels,
            member=workload_principal(project_number, pool, cfg.kubernetes.namespace, compilecache.SERVICE_ACCOUNT)),
            pulumi.ResourceOptions(providers=[provider, cluster.provider], depends_on=services.resources))
    return Foundation(cfg, provider, services, cluster, common, cpu_pools, bucket, platform, staged, weights, router,
                      serving, in_cluster, on_system_nodes, geometry, autoscaler, compile_cache)


def add_scaling(foundation: Foundation, servers: pulumi.Resource, set_name: str) -> None:
    """One ScaledObject per scaled role, once the set and KEDA exist (autoscaling.enabled)."""
    if foundation.autoscaler is None:
        return
    Scaling("scaling", ScalingArgs(namespace=foundation.platform.namespace.metadata.name, set_name=set_name,
                                   config=foundation.cfg),
            pulumi.ResourceOptions(provider=foundation.cluster.provider,
                                   depends_on=[servers, foundation.autoscaler.release]))
    # What `python -m tools bench --ramp` watches and the plan's times it holds each role to.
    pulumi.export("autoscaledRoles", autoscaling.scaled_roles_output(foundation.cfg))


def api_server_cidrs(cluster: GkeCluster) -> tuple[pulumi.Output, ...]:
    """The control plane's private and public endpoints as /32s: pods' API calls reach one of them."""
    private = cluster.cluster.private_cluster_config.apply(lambda c: c.private_endpoint if c else None)
    return tuple(address.apply(lambda ip: f"{ip}/32") for address in (private, cluster.cluster.endpoint))


def user_outputs(cfg: StackConfig, stack: str) -> dict[str, object]:
    """What a user needs after `up`: credentials, where the router is and how to reach it, the model."""
    ns = cfg.kubernetes.namespace
    outputs: dict[str, object] = {
        # The DNS endpoint is authorized by IAM (container.clusters.connect), so this works from anywhere.
        "kubeconfigCommand": f"gcloud container clusters get-credentials {cfg.cluster_name} --location "
                             f"{cfg.gcp.region} --project {cfg.gcp.project}"
                             + (" --dns-endpoint" if cfg.cluster.controlPlaneAccess == "dns" else ""),
        "servedModel": catalog.KIMI.hf_id,
        # Serving units behind the router; the smoke check asks each of them (pods labelled per slice).
        "servingSlices": capacity.serving_slices(cfg),
        "contextLength": cfg.context_length,
        "routerEndpoint": f"http://{EPP_SERVICE}.{ns}.svc.cluster.local:{contract.ROUTER_SERVICE_PORT}",
        "askCommand": f'python -m tools ask --stack {stack} "Hello"',
    }
    if cfg.router.mode == "gateway":
        outputs["gatewayName"] = GATEWAY_NAME
        outputs["routerEndpoint"] = (f"http://<address of Gateway {ns}/{GATEWAY_NAME}> "
                                     f"({cfg.router.gatewayClass})")
        outputs["gatewayAddressCommand"] = (f"kubectl get gateway {GATEWAY_NAME} -n {ns} "
                                            "-o jsonpath='{.status.addresses[0].value}'")
    else:
        outputs["routerPortForward"] = (f"kubectl port-forward -n {ns} svc/{EPP_SERVICE} "
                                        f"8080:{contract.ROUTER_SERVICE_PORT}")
    return outputs


def export_node_pools(foundation: Foundation, accelerator_pools: list) -> None:
    pulumi.export("nodePools", pulumi.Output.all(
        *[p.name for p in foundation.cpu_pools.pools.values()], *[p.name for p in accelerator_pools]))


def summary(cfg: StackConfig) -> list[str]:
    if cfg.track == "gpu":
        g = cfg.gpu
        hw = (f"{g.node_count} x {g.spec.machine_type} ({g.node_count * g.spec.gpus_per_node} {g.spec.accelerator}) "
              f"in {g.slices} slice(s), one NVL72 rack (node pool) each: {g.prefillGroups}P x "
              f"{g.prefillNodesPerGroup} + {g.decodeGroups}D x {g.decodeNodesPerGroup} = {g.slice_nodes} nodes "
              "per slice")
    else:
        t, [slice_] = cfg.tpu, parallel.layout(cfg).roles
        per_slice = (f"one {t.engine} engine per slice on {t.hosts_per_slice} hosts" if slice_.engines == 1 else
                     f"{slice_.engines} {t.engine} engines per slice, {slice_.engines_per_node} on each of its "
                     f"{t.hosts_per_slice} hosts")
        hw = (f"{t.slices} x {t.topology} {catalog.IRONWOOD.generation} slices = {t.slices * t.hosts_per_slice} x "
              f"{catalog.IRONWOOD.machine_type} ({t.slices * t.chips_per_slice} chips), {per_slice}, "
              f"TP={slice_.tensor_parallel} "
              + (f"with expert parallelism over all {slice_.expert_parallel} ranks" if t.engine == "vllm-torchtpu"
                 else f"EP={t.expertParallel}") + " per replica")
    staging = capacity.weight_staging(cfg)
    capacity_cost, throughput_cost = prices.hyperdisk_ml_monthly(staging.volume_gib, staging.throughput_mibps)
    return [
        *cfg.warnings,
        f"track {cfg.track}: cluster {cfg.cluster_name} in {cfg.gcp.region}, serving zone {cfg.gcp.zone}",
        f"accelerators: {hw}",
        *([engines.tpu_launch_line(cfg)] if cfg.track == "tpu" and cfg.tpu.engine == "vllm-torchtpu" else []),
        f"checkpoint: {cfg.model.repoId}@{cfg.model.revision or '<main, resolved at the first up>'} staged into "
        f"gs://{cfg.bucket_name}/{cfg.storage.checkpointPrefix}<revision>/ "
        f"({'deleted' if cfg.storage.deleteCheckpointOnDestroy else 'kept'} on destroy)",
        staging_line(cfg),
        f"weights: Hyperdisk ML {staging.volume_gib} GiB at {staging.throughput_mibps} MiB/s; hydration >= "
        f"{staging.hydration_s / 60:.1f} min; {replicas(cfg)} replicas on {staging.reader_nodes} nodes load their "
        f"copies in {staging.load_s / 60:.1f} min (target {catalog.WEIGHT_LOAD_TARGET_SECONDS // 60} min)",
        *weight_load_lines(cfg),
        f"weights cost (estimate): throughput ${throughput_cost:,.0f}/month "
        f"(${throughput_cost / prices.HOURS_PER_MONTH:.2f}/h), capacity ${capacity_cost:,.0f}/month",
        *capacity_lines(cfg, capacity.serving_capacity(cfg)),
        *engine_limit_lines(cfg),
        start_margin_line(cfg),
        *slice_lines(cfg),
        *autoscaling_lines(cfg),
        *tpu_memory_lines(cfg),
        *engine_image_lines(cfg),
        *monitoring_lines(cfg),
        *cost.summary_lines(cfg),
        *limits.summary_lines(cfg),
    ]


def overview(cfg: StackConfig) -> reader.Overview:
    """The reader's summary (components/plan/overview.py) with what the observe layer names: the dashboard."""
    found = reader.build(cfg)
    if not cfg.monitoring.enabled:
        found.add(reader.CREATED, "monitoring: off (no dashboard, alert policies or scrape targets)")
        return found
    scope = monitoring_scope(cfg)
    channels = len(cfg.monitoring.notificationChannels)
    found.add(reader.CREATED, f"monitoring: dashboard \"{dashboard_name(cfg)}\" (stack output monitoringDashboardUrl), "
              f"{len(alert_rules(scope, 0, 0))} alert policies, "
              + (f"{channels} notification channels" if channels else "no notification channel"))
    return found


def autoscaling_lines(cfg: StackConfig) -> list[str]:
    """The envelope KEDA scales within (components/plan/autoscaling.py), or why there is none."""
    if not cfg.autoscaling_on:
        why = ("autoscaling.enabled=false" if not cfg.autoscaling.enabled else "monitoring.enabled=false"
               if not cfg.monitoring.enabled else f"gpu.slices = {cfg.gpu.slices}: per-role scaling needs one slice")
        return [f"autoscaling: off ({why}): the serving sets keep the configured shape"]
    return autoscaling.envelope_lines(cfg, autoscaling.roles(cfg))


def tpu_memory_lines(cfg: StackConfig) -> list[str]:
    """What a TPU engine host keeps in memory (components/serving/modelservers.py TpuHostMemory) against the node's
    allocatable: the pod requests and limits exactly that, with /dev/shm at its term."""
    if cfg.track != "tpu" or cfg.tpu.engine != "vllm-torchtpu":
        return []
    pool = capacity.serving_capacity(cfg).host_bytes_per_node
    need = modelservers.tpu_host_memory(pool)
    room = machines.allocatable(machines.MACHINES[catalog.IRONWOOD.machine_type]).memory_bytes / machines.GIB
    verdict = (f"fits {catalog.IRONWOOD.machine_type} allocatable {room:.1f} GiB" if need.total <= room else
               f"over {catalog.IRONWOOD.machine_type} allocatable {room:.1f} GiB by {need.total - room:.1f} GiB "
               "(the scheduling proof stops the plan)")
    return [need.line() + f"; {verdict}; the pod requests and limits {modelservers.tpu_memory_gib(cfg, pool)} GiB, "
                          f"/dev/shm {modelservers.tpu_shm_gib(cfg)} GiB"]


def engine_image_lines(cfg: StackConfig) -> list[str]:
    """The TPU engine image the stack builds (components/serving/engineimage.py) and what its size costs each start."""
    built = loading.engine_image(cfg)
    if built is None:
        return []
    from components.serving import engineimage

    return [f"engine image: built by Cloud Build at the first up from components/locks/vllm-torchtpu.txt (sha256 "
            f"{engineimage.lock_sha256()[:12]}, {built.wheel_bytes / 1e9:.2f} GB of wheels, CPU torch, no nvidia-* or "
            f"triton) into {engineimage.repository_path(cfg.gcp.region, cfg.gcp.project, cfg.cluster_name)}/"
            f"{engineimage.IMAGE_NAME} in {built.build_s / 60:.1f} min, alongside the cluster; the pods run it by "
            f"digest and install nothing; {built.image_bytes / 1e9:.2f} GB per host pulled in "
            f"{built.pull_s / 60:.1f} min, start skew <= {built.skew_s:.0f} s of the "
            f"{loading.TPU_RENDEZVOUS_TIMEOUT_S} s host rendezvous (loading.engine_image, assumed rates)"]


def staging_line(cfg: StackConfig) -> str:
    model = staging_model(cfg)
    return (f"staging: {catalog.KIMI.checkpoint_bytes / 1e12:.2f} TB from the Hugging Face Hub in "
            f"{model.seconds / 60:.1f} min: {model.pods} pods x {model.workers_per_pod} streams, one per staging node, "
            f"leaving from {model.addresses} NAT addresses, "
            f"aggregate {model.aggregate_mbps / 1000:.2f} GB/s (limited by {model.limit}; pod rate "
            f"{model.pod_mbps:.0f} MB/s = {model.sources['pod rate']}); when the bucket already holds the revision "
            f"nothing comes from the Hub, but the pods read their shares back to prove them: about "
            f"{proof_readback_seconds(cfg) / 60:.1f} min (components/plan/staging.py proof_readback_seconds)")


def replicas(cfg: StackConfig) -> int:
    return sum(r.replicas for r in loading.replica_reads(cfg))


def weight_load_lines(cfg: StackConfig) -> list[str]:
    """Bytes each rank and node reads, the load time and what limits it, the volume's throughput and probes."""
    model = loading.load_model(cfg)
    ld = model.loader
    gb = 1e9
    lines = [f"weight load: {ld.engine} --load-format {ld.load_format} with the expert-weight filter; "
             f"{model.readers} nodes read {model.volume_bytes / 1e12:.2f} TB from the volume "
             f"(without the filter every rank would read the whole {loading.checkpoint_bytes() / 1e12:.2f} TB)"]
    for r in model.reads:
        name, rate = model.limit(r)
        lines.append(f"  {r.replicas} x {r.role} (EP {r.expert_parallel}, {r.ranks_per_node} ranks/node): "
                     f"{r.rank_bytes / gb:,.1f} GB per rank, {r.node_bytes / gb:,.1f} GB per node, "
                     f"{r.node_bytes * r.nodes_per_replica / 1e12:.2f} TB per replica, "
                     f"{model.seconds(r) / 60:.1f} min at {rate / MIB:,.0f} MiB/s per node ({name})")
    budget = loading.startup_budget_s(cfg)
    built = loading.engine_image(cfg)
    half = dataclasses.replace(model, throughput_mibps=model.throughput_mibps // 2)
    sizing = ("storage.throughputMiBps" if cfg.storage.throughputMiBps
              else "the least at which no node waits on the volume")
    idle_h = model.readers * (half.load_s - model.load_s) / 3600
    accelerators = cost.hourly_costs(cfg)[0]  # the accelerator line comes first
    idle_cost = (f"${accelerators.usd_per_hour / model.readers * idle_h:,.0f} per start" if accelerators.usd_per_hour
                 else f"unpriced: set {accelerators.basis}")
    lines += [
        f"  load time {model.load_s / 60:.1f} min (target {catalog.WEIGHT_LOAD_TARGET_SECONDS // 60} min), limited "
        f"by the {model.limiting_term}; per-node limit {model.node_limit_mibps:,} MiB/s "
        f"({'storage.nodeReadMiBps' if cfg.storage.nodeReadMiBps else 'assumed, storage.nodeReadMiBps'}), "
        f"loader {ld.rank_bytes_per_s / gb:.1f} GB/s per rank",
        f"  Hyperdisk ML {model.throughput_mibps:,} MiB/s ({sizing}), "
        f"${model.throughput_mibps * prices.HYPERDISK_ML_THROUGHPUT.usd / prices.HOURS_PER_MONTH:.2f}/h; "
        f"at half of it every start loads for {half.load_s / 60:.1f} min: {idle_h:.1f} more idle accelerator "
        f"node-hours ({idle_cost})",
        f"  startup probe budget {budget // 60} min = {loading.PROBE_MARGIN:g} x (load {model.load_s / 60:.1f} + "
        f"engine start {loading.ENGINE_START_S[cfg.track] // 60} min assumed"
        + (f" + image pull {built.pull_s / 60:.1f} min, {built.image_bytes / 1e9:.2f} GB per host; "
           f"host start skew <= {built.skew_s:.0f} s of the {loading.TPU_RENDEZVOUS_TIMEOUT_S} s rendezvous"
           if built else "") + "); pulumi waits "
        f"{loading.ready_timeout_s(cfg) // 60} min for the serving sets and {loading.hydration_timeout_s(cfg) // 60} "
        "min for hydration (one transfer Job, at most one node's read limit)",
        grown_in_place_line(cfg),
    ]
    return lines


def grown_in_place_line(cfg: StackConfig) -> str:
    """What a scale-up of an existing stack gets from the volume it already has (`tools diff` against the last
    plan gives the figures for the throughput it really has)."""
    fresh, grown = loading.startup_budget_terms(cfg)
    lag = loading.HDML_MODIFY_LAG_S / 60
    return (f"  grown in place (more slices on an existing stack): the claim moves to the VolumeAttributesClass of "
            f"{loading.throughput_mibps(cfg):,} MiB/s and the serving set grows at once (pulumi waits only for the "
            f"claim's Bound); new groups may read the old throughput for up to {lag:.0f} min more; the probe budget "
            f"covers {lag:.0f} "
            f"+ {loading.PROBE_MARGIN:g} x load + engine start = {grown / 60:.1f} min (fresh {fresh / 60:.1f}); "
            f"one throughput change per {loading.HDML_MODIFY_INTERVAL_S // 3600} h "
            "(loading.HDML_MODIFY_LAG_S, HDML_MODIFY_INTERVAL_S)")


def slice_lines(cfg: StackConfig) -> list[str]:
    """Per serving unit and in total: sessions held at the served context, weight load, hourly cost."""
    c = capacity.slice_capacity(cfg)
    staging = capacity.weight_staging(cfg)
    each, shared, complete = cost.per_slice(cfg)
    key = "kimi-k3-1:cost.gpuNodeHourUsd" if cfg.track == "gpu" else "kimi-k3-1:cost.tpuChipHourUsd"
    shared_text = f"${shared:,.2f}/h" + ("" if complete else " (some items unpriced)")
    grows, grows_complete = cost.slice_increment(cfg)
    increment = (f"${grows:,.2f}/h more for its boot disks, NAT and the volume's throughput"
                 + ("" if grows_complete else " (some items unpriced)") + " (cost.slice_increment)")
    if each is None:
        price = f"each slice adds its accelerators (unpriced: set {key}) + {increment}"
        total_price = f"{c.slices} x unpriced accelerators + rest of the stack {shared_text}"
    else:
        price = f"each slice adds ${each:,.2f}/h accelerators + {increment}"
        total_price = (f"${c.slices * each + shared:,.2f}/h ({c.slices} x ${each:,.2f} + rest of the stack "
                       f"{shared_text})")
    where = "decode groups" if cfg.track == "gpu" else "replica"
    prefix = (f"; prefill prefix cache {c.prefix_sessions_hbm:,} HBM + {c.prefix_sessions_host:,} host"
              if cfg.track == "gpu" else "")
    context = f"{cfg.context_length:,}-token sessions"
    return [
        f"per slice ({c.replicas} replica(s)): {context} in the {where}: {c.sessions_hbm:,} in HBM + "
        f"{c.sessions_host:,} in host DRAM{prefix}; weights load in {staging.load_s / 60:.1f} min "
        f"(every replica of every slice at once); {price}",
        f"total ({c.slices} slices behind one router): {c.slices * c.sessions_hbm:,} sessions in HBM + "
        f"{c.slices * c.sessions_host:,} in host DRAM; {replicas(cfg)} replicas load in "
        f"{staging.load_s / 60:.1f} min; {total_price}",
    ]


def monitoring_lines(cfg: StackConfig) -> list[str]:
    if not cfg.monitoring.enabled:
        return ["monitoring: off (no PodMonitorings, dashboard or alert policies)"]
    scope = monitoring_scope(cfg)
    channels = len(cfg.monitoring.notificationChannels)
    return [f"dashboard: Cloud Monitoring > Dashboards > \"{dashboard_name(cfg)}\" "
            f"({', '.join(g.title for g in groups(scope))}; link in output monitoringDashboardUrl)",
            f"alerts: {len(alert_rules(scope, 0, 0))} policies, "
            f"{f'{channels} notification channel(s)' if channels else 'no notification channel'}"]


def monitoring_scope(cfg: StackConfig) -> Scope:
    """What the dashboard and alerts watch: the stack's series, and the scaled roles' HPAs where autoscaling is on."""
    roles = autoscaling.roles(cfg)
    return Scope.of(cfg.track, cfg.cluster_name, cfg.kubernetes.namespace, cfg.tpu.engine,
                    tuple(autoscaling.hpa_name(r.name) for r in roles),
                    autoscaling.time_to_add_s(cfg)[0] if roles else 0.0)


def dashboard_name(cfg: StackConfig) -> str:
    """Unique per project as the cluster name is; the stack's name plays no part."""
    return f"{catalog.GUIDE_NAME} on {cfg.cluster_name} ({cfg.track})"


def capacity_lines(cfg: StackConfig, c: capacity.ServingCapacity) -> list[str]:
    gb = 1e9
    r, w, g = c.rule, c.weights, c.groups
    return [
        f"engine-effective KV block: {r.block_tokens} tokens ({r.engine}, asked {r.requested_tokens}): {r.steps[-1]}",
        f"per device: weights {w.total / gb:.1f} GB held (TP {w.tensor_parallel}, EP {w.expert_parallel}: non-expert "
        f"{w.dense / gb:.1f} + routed experts {w.experts / gb:.1f} + their scales {w.scales / gb:.1f}; "
        "components/plan/capacity.py weights_held_per_device), non-weight "
        f"{c.non_weight_bytes_per_device / gb:.1f} GB (capacity.non_weight_bytes), HBM left for KV "
        f"{c.kv_pool_bytes_per_device / gb:.1f} GB of {c.usable_bytes_per_device / gb:.1f} GB usable "
        f"({c.hbm_bytes_per_device / gb:.1f} GB)",
        f"KV pool per engine: {c.blocks_per_engine:,} blocks of {g.group_size} pages x {g.page_bytes:,} B "
        f"({g.attention_groups} MLA + {g.state_groups} KDA groups, vLLM kv_cache_planning); one "
        f"{c.context_length:,}-token request holds {c.blocks_per_sequence:,} blocks (MLA every block, "
        f"KDA {g.state_blocks_per_request} per group in align mode): {c.sequences_per_engine} per engine, "
        f"{c.sequences} per {c.role} replica",
        prefix_cache_line(cfg),
        f"router cache: lruCapacityPerServer {router_lru_capacity(cfg):,} blocks of {router_block_tokens(cfg)} tokens "
        f"per endpoint (the most one engine keeps in HBM or host DRAM over the session shapes: long sessions; "
        "prefixcache.lru_capacity_per_server, docs/capacity.md; "
        f"{c.endpoints_per_replica} endpoints per replica, one per engine)",
    ]


def prefix_cache_line(cfg: StackConfig) -> str:
    """The benchmark's sessions as the engines' own managers keep them (prefixcache.shape_capacity; every shape:
    docs/capacity.md)."""
    s = prefixcache.shape_capacity(cfg, prefixcache.router_shape(cfg))
    f = s.footprint
    where = "replica" if cfg.track == "gpu" else "slice"
    return (f"KV per replica (the benchmark's sessions, sparse KDA retention, as the engines' managers keep them): "
            f"{s.hbm_tokens_per_replica:,} prefix tokens in HBM ({s.hbm_sessions_per_engine} sessions per engine), "
            f"{s.host_tokens_per_replica:,} in host DRAM ({s.host_sessions_per_engine} per engine; copies of what HBM "
            f"keeps and of what it evicted); "
            f"{s.sessions_per_replica:,} sessions per {where} hit their next turn; a session holds "
            f"{f.session_blocks} blocks ({f.live_blocks} it reuses, {f.stale_blocks} stale KDA states) beside "
            f"{f.shared_blocks} shared (prefixcache.prefix_footprint)")


def engine_limit_lines(cfg: StackConfig) -> list[str]:
    """The engine settings that follow the KV pool: the context, how many requests an engine runs at once and the
    decode CUDA graphs, and what the engine admits at the served context (components/plan/capacity.py)."""
    groups = capacity.kv_cache_groups(cfg).groups
    head = (f"engine limits at --max-model-len {cfg.context_length:,} (capacity.max_running_requests, "
            f"sequences_that_fit; a running request holds a block in each of the {groups} KV cache groups)")
    if cfg.track == "gpu":
        parts = []
        for role, c in (("prefill", capacity.serving_capacity(cfg)), ("decode", capacity.decode_capacity(cfg))):
            graphs = (f", decode CUDA graphs up to {c.max_running} requests x {capacity.decode_query_tokens(cfg)} "
                      f"tokens (vLLM's own sizes from --max-num-seqs)" if role == "decode" else "")
            parts.append(f"{role} --max-num-seqs {c.max_running} ({c.blocks_per_engine:,} blocks // {groups}; vLLM's "
                         f"default 1,024 is never reached){graphs}, {c.sequences_per_engine} full-context requests "
                         f"per engine x {c.kv_groups} = {c.sequences} per group, one fewer per engine once non-weight "
                         f"HBM passes {c.non_weight_ceiling_bytes / 1e9:.1f} GB per GPU "
                         f"({c.non_weight_bytes_per_device / 1e9:.0f} GB assumed)")
        offload, engines = capacity.cpu_offload_bytes_per_engine(cfg), parallel.layout(cfg).engines_per_node
        return [f"{head}: {'; '.join(parts)}; host offload cpu_bytes_to_use {offload / 1e9:.0f} GB per engine "
                f"({cfg.gpu.hostOffloadPercent}% of a node's Grace DRAM / {engines} engines)"]
    c = capacity.serving_capacity(cfg)
    return [f"{head}: --max-num-seqs {kvblocks.TPU_MAX_NUM_SEQS} (fixed: the block's page-table floor depends on it; "
            f"the pool runs at most {c.max_running}), {c.sequences_per_engine} full-context requests per engine "
            f"({c.kv_groups} per slice); host offload cpu_bytes_to_use "
            f"{capacity.tpu_offload_bytes_per_engine(cfg) / 1e9:.0f} GB per engine (tpu.hicacheRatio "
            f"{cfg.tpu.hicacheRatio} x its HBM pool over its {parallel.layout(cfg).tensor_parallel} ranks)"]


def start_margin_line(cfg: StackConfig) -> str:
    """How far the non-weight memory the plan assumes sits under the point where the engine refuses to start: its KV
    pool must hold one request at --max-model-len (capacity.ServingCapacity.start_ceiling_non_weight_bytes;
    docs/engine-preconditions.md GPU-KVFIT-1)."""
    device = "GPU" if cfg.track == "gpu" else "TensorCore"
    roles = ((("prefill", capacity.serving_capacity(cfg)), ("decode", capacity.decode_capacity(cfg)))
             if cfg.track == "gpu" else (("slice", capacity.serving_capacity(cfg)),))
    parts = [f"{role} starts while non-weight memory stays under {c.start_ceiling_non_weight_bytes / 1e9:.1f} GB per "
             f"{device}; assumed {c.non_weight_bytes_per_device / 1e9:.1f} (one {c.context_length:,}-token request "
             f"needs a {c.one_request_pool_bytes / 1e9:.1f} GB pool)" for role, c in roles]
    return ("start margin (the engine refuses to start unless its KV pool holds one --max-model-len request, "
            f"vLLM kv_cache_planning): {'; '.join(parts)}")


def router_endpoints(cfg: StackConfig) -> int:
    """Endpoints the router picks prefill engines from: one per engine of every prefill replica."""
    replicas = cfg.gpu.slices * cfg.gpu.prefillGroups if cfg.track == "gpu" else cfg.tpu.slices
    return capacity.serving_capacity(cfg).endpoints_per_replica * replicas


def add_calibration(foundation: Foundation, servers: pulumi.Resource) -> None:
    """Optional peakPrefillThroughput measurement, once the model servers answer."""
    if not foundation.cfg.router.calibrate:
        return
    PrefillCalibration("calibration", CalibrationArgs(
        namespace=foundation.platform.namespace.metadata.name, endpoint=foundation.cfg.client_url,
        image=images.ref(foundation.cfg.images, "calibration"),
        chunk_tokens=contract.PREFILL_CHUNK_TOKENS,
        router_endpoints=router_endpoints(foundation.cfg)),
        pulumi.ResourceOptions(provider=foundation.cluster.provider,
                               depends_on=[servers, foundation.router.chart]))


def results_path(cfg: StackConfig) -> str:
    run = label_value(cfg.benchmark.runId or "manual")
    return f"{benchmark.RESULTS_PREFIX}/{label_value(pulumi.get_stack())}/{run}/"


def add_benchmark(foundation: Foundation, servers: pulumi.Resource) -> None:
    """inference-perf against the router, only for a benchmark run (`benchmark.enabled`)."""
    cfg = foundation.cfg
    if not cfg.benchmark.enabled:
        return
    bench = benchmark.Benchmark("benchmark", benchmark.BenchmarkArgs(
        namespace=foundation.platform.namespace.metadata.name, config=cfg,
        bucket=foundation.bucket.bucket.name, results_path=results_path(cfg),
        base_url=cfg.client_url, models_claim=foundation.weights.claim.metadata.name),
        # Load only once the model servers are Available and the results prefix is writable.
        pulumi.ResourceOptions(provider=foundation.cluster.provider,
                               depends_on=[servers, foundation.router.chart, *foundation.bucket.grants]))
    pulumi.export("benchmarkJob", bench.job.metadata.name)

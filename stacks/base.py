"""What both tracks share: APIs, network, node identity, cluster, CPU pools, checkpoint bucket."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components import catalog, contract
from components.cluster import GkeCluster, GkeClusterArgs
from components.config import StackConfig
from components.identity import NodeIdentity, NodeIdentityArgs, workload_principal
from components.naming import resource_labels
from components.network import Network, NetworkArgs
from components.nodepools import CpuPoolArgs, CpuPools, PoolCommon, transfer_pool
from components.services import ProjectServices, ProjectServicesArgs
from components.storage import CheckpointBucket, CheckpointBucketArgs


@dataclass
class Foundation:
    cfg: StackConfig
    gcp_provider: gcp.Provider
    services: ProjectServices
    cluster: GkeCluster
    pool_common: PoolCommon
    cpu_pools: CpuPools
    bucket: CheckpointBucket


def build_foundation(cfg: StackConfig) -> Foundation:
    labels = resource_labels(cfg, pulumi.get_stack())
    provider = gcp.Provider("gcp", project=cfg.gcp.project, region=cfg.gcp.region, default_labels=labels)
    in_project = pulumi.ResourceOptions(provider=provider)
    services = ProjectServices("apis", ProjectServicesArgs(project=cfg.gcp.project), in_project)
    after_apis = pulumi.ResourceOptions(provider=provider, depends_on=services.resources)

    network = Network("net", NetworkArgs(
        name=cfg.cluster_name, region=cfg.gcp.region, nodes_cidr=cfg.network.nodesCidr,
        pods_cidr=cfg.network.podsCidr, services_cidr=cfg.network.servicesCidr,
        proxy_only_cidr=cfg.network.proxyOnlyCidr), after_apis)
    nodes = NodeIdentity("nodes", NodeIdentityArgs(project=cfg.gcp.project, account_id=f"{cfg.cluster_name}-nodes"),
                         after_apis)
    cluster = GkeCluster("cluster", GkeClusterArgs(
        name=cfg.cluster_name, project=cfg.gcp.project, region=cfg.gcp.region, zone=cfg.gcp.zone,
        network=network.vpc.id, subnetwork=network.subnet.id, release_channel=cfg.cluster.releaseChannel,
        version_prefix=cfg.cluster.versionPrefix, authorized_networks=tuple(cfg.cluster.authorizedNetworks),
        maintenance_window_start=cfg.cluster.maintenanceWindowStart,
        maintenance_exclusion_start=cfg.cluster.maintenanceExclusionStart,
        deletion_protection=cfg.cluster.deletionProtection, dcgm_metrics=cfg.track == "gpu",
        node_service_account=nodes.email, labels=labels),
        # Nodes must not come up before their service account holds its role.
        pulumi.ResourceOptions(provider=provider, depends_on=[*services.resources, *nodes.grants]))

    common = PoolCommon(cluster=cluster.cluster.id, project=cfg.gcp.project, region=cfg.gcp.region,
                        zone=cfg.gcp.zone, service_account=nodes.email, labels=labels,
                        name_prefix=cfg.cluster_name)
    cpu_pools = CpuPools("cpu", common, [
        CpuPoolArgs(pool_name="system", machine_type=cfg.systemPool.machineType, node_count=cfg.systemPool.nodeCount),
        transfer_pool(cfg.transferPool.machineType, cfg.transferPool.nodeCount),
    ], in_project)

    project_number = gcp.organizations.get_project_output(
        project_id=cfg.gcp.project, opts=pulumi.InvokeOutputOptions(provider=provider)).number
    # Independent of the cluster: the bucket (and later the upload) can proceed while GKE is created.
    bucket = CheckpointBucket("weights", CheckpointBucketArgs(
        name=cfg.bucket_name, project=cfg.gcp.project, location=cfg.gcp.region,
        soft_delete_days=cfg.storage.softDeleteDays, delete_on_destroy=cfg.storage.deleteCheckpointOnDestroy,
        readers=(workload_principal(project_number, cfg.gcp.project, cfg.kubernetes.namespace,
                                    contract.TRANSFER_SERVICE_ACCOUNT),),
        labels=labels), after_apis)

    pulumi.export("clusterName", cluster.cluster.name)
    pulumi.export("clusterEndpoint", cluster.cluster.endpoint)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("bucketUri", bucket.uri)
    pulumi.export("checkpointUri", pulumi.Output.concat(bucket.uri, "/", cfg.storage.checkpointPrefix))
    pulumi.export("servingZone", cfg.gcp.zone)
    return Foundation(cfg, provider, services, cluster, common, cpu_pools, bucket)


def export_node_pools(foundation: Foundation, accelerator_pools: list) -> None:
    pulumi.export("nodePools", pulumi.Output.all(
        *[p.name for p in foundation.cpu_pools.pools.values()], *[p.name for p in accelerator_pools]))


def summary(cfg: StackConfig) -> list[str]:
    if cfg.track == "gpu":
        g = cfg.gpu
        hw = (f"{g.node_count} x {g.spec.machine_type} ({g.node_count * g.spec.gpus_per_node} {g.spec.accelerator}) "
              f"in one NVL72 domain: {g.prefillGroups}P x {g.prefillNodesPerGroup} + {g.decodeGroups}D x "
              f"{g.decodeNodesPerGroup} nodes")
    else:
        t = cfg.tpu
        hw = (f"{t.slices} x {t.topology} {catalog.IRONWOOD.generation} slices = {t.slices * t.hosts_per_slice} x "
              f"{catalog.IRONWOOD.machine_type} ({t.slices * t.chips_per_slice} chips), TP={t.tensorParallel} "
              f"EP={t.expertParallel} per replica")
    return [
        f"track {cfg.track}: cluster {cfg.cluster_name} in {cfg.gcp.region}, serving zone {cfg.gcp.zone}",
        f"accelerators: {hw}",
        f"checkpoint: gs://{cfg.bucket_name}/{cfg.storage.checkpointPrefix} "
        f"({'deleted' if cfg.storage.deleteCheckpointOnDestroy else 'kept'} on destroy)",
    ]

"""GKE Standard cluster for both tracks, and the Kubernetes provider built from it."""

from __future__ import annotations

import json
from typing import Optional

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from ..facts import catalog
from .base import Args, Component, StrInput
from .identity import workload_pool
from .network import PODS_RANGE, SERVICES_RANGE, STAGING_PODS_RANGE

CLUSTER_TIMEOUTS = pulumi.CustomTimeouts(create="90m", update="90m", delete="60m")
"""Explicit, because a short cap on slow accelerator clusters leaked whole clusters in CI
(https://github.com/NVIDIA/aicr/issues/2065)."""


class GkeClusterArgs(Args):
    name: str
    project: str
    region: str
    """Regional control plane."""
    zone: str
    """Serving zone: default location of every node pool."""
    network: StrInput
    subnetwork: StrInput
    staging_subnetwork: StrInput
    """Additional subnet for the staging pool only (catalog.GKE_ADDITIONAL_SUBNETS_SOURCE); its pods use
    network.STAGING_PODS_RANGE."""
    release_channel: str
    version_prefix: str
    """Minor line; the newest master version on it is requested and must reach GKE_MIN_VERSION."""
    authorized_networks: tuple[str, ...]
    dns_endpoint: bool
    """Reach the API server through its DNS endpoint (IAM-authorized, reachable from anywhere) instead of its IP."""
    maintenance_window_start: str
    maintenance_exclusion_start: str
    deletion_protection: bool
    dcgm_metrics: bool
    """Add NVIDIA DCGM metrics to Managed Prometheus (GPU track)."""
    hpa_metrics: bool = False
    """Add GKE's kube state metrics of HorizontalPodAutoscalers (the scaling dashboard group and alerts read them:
    components/facts/metrics.py GKE_KSM)."""
    shielded_nodes: bool
    """Shielded GKE Nodes for the whole cluster; off only when a pool's machine cannot join such a cluster
    (catalog.GpuMachine.shielded_gke_nodes)."""
    node_service_account: StrInput
    """Service account of the transient default pool, so even it never runs as the Compute default."""
    labels: dict[str, str]


def pick_master_version(channel: str, prefix: str, default: dict[str, str], latest: dict[str, str]) -> str:
    """The release channel's default version if it is on the pinned minor line, else the channel's newest;
    a cluster enrolled in a channel can only run versions that channel offers."""
    for offered in (default.get(channel), latest.get(channel)):
        if offered and offered.startswith(prefix):
            if catalog.parse_gke_version(offered) < catalog.parse_gke_version(catalog.GKE_MIN_VERSION):
                raise pulumi.RunError(f"the {channel} channel offers {offered}, below the pinned minimum "
                                      f"{catalog.GKE_MIN_VERSION}; set kimi-k3-1:cluster.releaseChannel to RAPID")
            return offered
    raise pulumi.RunError(f"the {channel} channel offers no {prefix}x version now ({default.get(channel)}, "
                          f"{latest.get(channel)}); change kimi-k3-1:cluster.versionPrefix or cluster.releaseChannel")


class GkeCluster(Component):
    """Private-node, Dataplane V2, Workload Identity cluster with Gateway API and Managed Prometheus.

    `provider` is the Kubernetes provider every in-cluster object must use.
    """

    def __init__(self, name: str, args: GkeClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gke", "Cluster", name, opts)
        versions = gcp.container.get_engine_versions_output(
            location=args.region, project=args.project, version_prefix=args.version_prefix,
            opts=pulumi.InvokeOutputOptions(parent=self),
        )
        master_version = pulumi.Output.all(
            versions.release_channel_default_version, versions.release_channel_latest_version,
        ).apply(lambda v: pick_master_version(args.release_channel, args.version_prefix, v[0], v[1]))
        components = (["SYSTEM_COMPONENTS"] + (["DCGM"] if args.dcgm_metrics else [])
                      + (["HPA"] if args.hpa_metrics else []))

        self.cluster = gcp.container.Cluster(
            f"{name}-gke",
            name=args.name,
            project=args.project,
            location=args.region,
            node_locations=[args.zone],
            network=args.network,
            subnetwork=args.subnetwork,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name=PODS_RANGE, services_secondary_range_name=SERVICES_RANGE,
                additional_ip_ranges_configs=[gcp.container.ClusterIpAllocationPolicyAdditionalIpRangesConfigArgs(
                    subnetwork=args.staging_subnetwork, pod_ipv4_range_names=[STAGING_PODS_RANGE])]),
            remove_default_node_pool=True,
            initial_node_count=1,
            node_config=gcp.container.ClusterNodeConfigArgs(
                service_account=args.node_service_account,
                oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
                workload_metadata_config=gcp.container.ClusterNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
                shielded_instance_config=gcp.container.ClusterNodeConfigShieldedInstanceConfigArgs(
                    enable_secure_boot=True, enable_integrity_monitoring=True),
            ),
            min_master_version=master_version,
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=args.release_channel),
            maintenance_policy=gcp.container.ClusterMaintenancePolicyArgs(
                daily_maintenance_window=gcp.container.ClusterMaintenancePolicyDailyMaintenanceWindowArgs(
                    start_time=args.maintenance_window_start),
                maintenance_exclusions=[gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
                    exclusion_name="no-upgrades-under-benchmarks",
                    start_time=args.maintenance_exclusion_start,
                    exclusion_options=gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
                        scope="NO_MINOR_OR_NODE_UPGRADES", end_time_behavior="UNTIL_END_OF_SUPPORT"),
                )],
            ),
            datapath_provider="ADVANCED_DATAPATH",
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=workload_pool(args.project)),
            gateway_api_config=gcp.container.ClusterGatewayApiConfigArgs(channel="CHANNEL_STANDARD"),
            addons_config=gcp.container.ClusterAddonsConfigArgs(
                http_load_balancing=gcp.container.ClusterAddonsConfigHttpLoadBalancingArgs(disabled=False),
                gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True),
                # Required by Hyperdisk ML and the Volume Populator
                # (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/about-volume-populator).
                gce_persistent_disk_csi_driver_config=gcp.container.ClusterAddonsConfigGcePersistentDiskCsiDriverConfigArgs(
                    enabled=True),
            ),
            monitoring_config=gcp.container.ClusterMonitoringConfigArgs(
                enable_components=components,
                managed_prometheus=gcp.container.ClusterMonitoringConfigManagedPrometheusArgs(enabled=True),
            ),
            private_cluster_config=gcp.container.ClusterPrivateClusterConfigArgs(
                enable_private_nodes=True, enable_private_endpoint=False),
            master_authorized_networks_config=gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
                cidr_blocks=[
                    gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                        cidr_block=cidr, display_name=f"operator-{i}")
                    for i, cidr in enumerate(args.authorized_networks)
                ],
            ),
            # DNS endpoint: requests pass Google Cloud IAM (container.clusters.connect) before RBAC, so
            # laptops and CI runners need no IP allow-list (CIS GKE 2.0 5.6.4).
            control_plane_endpoints_config=gcp.container.ClusterControlPlaneEndpointsConfigArgs(
                dns_endpoint_config=gcp.container.ClusterControlPlaneEndpointsConfigDnsEndpointConfigArgs(
                    allow_external_traffic=args.dns_endpoint)),
            enable_shielded_nodes=args.shielded_nodes,
            deletion_protection=args.deletion_protection,
            resource_labels=args.labels,
            opts=self.child(
                custom_timeouts=CLUSTER_TIMEOUTS,
                # The requested version moves as GKE ships patches; re-applying must not upgrade the
                # master under a running benchmark. node_config only describes the removed default pool.
                ignore_changes=["minMasterVersion", "nodeConfig"],
            ),
        )
        if args.dns_endpoint:
            # The DNS endpoint is served by a Google front end with a publicly trusted certificate.
            server = self.cluster.control_plane_endpoints_config.apply(
                lambda c: c.dns_endpoint_config.endpoint)
            ca = pulumi.Output.from_input(None)
        else:
            server, ca = self.cluster.endpoint, self.cluster.master_auth.cluster_ca_certificate
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(server, ca, self.cluster.name).apply(lambda a: _kubeconfig(*a)))
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            # Replace the provider (and so every object) only if the cluster itself is replaced.
            cluster_identifier=self.cluster.id,
            opts=self.child(),
        )
        self.finish(name=self.cluster.name, endpoint=self.cluster.endpoint, kubeconfig=self.kubeconfig)


def _kubeconfig(endpoint: str, ca_certificate: Optional[str], cluster_name: str) -> str:
    """Exec-auth kubeconfig: no credential is stored, `gke-gcloud-auth-plugin` fetches one
    (https://github.com/pulumi/examples/blob/master/gcp-py-gke/__main__.py)."""
    context = f"gke-{cluster_name}"
    cluster: dict[str, str] = {"server": f"https://{endpoint}"}
    if ca_certificate:
        cluster["certificate-authority-data"] = ca_certificate
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": context, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "gke-gcloud-auth-plugin",
            "provideClusterInfo": True,
            "installHint": "Install gke-gcloud-auth-plugin: gcloud components install gke-gcloud-auth-plugin",
        }}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    }, sort_keys=True)

"""Node pools: a CPU system pool, the Volume Populator transfer pool, and the accelerator pools.

Accelerator pools sit in one zone, reference a regional HIGH_THROUGHPUT workload policy that fixes
their interconnect topology, and consume a specific reservation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import pulumi
import pulumi_gcp as gcp

from ..facts import catalog, contract, machines
from .base import Args, Component, StrInput

POOL_TIMEOUTS = pulumi.CustomTimeouts(create="120m", update="120m", delete="60m")
"""Accelerator pools take long to create and drain; TF default is 2 h since 7.42
(https://github.com/hashicorp/terraform-provider-google/blob/main/CHANGELOG.md)."""
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class PoolCommon(Args):
    """What every pool of the cluster shares."""

    cluster: StrInput
    """Cluster id the pool joins."""
    project: str
    region: str
    zone: str
    service_account: StrInput
    labels: dict[str, str]
    name_prefix: str
    """Prefix of project-level names (workload policies), unique per stack: the cluster name."""
    subnetwork: StrInput
    """The cluster's default subnet, named by every pool but the staging pool: with an additional subnet in the
    cluster GKE may otherwise place a new pool in it (catalog.GKE_ADDITIONAL_SUBNETS_SOURCE)."""


def _taint(spec: tuple[str, str, str]) -> gcp.container.NodePoolNodeConfigTaintArgs:
    key, value, effect = spec
    return gcp.container.NodePoolNodeConfigTaintArgs(key=key, value=value, effect=effect)


def _node_config(common: PoolCommon, **fields) -> gcp.container.NodePoolNodeConfigArgs:
    """Node config every pool shares: own service account, Workload Identity metadata server, COS, and secure
    boot with integrity monitoring. Cluster Toolkit's gke-node-pool module sets both on every pool it makes,
    its A4X Max bare-metal and tpu7x blueprints included (modules/compute/gke-node-pool/main.tf
    `shielded_instance_config`, https://github.com/GoogleCloudPlatform/cluster-toolkit
    @1047080375afbb44da4b596be314634e7486af4a); docs/security.md."""
    return gcp.container.NodePoolNodeConfigArgs(
        service_account=common.service_account,
        shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
            enable_secure_boot=True, enable_integrity_monitoring=True),
        oauth_scopes=[CLOUD_PLATFORM_SCOPE],
        workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
        image_type="COS_CONTAINERD",
        resource_labels=common.labels,
        **fields,
    )


def _network(common: PoolCommon, **fields) -> gcp.container.NodePoolNetworkConfigArgs:
    return gcp.container.NodePoolNetworkConfigArgs(subnetwork=common.subnetwork, **fields)


def _reservation(project: str, name: str, block: Optional[str] = None,
                 sub_block: Optional[str] = None) -> gcp.container.NodePoolNodeConfigReservationAffinityArgs:
    """SPECIFIC_RESERVATION affinity; without it a specific-only reservation is not used
    (https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/modules/compute/gke-node-pool/reservation_definitions.tf)."""
    path = name if name.startswith("projects/") else f"projects/{project}/reservations/{name}"
    if block:
        path += f"/reservationBlocks/{block}"
    if sub_block:
        path += f"/reservationSubBlocks/{sub_block}"
    return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
        consume_reservation_type="SPECIFIC_RESERVATION", key=catalog.RESERVATION_AFFINITY_KEY, values=[path])


def _in_serving_zone(common: PoolCommon, pool_name: str, node_count: int) -> dict:
    """NodePool arguments every pool shares: its cluster, the serving zone, a fixed size, auto-repair.
    Node upgrades stay blocked by the cluster's maintenance exclusion."""
    return dict(
        name=pool_name,
        cluster=common.cluster,
        project=common.project,
        location=common.region,
        node_locations=[common.zone],
        node_count=node_count,
        management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
    )


class CpuPoolArgs(Args):
    pool_name: str
    machine_type: str
    node_count: int
    labels: dict[str, str] = {}
    """Kubernetes node labels."""
    taints: tuple[tuple[str, str, str], ...] = ()
    subnetwork: Optional[StrInput] = None
    """Another subnet than the cluster's default (the staging pool's), with `pod_range` its pods' range."""
    pod_range: Optional[str] = None
    scale_to_zero: bool = False
    """Start with node_count nodes and let the cluster autoscaler remove them once nothing runs there."""


class CpuPools(Component):
    """The system pool (controllers, router, monitoring) and the Volume Populator transfer pool.

    On Standard without node auto-provisioning the transfer Job only schedules on a pool labelled
    and tainted with its compute class
    (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/about-volume-populator).
    """

    def __init__(self, name: str, common: PoolCommon, pools: Sequence[CpuPoolArgs],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gke", "CpuPools", name, opts)
        self.pools = {
            pool.pool_name: gcp.container.NodePool(
                f"{name}-{pool.pool_name}",
                **_sized(_in_serving_zone(common, pool.pool_name, pool.node_count), pool),
                network_config=(gcp.container.NodePoolNetworkConfigArgs(subnetwork=pool.subnetwork,
                                                                        pod_range=pool.pod_range)
                                if pool.subnetwork is not None else _network(common)),
                node_config=_node_config(
                    common,
                    machine_type=pool.machine_type,
                    disk_type=machines.cpu_series(pool.machine_type).boot_disk,
                    disk_size_gb=catalog.BOOT_DISK_GB_CPU,
                    labels=pool.labels or None,
                    taints=[_taint(t) for t in pool.taints] or None,
                ),
                opts=self.child(custom_timeouts=POOL_TIMEOUTS),
            )
            for pool in pools
        }
        self.finish(pools=[p.name for p in self.pools.values()])


def _sized(fields: dict, pool: CpuPoolArgs) -> dict:
    """A pool that scales to zero starts at node_count (initial_node_count) under the cluster autoscaler: "When
    demand is low, the cluster autoscaler scales back down to a minimum size that you designate"
    (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler), here 0."""
    if not pool.scale_to_zero:
        return fields
    count = fields.pop("node_count")
    return {**fields, "initial_node_count": count,
            "autoscaling": gcp.container.NodePoolAutoscalingArgs(min_node_count=0, max_node_count=count)}


STAGING_POOL = "weights-staging"
STAGING_TAINT = (f"{catalog.GUIDE_NAME}/weights-staging", "true", "NO_SCHEDULE")
"""Keeps every other pod off the staging nodes, whose egress is the staging NAT's addresses."""


def staging_pool(machine_type: str, pods: int, subnetwork: StrInput, pod_range: str) -> CpuPoolArgs:
    """One node per staging pod in the staging subnet; it empties, and scales to zero, when the copy is done."""
    return CpuPoolArgs(pool_name=STAGING_POOL, machine_type=machine_type, node_count=pods,
                       taints=(STAGING_TAINT,), subnetwork=subnetwork, pod_range=pod_range, scale_to_zero=True)


def transfer_pool(machine_type: str, node_count: int) -> CpuPoolArgs:
    label = catalog.COMPUTE_CLASS_LABEL
    value = catalog.VOLUME_POPULATOR_COMPUTE_CLASS
    return CpuPoolArgs(pool_name="weights-transfer", machine_type=machine_type, node_count=node_count,
                       labels={label: value}, taints=((label, value, "NO_SCHEDULE"),))


class WorkloadPolicyArgs(Args):
    name: str
    project: str
    region: str
    accelerator_topology: str


def workload_policy(name: str, args: WorkloadPolicyArgs, opts: pulumi.ResourceOptions) -> gcp.compute.ResourcePolicy:
    """Regional HIGH_THROUGHPUT workload policy; its accelerator topology defines the interconnect domain."""
    return gcp.compute.ResourcePolicy(
        name,
        name=args.name,
        project=args.project,
        region=args.region,
        workload_policy=gcp.compute.ResourcePolicyWorkloadPolicyArgs(
            type=catalog.WORKLOAD_POLICY_TYPE, accelerator_topology=args.accelerator_topology),
        opts=opts,
    )


class GpuRacksArgs(Args):
    pool_prefix: str
    machine: catalog.GpuMachine
    slices: int
    """One node pool per slice, each on its own NVL72 rack."""
    nodes_per_slice: int
    """Every prefill and decode group node of one slice; at most one NVL72 domain (18)."""
    reservation_project: str
    reservation: str
    reservation_block: Optional[str] = None
    reservation_sub_blocks: tuple[str, ...] = ()
    """One per slice, in order; empty: Compute Engine picks a sub-block of the reservation for each pool."""


def slice_pool_name(prefix: str, index: int) -> str:
    """Node pool of slice `index`: the same name whatever the slice count, so adding a slice adds a pool."""
    return f"{prefix}-{index}"


class GpuRacks(Component):
    """A4X Max (or A4X) pools, one per slice, each inside one NVL72 `1x72` domain, with GKE-managed DRANET.

    All pools name one workload policy: Compute Engine applies a workload policy to each MIG (node pool)
    independently, so each pool is placed in one NVLink domain of its own
    (https://cloud.google.com/compute/docs/instance-groups/about-workload-policies). Pool i's Pulumi and GKE
    names depend on i only, so a higher slice count adds pools and never replaces one."""

    def __init__(self, name: str, common: PoolCommon, args: GpuRacksArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gke", "GpuRacks", name, opts)
        if args.nodes_per_slice > catalog.NVL72_MAX_NODES:
            raise ValueError(f"{args.nodes_per_slice} nodes exceed one NVL72 domain ({catalog.NVL72_MAX_NODES})")
        self.policy = workload_policy(
            f"{name}-policy",
            WorkloadPolicyArgs(name=f"{common.name_prefix}-{catalog.NVL72_TOPOLOGY}", project=common.project,
                               region=common.region, accelerator_topology=catalog.NVL72_TOPOLOGY),
            self.child(),
        )
        self.pools = [self._pool(name, common, args, i) for i in range(args.slices)]
        self.finish(pools=[p.name for p in self.pools], policy=self.policy.name)

    def _pool(self, name: str, common: PoolCommon, args: GpuRacksArgs, index: int) -> gcp.container.NodePool:
        machine = args.machine
        sub_block = args.reservation_sub_blocks[index] if args.reservation_sub_blocks else None
        return gcp.container.NodePool(
            f"{name}-{index}",
            **_in_serving_zone(common, slice_pool_name(args.pool_prefix, index), args.nodes_per_slice),
            # Cluster Toolkit's A4X Max blueprint: COMPACT type naming the workload policy, no tpu_topology.
            placement_policy=gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", policy_name=self.policy.name),
            network_config=_network(common, accelerator_network_profile=catalog.ACCELERATOR_NETWORK_PROFILE),
            node_config=_node_config(
                common,
                machine_type=machine.machine_type,
                # A4X machines attach no Persistent Disk; boot from Hyperdisk Balanced
                # (https://docs.cloud.google.com/ai-hypercomputer/docs/create/create-a4xmax-instances-in-bulk).
                disk_type="hyperdisk-balanced",
                disk_size_gb=catalog.BOOT_DISK_GB_ACCELERATOR,
                guest_accelerators=[gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                    type=machine.accelerator,
                    count=machine.gpus_per_node,
                    # GB300 needs driver >= R580.95.05; AICR installs `latest`
                    # (https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/examples/gke-a4x-max-bm/README.md,
                    # https://github.com/NVIDIA/aicr/blob/9b6263c1d690/docs/integrator/gke-a4x-max-networking.md).
                    gpu_driver_installation_config=gcp.container
                    .NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(gpu_driver_version="LATEST"),
                )],
                labels={**dict(machine.node_labels), contract.SLICE_NODE_LABEL: str(index)},
                taints=[_taint(catalog.GPU_TAINT)],
                linux_node_config=gcp.container.NodePoolNodeConfigLinuxNodeConfigArgs(
                    hugepages_config=gcp.container.NodePoolNodeConfigLinuxNodeConfigHugepagesConfigArgs(
                        hugepage_size2m=machine.hugepages_2m)) if machine.hugepages_2m else None,
                reservation_affinity=_reservation(args.reservation_project, args.reservation,
                                                  args.reservation_block, sub_block),
            ),
            opts=self.child(
                custom_timeouts=POOL_TIMEOUTS,
                # A fully consumed reservation cannot hold the old and the new pool at once.
                delete_before_replace=True,
            ),
        )


class TpuSlicesArgs(Args):
    pool_prefix: str
    topology: str
    slices: int
    hosts_per_slice: int
    reservation_project: str
    reservation: Optional[str] = None
    spot: bool = False


class TpuSlices(Component):
    """Ironwood slices: one node pool per slice, sharing one HIGH_THROUGHPUT workload policy.

    tpu7x rejects COMPACT group placement; the pool names the workload policy and its topology, and
    GKE reads the placement policy back without a type, so the field is guarded against a diff that
    would otherwise replace the pools on every apply (https://github.com/vllm-project/ci-infra/pull/547).
    """

    def __init__(self, name: str, common: PoolCommon, args: TpuSlicesArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gke", "TpuSlices", name, opts)
        self.policy = workload_policy(
            f"{name}-policy",
            WorkloadPolicyArgs(name=f"{common.name_prefix}-{args.topology}", project=common.project,
                               region=common.region, accelerator_topology=args.topology),
            self.child(),
        )
        self.pools = [
            gcp.container.NodePool(
                f"{name}-{i}",
                # A multi-host slice is all of its hosts or nothing: node count equals the slice's host count.
                **_in_serving_zone(common, slice_pool_name(args.pool_prefix, i), args.hosts_per_slice),
                placement_policy=gcp.container.NodePoolPlacementPolicyArgs(
                    type="", policy_name=self.policy.name, tpu_topology=args.topology),
                network_config=_network(common),
                node_config=_node_config(
                    common,
                    machine_type=catalog.IRONWOOD.machine_type,
                    disk_type="hyperdisk-balanced",
                    disk_size_gb=catalog.BOOT_DISK_GB_ACCELERATOR,
                    gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
                    labels={contract.SLICE_NODE_LABEL: str(i)},
                    taints=[_taint(catalog.TPU_TAINT)],
                    spot=args.spot or None,
                    reservation_affinity=(_reservation(args.reservation_project, args.reservation)
                                          if args.reservation else None),
                ),
                opts=self.child(
                    custom_timeouts=POOL_TIMEOUTS,
                    delete_before_replace=True,
                    ignore_changes=["placementPolicy"],
                ),
            )
            for i in range(args.slices)
        ]
        self.finish(pools=[p.name for p in self.pools], policy=self.policy.name)

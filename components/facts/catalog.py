"""Hardware, model and platform facts, each with its source, in one place.

Everything else reads these constants instead of repeating literals. Each fact names the upstream page
or file it comes from; a fact marked "assumption" is not published and is overridable in config where it
matters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GUIDE_NAME = "kimi-k3-1"
"""llm-d guide name; also the router release name, so the EPP service is `kimi-k3-1-epp` (seed post)."""


# --------------------------------------------------------------------------- GKE versions
@dataclass(frozen=True)
class VersionGate:
    feature: str
    minimum: str
    source: str


GKE_VERSION_GATES: tuple[VersionGate, ...] = (
    VersionGate("A4X Max (GB300) node pools", "1.35.0-gke.2745000",
                "AICR quoting the A4X Max GKE guide, 1.34 branch: 1.34.3-gke.1318000; "
                "https://github.com/NVIDIA/aicr/blob/9b6263c1d690/docs/integrator/gke-a4x-max-networking.md"),
    VersionGate("Ironwood tpu7x on Standard", "1.34.3-gke.1318000",
                "https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/examples/gke-tpu-7x/README.md"),
    VersionGate("GKE-managed DRANET", "1.34.1-gke.1829001", "https://docs.cloud.google.com/kubernetes-engine/docs/how-to/allocate-network-resources-dra"),
    VersionGate("Volume Populator to Hyperdisk ML", "1.33.2-gke.4780000", "https://docs.cloud.google.com/kubernetes-engine/docs/concepts/about-volume-populator"),
    VersionGate("Inference Extension CRDs installed by GKE", "1.34.0-gke.1626000", "https://llm-d.ai/docs/resources/gateway/gke"),
    VersionGate("additional subnet for the staging pool", "1.30.3-gke.1211000",
                "https://cloud.google.com/kubernetes-engine/docs/how-to/multi-subnet-cluster"),
)


def parse_gke_version(version: str) -> tuple[int, ...]:
    """`1.35.0-gke.2745000` -> (1, 35, 0, 2745000); a prefix such as `1.35.` -> (1, 35)."""
    head, _, gke = version.partition("-gke.")
    parts = [int(p) for p in head.split(".") if p]
    if gke:
        parts.append(int(gke))
    return tuple(parts)


GKE_MIN_VERSION = max((g.minimum for g in GKE_VERSION_GATES), key=parse_gke_version)
"""The lowest GKE version that satisfies every gate of both tracks."""

GKE_VERSION_PREFIX = "1.35."
"""Minor line the cluster is pinned to (Cluster Toolkit A4X Max blueprint uses `version_prefix: "1.35."`)."""


# --------------------------------------------------------------------------- accelerators
@dataclass(frozen=True)
class GpuMachine:
    """One NVL72 GPU machine family (https://cloud.google.com/compute/docs/gpus)."""

    key: str
    machine_type: str
    accelerator: str
    gpus_per_node: int
    hbm_gb_per_gpu: float
    host_memory_gb: int
    vcpus: int
    reservation_only: bool
    bare_metal: bool
    zones: tuple[str, ...]
    zones_source: str
    rdma_nics: int | None = None
    bf16_dense_tflops_per_gpu: float = 0.0
    """Peak dense BF16 tensor throughput of one GPU (the prefill rule's compute, components/plan/capacity.py
    peak_prefill_throughput): GB300 2.5 PFLOPS, GB200 2.25 PFLOPS, "without sparsity"
    (https://verda.com/blog/gb300-nvl72-architecture, per-GPU specifications)."""
    """MRDMA devices a whole-node pod claims; None claims all the node publishes."""
    node_labels: tuple[tuple[str, str], ...] = (("cloud.google.com/gke-networking-dra-driver", "true"),)
    """Node labels that turn on GKE-managed DRANET (A4X Max:
    https://github.com/NVIDIA/aicr/blob/9b6263c1d690/docs/integrator/gke-a4x-max-networking.md; A4X:
    https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/modules/compute/gke-node-pool/main.tf)."""
    hugepages_2m: int = 0
    """2 MiB hugepages pre-allocated per node (A4X Max: for the asapd-lite NIC daemon)."""
    asapd_instance_types: tuple[str, ...] = ()
    """Instance types the asapd-lite DaemonSet initializes (bare-metal A4X Max only)."""

    @property
    def shielded_gke_nodes(self) -> bool:
        """Whether a cluster holding this machine can keep Shielded GKE Nodes on. Cluster Toolkit's A4X Max
        bare-metal blueprint turns the cluster setting off and added a module variable for that alone
        (examples/gke-a4x-max-bm/gke-a4x-max-bm.yaml `enable_shielded_nodes: false`, PR #5211,
        https://github.com/GoogleCloudPlatform/cluster-toolkit @1047080375afbb44da4b596be314634e7486af4a); no
        Google page found states bare-metal support either way (docs/security.md)."""
        return not self.bare_metal


NVL72_MAX_NODES = 18
"""An NVL72 sub-block is 18 nodes x 4 GPUs; a node pool in one `1x72` domain holds at most 18 nodes
(https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/examples/gke-a4x-max-bm/README.md)."""
NVL72_TOPOLOGY = "1x72"
"""Workload-policy accelerator topology for an NVL72 domain
(https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/examples/gke-a4x-max-bm/gke-a4x-max-bm.yaml)."""

GPU_MACHINES: dict[str, GpuMachine] = {
    "a4x-max": GpuMachine(
        key="a4x-max", machine_type="a4x-maxgpu-4g-metal", accelerator="nvidia-gb300", gpus_per_node=4,
        hbm_gb_per_gpu=279.0, host_memory_gb=960, vcpus=144, reservation_only=True, bare_metal=True,
        bf16_dense_tflops_per_gpu=2500.0,
        # A4X Max zones are not published
        # (https://docs.cloud.google.com/ai-hypercomputer/docs/create/create-a4xmax-instances-in-bulk); third-party
        # deployments use us-central1-b.
        zones=("us-central1-b",),
        zones_source="A4X Max zone list unpublished (https://docs.cloud.google.com/ai-hypercomputer/docs/create/"
                     "create-a4xmax-instances-in-bulk); observed in us-central1-b",
        # a pod must request all 8 mrdma.google.com devices
        # (https://github.com/NVIDIA/aicr/blob/9b6263c1d690/docs/integrator/gke-a4x-max-networking.md)
        rdma_nics=8,
        node_labels=(("cloud.google.com/gke-networking-dra-driver", "true"),
                     ("cloud.google.com/gke-dpv2-unified-cni", "cni-migration")),
        # node system config hugepage_size2m
        # (https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/examples/gke-a4x-max-bm/gke-a4x-max-bm.yaml)
        hugepages_2m=4096,
        # Cluster Toolkit's asapd-lite installer selects both the Local-SSD and the no-Local-SSD shape.
        asapd_instance_types=("a4x-maxgpu-4g-metal", "a4x-maxgpu-4g-metal-nolssd"),
    ),
    "a4x": GpuMachine(
        key="a4x", machine_type="a4x-highgpu-4g", accelerator="nvidia-gb200", gpus_per_node=4,
        hbm_gb_per_gpu=186.0, host_memory_gb=884, vcpus=140, reservation_only=True, bare_metal=False,
        bf16_dense_tflops_per_gpu=2250.0,
        zones=("us-central1-b",),
        zones_source="Cluster Toolkit CI runs A4X in us-central1-b: https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/tools/cloud-build/daily-tests/tests/gke-a4x.yml",
    ),
}


@dataclass(frozen=True)
class TpuMachine:
    """Ironwood host shape (https://cloud.google.com/tpu/docs/tpu7x,
    https://docs.cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood)."""

    generation: str
    machine_type: str
    accelerator_label: str
    chips_per_host: int
    tensorcores_per_chip: int
    hbm_gib_per_chip: int
    host_memory_gb: int
    usable_host_memory_gib: int
    vcpus: int
    zones: tuple[str, ...]
    zones_source: str
    bf16_tflops_per_chip: float = 0.0
    """Peak BF16 compute per chip (https://cloud.google.com/tpu/docs/tpu7x: "2,307 TFLOPs BF16")."""


IRONWOOD = TpuMachine(
    generation="tpu7x", machine_type="tpu7x-standard-4t", accelerator_label="tpu7x", chips_per_host=4,
    tensorcores_per_chip=2, hbm_gib_per_chip=192, host_memory_gb=960,
    usable_host_memory_gib=800,  # seed post: "~800 GiB host RAM/node"
    vcpus=224, bf16_tflops_per_chip=2307.0,
    zones=("us-central1-c", "us-central1-ai1a"),
    zones_source="https://docs.cloud.google.com/tpu/docs/regions-zones (us-central1-c; us-central1-ai1a in one "
                 "version)",
)

TPU_MULTIHOST_TOPOLOGIES = ("2x2x2", "2x2x4", "2x4x4", "4x4x4")
"""Multi-host Ironwood topologies with a source: XPK's tpu7x-16 = 2x2x2, the seed's 2x2x4 = XPK tpu7x-32
(https://github.com/AI-Hypercomputer/xpk/blob/367c838253be/src/xpk/core/system_characteristics.py), 2x4x4 (32 chips,
8 hosts) and 4x4x4 (64 chips, 16 hosts: XPK's golden `tpu7x-4x4x4` node pools,
https://github.com/AI-Hypercomputer/xpk/tree/main/goldens). A 2x2x1 slice is one host and takes no workload policy
(xpk PR #825). Larger Ironwood shapes exist; the program has no source for them yet, and says so."""

BOOT_DISK_GB_ACCELERATOR = 500
BOOT_DISK_GB_CPU = 100
"""Boot disk sizes of the node pools (hyperdisk-balanced on accelerator nodes, pd-balanced on CPU nodes)."""

WORKLOAD_POLICY_TYPE = "HIGH_THROUGHPUT"
"""Only workload-policy type that carries an accelerator topology
(https://docs.cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood)."""


def topology_chips(topology: str) -> int:
    chips = 1
    for dim in topology.split("x"):
        chips *= int(dim)
    return chips


# --------------------------------------------------------------------------- node labels and taints
# Cluster Toolkit gpu_taint,
# https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/modules/compute/gke-node-pool/main.tf
GPU_TAINT = ("nvidia.com/gpu", "present", "NO_SCHEDULE")
# Cluster Toolkit tpu_taint,
# https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/modules/internal/tpu-definition/main.tf
TPU_TAINT = ("google.com/tpu", "present", "NO_SCHEDULE")
# the only value the API accepts
# (https://github.com/NVIDIA/aicr/blob/9b6263c1d690/docs/integrator/gke-a4x-max-networking.md)
ACCELERATOR_NETWORK_PROFILE = "auto"

VOLUME_POPULATOR_COMPUTE_CLASS = "gcs-to-hdml-compute-class"
"""Compute class the Volume Populator transfer Job selects; on Standard without NAP a node pool must
carry it as label and NoSchedule taint under `cloud.google.com/compute-class`
(https://docs.cloud.google.com/kubernetes-engine/docs/concepts/about-volume-populator)."""
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
TRANSFER_JOB_CPU_REQUEST = 24
"""vCPUs the Volume Populator's transfer Job requests unless the PVC annotation
`volume-populator.datalayer.gke.io/cpu-request` says otherwise (the program leaves it unset): the transfer pool's
nodes must offer that much allocatable CPU
(https://docs.cloud.google.com/kubernetes-engine/docs/how-to/persistent-volumes/volume-populator)."""

# https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/modules/compute/gke-node-pool/reservation_definitions.tf
RESERVATION_AFFINITY_KEY = "compute.googleapis.com/reservation-name"


# --------------------------------------------------------------------------- model
@dataclass(frozen=True)
class ModelFacts:
    """Kimi K3.1 Pro, from the launch post (docs/seed-vs-reality.md lists where we depart from it)."""

    hf_id: str = "moonshotai/Kimi-K3.1-Pro"
    total_params: float = 2.8e12
    active_params: float = 104e9
    routed_experts: int = 896
    layers: int = 93
    kda_layers: int = 69
    mla_layers: int = 24
    max_positions: int = 1_048_576
    checkpoint_bytes: int = 1_560_000_000_000  # "1.56 TB (MXFP4 experts)", decimal TB


KIMI = ModelFacts()
KIMI_K3_CONFIG_REPO = "moonshotai/Kimi-K3"
"""The family member whose config.json is published (the model.* geometry defaults are its values); Kimi K3.1 Pro's
is read from the staged revision at `pulumi up`."""

Track = Literal["gpu", "tpu"]


# --------------------------------------------------------------------------- storage
HYPERDISK_ML_MIN_GIB = 4
HYPERDISK_ML_MAX_GIB = 64 * 1024
HYPERDISK_ML_MIN_MIBPS = 400
HYPERDISK_ML_MAX_MIBPS = 2_097_152
"""Hyperdisk ML limits: 4 GiB-64 TiB (https://cloud.google.com/compute/docs/disks/hd-types/hyperdisk-ml), and
400-2,097,152 MiB/s per volume: "The maximum throughput for a Hyperdisk ML disk is increased to 2,097,152 MiB/s
from 1,200,000 MiB/s" (Compute Engine release notes, March 31, 2026,
https://docs.cloud.google.com/compute/docs/release-notes; the Hyperdisk overview lists "Throughput : 2,097,152
MiB/s" and read-only attachment "to up to 2,500 instances", https://docs.cloud.google.com/compute/docs/disks/hyperdisks;
the Hyperdisk ML page still said 1,200,000 in the copy we read)."""

HYPERDISK_PER_VM_READ_MIBPS = 2400
"""Assumption, not a published limit: how fast one node reads a Hyperdisk ML volume. Google publishes per-instance
Hyperdisk limits by machine type on https://cloud.google.com/compute/docs/disks/hyperdisk-perf-limits, but no
copy of that page we could read lists `a4x-maxgpu-4g-metal` or `tpu7x-standard-4t`. What the machine pages do
say: A4X Max attaches Hyperdisk ML (up to 32 volumes per `a4x-maxgpu-4g-metal`) and has "up to 400 Gbps" of
general-purpose network (https://docs.cloud.google.com/compute/docs/accelerator-optimized-machines, "Supported
disk types for A4X Max and A4X instances", "A4X Max and A4X comparison"), an upper bound; Hyperdisk ML is GA on
TPU7x since February 5, 2026 (https://docs.cloud.google.com/compute/docs/release-notes). It bounds every
reader node in components/plan/loading.py; `storage.nodeReadMiBps` replaces it with a measurement."""

HUB_STREAM_ASSUMED_MBPS = 60
"""Assumption (unpublished, not measured against the real Hub): MB/s one download stream from the Hugging Face
Hub sustains into a GKE pod. The staging Job runs storage.stagingWorkers streams, so its expected time is
checkpoint / (workers x this); its progress log prints the real rate to calibrate against."""

WEIGHT_LOAD_TARGET_SECONDS = 600
"""Design target: every replica's copy of the checkpoint loads within 10 minutes."""


# --------------------------------------------------------------------------- staging egress
CLOUD_NAT_ADDRESSES_SOURCE = "https://cloud.google.com/nat/docs/ports-and-addresses"
"""Cloud NAT serves VMs without an external address: "A VM without an external IP address, which is in a
subnetwork (subnet) served by a Public NAT gateway, uses a Public NAT IP address when it sends packets to a
destination on the internet"; automatic allocation adds addresses "based on ... the number of VMs that use the
gateway [and] the number of ports that are reserved for each VM", manual assignment uses the static addresses you
create."""
GKE_MASQUERADE_SOURCE = "https://cloud.google.com/kubernetes-engine/docs/concepts/ip-masquerade-agent"
"""A Standard cluster without `--disable-default-snat` rewrites a Pod's packets to destinations outside the
default non-masquerade ranges (the internet) from the Pod IP to the node's IP: to Cloud NAT every pod on a node is
that node."""
NAT_ONE_SECTION_RULE = ("`ALL_SUBNETWORKS_*` in one NAT section means \"there should not be any other RouterNat "
                        "section in any Router for this network in this region\" (pulumi_gcp 10.2.0 "
                        "`RouterNatArgs.source_subnetwork_ip_ranges_to_nat`)")
NAT_MIN_PORTS_PER_VM_ONE_ADDRESS = 32768
"""Static port allocation with this many ports per VM on the staging gateway. `minPortsPerVm` "is rounded up to
the nearest power of 2" (Compute API `RouterNat.minPortsPerVm`,
https://pub.dev/documentation/pulumi_google_native/latest/compute/RouterNat/minPortsPerVm.html), and Cloud NAT
works "by dividing the available source ports per external IP equally across all in-scope instances"
(https://cloud.google.com/blog/products/networking/google-cloud-nat-new-scaling-features). Two VMs' 32,768
would take all 65,536 values of the 16-bit source port, port 0 included, so two staging VMs cannot reserve theirs
on one address and each leaves from an address of its own. Our inference from those pages, not a sentence of
Google's; the staging subnet holds no other VM to compete for the addresses."""
GKE_ADDITIONAL_SUBNETS_SOURCE = "https://cloud.google.com/kubernetes-engine/docs/how-to/multi-subnet-cluster"
"""A VPC-native cluster on GKE >= 1.30.3-gke.1211000 takes up to eight additional subnets; only new node pools use
them, and a new pool without a subnet of its own may be placed in any of them ("based on IP address requirements
and the availability of IP addresses in all cluster subnets"), so every pool of this program names its subnet."""
STAGING_MAX_PODS = 8
"""Design bound on staging pods (one node and one NAT address each): 8 x 960 MB/s is about three times the
10-minute target rate (components/plan/staging.py); more would only reserve addresses."""


# --------------------------------------------------------------------------- locations
COMPUTE_ZONES_SOURCE = "https://cloud.google.com/compute/docs/regions-zones"
COMPUTE_ZONES: dict[str, tuple[str, ...]] = {
    # Regions with the zones Compute Engine lists for them (COMPUTE_ZONES_SOURCE; us-central1 also has the AI zone
    # us-central1-ai1a, https://docs.cloud.google.com/compute/docs/regions-zones/ai-zones). A region missing here is
    # missing from our table, not from Google Cloud: add it with its zones when a reservation lives there.
    "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f", "us-central1-ai1a"),
    "us-west1": ("us-west1-a", "us-west1-b", "us-west1-c"),
    "europe-west4": ("europe-west4-a", "europe-west4-b", "europe-west4-c"),
    "asia-east1": ("asia-east1-a", "asia-east1-b", "asia-east1-c"),
    "asia-northeast1": ("asia-northeast1-a", "asia-northeast1-b", "asia-northeast1-c"),
    "asia-southeast1": ("asia-southeast1-a", "asia-southeast1-b", "asia-southeast1-c"),
}


# --------------------------------------------------------------------------- namespaces
KUBERNETES_NAMESPACES_SOURCE = \
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/#initial-namespaces"
RESERVED_NAMESPACES: dict[str, str] = {
    # Namespaces a workload namespace must not be: the stack gives its namespace a default-deny NetworkPolicy,
    # a ResourceQuota and Pod Security labels, which would break what already runs there.
    "default": f"Kubernetes' initial namespace ({KUBERNETES_NAMESPACES_SOURCE})",
    "kube-system": f"Kubernetes' system namespace ({KUBERNETES_NAMESPACES_SOURCE})",
    "kube-public": f"Kubernetes' public namespace ({KUBERNETES_NAMESPACES_SOURCE})",
    "kube-node-lease": f"Kubernetes' node lease namespace ({KUBERNETES_NAMESPACES_SOURCE})",
    "gmp-system": "GKE Managed Prometheus' collectors (components/platform/netpol.py GMP_COLLECTORS)",
    "gmp-public": "GKE Managed Prometheus' public configuration",
}
RESERVED_NAMESPACE_PREFIXES: dict[str, str] = {
    "kube-": f"the prefix Kubernetes reserves for its system namespaces ({KUBERNETES_NAMESPACES_SOURCE})",
    "gke-": "the prefix of GKE's managed namespaces (gke-managed-*, gke-gmp-system)",
}
LWS_NAMESPACE = "lws-system"
"""Namespace of the LeaderWorkerSet controller chart (its release manifests' namespace)."""
DRA_NAMESPACE = "nvidia-dra-driver-gpu"
"""Namespace of the NVIDIA DRA driver chart (Cluster Toolkit installs it there: GoogleCloudPlatform/cluster-toolkit
`modules/management/kubectl-apply/main.tf`, `install_nvidia_dra_driver`)."""
KEDA_NAMESPACE = "keda"
"""Namespace of the KEDA chart (its docs install it there: https://keda.sh/docs/latest/deploy/)."""
CHART_NAMESPACES: dict[str, str] = {LWS_NAMESPACE: "the LeaderWorkerSet chart",
                                    DRA_NAMESPACE: "the NVIDIA DRA driver chart",
                                    KEDA_NAMESPACE: "the KEDA chart"}
"""Namespaces the stack's charts own; the workload namespace must be another one."""

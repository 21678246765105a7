"""The Google Cloud layer in the plan: each fact that, if wrong, makes GKE reject the apply or build
the wrong hardware, checked against the fact sheets and across resources."""

from __future__ import annotations

import re

import pytest

from components.cloud.nodepools import _reservation
from components.facts import catalog
from tests.conftest import STACKS
from tools.preview.mocks import PROJECT_NUMBER

NODE_POOL = "gcp:container/nodePool:NodePool"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
CLUSTER = "gcp:container/cluster:Cluster"
PROJECT = "kimi-test-project"  # tests/stacks/Pulumi.*.yaml


@pytest.fixture(scope="module")
def gke_md(shared) -> str:
    return (shared / "reference" / "gke.md").read_text()




# ----------------------------------------------------------------------------------------- GPU
def test_gpu_pool_hardware_matches_fact_sheet(gpu, gke_md):
    pool = gpu.one(NODE_POOL, "gpu-0")["inputs"]
    node = pool["nodeConfig"]
    assert f"| Machine type | `{node['machineType']}`" in gke_md
    [accel] = node["guestAccelerators"]
    assert f"`{accel['type']}`, count `{accel['count']}`" in gke_md
    assert accel["gpuDriverInstallationConfig"]["gpuDriverVersion"] == "LATEST"
    assert node["diskType"] == "hyperdisk-balanced"  # no Persistent Disk on A4X Max (gke.md §1.1)
    assert node["imageType"] == "COS_CONTAINERD"
    assert node["linuxNodeConfig"]["hugepagesConfig"]["hugepageSize2m"] == 4096
    assert "hugepage_size2m: 4096" in gke_md
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"} in node["taints"]


def test_gpu_pool_dranet_and_network_profile(gpu, gke_md):
    pool = gpu.one(NODE_POOL, "gpu-0")["inputs"]
    nodes = gpu.one("gcp:compute/subnetwork:Subnetwork", "net-nodes")["inputs"]["name"]
    assert pool["networkConfig"] == {"acceleratorNetworkProfile": "auto",
                                     "subnetwork": f"projects/{PROJECT}/regions/us-central1/subnetworks/{nodes}"}
    labels = pool["nodeConfig"]["labels"]
    expected = re.search(r"--node-labels=([^` ]+)`", gke_md).group(1)
    # The DRANET labels upstream sets, and the slice index every accelerator node carries (contract.SLICE_NODE_LABEL).
    assert labels == {**dict(item.split("=") for item in expected.split(",")), "kimi-k3-1.llm-d.ai/slice": "0"}


def test_gpu_pool_sits_in_one_nvl72_domain(gpu, gke_md):
    pool_resource = gpu.one(NODE_POOL, "gpu-0")
    pool = pool_resource["inputs"]
    policy = gpu.one(POLICY)["inputs"]
    assert policy["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "1x72"}
    assert 'accelerator_topology: "1x72"' in gke_md
    assert policy["region"] == pool["location"] == "us-central1"
    assert pool["placementPolicy"] == {"type": "COMPACT", "policyName": policy["name"]}
    assert "gpu-policy" in pool_resource["dependsOn"]
    assert pool["nodeCount"] == 3 * 4 + 1 * 4 <= catalog.NVL72_MAX_NODES
    assert pool["nodeLocations"] == ["us-central1-b"]


def test_gpu_pool_consumes_the_specific_reservation(gpu):
    pool = gpu.one(NODE_POOL, "gpu-0")
    assert pool["inputs"]["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": [f"projects/{PROJECT}/reservations/test-a4x-max-reservation"],
    }
    # A fully used reservation cannot hold a replacement beside the old pool.
    assert pool["options"]["deleteBeforeReplace"] is True
    assert pool["options"]["customTimeouts"]["create"] == "120m"


@pytest.mark.parametrize("default,latest,expected", [
    ({"REGULAR": "1.35.2-gke.100"}, {"REGULAR": "1.36.0-gke.5"}, "1.35.2-gke.100"),   # the channel default
    ({"REGULAR": "1.34.9-gke.1"}, {"REGULAR": "1.35.3-gke.7"}, "1.35.3-gke.7"),       # else the channel's newest
])
def test_master_version_comes_from_the_release_channel(default, latest, expected):
    from components.cloud.cluster import pick_master_version

    assert pick_master_version("REGULAR", "1.35.", default, latest) == expected


@pytest.mark.parametrize("default,latest,message", [
    ({"REGULAR": "1.34.9-gke.1"}, {"REGULAR": "1.36.0-gke.5"}, "offers no 1.35.x version"),
    ({"REGULAR": "1.35.0-gke.100"}, {}, "below the pinned minimum 1.35.0-gke.2745000"),
])
def test_master_version_outside_the_line_or_minimum_fails(default, latest, message):
    import pulumi

    from components.cloud.cluster import pick_master_version

    with pytest.raises(pulumi.RunError, match=message):
        pick_master_version("REGULAR", "1.35.", default, latest)


def test_reservation_paths_for_blocks_and_shared_reservations(gke_md):
    path = _reservation("owner-project", "res", "blk", "sub").values[0]
    assert path == "projects/owner-project/reservations/res/reservationBlocks/blk/reservationSubBlocks/sub"
    assert "RESERVATION_NAME/reservationBlocks/BLOCK_NAME/reservationSubBlocks/SUB_BLOCK_NAME" in gke_md
    assert _reservation("p", "projects/q/reservations/r").values == ["projects/q/reservations/r"]


def test_gpu_node_count_follows_the_pd_topology(variants):
    pool = variants["gpu2"].one(NODE_POOL, "gpu-0")["inputs"]
    assert pool["nodeCount"] == 2 * 4 + 1 * 8
    assert pool["nodeConfig"]["machineType"] == "a4x-highgpu-4g"
    assert pool["nodeConfig"]["guestAccelerators"][0]["type"] == "nvidia-gb200"


# ----------------------------------------------------------------------------------------- TPU
def test_tpu_slices_are_two_pools_of_four_hosts(tpu, gke_md):
    pools = [r for r in tpu.of_type(NODE_POOL) if r["parent"] == "tpu"]
    assert len(pools) == 2
    policy = tpu.one(POLICY)["inputs"]
    assert policy["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x4"}
    chips = 0
    for pool_resource in pools:
        pool = pool_resource["inputs"]
        node = pool["nodeConfig"]
        assert node["machineType"] == "tpu7x-standard-4t"
        assert "`tpu7x-standard-4t` (4 chips/VM)" in gke_md
        assert pool["nodeCount"] == 4, "a 2x2x4 slice is 16 chips on 4 hosts (gke.md §1.3)"
        chips += pool["nodeCount"] * catalog.IRONWOOD.chips_per_host
        assert pool["placementPolicy"] == {"type": "", "policyName": policy["name"], "tpuTopology": "2x2x4"}
        assert pool_resource["options"]["ignoreChanges"] == ["placementPolicy"]
        assert pool_resource["options"]["deleteBeforeReplace"] is True, "a reservation cannot hold two slices"
        assert "guestAccelerators" not in node
        assert {"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"} in node["taints"]
        assert node["reservationAffinity"]["values"] == [f"projects/{PROJECT}/reservations/test-tpu7x-reservation"]
        assert pool["nodeLocations"] == ["us-central1-c"]
    assert chips == 32 == 2 * catalog.topology_chips("2x2x4")
    assert len({p["inputs"]["name"] for p in pools}) == 2


# ----------------------------------------------------------------------------------------- cluster
@pytest.mark.parametrize("stack", STACKS)
def test_cluster_settings(plans, stack):
    plan = plans[stack]
    cluster = plan.one(CLUSTER)
    c = cluster["inputs"]
    assert c["location"] == "us-central1" and c["nodeLocations"] == [plan.one(NODE_POOL, "cpu-system")["inputs"]
                                                                        ["nodeLocations"][0]]
    assert c["workloadIdentityConfig"] == {"workloadPool": f"{PROJECT}.svc.id.goog"}
    assert c["gatewayApiConfig"] == {"channel": "CHANNEL_STANDARD"}
    assert c["datapathProvider"] == "ADVANCED_DATAPATH"
    assert c["addonsConfig"] == {
        "httpLoadBalancing": {"disabled": False},
        "gcsFuseCsiDriverConfig": {"enabled": True},
        "gcePersistentDiskCsiDriverConfig": {"enabled": True},
    }
    assert c["privateClusterConfig"]["enablePrivateNodes"] is True
    # IP endpoint closed to the internet (no CIDRs); users and CI reach the IAM-guarded DNS endpoint.
    assert c["masterAuthorizedNetworksConfig"] == {"cidrBlocks": []}
    assert c["controlPlaneEndpointsConfig"] == {"dnsEndpointConfig": {"allowExternalTraffic": True}}
    # Off only on the A4X Max (bare-metal) cluster, as Cluster Toolkit's A4X Max blueprint runs it (docs/security.md);
    # every pool still sets secure boot and integrity monitoring.
    assert c["enableShieldedNodes"] is (stack == "tpu")
    assert c["nodeConfig"]["shieldedInstanceConfig"] == {"enableSecureBoot": True, "enableIntegrityMonitoring": True}
    for pool in plan.of_type(NODE_POOL):
        assert pool["inputs"]["nodeConfig"]["shieldedInstanceConfig"] == {
            "enableSecureBoot": True, "enableIntegrityMonitoring": True}, pool["name"]
    assert c["removeDefaultNodePool"] is True
    assert c["deletionProtection"] is False
    assert c["releaseChannel"] == {"channel": "REGULAR"}
    [exclusion] = c["maintenancePolicy"]["maintenanceExclusions"]
    assert exclusion["exclusionOptions"] == {"scope": "NO_MINOR_OR_NODE_UPGRADES",
                                             "endTimeBehavior": "UNTIL_END_OF_SUPPORT"}
    assert "endTime" not in exclusion  # exactly one of end_time / end_time_behavior
    assert "dailyMaintenanceWindow" in c["maintenancePolicy"]
    assert catalog.parse_gke_version(c["minMasterVersion"]) >= catalog.parse_gke_version(catalog.GKE_MIN_VERSION)
    assert set(cluster["options"]["ignoreChanges"]) == {"minMasterVersion", "nodeConfig"}
    monitoring = c["monitoringConfig"]
    assert monitoring["managedPrometheus"] == {"enabled": True}
    assert ("DCGM" in monitoring["enableComponents"]) == (stack == "gpu")


@pytest.mark.parametrize("stack", STACKS)
def test_cluster_is_wired_to_its_network(plans, stack):
    plan = plans[stack]
    c = plan.one(CLUSTER)["inputs"]
    subnet = plan.one("gcp:compute/subnetwork:Subnetwork", "net-nodes")["inputs"]
    vpc = plan.one("gcp:compute/network:Network")["inputs"]
    assert c["network"] == f"projects/{PROJECT}/global/networks/{vpc['name']}"
    assert c["subnetwork"].endswith(f"/subnetworks/{subnet['name']}")
    ranges = {r["rangeName"] for r in subnet["secondaryIpRanges"]}
    policy = c["ipAllocationPolicy"]
    assert {policy["clusterSecondaryRangeName"], policy["servicesSecondaryRangeName"]} == ranges
    proxy = plan.one("gcp:compute/subnetwork:Subnetwork", "net-proxy-only")["inputs"]
    assert (proxy["purpose"], proxy["role"], proxy["region"]) == ("REGIONAL_MANAGED_PROXY", "ACTIVE", "us-central1")
    assert proxy["network"] == c["network"]
    nats = plan.of_type("gcp:compute/routerNat:RouterNat")
    # A section naming all subnets would exclude the staging NAT (catalog.NAT_ONE_SECTION_RULE).
    assert {n["inputs"]["sourceSubnetworkIpRangesToNat"] for n in nats} == {"LIST_OF_SUBNETWORKS"}
    served = [s["name"].rsplit("/", 1)[1] for n in nats for s in n["inputs"]["subnetworks"]]
    assert sorted(served) == sorted([subnet["name"], plan.one("gcp:compute/subnetwork:Subnetwork",
                                                              "net-staging")["inputs"]["name"]]), "each subnet once"


# ----------------------------------------------------------------------------------------- identity
@pytest.mark.parametrize("stack", STACKS)
def test_every_node_runs_as_the_least_privilege_account(plans, stack):
    plan = plans[stack]
    account = plan.one("gcp:serviceaccount/account:Account", "nodes-sa")["inputs"]
    email = f"{account['accountId']}@{PROJECT}.iam.gserviceaccount.com"
    grants = plan.of_type("gcp:projects/iAMMember:IAMMember")
    # The TPU stack's image build has an identity of its own that may only write its build logs on the project.
    builder = [f"serviceAccount:{a['inputs']['accountId']}@{PROJECT}.iam.gserviceaccount.com"
               for a in plan.of_type("gcp:serviceaccount/account:Account") if a["name"] == "engine-image-builder"]
    assert len(builder) == (stack == "tpu")
    # KEDA's operator reads Managed Prometheus as the stack's own KEDA account (autoscaling on).
    keda = [g for g in grants if g["name"] == "autoscaler-reads-monitoring"]
    cluster = plan.one("gcp:container/cluster:Cluster")["inputs"]["name"]
    assert [(g["inputs"]["role"], g["inputs"]["member"]) for g in keda] == [
        ("roles/monitoring.viewer", f"serviceAccount:{cluster}-keda@{PROJECT}.iam.gserviceaccount.com")]
    assert [(g["inputs"]["role"], g["inputs"]["member"]) for g in grants if g not in keda] == [
        ("roles/container.defaultNodeServiceAccount", f"serviceAccount:{email}"),
        *(("roles/logging.logWriter", member) for member in builder)]
    cluster = plan.one(CLUSTER)["inputs"]
    assert cluster["nodeConfig"]["serviceAccount"] == email  # even the transient default pool
    for pool in plan.of_type(NODE_POOL):
        node = pool["inputs"]["nodeConfig"]
        assert node["serviceAccount"] == email, pool["name"]
        assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}, pool["name"]
        assert node["oauthScopes"] == ["https://www.googleapis.com/auth/cloud-platform"]
    assert "roles/editor" not in (plan.folder / "resources.json").read_text()


def test_transfer_pool_carries_the_populator_compute_class(gpu, gke_md):
    node = gpu.one(NODE_POOL, "cpu-weights-transfer")["inputs"]["nodeConfig"]
    assert node["labels"] == {"cloud.google.com/compute-class": "gcs-to-hdml-compute-class"}
    assert node["taints"] == [{"key": "cloud.google.com/compute-class", "value": "gcs-to-hdml-compute-class",
                               "effect": "NO_SCHEDULE"}]
    assert "`cloud.google.com/compute-class=gcs-to-hdml-compute-class:NoSchedule`" in gke_md


# ----------------------------------------------------------------------------------------- bucket
@pytest.mark.parametrize("stack", STACKS)
def test_checkpoint_bucket_is_private_regional_and_kept(plans, stack, gke_md):
    plan = plans[stack]
    bucket = plan.one("gcp:storage/bucket:Bucket", "weights-bucket")
    b = bucket["inputs"]
    assert b["location"] == "US-CENTRAL1"
    assert b["uniformBucketLevelAccess"] is True
    assert b["publicAccessPrevention"] == "enforced"
    assert b["softDeletePolicy"] == {"retentionDurationSeconds": 7 * 86400}
    assert b["forceDestroy"] is False
    assert bucket["options"]["retainOnDelete"] is True
    [grant] = [g for g in plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
               if g["inputs"]["member"].endswith("/sa/kimi-k3-1-weights-transfer")]
    assert grant["inputs"]["role"] == "roles/storage.objectViewer"
    assert grant["inputs"]["member"] == (
        f"principal://iam.googleapis.com/projects/{PROJECT_NUMBER}/locations/global/workloadIdentityPools/"
        f"{PROJECT}.svc.id.goog/subject/ns/kimi-k3-1/sa/kimi-k3-1-weights-transfer")
    assert "principal://iam.googleapis.com/projects/PROJECT_NUMBER/locations/global/workloadIdentityPools/" \
           "PROJECT_ID.svc.id.goog/subject/ns/NAMESPACE/sa/KSA_NAME" in gke_md


def test_bucket_deletion_is_an_explicit_choice(variants):
    bucket = variants["throwaway"].one("gcp:storage/bucket:Bucket", "weights-bucket")
    assert bucket["inputs"]["forceDestroy"] is True
    assert "retainOnDelete" not in bucket.get("options", {})


def test_a_kept_bucket_is_used_not_created(variants):
    """After a destroy kept the bucket, `storage.bucketExists` makes the next up read it instead of creating it
    (creating would fail: the name exists)."""
    plan = variants["adopt"]
    bucket = plan.one("gcp:storage/bucket:Bucket", "weights-bucket")
    assert bucket["options"]["read"] == f"{PROJECT}-kimi-k3-1-weights"
    assert bucket["inputs"] == {}
    grants = [g for g in plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
              if g["name"].startswith("weights-")]  # the stack's compile-cache bucket has grants of its own
    assert grants and all(g["inputs"]["bucket"] == bucket["options"]["read"] for g in grants)


# ----------------------------------------------------------------------------------------- graph
@pytest.mark.parametrize("stack", STACKS)
def test_apis_come_first_and_nothing_waits_for_what_it_does_not_need(plans, stack):
    plan = plans[stack]
    apis = {r["inputs"]["service"] for r in plan.of_type("gcp:projects/service:Service")}
    assert {"container.googleapis.com", "compute.googleapis.com", "storage.googleapis.com", "iam.googleapis.com",
            "networkservices.googleapis.com", "monitoring.googleapis.com"} <= apis
    for name in ("cluster-gke", "net-vpc", "weights-bucket", "nodes-sa"):
        assert "apis-container" in plan.closure(name) or "apis-storage" in plan.closure(name), name
    # The bucket (and the checkpoint upload into it) must not wait for the cluster or any node pool.
    # Grants to Workload Identity principals wait for the cluster: its pool does not exist before.
    assert "cluster-gke" in plan.closure("weights-reader-0")
    bucket_deps = plan.closure("weights-bucket")
    assert not {r["name"] for r in plan.of_type(NODE_POOL)} & bucket_deps
    assert "cluster-gke" not in bucket_deps
    # Accelerator pools wait for the cluster, not for the bucket or the transfer pool.
    for pool in plan.of_type(NODE_POOL):
        deps = plan.closure(pool["name"])
        assert "cluster-gke" in deps and "weights-bucket" not in deps, pool["name"]


@pytest.mark.parametrize("stack", STACKS)
def test_stack_outputs(plans, stack):
    outputs = plans[stack].outputs
    assert {"clusterName", "clusterEndpoint", "kubeconfig", "bucketUri", "servingZone", "nodePools"} <= set(outputs)
    assert outputs["bucketUri"] == f"gs://{PROJECT}-kimi-k3-1-weights"
    pools = {p["inputs"]["name"] for p in plans[stack].of_type(NODE_POOL)}
    assert set(outputs["nodePools"]) == pools


@pytest.mark.parametrize("stack", STACKS)
def test_billable_resources_carry_stack_labels(plans, stack):
    plan = plans[stack]
    for resource in plan.of_type(NODE_POOL):
        assert resource["inputs"]["nodeConfig"]["resourceLabels"]["pulumi-stack"] == stack
    assert plan.one(CLUSTER)["inputs"]["resourceLabels"]["llm-d-guide"] == "kimi-k3-1"
    assert plan.one("gcp:storage/bucket:Bucket", "weights-bucket")["inputs"]["labels"]["accelerator-track"] == stack


def test_shielded_gke_nodes_stay_on_for_the_a4x_vm_fallback(variants):
    assert variants["gpu2"].one(CLUSTER)["inputs"]["enableShieldedNodes"] is True

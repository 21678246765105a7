"""Cluster platform and weight staging: wiring between the objects, checked on the plan."""

from __future__ import annotations

import re

import pytest

from components.facts import catalog
from components.facts.versions import LWS_MIN_VERSION
from tests.conftest import STACKS, Plan
from tools.preview.mocks import PROJECT_NUMBER

CHART = "kubernetes:helm.sh/v4:Chart"
CUSTOM_RESOURCE_INSTALLERS = {
    # API group -> logical name of the chart that installs its CRD and controller.
    "leaderworkerset.x-k8s.io": "platform-lws",
    "disaggregatedset.x-k8s.io": "platform-lws",
    "resource.nvidia.com": "gpu-devices-dra-driver",
}


def manifest(plan: Plan, kind: str, name: str | None = None) -> dict:
    found = [m for m in plan.manifests if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def resource_of(plan: Plan, kind: str, name: str) -> dict:
    return next(r for r in plan.resources
                if r["inputs"].get("kind") == kind and r["inputs"].get("metadata", {}).get("name") == name)




@pytest.fixture(scope="module")
def gke_md(shared) -> str:
    return (shared / "reference" / "gke.md").read_text()


# ----------------------------------------------------------------------------------------- weights
@pytest.mark.parametrize("stack", STACKS)
def test_models_claim_resolves_to_the_objects_created(plans, stack):
    plan = plans[stack]
    pvc = manifest(plan, "PersistentVolumeClaim")
    revision = plan.outputs["stagedRevision"]
    assert pvc["metadata"]["name"] == plan.outputs["modelsClaim"] == f"kimi-k3-1-models-{revision[:12]}"
    storage_class = manifest(plan, "StorageClass")
    source = manifest(plan, "GCPDataSource")
    namespace = manifest(plan, "Namespace", "kimi-k3-1")["metadata"]["name"]
    assert pvc["metadata"]["namespace"] == source["metadata"]["namespace"] == namespace
    spec = pvc["spec"]
    assert spec["accessModes"] == ["ReadOnlyMany"]
    assert spec["storageClassName"] == storage_class["metadata"]["name"]
    ref = spec["dataSourceRef"]
    assert (ref["apiGroup"], ref["kind"], ref["name"]) == (
        source["apiVersion"].split("/")[0], source["kind"], source["metadata"]["name"])
    requested_gib = int(spec["resources"]["requests"]["storage"].removesuffix("Gi"))
    assert requested_gib * 2**30 >= catalog.KIMI.checkpoint_bytes * 1.1
    # Zonal disk in the serving zone, where the accelerator pools are.
    [term] = storage_class["allowedTopologies"]
    [requirement] = term["matchLabelExpressions"]
    zones = {z for p in plan.of_type("gcp:container/nodePool:NodePool") for z in p["inputs"]["nodeLocations"]}
    assert requirement["key"] == "topology.gke.io/zone" and set(requirement["values"]) == zones
    assert storage_class["provisioner"] == "pd.csi.storage.gke.io"
    assert storage_class["parameters"]["type"] == "hyperdisk-ml"
    assert storage_class["volumeBindingMode"] == "Immediate", "hydration starts at creation, not at first pod"


@pytest.mark.parametrize("stack", STACKS)
def test_claim_is_deleted_before_its_data_source(plans, stack):
    plan = plans[stack]
    pvc = resource_of(plan, "PersistentVolumeClaim", plan.outputs["modelsClaim"])
    source = resource_of(plan, "GCPDataSource", f"{plan.outputs['modelsClaim']}-source")
    assert source["name"] in pvc["dependsOn"], "Pulumi deletes dependents first"


def test_data_source_shape_matches_gke_docs(plans, gke_md):
    assert "`apiVersion: datalayer.gke.io/v1`, `kind: GCPDataSource`, namespaced" in gke_md
    for plan in plans.values():
        source = manifest(plan, "GCPDataSource")
        assert set(source) == {"apiVersion", "kind", "metadata", "spec"}
        assert set(source["spec"]) == {"cloudStorage"}
        assert set(source["spec"]["cloudStorage"]) == {"serviceAccountName", "uri"}
        assert source["spec"]["cloudStorage"]["uri"] == plan.outputs["checkpointUri"]
        assert source["spec"]["cloudStorage"]["uri"].endswith("/"), "trailing slash = folder (gke.md §4)"
        account = manifest(plan, "ServiceAccount", source["spec"]["cloudStorage"]["serviceAccountName"])
        assert account["metadata"]["namespace"] == source["metadata"]["namespace"]


@pytest.mark.parametrize("stack", STACKS)
def test_transfer_identity_is_exactly_the_bucket_reader(plans, stack):
    plan = plans[stack]
    source = manifest(plan, "GCPDataSource")
    account = source["spec"]["cloudStorage"]["serviceAccountName"]
    namespace = source["metadata"]["namespace"]
    project = plan.one("gcp:container/cluster:Cluster")["inputs"]["project"]
    [grant] = [g for g in plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
               if g["inputs"]["member"].endswith(f"/sa/{account}")]
    assert grant["inputs"]["role"] == "roles/storage.objectViewer"
    assert grant["inputs"]["member"] == (
        f"principal://iam.googleapis.com/projects/{PROJECT_NUMBER}/locations/global/workloadIdentityPools/"
        f"{project}.svc.id.goog/subject/ns/{namespace}/sa/{account}")


@pytest.mark.parametrize("stack,nodes,throughput", [("gpu", 16, 38400), ("tpu", 8, 19456)])
def test_default_throughput_is_where_no_node_waits_on_the_volume(plans, stack, nodes, throughput):
    """Hand-worked: every reader node gets the 2,400 MiB/s per-node limit: GPU 16 x 2400 = 38,400 MiB/s;
    TPU 8 x 2400 = 19,200, rounded up to a multiple of 512 = 19,456 MiB/s."""
    storage_class = manifest(plans[stack], "StorageClass")
    assert storage_class["parameters"]["provisioned-throughput-on-create"] == f"{throughput}Mi"
    assert throughput >= nodes * 2400 > throughput - 512
    assert "hydration >=" in plans[stack].summary and "$" in plans[stack].summary


@pytest.mark.parametrize("stack", STACKS)
def test_claim_names_the_class_of_its_throughput(plans, stack):
    """The existing volume's throughput follows the readers: the claim names a VolumeAttributesClass whose one
    parameter is the throughput the StorageClass creates the disk with, for the PD CSI driver."""
    plan = plans[stack]
    storage_class = manifest(plan, "StorageClass")
    [vac] = [m for m in plan.manifests if m["kind"] == "VolumeAttributesClass"]
    assert vac["driverName"] == storage_class["provisioner"] == "pd.csi.storage.gke.io"
    assert vac["parameters"] == {"throughput": storage_class["parameters"]["provisioned-throughput-on-create"]}
    assert vac["parameters"]["throughput"] == f"{plan.outputs['weightLoad']['throughputMiBps']}Mi"
    pvc = manifest(plan, "PersistentVolumeClaim", plan.outputs["modelsClaim"])
    assert pvc["spec"]["volumeAttributesClassName"] == vac["metadata"]["name"]
    # The serving set waits on the claim (Bound: hydrated), so no group reads a volume still being populated.
    claim = resource_of(plan, "PersistentVolumeClaim", plan.outputs["modelsClaim"])
    servers = [r for r in plan.resources if r["type"] in (
        "kubernetes:disaggregatedset.x-k8s.io/v1:DisaggregatedSet",
        "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")]
    assert servers and all(claim["name"] in plan.closure(r["name"]) for r in servers)


@pytest.mark.parametrize("stack", STACKS)
def test_weights_wait_only_for_what_hydration_needs(plans, stack):
    plan = plans[stack]
    pvc = resource_of(plan, "PersistentVolumeClaim", plan.outputs["modelsClaim"])
    deps = plan.closure(pvc["name"])
    assert {"cpu-weights-transfer", "weights-reader-0", "weights-staging-job"} <= deps, "hydrates a verified copy"
    accelerator_pools = {p["name"] for p in plan.of_type("gcp:container/nodePool:NodePool") if p["parent"] != "cpu"}
    assert not accelerator_pools & deps, "hydration must overlap accelerator pool creation"
    annotations = pvc["inputs"]["metadata"]["annotations"]
    # Bound (hydrated), nothing more: the claim names its VolumeAttributesClass (test above), but a first
    # `pulumi up` must not wait on the driver applying it (components/weights/volume.py); the startup budget covers a
    # scale-up's lag (tests/cloud/test_scale.py).
    assert annotations["pulumi.com/waitFor"] == "jsonpath={.status.phase}=Bound"
    # A wide margin over the modelled copy, whose speed is not published (components/plan/loading.py).
    hydration_min = float(re.search(r"hydration >= (\d+\.\d) min", plan.summary).group(1))
    assert int(annotations["pulumi.com/timeoutSeconds"]) >= 4 * hydration_min * 60


# ----------------------------------------------------------------------------------------- platform
@pytest.mark.parametrize("stack", STACKS)
def test_hf_token_secret(plans, stack):
    secret = manifest(plans[stack], "Secret", "llm-d-hf-token")
    assert secret["metadata"]["namespace"] == "kimi-k3-1"
    assert secret["stringData"] == {"HF_TOKEN": "[secret]"}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.lstrip("v").split("."))


@pytest.mark.parametrize("stack", STACKS)
def test_lws_controller(plans, stack):
    chart = plans[stack].one(CHART, "platform-lws")["inputs"]
    assert chart["chart"] == "oci://registry.k8s.io/lws/charts/lws"
    assert _version(chart["version"]) >= _version(LWS_MIN_VERSION) >= (0, 11, 1)
    assert chart["namespace"] == "lws-system"
    values = dict(chart.get("values", {}))
    # The manager runs by digest: the pinned tag's (components/checks/registry.py), through the chart's tag value.
    tag = values.pop("image")["manager"]["tag"]
    assert tag.startswith(f"v{LWS_MIN_VERSION}@sha256:") or tag.split("@")[0] == "v" + chart["version"]
    assert "@sha256:" in tag
    if stack == "gpu":
        assert values == {"enableDisaggregatedSet": True}
    else:
        assert "enableDisaggregatedSet" not in values


@pytest.mark.parametrize("stack", STACKS)
def test_custom_resources_wait_for_their_crd_installers(plans, stack):
    plan = plans[stack]
    for resource in plan.resources:
        api_version = resource["inputs"].get("apiVersion", "") if resource["type"].startswith("kubernetes:") else ""
        group = api_version.split("/")[0]
        if group in CUSTOM_RESOURCE_INSTALLERS:
            assert CUSTOM_RESOURCE_INSTALLERS[group] in plan.closure(resource["name"]), resource["name"]


@pytest.mark.parametrize("stack", STACKS)
def test_charts_wait_for_nodes_to_run_on(plans, stack):
    """Chart v4 awaits every rendered object; a controller Deployment is only Ready once nodes exist."""
    for chart in plans[stack].of_type(CHART):
        assert "cpu-system" in plans[stack].closure(chart["name"]), chart["name"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubernetes_object_uses_the_cluster_provider(plans, stack):
    for resource in plans[stack].resources:
        if resource["type"].startswith("kubernetes:"):
            assert resource.get("options", {}).get("provider") == "cluster-k8s", resource["name"]


# ----------------------------------------------------------------------------------------- GPU devices
def test_dra_driver_serves_compute_domains_on_the_gpu_nodes(gpu):
    chart = gpu.one(CHART, "gpu-devices-dra-driver")["inputs"]
    assert (chart["chart"], chart["repositoryOpts"]["repo"]) == (
        "nvidia-dra-driver-gpu", "https://helm.ngc.nvidia.com/nvidia")
    values = chart["values"]
    assert values["resources"] == {"gpus": {"enabled": False}}
    assert values["nvidiaDriverRoot"] == "/home/kubernetes/bin/nvidia"
    node = gpu.one("gcp:container/nodePool:NodePool", "gpu-0")["inputs"]["nodeConfig"]
    plugin = values["kubeletPlugin"]
    expressions = plugin["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "cloud.google.com/gke-accelerator", "operator": "In",
            "values": [node["guestAccelerators"][0]["type"]]} in expressions
    for taint in node["taints"]:
        assert {"key": taint["key"], "operator": "Equal", "value": taint["value"], "effect": "NoSchedule"} \
            in plugin["tolerations"]
    quota = manifest(gpu, "ResourceQuota")
    assert quota["metadata"]["namespace"] == chart["namespace"]
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == [
        "system-node-critical", "system-cluster-critical"]
    assert gpu.named("gpu-devices-dra-quota")["name"] in gpu.closure("gpu-devices-dra-driver")


def test_claims_the_serving_pods_will_use(gpu):
    domain = manifest(gpu, "ComputeDomain")
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == "kimi-k3-1-nvl72-channel"
    template = manifest(gpu, "ResourceClaimTemplate")
    [request] = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {"deviceClassName": "mrdma.google.com", "allocationMode": "ExactCount", "count": 8}
    assert domain["metadata"]["namespace"] == template["metadata"]["namespace"] == "kimi-k3-1"
    # numNodes 0, as the CRD recommends with IMEXDaemonsWithDNSNames: the immutable spec then does not depend on
    # the slice count (tests/cloud/test_scale.py).
    assert domain["spec"]["numNodes"] == 0
    values = gpu.one(CHART, "gpu-devices-dra-driver")["inputs"]["values"]
    assert values["featureGates"] == {"IMEXDaemonsWithDNSNames": True}


def test_asapd_lite_takes_the_nodes_hugepages(gpu):
    daemonset = manifest(gpu, "DaemonSet", "asapd-lite")
    pod = daemonset["spec"]["template"]["spec"]
    node = gpu.one("gcp:container/nodePool:NodePool", "gpu-0")["inputs"]["nodeConfig"]
    pages = node["linuxNodeConfig"]["hugepagesConfig"]["hugepageSize2m"]
    [container] = pod["containers"]
    assert container["resources"]["limits"]["hugepages-2Mi"] == f"{pages * 2}Mi"
    assert container["resources"]["requests"] == container["resources"]["limits"]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    [instance_types] = [e["values"] for e in term["matchExpressions"] if e["key"] == "node.kubernetes.io/instance-type"]
    assert node["machineType"] in instance_types, "asapd-lite must land on the pool's nodes"
    assert container["image"].rsplit(":", 1)[1] not in ("", "latest")


def test_a4x_fallback_gets_only_what_a4x_uses(variants):
    """A4X (GB200 VMs): DRANET label only, no hugepages, no asapd-lite (gke.md §2.4); A4X Max extras stay off."""
    plan = variants["gpu2"]
    node = plan.one("gcp:container/nodePool:NodePool", "gpu-0")["inputs"]["nodeConfig"]
    assert node["labels"] == {"cloud.google.com/gke-networking-dra-driver": "true", "kimi-k3-1.llm-d.ai/slice": "0"}
    assert "linuxNodeConfig" not in node
    assert [m["metadata"]["name"] for m in plan.program_manifests if m["kind"] == "DaemonSet"] == [
        "kimi-k3-1-engine-image-prepull"], "no asapd-lite (the one DaemonSet is components/serving/prepull.py's)"


def test_tpu_track_has_no_gpu_plumbing(tpu):
    kinds = {m["kind"] for m in tpu.manifests}
    assert not kinds & {"ComputeDomain", "ResourceClaimTemplate", "ResourceQuota"}
    # The one DaemonSet is the engine image pre-pull (components/serving/prepull.py), not the GPU NIC or DRA plumbing.
    assert [m["metadata"]["name"] for m in tpu.manifests if m["kind"] == "DaemonSet"] == [
        "kimi-k3-1-engine-image-prepull"]
    assert {r["name"] for r in tpu.of_type(CHART)} == {"platform-lws", "router-chart", "autoscaler-keda"}


# ----------------------------------------------------------------------------------------- monitoring
@pytest.mark.parametrize("stack", STACKS)
def test_pod_monitorings_scrape_ports_the_selected_pods_expose(plans, stack):
    """Each PodMonitoring selects pod templates of the plan, and scrapes a port their engine listens on."""
    from tests.router.test_router import pod_templates

    plan = plans[stack]
    monitorings = [m for m in plan.manifests if m["kind"] == "PodMonitoring" and "matchLabels" in m["spec"]["selector"]]
    assert monitorings
    for monitoring in monitorings:
        match = monitoring["spec"]["selector"]["matchLabels"]
        selected = [t for _, t in pod_templates(plan) if match.items() <= t["metadata"]["labels"].items()]
        assert selected, f"{monitoring['metadata']['name']} selects no pod"
        port = monitoring["spec"]["endpoints"][0]["port"]
        for template in selected:
            engine = template["spec"]["containers"][0]
            assert port in {p["containerPort"] for p in engine["ports"]}, monitoring["metadata"]["name"]
    router = next(m for m in plan.manifests if m["metadata"]["name"] == "kimi-k3-1-router")
    assert router["spec"]["endpoints"][0]["port"] == "metrics"  # the EPP container port name (llm-d router chart)


def test_monitoring_switch(variants):
    plan = variants["quiet"]
    assert not [m for m in plan.manifests if m["kind"] == "PodMonitoring"]
    # The namespace from config reaches every namespaced object and the bucket reader principal.
    assert manifest(plan, "PersistentVolumeClaim")["metadata"]["namespace"] == "llm-d-kimi"
    grants = plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    # Every Workload Identity principal names the namespace; the engine image build's own account is no pod's.
    principals = [g for g in grants if g["name"] != "engine-image-source"]
    assert [g["name"] for g in grants if g not in principals] == ["engine-image-source"]
    assert principals and all("/subject/ns/llm-d-kimi/sa/" in g["inputs"]["member"] for g in principals), \
        [(g["name"], g["dependsOn"]) for g in grants]

"""Checkpoint staging in the plan: a Job that copies the model into the bucket, gates hydration, does not wait
for accelerator pools, runs the repository's copier, and holds the token only as a secret."""

from __future__ import annotations

import re
import shlex
from importlib.metadata import PackageNotFoundError, version

import pytest

from components.facts import contract, versions
from components.plan import staging as sizing
from components.weights import shipped, staging
from tests.config.test_config import error, parse
from tests.conftest import ROOT, STACKS
from tools.preview.mocks import PROJECT_NUMBER, UNRESOLVED_REVISION

PINNED = "5f1c0ffee0ddba11c0de5eed0123456789abcdef"


def job(plan) -> dict:
    return plan.one("kubernetes:batch/v1:Job", "weights-staging-job")


def accelerator_pools(plan) -> set[str]:
    return {p["name"] for p in plan.of_type("gcp:container/nodePool:NodePool") if p["parent"] != "cpu"}


@pytest.mark.parametrize("stack", STACKS)
def test_staging_gates_hydration_and_does_not_wait_for_accelerator_pools(plans, stack):
    plan = plans[stack]
    staged = job(plan)
    before = plan.closure(staged["name"])
    assert {"cluster-gke", "cpu-system", "platform-hf-token", "weights-staging-writer"} <= before
    assert accelerator_pools(plan) and not accelerator_pools(plan) & before, "copies while accelerator pools create"
    assert {"cpu-weights-staging", "net-staging-nat"} <= before, "its pods run on the staging pool, behind its NAT"
    assert "cpu-weights-transfer" not in before, "the copy does not wait for the hydration pool"
    for kind in ("kubernetes:core/v1:PersistentVolumeClaim", "datalayer.gke.io/v1:GCPDataSource"):
        hydration = [r for r in plan.resources if r["type"] == kind or
                     f"{r['inputs'].get('apiVersion')}:{r['inputs'].get('kind')}" == kind]
        assert len(hydration) == 1 and staged["name"] in plan.closure(hydration[0]["name"]), kind
    servers = next(r for r in plan.resources if r["type"].startswith("kimi:modelserver:"))
    assert staged["name"] in plan.closure(servers["name"]), "model servers wait for the verified copy"


@pytest.mark.parametrize("stack", STACKS)
def test_the_token_reaches_staging_only_as_a_secret(plans, stack):
    plan = plans[stack]
    resolver = plan.one("pulumi-python:dynamic/kimi:HubRevision")
    assert resolver["inputs"]["token"] == "[secret]" and resolver["inputs"]["__provider"] == "[secret]"
    [container] = job(plan)["inputs"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": contract.HF_TOKEN_SECRET, "key": contract.HF_TOKEN_KEY}}}
    assert not [e for e in container["env"] if "TOKEN" in e["name"] and "value" in e]


@pytest.mark.parametrize("stack", STACKS)
def test_the_job_runs_the_copier_of_this_repository(plans, stack):
    plan = plans[stack]
    spec = job(plan)["inputs"]["spec"]["template"]["spec"]
    [container] = spec["containers"]
    code = plan.one("kubernetes:core/v1:ConfigMap", "weights-staging-code")["inputs"]["data"]
    assert {shipped.key(path): shipped.pod_text(source) for path, source in shipped.APP.items()} == code
    [volume] = [v for v in spec["volumes"] if "configMap" in v]
    assert {(i["key"], i["path"]) for i in volume["configMap"]["items"]} == {
        (shipped.key(p), p) for p in shipped.APP}
    assert container["image"].startswith(versions.STAGING_IMAGE + "@sha256:"), "the pinned tag, by its digest"
    install = container["command"][2]
    assert "--require-hashes" in shlex.split(install) and "--no-deps" in shlex.split(install)
    assert "-r /app/tools/staging/requirements.lock" in install and "python -m tools.live.stage_weights" in install
    args = dict(zip(container["args"][::2], container["args"][1::2], strict=True))
    assert args["--revision"] == plan.outputs["stagedRevision"] == UNRESOLVED_REVISION
    bucket = plan.one("gcp:storage/bucket:Bucket")["inputs"]["name"]
    assert args["--dest"] == plan.outputs["checkpointUri"] == (
        f"gs://{bucket}/moonshotai/Kimi-K3.1-Pro/{UNRESOLVED_REVISION}/")
    source = next(m for m in plan.manifests if m["kind"] == "GCPDataSource")
    assert source["spec"]["cloudStorage"]["uri"] == args["--dest"], "hydration reads exactly the staged folder"
    assert args["--repo-id"] == "moonshotai/Kimi-K3.1-Pro" and args["--workers"] == "16"
    assert spec["nodeSelector"] == {staging.NODE_POOL_LABEL: "weights-staging"}
    pool = next(p for p in plan.of_type("gcp:container/nodePool:NodePool") if p["inputs"]["name"] == "weights-staging")
    assert [{"key": t["key"], "value": t["value"], "effect": staging.TAINT_EFFECTS[t["effect"]]}
            for t in pool["inputs"]["nodeConfig"]["taints"]] == [
        {k: v for k, v in t.items() if k != "operator"} for t in spec["tolerations"]]
    assert job(plan)["inputs"]["spec"]["template"]["metadata"]["labels"] == contract.STAGING_LABELS
    assert int(job(plan)["inputs"]["metadata"]["annotations"]["pulumi.com/timeoutSeconds"]) >= 3600
    assert "skipAwait" not in str(job(plan)["inputs"]["metadata"]), "pulumi up waits for the copy"


@pytest.mark.parametrize("stack", STACKS)
def test_the_stager_may_list_the_bucket_and_write_only_the_checkpoint_prefix(plans, stack):
    plan = plans[stack]
    grants = {g["name"]: g["inputs"] for g in plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
              if g["parent"] == "weights-staging"}
    project = plan.one("gcp:container/cluster:Cluster")["inputs"]["project"]
    bucket = plan.one("gcp:storage/bucket:Bucket")["inputs"]["name"]
    member = (f"principal://iam.googleapis.com/projects/{PROJECT_NUMBER}/locations/global/workloadIdentityPools/"
              f"{project}.svc.id.goog/subject/ns/kimi-k3-1/sa/{contract.STAGING_SERVICE_ACCOUNT}")
    assert {g["member"] for g in grants.values()} == {member}
    assert grants["weights-staging-lister"]["role"] == "roles/storage.objectViewer"
    writer = grants["weights-staging-writer"]
    assert writer["role"] == "roles/storage.objectUser"
    assert writer["condition"]["expression"] == (
        f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/moonshotai/Kimi-K3.1-Pro/")')
    account = plan.one("kubernetes:core/v1:ServiceAccount", "weights-staging-sa")["inputs"]["metadata"]
    assert account["name"] == contract.STAGING_SERVICE_ACCOUNT


def test_a_pinned_revision_needs_no_hub_at_plan_or_up_time(variants):
    plan = variants["pinned"]
    assert not plan.of_type("pulumi-python:dynamic/kimi:HubRevision")
    args = job(plan)["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--revision") + 1] == PINNED == plan.outputs["stagedRevision"]
    assert args[args.index("--workers") + 1] == "4"
    assert plan.outputs["modelsClaim"] == f"{contract.MODELS_PVC}-{PINNED[:12]}"
    assert job(plan)["inputs"]["metadata"]["name"] == f"kimi-k3-1-weights-stage-{PINNED[:12]}"
    assert plan.outputs["checkpointUri"].endswith(f"/moonshotai/Kimi-K3.1-Pro/{PINNED}/")


@pytest.mark.parametrize("stack", STACKS)
def test_the_plan_summary_prints_the_staging_time_and_the_critical_path(plans, stack):
    """Hand-worked in the test below: 9.0 min, on the critical path between the CPU pools and hydration
    (tests/plan/test_loading.py checks the path's arithmetic)."""
    summary = plans[stack].summary
    assert "staging: 1.56 TB from the Hugging Face Hub in 9.0 min" in summary
    assert re.search(r"critical path \(min\): .*cpu-system 4\.0 -> .*weights-staging-job 9\.0 -> "
                     r".*weights-volume-pvc \d+\.\d", summary), summary


@pytest.mark.parametrize("value", ["main", "v1.0", "5F1C0FFEE0DDBA11C0DE5EED0123456789ABCDEF", PINNED[:12]])
def test_revision_must_be_a_full_commit(value):
    assert error("gpu", model__revision=value) == (
        f"kimi-k3-1:model.revision = {value!r}: a full 40-character lowercase commit hash (branch and tag names "
        "move, so they are not accepted; leave it unset to stage the commit `main` points to now)")


def test_repo_id_and_workers_are_checked():
    assert "a Hugging Face repository id such as" in error("gpu", model__repoId="not a repo")
    assert "kimi-k3-1:storage.stagingWorkers" in error("gpu", storage__stagingWorkers=0)


def test_the_job_installs_the_libraries_the_tests_ran():
    """The lock pins every package with a hash, and the versions installed here (which the copier's tests ran)."""
    lines = [line for line in (ROOT / "components/weights/copier/requirements.lock").read_text().splitlines()
             if line and not line.startswith("#")]
    pins = {}
    for line in lines:
        match = re.fullmatch(r"([a-z0-9_.-]+)==(\S+) --hash=sha256:[0-9a-f]{64}", line)
        assert match, line
        pins[match.group(1)] = match.group(2)
    # what components/weights/copier imports itself: the Hub's client, its Xet transfer, the file bytes' transport
    assert {"huggingface_hub", "hf-xet", "google-cloud-storage", "httpx2", "requests", "urllib3",
            "protobuf"} <= set(pins)
    for name, pinned in pins.items():
        try:
            assert version(name) == pinned, name
        except PackageNotFoundError:
            pytest.fail(f"{name} is in the lock but not installed here, so no test ran it")


@pytest.mark.parametrize("stack", STACKS)
def test_the_job_is_split_over_the_pods_the_staging_model_sizes(plans, stack):
    """Hand-worked: a pod brings min(16 x 60, 4 x 450) = 960 MB/s; the target is 1.56e12 / 600 s = 2,600 MB/s, so
    3 pods; each leaves from its own NAT address (2,200 MB/s each), so the pods bind: 2,880 MB/s, 542 s = 9.0 min."""
    plan = plans[stack]
    spec = job(plan)["inputs"]["spec"]
    model = sizing.staging_model(parse(stack))
    assert (model.pods, model.addresses, model.pod_mbps, model.aggregate_mbps, model.limit) == (3, 3, 960, 2880, "pods")
    assert set(model.sources) == {"pod rate", "target", "Hub per-address limit", "Cloud Storage ingest"}
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == model.pods
    [container] = spec["template"]["spec"]["containers"]
    assert container["args"][container["args"].index("--shards") + 1] == str(model.pods)
    assert container["resources"]["requests"]["cpu"] == str(sizing.POD_CPU)
    assert ("staging: 1.56 TB from the Hugging Face Hub in 9.0 min: 3 pods x 16 streams, one per staging node, "
            "leaving from 3 NAT addresses, aggregate 2.88 GB/s (limited by pods") in plan.summary
    assert "weights-staging-job 9.0" in plan.summary, "the critical path reads the same model"


@pytest.mark.parametrize("stack", STACKS)
def test_each_staging_pod_leaves_from_an_address_of_its_own(plans, stack):
    """One pod per node (required anti-affinity on the hostname), one node per pod in a subnet of its own, and
    that subnet's NAT holds exactly one program-owned address per pod with ports that pin each VM to one."""
    plan = plans[stack]
    pods = sizing.staging_model(parse(stack)).pods
    template = job(plan)["inputs"]["spec"]["template"]
    [term] = template["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == staging.HOSTNAME_LABEL
    assert term["labelSelector"]["matchLabels"] == template["metadata"]["labels"] == contract.STAGING_LABELS
    pool = plan.one("gcp:container/nodePool:NodePool", "cpu-weights-staging")["inputs"]
    subnet = plan.one("gcp:compute/subnetwork:Subnetwork", "net-staging")["inputs"]
    assert (pool["initialNodeCount"], pool["autoscaling"]) == (pods, {"minNodeCount": 0, "maxNodeCount": pods})
    assert pool["networkConfig"]["subnetwork"].endswith(f"/subnetworks/{subnet['name']}")
    assert pool["networkConfig"]["podRange"] == subnet["secondaryIpRanges"][0]["rangeName"]
    addresses = plan.of_type("gcp:compute/address:Address")
    assert len(addresses) == pods and {a["inputs"]["addressType"] for a in addresses} == {"EXTERNAL"}
    nat = plan.one("gcp:compute/routerNat:RouterNat", "net-staging-nat")
    inputs = nat["inputs"]
    assert inputs["natIpAllocateOption"] == "MANUAL_ONLY" and len(inputs["natIps"]) == pods
    assert sorted(link.split("/regions/us-central1/addresses/")[1] for link in inputs["natIps"]) == sorted(
        a["inputs"]["name"] for a in addresses)
    assert {a["name"] for a in addresses} <= set(nat["dependsOn"]), "destroy releases the addresses after the NAT"
    assert (inputs["enableDynamicPortAllocation"], inputs["minPortsPerVm"]) == (False, 32768)
    assert [s["name"].rsplit("/", 1)[1] for s in inputs["subnetworks"]] == [subnet["name"]]
    assert not [r for r in plan.resources if (r["inputs"].get("deletionPolicy") or "DELETE") != "DELETE"
                and r["type"] in ("gcp:compute/address:Address", "gcp:compute/routerNat:RouterNat")]


@pytest.mark.parametrize("stack", STACKS)
def test_the_rest_of_the_cluster_keeps_its_own_egress(plans, stack):
    """Accelerator and CPU pools stay in the default subnet, whose NAT allocates addresses as needed: a pool
    without a subnet of its own could land in the staging subnet and take one of its few addresses."""
    plan = plans[stack]
    nodes = plan.one("gcp:compute/subnetwork:Subnetwork", "net-nodes")["inputs"]["name"]
    nat = plan.one("gcp:compute/routerNat:RouterNat", "net-nat")["inputs"]
    assert (nat["natIpAllocateOption"], nat["sourceSubnetworkIpRangesToNat"]) == ("AUTO_ONLY", "LIST_OF_SUBNETWORKS")
    assert [(s["name"].rsplit("/", 1)[1], s["sourceIpRangesToNats"]) for s in nat["subnetworks"]] == [
        (nodes, ["ALL_IP_RANGES"])]
    others = [p for p in plan.of_type("gcp:container/nodePool:NodePool") if p["name"] != "cpu-weights-staging"]
    assert others and all(p["inputs"]["networkConfig"]["subnetwork"].endswith(f"/subnetworks/{nodes}")
                          for p in others), [p["name"] for p in others]
    cluster = plan.one("gcp:container/cluster:Cluster")["inputs"]["ipAllocationPolicy"]
    [extra] = cluster["additionalIpRangesConfigs"]
    assert extra["subnetwork"].endswith("/subnetworks/" + plan.one(
        "gcp:compute/subnetwork:Subnetwork", "net-staging")["inputs"]["name"])


def test_the_staging_model_scales_pods_to_the_reachable_rate():
    cfg = parse("gpu")
    model = sizing.staging_model(parse("gpu", storage__stagingWorkers=4))
    assert model.pod_mbps == 240 and model.pods == sizing.MAX_PODS and model.limit == "pods"
    assert model.seconds == pytest.approx(1.56e12 / (sizing.MAX_PODS * 240e6), rel=0.01)
    small = sizing.staging_model(cfg, checkpoint_bytes=10**11)
    assert small.pods == 1 and small.limit == "pods" and small.aggregate_mbps == 960
    assert sizing.staging_model(parse("tpu", storage__stagingPods=5)).pods == 5, "storage.stagingPods wins"


@pytest.mark.parametrize(("pods", "addresses", "aggregate", "limit"), [
    (3, 3, 3 * 960, "pods"),
    (3, 1, 2200, "Hub per-address limit"),
    (8, 2, 2 * 2200, "Hub per-address limit"),
    (8, 8, 8 * 960, "pods"),
    (8, 20, 8 * 960, "pods"),
])
def test_the_hub_limit_is_min_of_pods_and_addresses_times_the_per_address_rate(pods, addresses, aggregate, limit):
    """More addresses than pods buy nothing: a pod leaves from one address."""
    model = sizing.staging_model(parse("gpu", storage__stagingPods=pods), addresses=addresses)
    assert (model.aggregate_mbps, model.limit) == (aggregate, limit)
    assert sizing.staging_addresses(parse("gpu", storage__stagingPods=pods)) == pods


@pytest.mark.parametrize(("changes", "message"), [
    ({"storage__stagingPods": -1}, "kimi-k3-1:storage.stagingPods = '-1': input should be greater than or equal to 1"),
    ({"storage__stagingPods": 9}, "kimi-k3-1:storage.stagingPods = '9': input should be less than or equal to 8"),
    ({"network__stagingNodesCidr": "10.9.2.0/29"},
     "kimi-k3-1:network.stagingNodesCidr = '10.9.2.0/29': a /29 holds 4 node addresses (4 of 8 are reserved) but "
     "storage.stagingPods may ask for 8 staging nodes; use a /28 or wider"),
    ({"network__stagingPodsCidr": "10.9.16.0/22"},
     "kimi-k3-1:network.stagingPodsCidr = '10.9.16.0/22': GKE gives each node a /24 of it"),
    ({"network__stagingNodesCidr": "10.0.1.0/24"},
     "kimi-k3-1:network.stagingNodesCidr = '10.0.1.0/24': overlaps network.nodesCidr '10.0.0.0/20'"),
])
def test_the_staging_egress_keys_are_checked(changes, message):
    assert error("gpu", **changes).startswith(message)


def test_the_command_line_takes_its_shard_from_the_indexed_job(monkeypatch):
    from tools.live.stage_weights import parse_args

    monkeypatch.setenv("JOB_COMPLETION_INDEX", "2")
    args = parse_args(["--repo-id", "a/b", "--revision", PINNED, "--dest", "gs://b/p/", "--shards", "3"])
    assert (args.shard_index, args.shards) == (2, 3)

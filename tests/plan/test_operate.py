"""Benchmark Job, cost estimate and lifetime labels in the plan; the driver's cost report."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from components.config import ConfigError
from components.plan import cost
from tests.config.test_config import parse
from tests.conftest import STACKS, Plan
from tools.live.bench import measured_output_tokens_per_second


def manifest(plan: Plan, kind: str, name: str | None = None) -> dict:
    [found] = [m for m in plan.manifests if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]
    return found


@pytest.fixture(scope="module")
def inference_perf_schema(shared) -> dict[str, set[str]]:
    """Key sets engines.md §3 records for the inference-perf config."""
    text = (shared / "reference" / "engines.md").read_text().split("## 3. inference-perf", 1)[1].split("## 4.", 1)[0]
    top = re.search(r"Top-level keys \[.*?\]: `([^`]+)`", text).group(1)
    replay = re.search(r"`conversation_replay` \(synthetic multi-turn agentic\): `\{([^}]+)\}`", text).group(1)
    return {
        "top": {k.strip() for k in top.split(",")},
        "conversation_replay": {k.strip() for k in replay.split(",")},
        "concurrent_stage": {"num_requests", "concurrency_level"},
        "storage": {"local_storage", "google_cloud_storage", "simple_storage_service"},
        "google_cloud_storage": {"bucket_name", "path", "report_file_prefix"},
        "api": set(re.findall(r"`([a-z_]+)(?::[^`]*)?`", text.split("* `api`", 1)[1].split("\n* ", 1)[0])),
    }


@pytest.mark.parametrize("stack", STACKS)
def test_benchmark_is_on_demand(plans, stack):
    jobs = [m["metadata"]["name"] for m in plans[stack].manifests if m["kind"] == "Job"]
    assert jobs == [plans[stack].outputs["stagingJob"]], "the benchmark runs only when the driver asks for it"
    assert "benchmarkJob" not in plans[stack].outputs


def test_inference_perf_config_matches_the_schema(variants, inference_perf_schema):
    plan = variants["bench"]
    config = yaml.safe_load(manifest(plan, "ConfigMap", "kimi-k3-1-inference-perf-config")["data"]["config.yml"])
    assert set(config) <= inference_perf_schema["top"]
    assert config["load"]["type"] == "concurrent"
    for stage in config["load"]["stages"]:
        assert set(stage) == inference_perf_schema["concurrent_stage"]
    assert config["data"]["type"] == "conversation_replay"
    assert set(config["data"]["conversation_replay"]) <= inference_perf_schema["conversation_replay"]
    assert set(config["api"]) <= inference_perf_schema["api"]
    assert set(config["storage"]) <= inference_perf_schema["storage"]
    assert set(config["storage"]["google_cloud_storage"]) <= inference_perf_schema["google_cloud_storage"]


def test_benchmark_is_wired_to_the_router_bucket_and_weights(variants):
    plan = variants["bench"]
    config = yaml.safe_load(manifest(plan, "ConfigMap", "kimi-k3-1-inference-perf-config")["data"]["config.yml"])
    chart = plan.one("kubernetes:helm.sh/v4:Chart", "router-chart")["inputs"]
    port = chart["values"]["router"]["extraServicePorts"][0]["port"]
    assert config["server"]["base_url"] == f"http://{chart['name']}-epp:{port}" == "http://kimi-k3-1-epp:80"
    assert config["server"]["type"] == chart["values"]["router"]["modelServers"]["type"]
    bucket = plan.one("gcp:storage/bucket:Bucket", "weights-bucket")["inputs"]["name"]
    gcs = config["storage"]["google_cloud_storage"]
    assert gcs["bucket_name"] == bucket
    assert plan.outputs["benchmarkResultsUri"] == f"gs://{bucket}/{gcs['path']}"
    job = manifest(plan, "Job", "kimi-k3-1-inference-perf")
    pod = job["spec"]["template"]["spec"]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert config["tokenizer"]["pretrained_model_name_or_path"] in mounts, "tokenizer from the weights volume"
    assert plan.outputs["benchmarkJob"] == job["metadata"]["name"]
    # The benchmark identity may write only under the results prefix.
    [writer] = [g for g in plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
                if g["inputs"]["member"].endswith(f"/sa/{pod['serviceAccountName']}")]
    assert writer["inputs"]["role"] == "roles/storage.objectCreator" and "condition" in writer["inputs"]
    assert f'objects/{gcs["path"].split("/")[0]}/' in writer["inputs"]["condition"]["expression"]
    component = plan.named(next(r for r in plan.resources if r["inputs"].get("kind") == "Job"
                                and r["inputs"]["metadata"]["name"] == job["metadata"]["name"])["parent"])
    parents = {plan.named(d)["parent"] for d in component["dependsOn"]} | set(component["dependsOn"])
    assert "vllm" in parents, "load starts only once the model servers are Available"


def test_hourly_cost_with_overrides(variants):
    """bench variant: 16 A4X Max nodes x $42.50 = $680; 3 CPU nodes x $0.50 = $1.50; Hyperdisk ML
    1800 GiB x $0.084 / 730 = $0.207 and 38400 MiB/s x $0.12 / 730 = $6.312; bucket 1560 GB x $0.02 / 730 =
    $0.043; boot disks 16 x 500 + 3 x 100 = 8,300 GB x $0.08 / 730 = $0.910; GKE $0.10; NAT 19 VMs x $0.0014 =
    $0.0266; 3 staging NAT addresses x $0.005 = $0.015. Total $689.11/h."""
    lines = cost.hourly_costs(parse("gpu", benchmark__enabled="true", cost__gpuNodeHourUsd="42.50",
                                    cost__cpuNodeHourUsd="0.50"))
    amount, complete = cost.total(lines)
    assert complete and amount == pytest.approx(689.113, abs=0.001)
    assert variants["bench"].outputs["hourlyCostUsd"] == 689.11  # rounded to cents
    assert variants["bench"].outputs["hourlyCostComplete"] is True


@pytest.mark.parametrize("stack,key", [("gpu", "cost.gpuNodeHourUsd"), ("tpu", "cost.tpuChipHourUsd")])
def test_unpriced_accelerators_name_the_key_to_set(plans, stack, key):
    assert f"price unknown, set kimi-k3-1:{key}" in plans[stack].summary
    assert plans[stack].outputs["hourlyCostComplete"] is False


def test_cost_config_rejects_non_numbers():
    with pytest.raises(ConfigError) as info:
        parse("gpu", cost__gpuNodeHourUsd="lots")
    assert str(info.value) == ("kimi-k3-1:cost.gpuNodeHourUsd = 'lots': expected a finite, non-negative decimal "
                               "such as '42.50' (USD)")


def test_cost_per_million_tokens():
    """$683.56/h at 10,000 output tokens/s = 36e6 tokens/h -> $18.99 per million."""
    assert cost.cost_per_million_tokens(683.56, 10_000) == pytest.approx(18.988, abs=0.001)


def test_driver_reads_the_output_rate(tmp_path):
    (tmp_path / "stage_0.json").write_text(json.dumps({"throughput": {"output_tokens_per_sec": 812.5}}))
    (tmp_path / "summary.json").write_text(json.dumps({"throughput": {"output_tokens_per_sec": 2_400.0}}))
    assert measured_output_tokens_per_second(tmp_path) == 2_400.0
    assert measured_output_tokens_per_second(tmp_path / "empty") is None


def test_max_lifetime_label_on_billable_resources(plans, variants):
    for plan, hours in ((plans["gpu"], "24"), (variants["bench"], "6")):
        for pool in plan.of_type("gcp:container/nodePool:NodePool"):
            assert pool["inputs"]["nodeConfig"]["resourceLabels"]["max-lifetime-hours"] == hours
        assert plan.one("gcp:container/cluster:Cluster")["inputs"]["resourceLabels"]["max-lifetime-hours"] == hours
        bucket = plan.one("gcp:storage/bucket:Bucket", "weights-bucket")
        assert bucket["inputs"]["labels"]["max-lifetime-hours"] == hours
        # The Hyperdisk ML disk is created by the CSI driver, not Pulumi: its labels come from the StorageClass.
        storage_class = next(m for m in plan.manifests if m["kind"] == "StorageClass")
        disk_labels = dict(item.split("=") for item in storage_class["parameters"]["labels"].split(","))
        assert disk_labels["max-lifetime-hours"] == hours and disk_labels["llm-d-guide"] == "kimi-k3-1"


def test_benchmark_job_runs_where_the_weights_volume_attaches(variants):
    """The Job reads its tokenizer from the Hyperdisk ML volume: it runs on the transfer pool's nodes, which the
    Volume Populator itself uses to write that volume (gke.md §4)."""
    plan = variants["bench"]
    pod = manifest(plan, "Job", "kimi-k3-1-inference-perf")["spec"]["template"]["spec"]
    node = plan.one("gcp:container/nodePool:NodePool", "cpu-weights-transfer")["inputs"]["nodeConfig"]
    assert pod["nodeSelector"].items() <= node["labels"].items()
    for taint in node["taints"]:
        assert {"key": taint["key"], "operator": "Equal", "value": taint["value"], "effect": "NoSchedule"} \
            in pod["tolerations"]


def test_each_run_reports_to_its_own_folder(variants):
    config = yaml.safe_load(manifest(variants["bench"], "ConfigMap", "kimi-k3-1-inference-perf-config")
                            ["data"]["config.yml"])
    assert config["storage"]["google_cloud_storage"]["path"] == "benchmarks/bench/manual/"
    assert variants["bench"].outputs["benchmarkResultsUri"].endswith("/benchmarks/bench/manual/")


def test_benchmark_needs_the_transfer_pool():
    with pytest.raises(ConfigError) as info:
        parse("gpu", benchmark__enabled="true", transferPool__nodeCount="0")
    assert str(info.value).startswith(
        "kimi-k3-1:transferPool.nodeCount = 0: the benchmark Job runs on the transfer pool")

"""`python -m tools diff`: hand-made plan pairs checked on exact output, and one run on two commits of this checkout."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tools.preview import plan_diff
from tools.preview.replacements import RULES

GPU_POOL = {
    "type": "gcp:container/nodePool:NodePool", "name": "gpu-pool", "parent": "gpu", "dependsOn": ["cluster-gke"],
    "inputs": {"location": "us-central1-b", "nodeCount": 16,
               "nodeConfig": {"machineType": "a4x-maxgpu-4g-metal", "diskSizeGb": 500}},
    "options": {"deleteBeforeReplace": True, "provider": "gcp"},
}
TPU_POOL = {
    "type": "gcp:container/nodePool:NodePool", "name": "tpu-0", "parent": "gpu", "dependsOn": ["cluster-gke"],
    "inputs": {"placementPolicy": {"tpuTopology": "2x2x4", "type": "COMPACT"}, "nodeCount": 4},
    "options": {"ignoreChanges": ["placementPolicy"], "provider": "gcp"},
}
READER = {
    "type": "gcp:storage/bucketIAMMember:BucketIAMMember", "name": "weights-reader-0", "parent": "weights",
    "dependsOn": [], "inputs": {"bucket": "b", "member": "principal://x", "role": "roles/storage.objectViewer"},
    "options": {"provider": "gcp"},
}
COMPONENT = {"type": "kimi:gke:GpuNodePool", "name": "gpu", "parent": None, "dependsOn": [], "inputs": {}}
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "llm-d-hf-token", "namespace": "kimi"},
          "stringData": {"HF_TOKEN": "[secret]"}, "type": "Opaque"}
PVC = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "models", "namespace": "kimi"},
       "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "hdml",
                "resources": {"requests": {"storage": "1800Gi"}}}}
DSET = {"apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
        "metadata": {"name": "vllm", "namespace": "kimi"},
        "spec": {"roles": [{"name": "prefill", "spec": {"replicas": 3}}, {"name": "decode", "spec": {"replicas": 1}}]}}
SUMMARY = """\
accelerators: 16 x a4x-maxgpu-4g-metal (64 nvidia-gb300) in one NVL72 domain: 3P x 4 + 1D x 4 nodes
weights: Hyperdisk ML 1800 GiB at 10240 MiB/s; hydration >= 2.4 min; 4 replicas on 16 nodes load their copies in 9.7 min
router cache: lruCapacityPerServer 612,163 blocks of 128 tokens per endpoint (4 per replica)
cost estimate (prices of 2026-11-29): $2.97/hour plus the unpriced items below
  2 x n2-standard-8 (system): $0.78/h
"""


def k8s_resource(name: str, manifest: dict[str, Any]) -> dict[str, Any]:
    api = manifest["apiVersion"]
    token = f"kubernetes:{api if '/' in api else 'core/' + api}"
    return {"type": f"{token}:{manifest['kind']}", "name": name, "parent": None, "dependsOn": [],
            "inputs": copy.deepcopy(manifest), "options": {"provider": "cluster-k8s"}}


def base_plan() -> dict[str, Any]:
    manifests = [SECRET, PVC, DSET]
    resources = [COMPONENT, GPU_POOL, TPU_POOL, READER,
                 *(k8s_resource(n, m) for n, m in zip(("hf-token", "pvc", "vllm-ds"), manifests, strict=True))]
    return {"resources": copy.deepcopy(resources), "manifests": copy.deepcopy(manifests),
            "outputs": {"hourlyCostUsd": 2.97, "kubeconfig": "[secret]"}, "summary": SUMMARY}


def write(folder: Path, plan: dict[str, Any], extra: dict[str, list[dict[str, Any]]] | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "resources.json").write_text(json.dumps(plan["resources"], indent=2))
    (folder / "manifests.yaml").write_text(yaml.safe_dump_all(plan["manifests"]))
    (folder / "outputs.json").write_text(json.dumps(plan["outputs"]))
    (folder / "summary.txt").write_text(plan["summary"])
    for name, objects in (extra or {}).items():
        (folder / name).write_text(yaml.safe_dump_all(objects))
    return folder


def named(plan: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in plan["resources"] if r["name"] == name)


def run(tmp_path: Path, change, *args: str, extra=None) -> tuple[int, str]:
    old, new = base_plan(), base_plan()
    change(new)
    base = write(tmp_path / "base" / "gpu", old)
    head = write(tmp_path / "head" / "gpu", new, extra)
    out = tmp_path / "report.md"
    code = plan_diff.main([str(base.parent), str(head.parent), "--out", str(out), *args])
    return code, out.read_text().replace(str(tmp_path), "T")


def body(report: str) -> str:
    """The report below its title and stack table."""
    return report.split("## Stack `gpu`\n\n", 1)[1]


def test_help_works():
    proc = subprocess.run([sys.executable, "-m", "tools.preview.plan_diff", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "BASE and HEAD" in proc.stdout and "--exit-code" in proc.stdout


def test_identical_plans_say_no_changes(tmp_path):
    code, report = run(tmp_path, lambda plan: None, "--exit-code")
    assert code == 0
    assert report == "# Offline plan diff: `T/base` → `T/head`\n\nno changes (stacks: gpu)\n"


def test_a_field_change(tmp_path):
    def change(plan):
        named(plan, "gpu-pool")["inputs"]["nodeCount"] = 12
        plan["manifests"][2]["spec"]["roles"][0]["spec"]["replicas"] = 2
        named(plan, "vllm-ds")["inputs"]["spec"]["roles"][0]["spec"]["replicas"] = 2
        plan["summary"] = plan["summary"].replace("16 x", "12 x").replace("$2.97/hour", "$2.32/hour")

    code, report = run(tmp_path, change, "--exit-code")
    assert code == 1
    assert report.startswith("""\
# Offline plan diff: `T/base` → `T/head`

| stack | create | update | replace | delete | summary figures changed |
| --- | ---: | ---: | ---: | ---: | ---: |
| gpu | 0 | 2 | 0 | 0 | 2 |
""")
    assert body(report) == """\
### Summary figures

| figure | base | head | change |
| --- | ---: | ---: | ---: |
| accelerator nodes | 16 | 12 | -4 (-25%) |
| hourly cost | 2.97 USD/h | 2.32 USD/h | -0.65 USD/h (-22%) |

### Pulumi resources

**~ update** `gcp:container/nodePool:NodePool` **gpu-pool**

| path | base | head | note |
| --- | --- | --- | --- |
| `nodeCount` | `16` | `12` |  |

### Kubernetes objects

**~ update** `DisaggregatedSet kimi/vllm` (`vllm-ds`)

| path | base | head | note |
| --- | --- | --- | --- |
| `spec.roles[name=prefill].spec.replicas` | `3` | `2` |  |

<details><summary>summary.txt lines that changed</summary>

```diff
-accelerators: 16 x a4x-maxgpu-4g-metal (64 nvidia-gb300) in one NVL72 domain: 3P x 4 + 1D x 4 nodes
+accelerators: 12 x a4x-maxgpu-4g-metal (64 nvidia-gb300) in one NVL72 domain: 3P x 4 + 1D x 4 nodes
-cost estimate (prices of 2026-11-29): $2.97/hour plus the unpriced items below
+cost estimate (prices of 2026-11-29): $2.32/hour plus the unpriced items below
```

</details>
"""


def test_an_added_object_and_chart_objects_from_a_sibling_file(tmp_path):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "epp", "namespace": "kimi"},
                  "data": {"config.yaml": "plugins: []"}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kimi-epp", "namespace": "kimi"},
               "spec": {"ports": [{"name": "grpc", "port": 9002}]}}

    def change(plan):
        plan["manifests"].append(config_map)
        plan["resources"].append(k8s_resource("epp-config", config_map))

    code, report = run(tmp_path, change, extra={"charts.yaml": [service]})
    assert code == 0
    assert body(report) == """\
### Kubernetes objects

**+ create** `ConfigMap kimi/epp` (`epp-config`)

**+ create** `Service kimi/kimi-epp` (from charts.yaml)
"""


def test_a_removed_resource(tmp_path):
    code, report = run(tmp_path, lambda plan: plan["resources"].remove(named(plan, "weights-reader-0")))
    assert body(report) == """\
### Pulumi resources

**- delete** `gcp:storage/bucketIAMMember:BucketIAMMember` **weights-reader-0**
"""


def test_forced_replacements_are_called_out_with_their_source(tmp_path):
    def change(plan):
        pool = named(plan, "gpu-pool")["inputs"]
        pool["location"] = "us-central1-a"
        pool["nodeConfig"]["machineType"] = "a4x-highgpu-4g"  # updated in place by the provider
        named(plan, "tpu-0")["inputs"]["placementPolicy"]["tpuTopology"] = "2x4x4"  # ignoreChanges
        for pvc in (plan["manifests"][1], named(plan, "pvc")["inputs"]):
            pvc["spec"]["storageClassName"] = "premium"

    _, report = run(tmp_path, change)
    pool_source = next(r.source for r in RULES if r.type == GPU_POOL["type"] and r.path == "location")
    pvc_source = next(r.source for r in RULES if r.type == "k8s:/PersistentVolumeClaim"
                      and r.path == "spec.storageClassName")
    assert "| gpu | 0 | 1 | 2 | 0 | 0 |" in report
    assert body(report) == f"""\
### Replacements

- `gcp:container/nodePool:NodePool` **gpu-pool**: `location`
- `PersistentVolumeClaim kimi/models` (`pvc`): `spec.storageClassName`

### Pulumi resources

**+- replace** `gcp:container/nodePool:NodePool` **gpu-pool**
- deleteBeforeReplace: the old one is deleted before the new one exists

| path | base | head | note |
| --- | --- | --- | --- |
| `location` | `"us-central1-b"` | `"us-central1-a"` | forces replacement ([source]({pool_source})) |
| `nodeConfig.machineType` | `"a4x-maxgpu-4g-metal"` | `"a4x-highgpu-4g"` |  |

**~ update** `gcp:container/nodePool:NodePool` **tpu-0**

| path | base | head | note |
| --- | --- | --- | --- |
| `placementPolicy.tpuTopology` | `"2x2x4"` | `"2x4x4"` | ignoreChanges: not applied |

### Kubernetes objects

**+- replace** `PersistentVolumeClaim kimi/models` (`pvc`)

| path | base | head | note |
| --- | --- | --- | --- |
| `spec.storageClassName` | `"hdml"` | `"premium"` | forces replacement ([source]({pvc_source})) |
"""


def test_a_changed_secret_stays_masked(tmp_path):
    def change(plan):
        for secret in (plan["manifests"][0], named(plan, "hf-token")["inputs"]):
            secret["stringData"]["HF_ENDPOINT"] = "[secret]"
        named(plan, "weights-reader-0")["inputs"]["member"] = "[secret]"

    _, report = run(tmp_path, change)
    secret_source = next(r.source for r in RULES if r.type == "k8s:/Secret" and r.path == "stringData")
    member_source = next(r.source for r in RULES if r.type == READER["type"] and r.path == "member")
    assert body(report) == f"""\
### Replacements

- `gcp:storage/bucketIAMMember:BucketIAMMember` **weights-reader-0**: `member`
- `Secret kimi/llm-d-hf-token` (`hf-token`): `stringData.HF_ENDPOINT`

### Pulumi resources

**+- replace** `gcp:storage/bucketIAMMember:BucketIAMMember` **weights-reader-0**

| path | base | head | note |
| --- | --- | --- | --- |
| `member` | `"principal://x"` | `"[secret]"` | forces replacement ([source]({member_source})) |

### Kubernetes objects

**+- replace** `Secret kimi/llm-d-hf-token` (`hf-token`)

| path | base | head | note |
| --- | --- | --- | --- |
| `stringData.HF_ENDPOINT` | *absent* | `"[secret]"` | forces replacement ([source]({secret_source})) |
"""


def test_long_values_are_cut_around_the_difference():
    old = "exec vllm serve /models " + "--flag value " * 20 + "--data-parallel-size 16 " + "--tail x " * 20
    new = old.replace("--data-parallel-size 16", "--data-parallel-size 12")
    a, b = plan_diff.shorten_pair(old, new)
    assert "size 16" in a and "size 12" in b and a.startswith("…") and a.endswith("…")
    assert len(a) <= plan_diff.WIDTH + 2


def test_args_lists_align_on_equal_flags():
    old = ["--port", "8000", "--tp", "1", "--ep"]
    new = ["--port", "8000", "--kv-cache-dtype", "fp8", "--tp", "1", "--ep"]
    assert [(c.path, c.old, c.new) for c in plan_diff.diff_values(old, new, "args")] == [
        ("args[2:2]", plan_diff.ABSENT, ["--kv-cache-dtype", "fp8"])]


def test_summary_figures_survive_new_and_reworded_lines():
    extra = "fit: gpu pool 4/4 GPUs, 1 pod per node\nstaging time: 12 min\n"
    old = figures = plan_diff.figures(SUMMARY)
    new = plan_diff.figures(extra + SUMMARY.replace("router cache:", "router:") + "headline: $9.99/hour\n")
    assert figures["lruCapacityPerServer"] == 612163 and figures["hourly cost"] == 2.97
    assert figures["weight load time"] == 9.7 and figures["accelerator nodes"] == 16
    assert figures["system pool nodes"] == 2 and "weights-transfer pool nodes" not in figures
    assert new == old


def test_refs_that_are_neither_folders_nor_commits_are_an_error(tmp_path, capsys):
    assert plan_diff.main(["no-such-ref-or-folder", str(tmp_path)]) == 2
    assert "neither a plan folder nor a commit" in capsys.readouterr().err


# --- end to end: two commits of a copy of this checkout, rendered by the tool itself -----------------------

E2E_STACK = {
    # Its own stack file, so values a user puts in the committed ones do not matter.
    "kimi-k3-1:track": "gpu", "kimi-k3-1:gcp.project": "plan-diff-test", "kimi-k3-1:gcp.zone": "us-central1-b",
    "kimi-k3-1:gpu.reservation": "r", "kimi-k3-1:gpu.prefillGroups": 3, "kimi-k3-1:gpu.decodeGroups": 1,
}


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), "-c", "user.name=test", "-c", "user.email=test@example.com",
                           "-c", "commit.gpgsign=false", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def two_commits(tmp_path_factory) -> Path:
    """A repository with this checkout's files (committed or not, ignored ones left out) and two commits that
    differ only in gpu.prefillGroups (3, then 2)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    repo = tmp_path_factory.mktemp("repo")
    files = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file() and not name.startswith("Pulumi.") or name == "Pulumi.yaml":
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    stack = repo / "Pulumi.e2e.yaml"
    stack.write_text(yaml.safe_dump({"config": E2E_STACK}))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "three prefill groups")
    stack.write_text(yaml.safe_dump({"config": {**E2E_STACK, "kimi-k3-1:gpu.prefillGroups": 2}}))
    git(repo, "commit", "-qam", "two prefill groups")
    return repo


def test_end_to_end_on_two_commits(two_commits):
    proc = subprocess.run([sys.executable, "-m", "tools", "diff", "main~1", "main", "--repo", str(two_commits),
                           "--stack", "e2e"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = proc.stdout
    assert report.startswith("# Offline plan diff: `main~1 (")
    # The prefill role is autoscaled: its most replicas are its ScaledObject's (the set leaves them to its RoleScaler).
    assert "| `spec.maxReplicaCount` | `3` | `2` |  |" in report
    pool = report.split("`gcp:container/nodePool:NodePool` **gpu-0**", 1)[1].split("**", 1)[0]
    assert "| `nodeCount` | `16` | `12` |  |" in pool
    for row in ("| accelerator nodes | 16 | 12 | -4 (-25%) |", "| model replicas | 4 | 3 | -1 (-25%) |",
                "| hourly cost | "):
        assert row in report
    assert "ScaledObject kimi-k3-1/kimi-k3-1-prefill" in report
    assert "plan-only-secret-value" not in report


def test_an_immutable_field_the_api_server_rejects(tmp_path):
    rct = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
           "metadata": {"name": "rdma", "namespace": "kimi"},
           "spec": {"spec": {"devices": {"requests": [{"name": "rdma", "exactly": {"count": 8}}]}}}}

    def change(plan):
        plan["manifests"][-1]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 4

    old, new = base_plan(), base_plan()
    for plan in (old, new):
        plan["manifests"].append(copy.deepcopy(rct))
        plan["resources"].append(k8s_resource("rdma", rct))
    change(new)
    named(new, "rdma")["inputs"] = copy.deepcopy(new["manifests"][-1])
    write(tmp_path / "base" / "gpu", old)
    write(tmp_path / "head" / "gpu", new)
    out = tmp_path / "report.md"
    assert plan_diff.main([str(tmp_path / "base"), str(tmp_path / "head"), "--out", str(out)]) == 0
    source = next(r.source for r in RULES if r.type == "k8s:resource.k8s.io/ResourceClaimTemplate")
    note = f"immutable: the API server rejects this update ([source]({source}))"
    assert body(out.read_text()) == f"""\
### Updates the API server rejects

- `ResourceClaimTemplate kimi/rdma` (`rdma`): `spec.spec.devices.requests[name=rdma].exactly.count`

### Kubernetes objects

**~ update** `ResourceClaimTemplate kimi/rdma` (`rdma`)
- an immutable field changes: `pulumi up` fails on this object unless it is replaced (renamed, or deleted first)

| path | base | head | note |
| --- | --- | --- | --- |
| `spec.spec.devices.requests[name=rdma].exactly.count` | `8` | `4` | {note} |
"""


def test_long_entries_keep_every_row_with_a_note(tmp_path):
    old, new = base_plan(), base_plan()
    for plan, value in ((old, "v"), (new, "w")):
        pool = named(plan, "gpu-pool")
        pool["inputs"] = {"labels": {f"k{i}": value for i in range(5)}, **pool["inputs"]}
    named(new, "gpu-pool")["inputs"]["location"] = "us-central1-a"
    write(tmp_path / "base" / "gpu", old)
    write(tmp_path / "head" / "gpu", new)
    out = tmp_path / "report.md"
    plan_diff.main([str(tmp_path / "base"), str(tmp_path / "head"), "--out", str(out), "--max-rows", "2"])
    report = out.read_text()
    rows = [line.split(" | ")[0] for line in report.splitlines() if line.startswith("| `")]
    assert rows == ["| `labels.k0`", "| `labels.k1`", "| `location`"]
    assert "*… and 3 more paths (`--max-rows 0` shows all)*" in report


def test_a_ref_and_this_checkouts_plan_render_the_same_charts(two_commits, tmp_path):
    """`plan_diff main build/plan` on an unchanged checkout: the ref's extracted tree has no shared folder beside
    it, yet it must find the chart copies this checkout renders with, or every chart object looks new."""
    from tests import plan_server
    from tests.conftest import SHARED, run_plan

    out = tmp_path / "plan"
    stack = tmp_path / "Pulumi.e2e.yaml"
    stack.write_text(yaml.safe_dump({"config": {**E2E_STACK, "kimi-k3-1:gpu.prefillGroups": 2}}))
    assert run_plan(out, "--stack-file", str(stack)).returncode == 0
    # The diff forked from the session's preloaded plan process (the command itself: test_end_to_end_on_two_commits).
    proc = plan_server.run(["main", str(out / "e2e"), "--repo", str(two_commits)], dict(os.environ), plan_server.DIFF)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2:] == ["no changes (stacks: e2e)"], proc.stdout
    if (SHARED / "charts").is_dir():  # with chart copies, both sides rendered every chart
        charts = json.loads((out / "e2e" / "charts.json").read_text())
        assert charts and all(not c["skipped"] for c in charts), charts


def test_chart_objects_one_side_did_not_render_are_left_out_and_said(tmp_path):
    child = {"type": "kubernetes:core/v1:Service", "name": "router:kimi/epp", "parent": "router",
             "dependsOn": [], "inputs": {"apiVersion": "v1", "kind": "Service",
                                          "metadata": {"name": "epp", "namespace": "kimi"}}}
    chart = {"type": "kubernetes:helm.sh/v4:Chart", "name": "router", "parent": None, "dependsOn": [], "inputs": {}}
    rendered = {"resource": "router", "skipped": None}
    base = plan_diff.StackPlan("gpu", [chart], {}, {}, "", {"router": {**rendered, "skipped": "no copy found"}})
    head = plan_diff.StackPlan("gpu", [chart, child],
                               {"Service|kimi|epp": plan_diff.KubeObject(child["inputs"], "manifests.yaml")}, {}, "",
                               {"router": rendered})
    diff = plan_diff.diff_stack("gpu", base, head)
    assert diff.empty
    assert diff.notes == ["chart router was not rendered on the base side (no copy found): its objects are compared "
                          "only when both sides render it"]


# --------------------------------------------------------------------------- the cost row says what it leaves out
UNPRICED_GPU = " + 16 x a4x-maxgpu-4g-metal unpriced: set kimi-k3-1:cost.gpuNodeHourUsd"


def _cost_summary(usd: str, unpriced_items: str) -> str:
    return f"cost estimate (list prices of 2026-11-29): ${usd}/h{unpriced_items}\n"


def test_the_hourly_cost_names_what_both_sides_leave_unpriced():
    from tools.preview.plan_diff import _delta, diff_figures

    [row] = diff_figures(_cost_summary("10.61", UNPRICED_GPU), _cost_summary("17.84", UNPRICED_GPU))
    assert _delta(row) == "+7.23 USD/h (+68%); priced items only; unpriced on both: 16 x a4x-maxgpu-4g-metal"


def test_a_priced_and_an_unpriced_stack_are_not_compared_as_a_percentage():
    from tools.preview.plan_diff import _delta, diff_figures

    [row] = diff_figures(_cost_summary("10.61", UNPRICED_GPU), _cost_summary("690.61", ""))
    assert "%" not in _delta(row)
    assert _delta(row) == ("not comparable: base leaves out 16 x a4x-maxgpu-4g-metal, head leaves out nothing")
    # The same total with different items left out is still a row: the totals mean different things.
    [same] = diff_figures(_cost_summary("10.61", UNPRICED_GPU), _cost_summary("10.61", ""))
    assert same.comparable is False


def _with_load(plan: dict[str, Any], slices: int) -> None:
    from components.plan import loading
    from tests.config.test_config import parse

    plan["outputs"]["weightLoad"] = json.loads(json.dumps(loading.load_output(parse("gpu", gpu__slices=slices))))


def test_a_scale_up_is_applied_to_the_throughput_the_existing_volume_has(tmp_path, capsys):
    """The base plan's outputs stand for the stack's state; `--deployed` takes the real stack's outputs instead
    (`pulumi stack output --json`): the groups the head adds read that volume's throughput until the change applies."""
    def run_grown(*args):
        old, new = base_plan(), base_plan()
        _with_load(old, 1)
        _with_load(new, 3)
        folder = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        base, head = write(folder / "base" / "gpu", old), write(folder / "head" / "gpu", new)
        out = folder / "report.md"
        code = plan_diff.main([str(base.parent), str(head.parent), "--out", str(out), *args])
        return code, (out.read_text() if out.is_file() else "")

    code, text = run_grown()
    assert code == 0
    section = text.split("### Applied to the existing stack\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section[0].startswith("- volume throughput 38,400 -> 115,200 MiB/s for 48 reader nodes, on the existing "
                                 "volume (the base plan's outputs)")
    assert section[1].startswith("- groups this up adds load in at most 10.7 min")
    assert section[2].endswith(": covers it")
    # The deployed stack really has half of that (set by hand, say): the added groups wait longer.
    deployed = tmp_path / "deployed.json"
    state = base_plan()
    _with_load(state, 1)
    state["outputs"]["weightLoad"]["throughputMiBps"] = 19200
    deployed.write_text(json.dumps(state["outputs"]))
    code, text = run_grown("--deployed", str(deployed))
    assert code == 0
    assert ("- volume throughput 19,200 -> 115,200 MiB/s for 48 reader nodes, on the existing volume (the deployed "
            "stack's outputs)") in text
    assert "- groups this up adds load in at most 20.2 min" in text and "21.4 min if it kept 19,200 MiB/s" in text
    # Outputs of a stack deployed before `weightLoad` existed: said in one line, nothing compared.
    deployed.write_text(json.dumps({"hourlyCostUsd": 2.97}))
    capsys.readouterr()
    code, _ = run_grown("--deployed", str(deployed))
    assert code == 2
    assert capsys.readouterr().err == (f"error: --deployed {deployed}: no `weightLoad` output (the stack was deployed "
                                       "by a version that did not export it; compare with the plan of the commit it "
                                       "was deployed from instead)\n")

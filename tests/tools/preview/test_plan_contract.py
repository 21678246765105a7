"""The offline plan's format is an interface: shape, determinism, atomic writes, secrets, errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from components.config import default_cluster_name
from tests.conftest import (
    LEAKY_TOKEN,
    STACKS,
    Plan,
    fixture_stack,
    fixture_stack_args,
    run_plan,
    stack_document,
    write_stack,
)

PLAN_FILES = ("resources.json", "manifests.yaml", "outputs.json", "summary.txt")


def _walk_numbers(value, path=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk_numbers(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk_numbers(v, f"{path}[{i}]")
    elif isinstance(value, float):
        yield path, value


@pytest.mark.parametrize("stack", STACKS)
def test_resources_json_shape(plans, stack):
    plan: Plan = plans[stack]
    names = [r["name"] for r in plan.resources]
    assert len(names) == len(set(names)), "logical names must be unique so parent/dependsOn are unambiguous"
    for index, resource in enumerate(plan.resources):
        assert {"type", "name", "parent", "dependsOn", "inputs"} <= set(resource), resource
        assert set(resource) <= {"type", "name", "parent", "dependsOn", "inputs", "options"}
        if resource["parent"] is not None:
            assert resource["parent"] in names[:index], f"{resource['name']}: parent registered later or missing"
        assert all(dep in names for dep in resource["dependsOn"])
        assert resource["dependsOn"] == sorted(set(resource["dependsOn"]))
        assert not list(_walk_numbers(resource["inputs"])) or all(
            not v.is_integer() for _, v in _walk_numbers(resource["inputs"])), "integral numbers must be ints"
    types = {r["type"] for r in plan.resources}
    assert "pulumi:providers:gcp" in types and "pulumi:providers:kubernetes" in types
    assert any(t.startswith("kimi:") for t in types), "components are part of the plan"


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubernetes_object_is_a_complete_manifest(plans, stack):
    plan: Plan = plans[stack]
    direct = [r for r in plan.resources if r["type"].startswith("kubernetes:")
              and not r["type"].startswith(("kubernetes:helm.sh/", "kubernetes:yaml/", "kubernetes:kustomize/"))]
    assert len(plan.manifests) == len(direct)
    for manifest in plan.manifests:
        assert manifest["apiVersion"] and manifest["kind"] and manifest["metadata"]["name"], manifest


def test_implicit_and_explicit_dependencies_are_recorded(gpu):
    cluster = gpu.one("gcp:container/cluster:Cluster")
    # Implicit: the cluster reads the subnet's id and the node service account's email.
    assert {"net-nodes", "nodes-sa"} <= set(cluster["dependsOn"])
    # Explicit: the cluster component waits for the APIs and the node account's role grant.
    component = gpu.one("kimi:gke:Cluster")
    assert {"apis-container", "apis-compute", "nodes-container.defaultNodeServiceAccount"} <= set(
        component["dependsOn"])


def test_plan_is_deterministic(plan_root, tmp_path):
    proc = run_plan(tmp_path, *fixture_stack_args())
    assert proc.returncode == 0, proc.stderr
    for stack in STACKS:
        for name in PLAN_FILES:
            assert (tmp_path / stack / name).read_bytes() == (plan_root / stack / name).read_bytes(), name


def test_stack_name_only_names_things(variants, gpu):
    """`gpu-staging` and `bad` with the gpu stack's settings render the gpu stack but for the stack's label and the
    cloud names derived from the stack's name (components/config/base.py default_cluster_name), and so the addresses
    the offline plan's stand-in cluster gets from its name (tools/preview/mocks.py)."""
    def neutral(text: str, stack: str) -> str:
        text = text.replace(default_cluster_name(stack), "<cluster>")
        text = re.sub(r"\b(10\.0\.15\.|34\.118\.)[0-9]+", r"\1<octet>", text)
        text = re.sub(r'pulumi-stack(\\?)": (\\?)"[-a-z0-9]+', "pulumi-stack", text)
        return re.sub(r"pulumi-stack=[-a-z0-9]+", "pulumi-stack", text)

    reference = neutral((gpu.folder / "resources.json").read_text(), "gpu")
    for name in ("gpu-staging", "bad"):
        assert neutral((variants[name].folder / "resources.json").read_text(), name) == reference


def test_a_failed_stack_is_named_keeps_its_plan_and_the_others_still_render(plan_root, tmp_path):
    """A stack file with a config error (a user's extra Pulumi.<name>.yaml, say) fails alone: it is named
    with its error, its previous plan folder stays as it was, and the other stacks are written."""
    out = tmp_path / "out"
    shutil.copytree(plan_root, out)
    (out / "gpu" / "summary.txt").write_text("stale\n")
    before = {p: p.read_bytes() for p in (out / "tpu").rglob("*") if p.is_file()}
    config = dict(stack_document("tpu")["config"])
    config["kimi-k3-1:tpu.topology"] = "2x2x8"
    bad = write_stack(tmp_path, "tpu", config)
    proc = run_plan(out, "--stack-file", str(fixture_stack("gpu")), "--stack-file", str(bad))
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("plan tpu: ") and "kimi-k3-1:tpu.topology" in line
    assert "Traceback" not in proc.stderr + proc.stdout
    after = {p: p.read_bytes() for p in (out / "tpu").rglob("*") if p.is_file()}
    assert after == before, "the failed stack's previous plan must stay untouched"
    assert (out / "gpu" / "summary.txt").read_bytes() == (plan_root / "gpu" / "summary.txt").read_bytes()
    assert not [p for p in out.iterdir() if p.name.startswith(".staging")]


@pytest.mark.parametrize("change,key", [
    ({"kimi-k3-1:tpu.slices": "many"}, "kimi-k3-1:tpu.slices"),                 # wrong type
    ({"kimi-k3-1:tpu.slicez": 2}, "kimi-k3-1:tpu.slicez"),                      # unknown key
    ({"kimi-k3-1:gcp.project": None}, "kimi-k3-1:gcp.project"),                # missing required key
    ({"kimi-k3-1:tpu.slices": 64}, "kimi-k3-1:tpu.slices"),                     # out of range
    ({"kimi-k31:gcp.zone": "us-central1-c"}, "kimi-k31:gcp.zone"),             # misspelt namespace
    ({"kimi-k3-1:benchmark.conversations": float("inf")}, "benchmark.conversations"),  # YAML .inf
])
def test_malformed_stack_fails_cleanly(tmp_path, change, key):
    config = dict(stack_document("tpu")["config"])
    for k, v in change.items():
        if v is None:
            config.pop(k)
        else:
            config[k] = v
    stack_file = write_stack(tmp_path, "broken", config)
    out = tmp_path / "out"
    proc = run_plan(out, "--stack-file", str(stack_file))
    assert proc.returncode != 0
    assert key in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len(proc.stderr.strip().splitlines()) <= 2, proc.stderr
    assert not out.exists() or not any(out.iterdir())


def test_unset_secret_is_fed_the_sentinel_and_named(plans):
    """Stack files carry no token (the fixtures, like the committed files): the plan runs on the sentinel, as
    `pulumi up` would stop on the CLI's missing-configuration message, and the summary says which secret to set."""
    for stack in STACKS:
        assert "hfToken" not in stack_document(stack)["config"].__repr__()
        assert any("kimi-k3-1:hfToken is not set" in line for line in plans[stack].summary.splitlines()), stack


def test_hugging_face_token_never_written(variants):
    """The `leaky` variant gives the token as a `secure:` value: never decrypted, never shown."""
    assert LEAKY_TOKEN not in variants.proc.stdout + variants.proc.stderr
    for path in variants["leaky"].folder.rglob("*"):
        if path.is_file():
            assert LEAKY_TOKEN not in path.read_text(), path
    assert variants["leaky"].outputs["kubeconfig"] == "[secret]"


def test_a_secret_used_in_plain_text_fails_the_plan():
    """The program gets a sentinel for secret keys; the plan fails if it shows up unmasked anywhere."""
    from tools.preview.render import SECRET_SENTINEL, PlanError, check_no_secret_leak

    check_no_secret_leak({"resources": [{"inputs": {"stringData": {"HF_TOKEN": "[secret]"}}}]})
    with pytest.raises(PlanError, match="reached the plan unmasked"):
        check_no_secret_leak({"resources": [{"inputs": {"env": [{"value": SECRET_SENTINEL}]}}]})


@pytest.mark.parametrize("stack", STACKS)
def test_secret_outputs_are_masked(plans, stack):
    assert plans[stack].outputs["kubeconfig"] == "[secret]"
    assert "certificate-authority-data" not in json.dumps(plans[stack].outputs)


def test_unknown_stack_is_a_clear_error(tmp_path):
    proc = run_plan(tmp_path, "--stack", "does-not-exist")
    assert proc.returncode == 2
    assert "Pulumi.does-not-exist.yaml" in proc.stderr
    assert not Path(tmp_path / "does-not-exist").exists()


def test_outputs_that_carry_mock_values_are_marked(plans):
    """outputs.json `$mocked` names each output holding a stand-in of the mock engine (docs/plan-format.md)."""
    from tools.preview.mocks import UNRESOLVED_REVISION

    for plan in plans.values():
        mocked = plan.outputs["$mocked"]
        assert plan.outputs["stagedRevision"] == UNRESOLVED_REVISION and "stagedRevision" in mocked
        assert "clusterEndpoint" in mocked and "namespace" not in mocked and "servedModel" not in mocked
        for name in mocked:
            assert name in plan.outputs, name


def test_committed_placeholders_are_warned_about():
    """The committed stack files (project root) still hold their `# CHANGE` placeholders: the plan summary and
    `pulumi up` warn once per placeholder."""
    from components.config import PROJECT, parse_config
    from tests.conftest import ROOT
    from tools.preview.render import project_file, stack_config

    for stack, reservation in (("gpu", "my-a4x-max-reservation"), ("tpu", "my-tpu7x-reservation")):
        config, _ = stack_config(ROOT / f"Pulumi.{stack}.yaml", project_file())
        cfg = parse_config({k[len(PROJECT) + 1:]: v for k, v in config.items() if k.startswith(f"{PROJECT}:")})
        assert cfg.warnings == [
            "warning: kimi-k3-1:gcp.project is still the committed placeholder 'my-gcp-project': set yours before "
            "`pulumi up`",
            f"warning: kimi-k3-1:{stack}.reservation is still the committed placeholder '{reservation}': set yours "
            f"before `pulumi up`"]

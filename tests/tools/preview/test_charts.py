"""The charts rendered with the real Helm engine (tools/preview/helm_render.py) are in the plan, complete and checked;
every value the program passes is one its chart reads."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import STACKS, Plan, rendered
from tools.preview import helm_render

CHART = helm_render.CHART_TYPE


def objects(plan: Plan, chart: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m["kind"], m["metadata"]["name"]): m for m in plan.chart_manifests(chart)}


@pytest.mark.parametrize("stack", STACKS)
def test_router_and_lws_objects_are_in_the_plan(plans, stack):
    plan = rendered(plans[stack])
    router = objects(plan, "router-chart")
    expected = {("Deployment", "kimi-k3-1-epp"), ("Service", "kimi-k3-1-epp"), ("InferencePool", "kimi-k3-1")}
    assert expected <= set(router)
    assert router[("Service", "kimi-k3-1-epp")]["metadata"]["namespace"] == "kimi-k3-1"
    lws = objects(plan, "platform-lws")
    assert ("Deployment", "platform-lws-controller-manager") in lws
    crds = (plan.folder / "crds.yaml").read_text()
    assert "name: leaderworkersets.leaderworkerset.x-k8s.io" in crds
    # Chart v4 registers each object as a child of the chart, on the chart's provider.
    child = next(r for r in plan.resources if r["name"] == "router-chart:Deployment:kimi-k3-1/kimi-k3-1-epp")
    assert child["parent"] == "router-chart" and child["options"]["provider"] == "cluster-k8s"


def test_dra_driver_objects_are_on_gpu_only(gpu, tpu):
    plan = rendered(gpu)
    driver = objects(plan, "gpu-devices-dra-driver")
    assert {("DaemonSet", "nvidia-dra-driver-gpu-kubelet-plugin"), ("Deployment", "nvidia-dra-driver-gpu-controller"),
            ("DeviceClass", "compute-domain-default-channel.nvidia.com")} <= set(driver)
    assert "name: computedomains.resource.nvidia.com" in (plan.folder / "crds.yaml").read_text()
    assert not [c for c in tpu.charts if c["resource"] == "gpu-devices-dra-driver"]


def test_gateway_mode_renders_the_gateway_chart(variants):
    plan = rendered(variants["gateway"])
    router = objects(plan, "router-chart")
    assert ("InferencePool", "kimi-k3-1") in router
    own = {m["kind"] for m in plan.program_manifests}
    assert {"HTTPRoute", "HealthCheckPolicy", "GCPBackendPolicy"} <= own, "the program makes these itself"
    assert not {m["kind"] for m in router.values()} & {"HTTPRoute", "HealthCheckPolicy", "GCPBackendPolicy"}


@pytest.mark.parametrize("stack", STACKS)
def test_chart_index_matches_manifests(plans, stack):
    plan = rendered(plans[stack])
    for chart in plan.charts:
        assert chart["contentSha256"] and len(chart["objects"]) == len(plan.chart_manifests(chart["resource"]))
    assert "chart router-chart: llm-d-router-standalone v0.10.0:" in plan.summary


@pytest.mark.parametrize("stack", STACKS)
def test_chart_secrets_are_masked(plans, stack):
    secrets = [r for r in rendered(plans[stack]).resources
               if r["type"] == "kubernetes:core/v1:Secret" and r.get("parent") == "platform-lws"]
    assert secrets and all(v == "[secret]" for s in secrets for v in (s["inputs"].get("data") or {}).values())


# --------------------------------------------------------------------------- values the charts read
def _leaves(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, path + (key,))
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, item in enumerate(value):
            yield from _leaves(item, path + (i,))
    elif path:
        yield path, value


def _mutated(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "9"
    if isinstance(value, list):
        return [*value, "probe"]
    return {"probe": "probe"}


def unread_values(entry: dict[str, Any]) -> list[str]:
    """Value paths whose change leaves the rendered chart identical: the chart never reads them (none of these
    charts has a values schema that would reject them). A change that makes rendering fail counts as read."""
    from helm_python import HelmError

    inputs = entry["inputs"]
    source = helm_render.find_source(inputs["chart"], inputs["version"])
    release, namespace = inputs.get("name") or entry["name"], inputs["namespace"]

    def render(values: dict[str, Any]) -> Any:
        return helm_render._render_cached(source.folder, json.dumps(values, sort_keys=True), release, namespace)

    base = render(inputs["values"])
    unread = []
    for path, value in _leaves(inputs["values"]):
        values = copy.deepcopy(inputs["values"])
        holder = values
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = _mutated(value)
        try:
            if render(values) == base:
                unread.append(".".join(map(str, path)))
        except HelmError:
            continue
    return unread


@pytest.mark.parametrize("stack", [*STACKS, "gateway", "quiet", "gpu-pinned"])
def test_every_value_passed_to_a_chart_is_read(plans, variants, stack):
    plan = rendered(plans[stack] if stack in STACKS else variants[stack])
    unread = {c["name"]: unread_values(c) for c in plan.of_type(CHART)}
    assert not {k: v for k, v in unread.items() if v}


def test_unread_value_check_finds_an_unread_value(gpu):
    entry = copy.deepcopy(rendered(gpu).one(CHART, "router-chart"))
    entry["inputs"]["values"]["router"]["monitoring"]["interval"] = "10s"  # read only by the chart's scrape object
    entry["inputs"]["values"]["router"]["epp"]["replicaz"] = 2
    assert unread_values(entry) == ["router.epp.replicaz", "router.monitoring.interval"]


# --------------------------------------------------------------------------- engine behaviour
def write_chart(folder: Path) -> Path:
    (folder / "templates").mkdir(parents=True)
    (folder / "crds").mkdir()
    (folder / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 1.0.0\n")
    (folder / "values.yaml").write_text("size: 1\n")
    (folder / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n"
        "data:\n  size: '{{ .Values.size }}'\n")
    (folder / "templates" / "hook.yaml").write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: hook\n  annotations:\n    helm.sh/hook: pre-install\n"
        "spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: c, image: x}]\n")
    (folder / "templates" / "NOTES.txt").write_text("thanks\n")
    (folder / "crds" / "probe.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: probes.example.com\n")
    return folder


def test_hooks_are_dropped_and_namespaces_defaulted(tmp_path):
    folder = write_chart(tmp_path / "probe")
    found = helm_render.render_templates(folder, {"size": 3}, "rel", "ns")
    assert [(o["kind"], o["metadata"]["name"], o["metadata"]["namespace"], o["data"]["size"]) for o in found] == [
        ("ConfigMap", "rel-cm", "ns", "3")]
    assert [c["name"] for c in helm_render._load(folder).crds] == ["crds/probe.yaml"]


def test_chart_that_fails_to_render_stops_the_plan(monkeypatch, shared):
    """A required value missing: the real engine's `required` fails, and so does the plan."""
    monkeypatch.setenv("KIMI_CHARTS_DIR", str(shared / "charts"))
    entry = {"name": "router-chart", "inputs": {
        "chart": "oci://ghcr.io/llm-d/charts/llm-d-router-standalone", "version": "v0.10.0", "name": "kimi-k3-1",
        "namespace": "kimi-k3-1", "values": {}}}
    with pytest.raises(helm_render.ChartError, match="matchLabels is required"):
        helm_render.render_chart(entry)


def test_changed_chart_copy_is_refused(tmp_path, monkeypatch, shared):
    copy_dir = tmp_path / "charts" / "nvidia-dra-driver-gpu"
    shutil.copytree(shared / "charts" / "nvidia-dra-driver-gpu", copy_dir)
    (copy_dir / "values.yaml").write_text((copy_dir / "values.yaml").read_text() + "\n# edited\n")
    monkeypatch.setenv("KIMI_CHARTS_DIR", str(tmp_path / "charts"))
    helm_render.find_source.cache_clear()
    try:
        with pytest.raises(helm_render.ChartError, match="content digest"):
            helm_render.find_source("nvidia-dra-driver-gpu", "25.8.0")
    finally:
        helm_render.find_source.cache_clear()


def test_missing_chart_is_reported_with_a_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(helm_render, "search_roots", lambda: [tmp_path])
    helm_render.find_source.cache_clear()
    try:
        result = helm_render.render_chart({"name": "platform-lws", "inputs": {
            "chart": "oci://registry.k8s.io/lws/charts/lws", "version": "0.11.1", "namespace": "lws-system"}})
    finally:
        helm_render.find_source.cache_clear()
    assert result.skipped.startswith("no copy of lws 0.11.1 found") and not result.objects


def test_fetched_archive_is_checked_against_the_recorded_digest(tmp_path, shared):
    """The registry path: an archive is unpacked only if its files hash to the recorded digest."""
    import helm_python

    ref = helm_render.pinned_charts()["nvidia-dra-driver-gpu"]
    good = Path(helm_python.package(shared / "charts" / "nvidia-dra-driver-gpu", destination=tmp_path / "pkg"))
    assert helm_render.install_archive(good.read_bytes(), ref, tmp_path / "out")
    assert (tmp_path / "out" / "nvidia-dra-driver-gpu" / "Chart.yaml").is_file()
    edited = tmp_path / "edited" / "nvidia-dra-driver-gpu"
    shutil.copytree(shared / "charts" / "nvidia-dra-driver-gpu", edited)
    (edited / "values.yaml").write_text("image: {}\n")
    bad = Path(helm_python.package(edited, destination=tmp_path / "pkg2"))
    assert not helm_render.install_archive(bad.read_bytes(), ref, tmp_path / "out2")


def test_every_pinned_chart_has_a_digest():
    assert all(len(ref.content_sha256) == 64 for ref in helm_render.pinned_charts().values())


@pytest.mark.parametrize("stack", STACKS)
def test_chart_crds_validate_strictly(plans, stack):
    """crds.yaml holds the charts' CRDs verbatim; each is a valid CustomResourceDefinition."""
    import kubernetes_validate

    from tests import schemas

    text = (rendered(plans[stack]).folder / "crds.yaml").read_text()
    docs = [d for d in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d]
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, schemas.KUBERNETES_VERSION, strict=True)

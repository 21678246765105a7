"""The scheduling proof (tools/preview/scheduling.py): every pod of both stacks fits, and each rule can fail."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from components.facts import machines
from tests.conftest import SGLANG_IMAGE, STACKS, Plan
from tests.conftest import rendered as with_charts
from tools.preview import helm_render, scheduling


def run(plan: Plan, manifests: list[dict[str, Any]] | None = None, resources: list[dict[str, Any]] | None = None):
    return scheduling.check(resources or plan.resources, manifests if manifests is not None else plan.manifests)


def find(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name)


@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_of_the_stack_fits(plans, stack):
    plan = with_charts(plans[stack])
    report = run(plan)
    assert not report.failures
    assert "scheduling: every pod fits its node pool" in plan.summary
    assert "system (2 x n2-standard-8): allocatable/node cpu 7.91" in plan.summary


@pytest.mark.parametrize("name", ["gateway", "gpu2", "bench", "sglang", "spec"])
def test_every_variant_fits(variants, name):
    assert not run(with_charts(variants[name])).failures


def test_a_pod_too_big_for_every_pool_fails_naming_it(gpu):
    manifests = copy.deepcopy(with_charts(gpu).manifests)
    epp = find(manifests, "Deployment", "kimi-k3-1-epp")
    epp["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "64"
    [failure] = run(gpu, manifests).failures
    assert failure.startswith("pod Deployment kimi-k3-1/kimi-k3-1-epp fits no node pool: requests cpu 68, memory")
    assert "closest pool weights-transfer" not in failure  # tainted for the transfer Job
    assert "closest pool system (n2-standard-8) allocatable cpu 7.91" in failure


def test_plan_fails_naming_the_pod(tmp_path, gpu):
    """End to end: a system pool of n2-standard-4 cannot hold the router pod; the plan stops naming it."""
    from tests.conftest import run_plan, stack_document, write_stack

    with_charts(gpu)
    config = dict(stack_document("gpu")["config"])
    config["kimi-k3-1:systemPool.machineType"] = "n2-standard-4"
    proc = run_plan(tmp_path / "out", "--stack-file", str(write_stack(tmp_path, "small", config)))
    assert proc.returncode != 0 and not (tmp_path / "out" / "small").exists()
    assert ("scheduling: pod Deployment kimi-k3-1/kimi-k3-1-epp fits no node pool: requests cpu 6, memory 10.0Gi; "
            "closest pool system (n2-standard-4) allocatable cpu 3.92") in proc.stderr


def test_upstream_proxy_resources_would_not_fit(gpu):
    """The regression this check found: the standalone chart's default Envoy resources (4 CPU, 8Gi, as the EPP)
    make the router pod request 8 CPU, above an n2-standard-8 node's allocatable."""
    plan = with_charts(gpu)
    entry = copy.deepcopy(plan.one(helm_render.CHART_TYPE, "router-chart"))
    del entry["inputs"]["values"]["router"]["proxy"]
    rendered = helm_render.render_chart(entry)
    others = [m for m, c in zip(plan.manifests, plan.manifest_charts, strict=True) if c != "router-chart"]
    manifests = others + rendered.objects
    [failure] = run(plan, manifests).failures
    assert "pod Deployment kimi-k3-1/kimi-k3-1-epp fits no node pool: requests cpu 8, memory 16.0Gi" in failure
    assert "cpu 8 > 7.91 allocatable" in failure


def test_replicas_needing_whole_nodes_cannot_outnumber_the_nodes(gpu):
    manifests = copy.deepcopy(with_charts(gpu).manifests)
    # The autoscaler may take a role to its ScaledObject's maximum: one more than the rack holds does not fit.
    scaled = next(m for m in manifests if m["kind"] == "ScaledObject" and m["metadata"]["name"].endswith("prefill"))
    scaled["spec"]["maxReplicaCount"] += 1
    [failure] = run(gpu, manifests).failures
    assert "replicas" in failure and "find no node with room left in a4x-max-nvl72-0 (16 nodes)" in failure


def test_vllm_pod_must_tolerate_the_arm_taint(gpu):
    manifests = copy.deepcopy(with_charts(gpu).manifests)
    dset = next(m for m in manifests if m["kind"] == "DisaggregatedSet")
    spec = dset["spec"]["roles"][1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    spec["tolerations"] = [t for t in spec["tolerations"] if t["key"] != "kubernetes.io/arch"]
    failures = run(gpu, manifests).failures
    assert failures and "taint kubernetes.io/arch=arm64:NoSchedule not tolerated" in failures[0]


def test_dra_claims_need_their_driver_on_the_pool(gpu):
    manifests = copy.deepcopy(with_charts(gpu).manifests)
    plugin = find(manifests, "DaemonSet", "nvidia-dra-driver-gpu-kubelet-plugin")
    plugin["spec"]["template"]["spec"]["tolerations"] = []  # can no longer land on the GPU nodes
    failures = run(gpu, manifests).failures
    assert failures and "the nvidia-dra-driver-gpu-kubelet-plugin DaemonSet does not run on this pool" in failures[0]
    resources = copy.deepcopy(gpu.resources)
    pool = next(r for r in resources if r["name"] == "gpu-0")
    pool["inputs"]["nodeConfig"]["labels"].pop("cloud.google.com/gke-networking-dra-driver")
    failures = run(gpu, resources=resources).failures
    assert failures
    assert "mrdma.google.com needs pool label cloud.google.com/gke-networking-dra-driver=true" in failures[0]


def test_daemonsets_and_serving_pod_share_a_node(gpu):
    manifests = copy.deepcopy(with_charts(gpu).manifests)
    asapd = find(manifests, "DaemonSet", "asapd-lite")
    for key in ("requests", "limits"):
        asapd["spec"]["template"]["spec"]["containers"][0]["resources"][key]["memory"] = "300Gi"
    failures = run(gpu, manifests).failures
    assert failures and all("a4x-max-nvl72" in f for f in failures)


def test_node_selector_must_match_gke_labels(tpu):
    manifests = copy.deepcopy(with_charts(tpu).manifests)
    lws = next(m for m in manifests if m["kind"] == "LeaderWorkerSet")
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["nodeSelector"][
        "cloud.google.com/gke-tpu-topology"] = "4x4x4"
    failures = run(tpu, manifests).failures
    assert failures
    assert "nodeSelector cloud.google.com/gke-tpu-topology=4x4x4 not on the pool (has 2x2x4)" in failures[0]


def test_effective_requests_count_init_containers_sidecars_and_overhead():
    spec = {
        "initContainers": [
            {"name": "setup", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}},
            {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "late-init", "resources": {"requests": {"cpu": "2"}}},
        ],
        "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}}}],
        "overhead": {"cpu": "250m"},
    }
    requests = scheduling.effective_requests(spec)
    # cpu: max(app 1 + sidecar 0.5, setup 3, sidecar 0.5 + late-init 2) + overhead 0.25
    assert requests["cpu"] == 3250
    # memory: app's limit stands in for its request; max(2Gi + 1Gi, 1Gi, 1Gi)
    assert requests["memory"] == 3 * 2**30


def test_quantities():
    assert scheduling.quantity("500m") == 0.5 and scheduling.quantity("8Gi") == 8 * 2**30
    assert scheduling.quantity(4) == 4 and scheduling.quantity("1e3") == 1000 and scheduling.quantity("2k") == 2000
    with pytest.raises(scheduling.SchedulingError):
        scheduling.quantity("lots")


def test_allocatable_follows_gke_reservations():
    n2 = machines.allocatable(machines.MACHINES["n2-standard-8"])
    # CPU: 60m + 10m + 2 x 5m + 4 x 2.5m = 90m reserved of 8000m.
    assert n2.cpu_milli == 7910
    memory = 32 * 10**9
    reserved = 0.25 * 4 * 2**30 + 0.20 * 4 * 2**30 + 0.10 * 8 * 2**30 + 0.06 * (memory - 16 * 2**30)
    assert abs(n2.memory_bytes - (memory - reserved - 100 * 2**20)) < 2
    a4x = machines.allocatable(machines.MACHINES["a4x-maxgpu-4g-metal"], hugepages_2m=4096)
    assert a4x.extended == {"nvidia.com/gpu": 4, "hugepages-2Mi": 8 * 2**30}
    assert machines.reserved_memory_bytes(512 * 2**20) == 255 * 2**20


def test_tolerations_follow_kubernetes_rules():
    taint = ("nvidia.com/gpu", "present", "NoSchedule")
    assert scheduling.tolerates([{"key": "nvidia.com/gpu", "operator": "Exists"}], taint)
    assert scheduling.tolerates([{"operator": "Exists"}], taint)
    assert scheduling.tolerates([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                                  "effect": "NoSchedule"}], taint)
    assert not scheduling.tolerates([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}], taint)
    assert not scheduling.tolerates([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], taint)


def test_claims_on_an_unrendered_chart_are_noted_not_failed(gpu):
    plan = with_charts(gpu)
    others = [m for m, c in zip(plan.manifests, plan.manifest_charts, strict=True) if c != "gpu-devices-dra-driver"]
    assert run(plan, others).failures, "without the driver's objects the claims cannot be served"
    report = scheduling.check(plan.resources, others, unrendered=("gpu-devices-dra-driver",))
    assert not report.failures
    assert any("claim compute-domain-channel (compute-domain-default-channel.nvidia.com) not checked" in n
               for n in report.notes)


def test_plan_without_charts_says_so(tmp_path, monkeypatch):
    """No chart copy anywhere: the plan still renders, and its summary and charts.json say what is missing."""
    import os

    from tests import plan_server
    from tests.conftest import fixture_stack

    monkeypatch.setenv("KIMI_SHARED_DIR", str(tmp_path / "nothing"))
    monkeypatch.delenv("KIMI_CHARTS_DIR", raising=False)
    if helm_render.FETCH_DIR.is_dir():
        pytest.skip(f"{helm_render.FETCH_DIR} holds fetched charts")
    # Forked from the session's preloaded plan process, with this environment (charts are looked for at render time).
    proc = plan_server.run(["--out", str(tmp_path / "out"), "--stack-file", str(fixture_stack("gpu"))],
                           dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    # What `make plan` prints last: the charts missing and the one command that gets them.
    assert proc.stdout.splitlines()[-1] == (
        "chart objects missing from the plan: no verified copy of keda 2.20.2, llm-d-router-standalone v0.10.0, "
        "lws 0.11.1, "
        "nvidia-dra-driver-gpu 25.8.0, so their objects are not in it and not checked; run `make charts` "
        "(.venv/bin/python -m tools charts --fetch) to pull the pinned charts, or set KIMI_CHARTS_DIR to a "
        "folder holding them")
    plan = Plan(tmp_path / "out" / "gpu")
    assert all(c["skipped"].startswith("no copy of") for c in plan.charts)
    assert "chart router-chart: llm-d-router-standalone v0.10.0: not rendered: no copy of" in plan.summary
    assert "charts not rendered (platform-lws, autoscaler-keda, router-chart, gpu-devices-dra-driver)" in plan.summary
    assert not plan.chart_manifests() and (plan.folder / "crds.yaml").read_text() == ""


# --------------------------------------------------------------------------- image architectures
GPU_POOL = "a4x-max-nvl72-0"


def vllm_pods(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pod specs of the GPU model servers (every DisaggregatedSet role's leader and worker templates)."""
    specs = []
    for m in manifests:
        if m["kind"] == "DisaggregatedSet":
            for role in m["spec"]["roles"]:
                template = role["spec"]["leaderWorkerTemplate"]
                specs += [t["spec"] for t in (template.get("leaderTemplate"), template["workerTemplate"]) if t]
    return specs


@pytest.mark.parametrize("stack", STACKS)
def test_every_container_image_has_recorded_architectures(plans, stack):
    """Every image both stacks run, chart pods included, is one components/plan/images.py records with sources, and
    the check found nothing unrecorded to note."""
    from components.plan import images

    plan = with_charts(plans[stack])
    seen = set()
    for group in scheduling.pod_groups(plan.manifests):
        for container in [*(group.spec.get("initContainers") or []), *group.spec["containers"]]:
            name, _ = images.by_reference(container["image"])
            assert name, f"{group.owner}: {container['image']} is not in components/plan/images.py"
            seen.add(name)
    assert not [n for n in run(plan).notes if "has no architectures" in n]
    assert all(images.IMAGES[n].architectures and "https://" in images.IMAGES[n].evidence for n in seen)
    if stack == "gpu":
        assert {"vllm", "routing-sidecar", "dra-driver", "asapd-lite"} <= seen


def test_images_on_the_gpu_pool_publish_arm64(gpu):
    """What the check enforces, stated directly: every image a pod can land on the Grace pool with has arm64."""
    from components.plan import images

    plan = with_charts(gpu)
    [pool] = [p for p in scheduling.pools_of(plan.resources) if p.name == GPU_POOL]
    assert pool.labels["kubernetes.io/arch"] == "arm64"
    on_gpu = {images.by_reference(c["image"])[0]
              for g in scheduling.pod_groups(plan.manifests) if not scheduling.placement_problems(g.spec, pool)
              for c in [*(g.spec.get("initContainers") or []), *g.spec["containers"]]}
    assert on_gpu == {"vllm", "routing-sidecar", "dra-driver", "asapd-lite"}
    assert all("arm64" in images.IMAGES[n].architectures for n in on_gpu)


def test_an_amd64_only_image_on_the_gpu_pods_fails_the_plan_with_one_line(tmp_path):
    """End to end through the real program: pin the GPU model server to an image recorded amd64-only
    (inference-perf's release builds linux/amd64 only) and the stack's plan stops with one line naming the pod,
    the image and the pool."""
    import os

    from tests import plan_server
    from tests.conftest import fixture_stack

    proc = plan_server.run([str(fixture_stack("gpu"))], dict(os.environ), "tests.swapped_image_render")
    assert proc.returncode == 3 and not proc.stdout
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: scheduling: pod ")
    assert "pod DisaggregatedSet kimi-k3-1/kimi-k3-1-vllm role " in line
    assert re.search(r"container vllm image quay\.io/inference-perf/inference-perf:v0\.7\.0@sha256:[0-9a-f]{64} can ",
                     line), line
    assert ("can land on pool a4x-max-nvl72-0 (a4x-maxgpu-4g-metal, arm64) but the image publishes linux/amd64 only "
            "(components/plan/images.py 'vllm')") in line
    # The engine image pre-pull (components/serving/prepull.py) holds the same image on the same nodes.
    assert "pod DaemonSet kimi-k3-1/kimi-k3-1-engine-image-prepull container hold image " in line
    assert line.count("| pod ") == 2  # prefill, decode and the pre-pull: one failure each, nothing else


def test_a_wrong_digest_for_the_gpu_pods_is_refused(gpu, monkeypatch):
    """A digest recorded as another tag's, or as another platform's manifest, cannot pass; the tag's index
    and the arm64 manifest can."""
    import dataclasses

    from components.plan import images

    manifests = copy.deepcopy(gpu.manifests)
    specs = vllm_pods(manifests)
    arm64_of_030 = "sha256:4864d46625cbc3307623e29ac742030655e27249feba7b97ec925ce4cc4dfb56"

    def with_vllm_digest(value: str) -> list[str]:
        for spec in specs:
            for c in spec["containers"]:
                if c["name"] == "vllm":
                    c["image"] = f"{images.IMAGES['vllm'].reference}@{value}"
        return [f for f in run(gpu, manifests).failures if "image docker.io/vllm" in f]

    wrong_tag = with_vllm_digest(arm64_of_030)
    assert len(wrong_tag) == 2 and all(
        f"its digest {arm64_of_030} is the linux/arm64 manifest of tag v0.30.0, not of the pinned v0.33.0" in f
        for f in wrong_tag)
    amd64_manifest, index, arm64_manifest = (f"sha256:{c * 64}" for c in "123")
    facts = tuple(images.KnownDigest(d, "v0.33.0", p, "test fact") for d, p in
                  ((amd64_manifest, images.AMD64), (index, images.INDEX), (arm64_manifest, images.ARM64)))
    monkeypatch.setitem(images.IMAGES, "vllm", dataclasses.replace(images.IMAGES["vllm"], known_digests=facts))
    [one, _] = with_vllm_digest(amd64_manifest)
    assert f"pool {GPU_POOL} (a4x-maxgpu-4g-metal, arm64) but its digest {amd64_manifest} is the linux/amd64 " \
           "manifest of v0.33.0, not runnable on linux/arm64 (test fact)" in one
    assert with_vllm_digest(index) == [] and with_vllm_digest(arm64_manifest) == []
    assert with_vllm_digest("sha256:" + "f" * 64) == []  # unknown offline: the registry decides at pull time


def test_an_image_not_pinned_here_is_noted_not_failed(tpu, variants):
    """An SGLang-TorchTPU image is the user's own: no architecture is known offline, so the summary says it is not
    checked rather than passing it silently."""
    report = run(variants["sglang"])
    assert not report.failures
    assert any(f"image {SGLANG_IMAGE} has no architectures in components/plan/images.py; "
               "not checked against pool tpu7x-2x2x4-0 (amd64)" in n for n in report.notes)


def test_autoscaled_sets_are_proved_at_their_maximum():
    """A ScaledObject may take its target up to maxReplicaCount: the proof places that many, on GPU through the
    role's DisaggregatedSetRoleScaler `<set>-<role>`, on TPU the LeaderWorkerSet itself."""
    from tools.preview.scheduling import at_maximum

    ds = {"kind": "DisaggregatedSet", "metadata": {"name": "s", "namespace": "n"},
          "spec": {"roles": [{"name": "prefill", "scaling": {"mode": "External"}, "spec": {}},
                             {"name": "decode", "scaling": {"mode": "External"}, "spec": {}}]}}
    lws = {"kind": "LeaderWorkerSet", "metadata": {"name": "t", "namespace": "n"}, "spec": {"replicas": 1}}

    def scaled(kind: str, name: str, top: int) -> dict:
        return {"kind": "ScaledObject", "metadata": {"name": name, "namespace": "n"},
                "spec": {"scaleTargetRef": {"kind": kind, "name": name}, "maxReplicaCount": top}}

    out = at_maximum([ds, lws, scaled("DisaggregatedSetRoleScaler", "s-prefill", 3),
                      scaled("DisaggregatedSetRoleScaler", "s-decode", 2), scaled("LeaderWorkerSet", "t", 4)])
    assert [r["spec"]["replicas"] for r in out[0]["spec"]["roles"]] == [3, 2]
    assert out[1]["spec"]["replicas"] == 4
    assert at_maximum([lws]) == [lws] and "replicas" not in ds["spec"]["roles"][0]["spec"]

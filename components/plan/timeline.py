"""Time to serving on a first `pulumi up`, computed from the program's own dependency graph: every resource
starts when everything it depends on (and everything its parents depend on) has finished, and takes the
duration below. The longest chain ending at the serving set is the critical path; the bound is what the
physics of the deployment needs (cluster, then the accelerator pools alongside staging and hydration, then
the load), with the same durations. A ratio above 1 means something waits on what it does not need.

Durations are assumptions unless a figure below names its source; the data-path ones (staging, hydration,
load) come from components.staging/capacity and components.plan.loading, the same code the pods are sized with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import StackConfig
from . import loading, staging

SERVING_TYPES = ("kubernetes:disaggregatedset.x-k8s.io/v1:DisaggregatedSet",
                 "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
"""The resources whose readiness is "serving": pulumi-kubernetes waits for their ready replicas."""
TARGET_RATIO = 1.05


@dataclass(frozen=True)
class Step:
    seconds: float
    basis: str


# Assumptions: Google publishes no creation times for these; the figures are typical orders of magnitude.
API_ENABLE = Step(60, "assumption: enabling a Google API")
GCP_OBJECT = Step(15, "assumption: a network, IAM, bucket or monitoring object")
K8S_OBJECT = Step(2, "assumption: one Kubernetes API call")
CLUSTER = Step(600, "assumption: a regional GKE Standard control plane")
CPU_POOL = Step(240, "assumption: a small CPU node pool")
GPU_POOL = Step(1200, "assumption: 16-18 bare-metal A4X Max nodes in one NVL72 sub-block (not published)")
TPU_POOL = Step(900, "assumption: one multi-host Ironwood slice node pool (not published)")
CHART = Step(120, "assumption: a Helm chart until its workloads are ready")


def staging_plan(cfg: StackConfig) -> tuple[int, float, float]:
    """(pods, aggregate bytes/s, seconds) of the Hub -> bucket copy on a first run: the copier's own model
    (components.plan.staging.staging_model, which names the source of each figure)."""
    model = staging.staging_model(cfg)
    return model.pods, model.aggregate_mbps * 1e6, model.seconds


def staging_step(cfg: StackConfig) -> Step:
    pods, rate, seconds = staging_plan(cfg)
    return Step(seconds, f"staging.staging_model: {pods} pod(s) at {rate / 1e9:.2f} GB/s, first run (bucket empty)")


def hydration_step(cfg: StackConfig) -> Step:
    return Step(loading.hydration_s(cfg), "loading.hydration_s: one transfer Job at one node's read limit")


def serving_step(cfg: StackConfig) -> Step:
    """The serving set's own start once it is created: weight load and engine start (the image pull is handled
    apart, since a pre-pull DaemonSet can take it off the path; no pod installs anything at start)."""
    model = loading.load_model(cfg)
    seconds = model.load_s + loading.ENGINE_START_S[cfg.track]
    return Step(seconds, f"weight load {model.load_s / 60:.1f} min (loading.load_model) + engine start "
                         f"{loading.ENGINE_START_S[cfg.track] // 60} min (assumed)")


def image_pull_step(cfg: StackConfig) -> Step:
    """The engine image onto a fresh node: each TPU host pulls the stack's build (all hosts at once), from its size."""
    built = loading.engine_image(cfg)
    if built is None:
        return Step(loading.IMAGE_PULL_S, "assumption: the engine image onto a fresh node")
    return Step(built.pull_s, f"loading.engine_image: {built.image_bytes / 1e9:.2f} GB per host at "
                              f"{loading.NODE_PULL_BYTES_PER_S / 1e6:.0f} MB/s + unpack (assumed)")


def build_step(cfg: StackConfig) -> Step:
    """The TPU engine image's Cloud Build (components/serving/engineimage.py), from the lock's size."""
    built = loading.engine_image(cfg)
    if built is None:
        return GCP_OBJECT
    return Step(built.build_s, f"loading.engine_image: {built.wheel_bytes / 1e9:.2f} GB of wheels downloaded, "
                               f"installed and pushed as a {built.image_bytes / 1e9:.2f} GB image (assumed rates)")


BUILD_TYPE = "command:local:Command"
PREPULL_TYPE = "kubernetes:apps/v1:DaemonSet"
PREPULL_SUFFIX = "-prepull-ds"


def _is_accelerator_pool(resource: dict[str, Any]) -> bool:
    config = resource.get("inputs", {}).get("nodeConfig", {}) or {}
    return bool(config.get("guestAccelerators")) or str(config.get("machineType", "")).startswith(("a4x", "tpu"))


def step(cfg: StackConfig, resource: dict[str, Any]) -> Step:
    """Duration of one resource of resources.json."""
    kind = resource["type"]
    if kind.startswith(("kimi:", "pulumi:providers:")) or kind.startswith("pulumi-python:dynamic"):
        return Step(0, "component or provider")
    if kind == BUILD_TYPE:
        return build_step(cfg)
    if kind == "gcp:projects/service:Service":
        return API_ENABLE
    if kind == "gcp:container/cluster:Cluster":
        return CLUSTER
    if kind == "gcp:container/nodePool:NodePool":
        if not _is_accelerator_pool(resource):
            return CPU_POOL
        return GPU_POOL if cfg.track == "gpu" else TPU_POOL
    if kind == "kubernetes:batch/v1:Job" and resource["name"].startswith("weights-staging"):
        return staging_step(cfg)
    if kind == "kubernetes:core/v1:PersistentVolumeClaim":
        return hydration_step(cfg)
    if kind in SERVING_TYPES:
        return serving_step(cfg)
    if kind == "kubernetes:helm.sh/v4:Chart":
        return CHART
    if kind.startswith("kubernetes:"):
        return K8S_OBJECT
    return GCP_OBJECT


@dataclass(frozen=True)
class CriticalPath:
    serving_s: float
    path: tuple[tuple[str, float], ...]
    """(resource, seconds it takes) along the longest chain, first to last, steps of 0 s left out."""
    bound_s: float
    bound_terms: str

    @property
    def ratio(self) -> float:
        return self.serving_s / self.bound_s


def finish_times(resources: list[dict[str, Any]],
                 duration: Callable[[dict[str, Any], float, dict[str, float]], float]
                 ) -> tuple[dict[str, float], dict[str, str | None]]:
    """Finish time of every resource and the predecessor that decided it (None when it starts at 0).
    `duration(resource, start, finish so far)` may depend on when things it waits for finished."""
    by_name = {r["name"]: r for r in resources}
    children: dict[str, list[str]] = {}
    for r in resources:
        if r.get("parent"):
            children.setdefault(r["parent"], []).append(r["name"])

    def waits_for(name: str) -> set[str]:
        found: set[str] = set()
        current: str | None = name
        while current:
            found.update(d for d in by_name[current]["dependsOn"] if d in by_name)
            current = by_name[current].get("parent")
        return found

    finish: dict[str, float] = {}
    before: dict[str, str | None] = {}

    def visit(name: str) -> float:
        if name in finish:
            return finish[name]
        finish[name] = float("nan")  # guards against a cycle, which the engine would reject anyway
        start, prev = 0.0, None
        for dep in sorted(waits_for(name)):
            t = visit(dep)
            if t > start:
                start, prev = t, dep
        end = start + duration(by_name[name], start, finish)
        for child in children.get(name, ()):
            t = visit(child)
            if t > end:
                end, prev = t, child
        finish[name], before[name] = end, prev
        return end

    for name in by_name:
        visit(name)
    return finish, before


def critical_path(cfg: StackConfig, resources: list[dict[str, Any]]) -> CriticalPath:
    by_name = {r["name"]: r for r in resources}
    pools = [r for r in resources if r["type"] == "gcp:container/nodePool:NodePool" and _is_accelerator_pool(r)]
    prepulled = any(r["type"] == PREPULL_TYPE and r["name"].endswith(PREPULL_SUFFIX) for r in resources)
    pull = image_pull_step(cfg).seconds

    def pull_left(start: float, finish: dict[str, float]) -> float:
        """Image pull still to do when the serving set is created: all of it, or with a pre-pull DaemonSet
        what is left of the pull that began when the last accelerator pool came up."""
        if not prepulled:
            return pull
        ready = max([finish[p["name"]] for p in pools] + [finish[b] for b in builds])
        return max(0.0, ready + pull - start)

    def duration(r: dict[str, Any], start: float, finish: dict[str, float]) -> float:
        seconds = step(cfg, r).seconds
        return seconds + pull_left(start, finish) if r["type"] in SERVING_TYPES else seconds

    builds = [r["name"] for r in resources if r["type"] == BUILD_TYPE]
    finish, before = finish_times(resources, duration)
    servers = [r["name"] for r in resources if r["type"] in SERVING_TYPES]
    end = max(servers, key=lambda n: finish[n])
    chain: list[tuple[str, float]] = []
    current: str | None = end
    while current:
        start = max([finish[d] for d in by_name[current]["dependsOn"] if d in finish] or [0.0])
        seconds = duration(by_name[current], start, finish)
        if seconds:
            chain.append((current, seconds))
        current = before[current]
    chain.reverse()
    # The bound: the cluster as the graph builds it (APIs, network, identity are all it needs), then the
    # slowest of the accelerator pools and the data path (system pool, staging, hydration, which also needs
    # the transfer pool), then the serving set's own start.
    cluster = max(finish[r["name"]] for r in resources if r["type"] == "gcp:container/cluster:Cluster")
    build = max([build_step(cfg).seconds] if builds else [0.0])
    accelerators = max([step(cfg, r).seconds for r in pools] + [build]) + pull
    data = CPU_POOL.seconds + staging_step(cfg).seconds + hydration_step(cfg).seconds
    serve = serving_step(cfg).seconds
    bound = cluster + max(accelerators, data) + serve
    terms = (f"cluster {cluster / 60:.1f} + max(accelerator pool + image pull {accelerators / 60:.1f}, system pool "
             f"+ staging + hydration {data / 60:.1f}) + load and engine start {serve / 60:.1f}")
    return CriticalPath(finish[end], tuple(chain), bound, terms)


def summary_lines(cfg: StackConfig, resources: list[dict[str, Any]]) -> list[str]:
    cp = critical_path(cfg, resources)
    path = " -> ".join(f"{name} {seconds / 60:.1f}" for name, seconds in cp.path)
    pods, rate, seconds = staging_plan(cfg)
    return [f"time to serving (first up, from the dependency graph): {cp.serving_s / 60:.1f} min; bound "
            f"{cp.bound_s / 60:.1f} min = {cp.bound_terms}; ratio {cp.ratio:.3f} (target <= {TARGET_RATIO})",
            f"  staging (bucket empty): {pods} pod(s), {rate / 1e9:.2f} GB/s aggregate, {seconds / 60:.1f} min",
            f"  critical path (min): {path}",
            restart_line(cfg)]


def restart_line(cfg: StackConfig) -> str:
    """A serving group's own start, first and warm (loading.group_start)."""
    g = loading.group_start(cfg)
    return (f"  a serving group's start: first {g.first_s / 60:.1f} min = image pull {g.pull_s / 60:.1f} + weight load "
            f"{g.load_s / 60:.1f} + engine start {g.engine_cold_s / 60:.1f} (compile caches empty); warm restart "
            f"{g.warm_s / 60:.1f} min = weight load {g.load_s / 60:.1f} + engine start "
            f"{g.engine_warm_s / 60:.1f} (a pod "
            f"or group restart, or a group a scale-out adds: image on the node, compile caches on the stack's cache "
            f"bucket; {loading.COLD_COMPILE_S[cfg.track] // 60} min of cold compile assumed, loading.COLD_COMPILE_S)")

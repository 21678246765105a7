"""Autoscaling within the reservation, without Pulumi: which roles scale, their envelope (capacity, sessions, $/h at
the minimum and the maximum, time to add one step), and an offline replay of a load trace through the algorithm the
cluster runs for a KEDA ScaledObject (KEDA feeds its external metric to a HorizontalPodAutoscaler it owns).

What scales: GPU, the prefill and decode roles of the DisaggregatedSet, each through the
DisaggregatedSetRoleScaler the controller creates for a role with `scaling.mode: External` (it exposes /scale); TPU,
the engines (LeaderWorkerSet groups, one per slice, /scale on the LeaderWorkerSet). The accelerator node pools keep
the maximum shape: the reservation bills them whether a pod runs there or not (below), and a scale-up then waits
only for the pod, never for a node.

The figures come from the project's own models: sessions per replica from components.plan.capacity, the load and start
from components.plan.loading, prices from components.plan.cost. Durations not published anywhere are marked ASSUMPTION.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Optional

from ..config import StackConfig
from ..facts import catalog, metrics
from . import capacity, cost, images, loading

# --------------------------------------------------------------------------- the cluster's clock
HPA_SYNC_S = 15
"""kube-controller-manager's HPA resync: `HorizontalPodAutoscalerSyncPeriod` defaults to 15s (kubernetes/kubernetes
pkg/controller/podautoscaler/config/v1alpha1/defaults.go); GKE runs the control plane with it."""
HPA_TOLERANCE = 0.1
"""`HorizontalPodAutoscalerTolerance` default (same file): a usage ratio within 10 % of 1 keeps the replicas."""
KEDA_POLLING_S = 15
"""ScaledObject `spec.pollingInterval` the program sets (llm-d's guides set 15: guides/workload-autoscaling/
keda-epp-queue/optimized-baseline/base/scaledobject.yaml)."""
SCRAPE_S = 30
"""Managed Prometheus scrape interval of the EPP and the engines (components/observe/monitoring.py SCRAPE_INTERVAL)."""
DETECT_S = SCRAPE_S + KEDA_POLLING_S + HPA_SYNC_S
"""Worst case from a change in load to a new desired replica count: one scrape, one KEDA poll, one HPA sync."""
SCHEDULE_S = 30
"""ASSUMPTION: scheduling a group's pods onto held nodes and starting their containers (image already on the node)."""

KV_TARGET = 0.8
"""Share of a replica's full-length sessions (HBM) the autoscaler keeps it at: llm-d's token-aware decode trigger
scales at 0.8 "pods' worth of full KV cache" (guides/workload-autoscaling/keda-epp-token-aware/pd-disaggregation/base/
decode-scaledobject.yaml), and it is the router's own saturation set point (llm-d-router v0.10.0 pkg/epp/framework/
plugins/flowcontrol/saturationdetector/utilization/config.go DefaultKVCacheUtilThreshold 0.8)."""
PREFILL_TARGET = 0.8
"""Share of a prefill group's peak prefill throughput (router.peakPrefillThroughput x its endpoints) it is kept at."""

SESSION_S = 900
"""ASSUMPTION: how long one session holds its slot on a decode group or engine (an agentic session of several turns);
the simulation's closed loop (like the benchmark's concurrency slots) starts a new session when one ends."""
RATE_WINDOW_S = 300
"""The prefill trigger's rate window (`rate(...[5m])` in its query)."""


# --------------------------------------------------------------------------- roles and envelope
@dataclass(frozen=True)
class Role:
    """One scaled role: a ScaledObject's target."""

    name: str
    """`prefill` or `decode` (GPU), `engines` (TPU)."""
    min: int
    max: int
    step: int
    """Replicas one HPA policy period may add or remove (the ScaledObject's Pods policy value)."""
    nodes_per_replica: int
    """Accelerator VMs one replica occupies (GPU nodes of a group; TPU hosts of a slice)."""
    sessions_per_replica: int
    """Full-length sessions one replica holds in HBM (components.plan.capacity); 0 for prefill, which holds none."""
    prefill_tokens_per_s: float
    """Prefill: peak uncached tokens/s of one replica (router.peakPrefillThroughput x endpoints); 0 otherwise."""
    add_s: float
    """Time to add one step: detection + scheduling + weight load + engine start (time_to_add_s)."""

    @property
    def target(self) -> float:
        """The ScaledObject's AverageValue per replica: sessions (decode, engines) or prefill replicas' worth of
        uncached tokens (prefill)."""
        if self.name == "prefill":
            return PREFILL_TARGET
        return KV_TARGET * self.sessions_per_replica


def time_to_add_s(cfg: StackConfig) -> tuple[float, str]:
    """(seconds, terms) from a rise in load to a new replica serving, on a node the pool already holds: detection,
    scheduling, the pod's start (the TPU leader waits in the host rendezvous for its hosts' pulls,
    loading.pod_start_s; GPU images are pre-pulled on every held node), the weight load (the plan's figure with every
    replica reading at once: a bound for a group that loads alone) and the engine's warm start: every role keeps at
    least one replica (config.autoscaling, min >= 1), which filled the stack's compile cache when it first started
    (loading.group_start, components/serving/compilecache.py)."""
    load = loading.load_model(cfg).load_s
    pod = loading.pod_start_s(cfg)
    start = loading.group_start(cfg).engine_warm_s - pod
    total = DETECT_S + SCHEDULE_S + pod + load + start
    terms = (f"detect {DETECT_S} s + schedule {SCHEDULE_S} s" + (f" + pod start {pod:.0f} s" if pod else "")
             + f" + weight load {load / 60:.1f} min + engine start {start / 60:g} min (compile caches warm)")
    return total, terms


def default_roles(cfg: StackConfig) -> tuple[Role, ...]:
    """The roles at their widest: min 1, max the configured shape, step 1 (what the config keys default to)."""
    add, _ = time_to_add_s(cfg)
    if cfg.track == "gpu":
        g = cfg.gpu
        decode = capacity.decode_capacity(cfg)
        prefill = capacity.serving_capacity(cfg)
        rate = capacity.peak_prefill_throughput(cfg) * prefill.endpoints_per_replica
        return (Role("prefill", 1, g.prefillGroups, 1, g.prefillNodesPerGroup, 0, rate, add),
                Role("decode", 1, g.decodeGroups, 1, g.decodeNodesPerGroup, decode.sequences, 0.0, add))
    t = cfg.tpu
    return (Role("engines", 1, t.slices, 1, t.hosts_per_slice, capacity.decode_capacity(cfg).sequences, 0.0, add),)


@dataclass(frozen=True)
class Envelope:
    roles: tuple[Role, ...]
    accelerator_hour_usd: Optional[float]
    """$/h of one accelerator VM (GPU node; TPU host = its chips), None when unpriced."""
    unpriced_key: str
    sessions_min: int
    sessions_max: int
    nodes_min: int
    nodes_max: int
    rest_usd_per_hour: float
    """Everything else of the stack (CPU pools, volume, fees), which does not scale."""

    def usd_per_hour(self, nodes: int) -> Optional[float]:
        if self.accelerator_hour_usd is None:
            return None
        return nodes * self.accelerator_hour_usd + self.rest_usd_per_hour


def accelerator_hour_usd(cfg: StackConfig) -> tuple[Optional[float], str]:
    """($/h of one accelerator VM or None, the config key that prices it), from the cost estimate's own lines."""
    lines = cost.hourly_costs(cfg)
    first = lines[0]
    vms = cfg.gpu.node_count if cfg.track == "gpu" else cfg.tpu.slices * cfg.tpu.hosts_per_slice
    key = "kimi-k3-1:cost.gpuNodeHourUsd" if cfg.track == "gpu" else "kimi-k3-1:cost.tpuChipHourUsd"
    return (None if first.usd_per_hour is None else first.usd_per_hour / vms), key


def envelope(cfg: StackConfig, roles: Optional[Sequence[Role]] = None) -> Envelope:
    roles = tuple(roles or default_roles(cfg))
    price, key = accelerator_hour_usd(cfg)
    rest, _ = cost.total(cost.hourly_costs(cfg)[1:])
    serving = [r for r in roles if r.name != "prefill"]
    slices = capacity.serving_slices(cfg) if cfg.track == "gpu" else 1
    return Envelope(
        roles=roles, accelerator_hour_usd=price, unpriced_key=key,
        sessions_min=slices * sum(r.min * r.sessions_per_replica for r in serving),
        sessions_max=slices * sum(r.max * r.sessions_per_replica for r in serving),
        nodes_min=slices * sum(r.min * r.nodes_per_replica for r in roles),
        nodes_max=slices * sum(r.max * r.nodes_per_replica for r in roles),
        rest_usd_per_hour=rest)


def envelope_lines(cfg: StackConfig, roles: Optional[Sequence[Role]] = None) -> list[str]:
    """The plan summary's autoscaling envelope."""
    env = envelope(cfg, roles)
    add, terms = time_to_add_s(cfg)
    unit = "nodes" if cfg.track == "gpu" else "hosts"

    def price(nodes: int) -> str:
        usd = env.usd_per_hour(nodes)
        return f"unpriced accelerators (set {env.unpriced_key})" if usd is None else f"${usd:,.2f}/h"

    shape = "; ".join(f"{r.name} {r.min}..{r.max} replicas (step {r.step}, {r.nodes_per_replica} {unit} each)"
                      for r in env.roles)
    return [
        f"autoscaling envelope: {shape}",
        f"  at min: {env.nodes_min} accelerator {unit} in use, {env.sessions_min:,} full-length sessions in HBM, "
        f"{price(env.nodes_min)}; at max: {env.nodes_max} {unit}, {env.sessions_max:,} sessions, "
        f"{price(env.nodes_max)} (the reservation bills its VMs either way: what scaling down releases is capacity "
        f"the reservation's other consumers can use)",
        f"  time to add one step: {add / 60:.1f} min = {terms}",
    ]


# --------------------------------------------------------------------------- the HPA, as released
@dataclass(frozen=True)
class Behavior:
    """The HPA `behavior` the ScaledObject passes through `advanced.horizontalPodAutoscalerConfig.behavior`."""

    up_window_s: int
    up_pods: int
    up_period_s: int
    down_window_s: int
    down_pods: int
    down_period_s: int


def behavior(role: Role) -> Behavior:
    """Scale up at once, by up to `max` replicas per sync (what a burst needs arrives in one time-to-add); scale down
    only after the load has stayed low for the whole time to add a step, one step per time-to-add: a replica
    released sooner is one a returning burst would wait for again (stabilisation window and period at least the
    modelled time to add capacity)."""
    window = int(math.ceil(role.add_s / 60) * 60)
    return Behavior(up_window_s=0, up_pods=max(role.max, 1), up_period_s=HPA_SYNC_S,
                    down_window_s=window, down_pods=role.step, down_period_s=window)


def per_pod_replicas(current: int, usage: float, target: float, tolerance: float = HPA_TOLERANCE) -> int:
    """ReplicaCalculator.GetExternalPerPodMetricReplicas (kubernetes/kubernetes pkg/controller/podautoscaler/
    replica_calculator.go), what a KEDA trigger with metricType AverageValue becomes: keep the count while
    |1 - usage / (target x current)| <= tolerance, else ceil(usage / target)."""
    if current > 0 and abs(1.0 - usage / (target * current)) <= tolerance:
        return current
    return math.ceil(usage / target - 1e-9)


class Hpa:
    """HorizontalController's normalisation with behaviors (pkg/controller/podautoscaler/horizontal.go):
    `stabilizeRecommendationWithBehaviors` (the lowest recommendation of the scale-up window / the highest of the
    scale-down window), then `convertDesiredReplicasWithBehaviorRate` with `calculateScaleUpLimitWithScalingRules` /
    `calculateScaleDownLimitWithBehaviors` (Pods policies: replicas at the period's start +/- the policy value), then
    min/max."""

    def __init__(self, role: Role, rules: Behavior):
        self.role, self.rules = role, rules
        self.recommendations: list[tuple[float, int]] = []
        self.up_events: list[tuple[float, int]] = []
        self.down_events: list[tuple[float, int]] = []

    def normalize(self, now: float, current: int, desired: int) -> int:
        r = self.rules
        up = desired >= current
        window = r.up_window_s if up else r.down_window_s
        keep = max(r.up_window_s, r.down_window_s)
        self.recommendations = [(t, v) for t, v in self.recommendations if t > now - keep]
        recent = [v for t, v in self.recommendations if t > now - window]
        stabilized = (min if up else max)([desired, *recent])
        self.recommendations.append((now, desired))
        result = stabilized
        if stabilized > current:
            added = sum(c for t, c in self.up_events if t > now - r.up_period_s)
            limit = max(current, current - added + r.up_pods)
            result = min(stabilized, limit, self.role.max)
        elif stabilized < current:
            removed = sum(c for t, c in self.down_events if t > now - r.down_period_s)
            limit = min(current, current + removed - r.down_pods)
            result = max(stabilized, limit, self.role.min)
        result = min(max(result, self.role.min), self.role.max)
        if result > current:
            self.up_events.append((now, result - current))
        elif result < current:
            self.down_events.append((now, current - result))
        return result


def drain_flags(cfg: StackConfig) -> list[str]:
    """vLLM's `--shutdown-timeout` on an autoscaled engine: on SIGTERM (a scale-down deleting its pod) the engine core
    drains, finishing its in-flight requests for up to this long, where the default 0 aborts them (vLLM 0.33.0
    vllm/v1/engine/core.py `_handle_shutdown`: mode = "abort" if shutdown_timeout == 0 else "drain"; the flag is in
    both pinned parsers, vLLM 0.33.0 and vLLM-TorchTPU 0.29.0). The longest session the replay models."""
    return ["--shutdown-timeout", str(SESSION_S)] if cfg.autoscaling_on else []


def termination_grace_s(cfg: StackConfig, default: int) -> int:
    """An autoscaled engine pod's terminationGracePeriodSeconds: the drain and the teardown after it
    (drain_grace_s), else the pod's own default."""
    return drain_grace_s() if cfg.autoscaling_on else default


def drain_grace_s(session_s: float = SESSION_S) -> int:
    """terminationGracePeriodSeconds of a scaled engine pod: its longest session with a margin, so the kubelet never
    kills a pod that still serves one (the engine stops taking new requests on SIGTERM and finishes the running ones,
    vLLM `--shutdown-timeout`; the router drops a terminating pod from its candidates)."""
    return int(math.ceil(2 * session_s / 60) * 60)


PROXY_EXT_PROC_TIMEOUT_S = 1000
"""The standalone router's Envoy gives the EPP's ext_proc stream `message_timeout: 1000s` (llm-d-router v0.10.0
config/charts/llm-d-router-standalone/values.yaml, envoy.yaml): a request the router still holds after that is
failed by the proxy, not by the router."""


def flow_control_ttl_s() -> int:
    """The router's flow control `defaultRequestTTL`: how long a request may wait in its queue before the router
    sheds it with a retryable backpressure error (default 60s, llm-d-router v0.10.0 apix/config/v1alpha1/
    endpointpickerconfig_types.go FlowControlConfig). A minute under the proxy's ext_proc timeout, so the router sheds
    it with its own retryable error rather than the proxy with a timeout; a burst's replicas take longer than that
    (time_to_add_s), so a client of a long burst retries, and the replay's closed loop is that retrying client: its
    session stays in the demand the autoscaler reads (running + queued)."""
    return PROXY_EXT_PROC_TIMEOUT_S - 60


# --------------------------------------------------------------------------- load traces
@dataclass(frozen=True)
class Trace:
    """Concurrent sessions wanted over time (closed loop: a slot whose session ends starts the next at once, as the
    benchmark's concurrency slots do; a slot retires only when its session ends)."""

    name: str
    seconds: int
    demand: Callable[[float], int]


def step_trace(low: int, high: int, hours: float = 6.0) -> Trace:
    """low for the first hour, high from 1 h to 4 h, low again after."""
    def demand(t: float) -> int:
        return high if 3600 <= t < 4 * 3600 else low
    return Trace(f"step {low} -> {high} -> {low} sessions", int(hours * 3600), demand)


def diurnal_trace(low: int, high: int, hours: float = 24.0) -> Trace:
    """A day: low at 04:00, high at 16:00, a cosine between, in whole sessions."""
    def demand(t: float) -> int:
        phase = math.cos(2 * math.pi * (t / 3600 - 16) / 24)
        return int(round(low + (high - low) * (1 + phase) / 2))
    return Trace(f"diurnal {low} .. {high} sessions", int(hours * 3600), demand)


# --------------------------------------------------------------------------- the replay
@dataclass
class _Replica:
    index: int
    ready_at: float
    sessions: list[float] = field(default_factory=list)
    """End times of the sessions it runs."""
    draining_since: Optional[float] = None


@dataclass(frozen=True)
class Row:
    t: float
    demand: int
    desired: int
    replicas: int
    """Spec replicas (what the HPA set), draining ones no longer counted."""
    ready: int
    in_use: int
    """Replicas holding accelerators: ready, starting and draining."""
    running: float
    """Sessions in flight (decode, engines) or uncached prefill tokens/s served (prefill)."""
    queued: float
    """Sessions the router's flow control holds (decode, engines) or prefill backlog in seconds of the ready groups."""


@dataclass(frozen=True)
class Result:
    role: Role
    trace: Trace
    rows: tuple[Row, ...]
    cut_sessions: int
    """Sessions still running on a replica when it was removed: must be 0 (drain before scale-down)."""
    drain_s: float
    """Longest drain: from a replica's scale-down to its last session's end."""
    reach_s: tuple[tuple[float, float, int], ...]
    """For each rise of the HPA's recommendation above the ready replicas (the trigger's ceil(usage / target), within
    the envelope): (when, seconds until that many were ready, replicas)."""
    node_hours: float
    fixed_node_hours: float

    @property
    def saved_node_hours(self) -> float:
        return self.fixed_node_hours - self.node_hours

    @property
    def max_reach_s(self) -> float:
        return max((s for _, s, _ in self.reach_s), default=0.0)


def simulate(role: Role, trace: Trace, context_tokens: int = 0, session_s: float = SESSION_S,
             dt: float = HPA_SYNC_S, start_replicas: Optional[int] = None,
             grace_s: float = 0.0) -> Result:
    """Replay `trace` through one role's ScaledObject: its trigger, the HPA normalisation above, the start time of
    an added replica and the drain of a removed one (no new sessions; removed once its last session ends)."""
    grace_s = grace_s or drain_grace_s(session_s)
    rules = behavior(role)
    hpa = Hpa(role, rules)
    initial = role.min if start_replicas is None else start_replicas
    replicas = [_Replica(i, 0.0) for i in range(initial)]
    released: list[_Replica] = []
    spec = initial
    queue: list[float] = []
    backlog = 0.0
    token_history: list[tuple[float, float]] = []
    rows: list[Row] = []
    cut = 0
    drain = 0.0
    node_seconds = 0.0
    prefill = role.name == "prefill"
    prev_need = initial
    rises: list[tuple[float, int]] = []
    reach: list[tuple[float, float, int]] = []
    steps = int(trace.seconds // dt)
    for k in range(steps + 1):
        now = k * dt
        demand = trace.demand(now)
        # sessions end; a draining replica with none left gives its nodes back
        for r in replicas:
            r.sessions = [end for end in r.sessions if end > now]
        for r in [r for r in replicas if r.draining_since is not None]:
            if r.sessions and now - r.draining_since < grace_s:
                continue
            cut += len(r.sessions)
            drain = max(drain, now - r.draining_since)
            replicas.remove(r)
            released.append(r)
        ready = [r for r in replicas if r.ready_at <= now and r.draining_since is None]
        running = sum(len(r.sessions) for r in replicas)
        # closed loop: the sessions wanted follow the demand; an ended session's slot starts a new one at once,
        # a fall retires the queued ones first and lets running ones finish (never cut)
        if demand > running + len(queue):
            queue.extend([now] * (demand - running - len(queue)))
        elif demand < running + len(queue):
            del queue[max(0, demand - running):]
        if not prefill:
            # the router dispatches the held sessions to the least-loaded ready replica with room
            while queue and ready:
                target = min(ready, key=lambda r: (len(r.sessions), r.index))
                if len(target.sessions) >= role.sessions_per_replica:
                    break
                queue.pop(0)
                target.sessions.append(now + session_s)
            usage = float(sum(len(r.sessions) for r in replicas) + len(queue))
            served, waiting = float(sum(len(r.sessions) for r in replicas)), float(len(queue))
        else:
            # prefill: each new session brings its context's uncached tokens; the ready groups work the backlog off
            starts = demand / session_s
            backlog += starts * context_tokens * dt
            power = len(ready) * role.prefill_tokens_per_s
            done = min(backlog, power * dt)
            backlog -= done
            token_history.append((now, starts * context_tokens))
            token_history = [(t, v) for t, v in token_history if t > now - RATE_WINDOW_S]
            rate = sum(v for _, v in token_history) / len(token_history)
            usage = rate / role.prefill_tokens_per_s
            served, waiting = done / dt, backlog / power if power else float("inf")
            queue.clear()
        # the HPA (KEDA's external metric) every sync
        desired = per_pod_replicas(spec, usage, role.target)
        new_spec = hpa.normalize(now, spec, desired)
        if new_spec > spec:
            for _ in range(new_spec - spec):
                active = [r for r in replicas if r.draining_since is None]
                index = max([r.index for r in active], default=-1) + 1
                replicas.append(_Replica(index, now + role.add_s - DETECT_S))
        elif new_spec < spec:
            # the LeaderWorkerSet removes its highest-index groups; their pods drain (components/plan/autoscaling.py
            # docs)
            active = sorted((r for r in replicas if r.draining_since is None), key=lambda r: -r.index)
            for r in active[:spec - new_spec]:
                r.draining_since = now
                if not r.sessions:
                    replicas.remove(r)
                    released.append(r)
        spec = new_spec
        in_use = len(replicas)
        node_seconds += in_use * role.nodes_per_replica * dt
        ready_count = sum(1 for r in replicas if r.ready_at <= now and r.draining_since is None)
        need = min(role.max, max(role.min, desired))
        if need > prev_need and need > ready_count:
            rises.append((now, need))
        prev_need = need
        for when, count in list(rises):
            if ready_count >= count:
                reach.append((when, now - when, count))
                rises.remove((when, count))
        rows.append(Row(now, demand, desired, spec, ready_count, in_use, served, waiting))
    for when, count in rises:
        reach.append((when, float("inf"), count))
    hours = node_seconds / 3600
    fixed = role.max * role.nodes_per_replica * (steps + 1) * dt / 3600
    return Result(role, trace, tuple(rows), cut, drain, tuple(reach), hours, fixed)


# --------------------------------------------------------------------------- a track's replay and its report
@dataclass(frozen=True)
class TrackResult:
    trace: Trace
    roles: tuple[Result, ...]
    accelerator_hour_usd: Optional[float]
    unpriced_key: str

    @property
    def node_hours(self) -> float:
        return sum(r.node_hours for r in self.roles)

    @property
    def fixed_node_hours(self) -> float:
        return sum(r.fixed_node_hours for r in self.roles)

    @property
    def saved_node_hours(self) -> float:
        return self.fixed_node_hours - self.node_hours

    @property
    def cut_sessions(self) -> int:
        return sum(r.cut_sessions for r in self.roles)

    @property
    def max_reach_s(self) -> float:
        return max(r.max_reach_s for r in self.roles)

    @property
    def add_s(self) -> float:
        return min(r.role.add_s for r in self.roles)

    def usd(self, node_hours: float) -> Optional[float]:
        return None if self.accelerator_hour_usd is None else node_hours * self.accelerator_hour_usd


def standard_traces(cfg: StackConfig, roles: Optional[Sequence[Role]] = None) -> tuple[Trace, Trace]:
    """A step from half the minimum's target load to the maximum's, and a day between the two, in full-length
    sessions: what the envelope can serve at its target (KV_TARGET) at each end."""
    env = envelope(cfg, roles)
    low = max(1, int(KV_TARGET * env.sessions_min / 2))
    high = max(low + 1, int(KV_TARGET * env.sessions_max))
    return step_trace(low, high), diurnal_trace(low, high)


def simulate_track(cfg: StackConfig, trace: Trace, roles: Optional[Sequence[Role]] = None,
                   session_s: float = SESSION_S) -> TrackResult:
    """Every scaled role of the stack under one trace (GPU: prefill and decode each see the sessions, prefill as the
    uncached tokens of their contexts); one slice's roles (GPU External scaling needs gpu.slices = 1)."""
    roles = tuple(roles or default_roles(cfg))
    price, key = accelerator_hour_usd(cfg)
    results = tuple(simulate(r, trace, context_tokens=cfg.context_length, session_s=session_s) for r in roles)
    return TrackResult(trace, results, price, key)


def _hours(seconds: float) -> str:
    return f"{int(seconds // 3600):02d}:{int(seconds % 3600 // 60):02d}"


def summary_line(result: TrackResult) -> str:
    """One line of figures: reach, drain, node-hours and cost against the fixed (maximum) shape."""
    saved = result.saved_node_hours
    usd = result.usd(saved)
    money = (f"${usd:,.0f} of accelerator time" if usd is not None
             else f"unpriced (set {result.unpriced_key} for dollars)")
    drain = max(r.drain_s for r in result.roles)
    return (f"{result.trace.name}: target reached in <= {result.max_reach_s / 60:.1f} min "
            f"(time to add one step {result.add_s / 60:.1f} min); {result.cut_sessions} sessions cut, longest drain "
            f"{drain / 60:.1f} min; {result.node_hours:,.1f} accelerator VM-hours vs {result.fixed_node_hours:,.1f} "
            f"fixed at the maximum: {saved:,.1f} VM-hours ({saved / result.fixed_node_hours:.0%}) released, {money}")


def table(result: TrackResult, every_s: int = 1800) -> list[str]:
    """The replay every `every_s` seconds as a markdown table: replicas desired/set/ready per role, sessions running
    and queued (decode, engines), prefill backlog, accelerator VMs in use and their cost."""
    names = [r.role.name for r in result.roles]
    head = ["time", "sessions wanted"] + [f"{n} desired/set/ready" for n in names] + [
        "running", "queued", "prefill backlog (s)" if "prefill" in names else None, "VMs in use", "$/h"]
    head = [h for h in head if h is not None]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_role = {r.role.name: r for r in result.roles}
    serving = next(r for r in result.roles if r.role.name != "prefill")
    for i, row in enumerate(serving.rows):
        if row.t % every_s:
            continue
        cells = [_hours(row.t), str(row.demand)]
        vms = 0
        for n in names:
            rr = by_role[n].rows[i]
            cells.append(f"{rr.desired}/{rr.replicas}/{rr.ready}")
            vms += rr.in_use * by_role[n].role.nodes_per_replica
        cells += [f"{row.running:.0f}", f"{row.queued:.0f}"]
        if "prefill" in by_role:
            backlog = by_role["prefill"].rows[i].queued
            cells.append("inf" if math.isinf(backlog) else f"{backlog:.0f}")
        usd = result.usd(vms)
        cells += [str(vms), "unpriced" if usd is None else f"{usd:,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# --------------------------------------------------------------------------- what the cluster gets
KEDA_API = "keda.sh/v1alpha1"
"""ScaledObject and TriggerAuthentication (the KEDA chart 2.20.2's templates/crds/crd-scaledobjects.yaml,
crd-triggerauthentications.yaml)."""
ROLE_SCALER = ("disaggregatedset.x-k8s.io/v1", "DisaggregatedSetRoleScaler")
"""The /scale of one DisaggregatedSet role: created by the controller for a role with `scaling.mode: External`, named
`<set>-<role>` (lws CRD disaggregatedset.x-k8s.io_disaggregatedsetrolescalers.yaml, subresources.scale)."""
LEADER_WORKER_SET = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
"""The TPU engines' /scale (lws CRD leaderworkerset.x-k8s.io_leaderworkersets.yaml, subresources.scale)."""
TRIGGER_AUTH_NAME = "managed-prometheus"
GMP_QUERY_URL = "https://monitoring.googleapis.com/v1/projects/{project}/location/global/prometheus"
"""Managed Prometheus' Prometheus-compatible query API (Cloud Monitoring API
projects.location.prometheus.api.v1.query, https://cloud.google.com/monitoring/api/ref_v3/rest/v1/
projects.location.prometheus.api.v1/query_range: location "has to be global"); KEDA's prometheus scaler appends
/api/v1/query."""
ROUTER_JOB = f"{catalog.GUIDE_NAME}-router"
"""Managed Prometheus' `job` of the router's series: the router PodMonitoring's name
(components/observe/monitoring.py)."""
EPP_METRICS = "https://github.com/llm-d/llm-d-router/blob/v0.10.0/pkg/epp/metrics/llm_d_router_metrics.go"


def router_matchers(cfg: StackConfig) -> str:
    """The labels Managed Prometheus puts on this stack's router series (components/observe/observability.py Scope)."""
    return f'cluster="{cfg.cluster_name}",namespace="{cfg.kubernetes.namespace}",job="{ROUTER_JOB}"'


TRIGGER_METRICS = ("llm_d_epp_request_running", "llm_d_epp_flow_control_queue_size", "llm_d_epp_request_input_tokens",
                   "llm_d_epp_request_cached_tokens")
"""The router metrics the ScaledObjects read (components/facts/metrics.py consumers)."""


def trigger(cfg: StackConfig, role: Role) -> dict:
    """One prometheus trigger per role, metricType AverageValue, so the HPA asks for ceil(value / threshold):

    - decode (GPU) and engines (TPU): sessions at the router, `llm_d_epp_request_running` (requests the router has
      dispatched, counted once its body went to the proxy, llm-d-router v0.10.0 pkg/epp/handlers/server.go
      IncRunningRequests) + `llm_d_epp_flow_control_queue_size` (requests flow control holds), each `or vector(0)`
      (an absent series is 0, not an empty sum); threshold = KV_TARGET x the replica's full-length sessions. One
      sum of both, where llm-d's keda-epp-queue guide has two triggers: the HPA takes the larger of two triggers,
      and neither alone sees the running + queued a burst needs.
    - prefill (GPU): uncached prompt tokens/s over 5 min (`llm_d_epp_request_input_tokens` - `..._cached_tokens`,
      histogram sums) in prefill groups' worth of peak throughput, threshold PREFILL_TARGET: llm-d's token-aware
      prefill trigger divides by peakPrefillThroughput too (guides/workload-autoscaling/keda-epp-token-aware/
      pd-disaggregation/base/prefill-scaledobject.yaml), on in-flight tokens; a rate is used here because a burst's
      backlog is worked off in minutes, well before a group added for it (time_to_add_s) could load.

    Every name is in components/facts/metrics.py, checked against the router's released code (EPP_METRICS)."""
    m = router_matchers(cfg)

    def epp(name: str) -> str:
        assert name in TRIGGER_METRICS, name
        return metrics.require(name, "epp")

    if role.name == "prefill":
        per_group = role.prefill_tokens_per_s
        query = (f"((sum(rate({epp('llm_d_epp_request_input_tokens')}_sum{{{m}}}[5m])) - "
                 f"sum(rate({epp('llm_d_epp_request_cached_tokens')}_sum{{{m}}}[5m]))) / {per_group:g}) or vector(0)")
        threshold = PREFILL_TARGET
        name = "uncached-prefill-groups"
    else:
        query = (f"(sum({epp('llm_d_epp_request_running')}{{{m}}}) or vector(0)) + "
                 f"(sum({epp('llm_d_epp_flow_control_queue_size')}{{{m}}}) or vector(0))")
        threshold = role.target
        name = "sessions-per-replica"
    return {"type": "prometheus", "name": name, "metricType": "AverageValue",
            "metadata": {"serverAddress": GMP_QUERY_URL.format(project=cfg.gcp.project), "query": query,
                         "threshold": f"{threshold:g}", "activationThreshold": "0", "ignoreNullValues": "false"},
            "authenticationRef": {"name": TRIGGER_AUTH_NAME}}


def scale_target(cfg: StackConfig, role: Role, set_name: str) -> dict:
    api, kind = ROLE_SCALER if cfg.track == "gpu" else LEADER_WORKER_SET
    name = f"{set_name}-{role.name}" if cfg.track == "gpu" else set_name
    return {"apiVersion": api, "kind": kind, "name": name}


def scaled_object_name(role: str) -> str:
    return f"{catalog.GUIDE_NAME}-{role}"


def hpa_name(role: str) -> str:
    """The HPA KEDA makes of the role's ScaledObject: named here (advanced.horizontalPodAutoscalerConfig.name), as
    KEDA's default would (`keda-hpa-<ScaledObject>`), so the dashboard and alerts can select it by name."""
    return f"keda-hpa-{scaled_object_name(role)}"


def scaled_roles_output(cfg: StackConfig) -> dict[str, dict[str, int | str]]:
    """The stack output `autoscaledRoles`: each scaled role's HPA, its bounds and the plan's times to move between
    them, which `python -m tools bench --ramp` holds the autoscaler to. Up: the time to add a replica (the behavior
    adds every missing replica in one step). Down: the stabilisation window, one period per further step, the drain
    grace of the replica let go, and the detection. loadAtMax: the load at the router at which the role's trigger asks
    for its maximum (ceil(value / threshold) = max): sessions in flight for decode and engines, uncached prompt tokens
    per second for prefill (trigger)."""
    found: dict[str, dict[str, int | str]] = {}
    for role in roles(cfg):
        rules = behavior(role)
        steps = max(1, math.ceil((role.max - role.min) / rules.down_pods))
        down = rules.down_window_s + (steps - 1) * rules.down_period_s + drain_grace_s() + DETECT_S
        load = ({"uncachedPromptTokensPerSecond": math.ceil(PREFILL_TARGET * role.max * role.prefill_tokens_per_s)}
                if role.name == "prefill" else {"sessions": math.ceil(role.target * role.max)})
        found[role.name] = {"hpa": hpa_name(role.name), "min": role.min, "max": role.max,
                            "upSeconds": math.ceil(role.add_s), "downSeconds": math.ceil(down), "loadAtMax": load}
    return found


def scaled_object(cfg: StackConfig, role: Role, set_name: str) -> dict:
    """The role's ScaledObject: its target's /scale between min and max, one trigger, the HPA behavior above."""
    rules = behavior(role)
    name = scaled_object_name(role.name)
    return {
        "apiVersion": KEDA_API, "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": cfg.kubernetes.namespace,
                     "labels": {"app.kubernetes.io/part-of": catalog.GUIDE_NAME, "llm-d.ai/role": role.name}},
        "spec": {
            "scaleTargetRef": scale_target(cfg, role, set_name),
            "minReplicaCount": role.min, "maxReplicaCount": role.max,
            "pollingInterval": KEDA_POLLING_S,
            # Only scale-to-zero reads it (min >= 1 here); set to the scale-down window all the same.
            "cooldownPeriod": rules.down_window_s,
            "advanced": {"horizontalPodAutoscalerConfig": {"name": hpa_name(role.name), "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": rules.up_window_s, "selectPolicy": "Max",
                            "policies": [{"type": "Pods", "value": rules.up_pods, "periodSeconds": rules.up_period_s}]},
                "scaleDown": {"stabilizationWindowSeconds": rules.down_window_s, "selectPolicy": "Max",
                              "policies": [{"type": "Pods", "value": rules.down_pods,
                                            "periodSeconds": rules.down_period_s}]}}}},
            "triggers": [trigger(cfg, role)],
        },
    }


def trigger_authentication(cfg: StackConfig) -> dict:
    """KEDA's operator reads Managed Prometheus as its own Kubernetes service account under Workload Identity: with
    `podIdentity.provider: gcp` the prometheus scaler takes Google's default token source with the monitoring.read
    scope (kedacore/keda v2.20.2 pkg/scalers/gcp/gcp_common.go GetGCPAuthorization, pkg/scalers/prometheus_scaler.go
    GetGCPOAuth2HTTPTransport). No key, no secret."""
    return {"apiVersion": KEDA_API, "kind": "TriggerAuthentication",
            "metadata": {"name": TRIGGER_AUTH_NAME, "namespace": cfg.kubernetes.namespace},
            "spec": {"podIdentity": {"provider": "gcp"}}}


SATURATION_DETECTOR = "utilization-detector"


def flow_control(cfg: StackConfig) -> dict:
    """The EndpointPickerConfig additions that turn the router's flow control on (llm-d-router v0.10.0): the
    `flowControl` feature gate, off by default (cmd/epp/runner/runner.go RegisterFeatureGate(flowcontrol.FeatureGate,
    false); pkg/epp/flowcontrol/config.go FeatureGate = "flowControl"), the utilization saturation detector at the
    autoscaler's own set point, and the queue's TTL (flow_control_ttl_s).

    Detector (pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/config.go): an endpoint's
    saturation is max(waiting queue / queueDepthThreshold, KV usage / kvCacheUtilThreshold), the pool's the mean;
    at 1.0 flow control holds new requests. kvCacheUtilThreshold = KV_TARGET (0.8, also the code's default), so the
    router starts holding requests at the load where the autoscaler asks for another replica; queueDepthThreshold
    stays at the code's default 5 and metricsStalenessThreshold at its 200ms, written out so the plan shows them."""
    return {
        "featureGates": ["flowControl"],
        "plugins": [{"type": SATURATION_DETECTOR, "name": SATURATION_DETECTOR, "parameters": {
            "kvCacheUtilThreshold": KV_TARGET, "queueDepthThreshold": 5, "metricsStalenessThreshold": "200ms"}}],
        "flowControl": {"defaultRequestTTL": f"{flow_control_ttl_s()}s",
                        "saturationDetector": {"pluginRef": SATURATION_DETECTOR}},
    }


# --------------------------------------------------------------------------- KEDA itself
KEDA_NAMESPACE = catalog.KEDA_NAMESPACE
KEDA_VALUES_IMAGES = {"keda": "keda", "metricsApiServer": "keda-metrics-apiserver", "webhooks": "keda-webhooks"}
"""The chart's `image.<key>` -> components/plan/images.py name (versions.KEDA_IMAGES)."""
KEDA_OPERATOR_SA = "keda-operator"
"""The operator's service account (values.yaml serviceAccount.operator.name): the Workload Identity principal
granted read on Managed Prometheus."""
KEDA_GRPC_PORT = 9666
"""The operator's metrics gRPC service, which the metrics API server calls (templates/manager/service.yaml)."""
KEDA_METRICS_API_PORT = 6443
"""values.yaml service.portHttpsTarget: the external metrics API the kube-apiserver (HPA) calls."""
KEDA_WEBHOOK_PORT = 9443
"""templates/webhooks/deployment.yaml: `webhooks.port | default 9443`, what the kube-apiserver's admission calls."""


def keda_values(cfg: StackConfig) -> dict:
    """Values for the KEDA chart (versions.KEDA_CHART): its images at the chart's version, `tag@digest` where
    `images.keda*Digest` is set, IfNotPresent; the operator watches the model namespace only; its scale RBAC names the
    two kinds the ScaledObjects target instead of the chart's `*/*` default (values.yaml rbac.scaledRefKinds); the
    chart's own NetworkPolicies stay off (they let every namespace in and cannot name the control plane or Google's
    APIs): the program writes the namespace's (components/platform/netpol.py)."""
    image = {}
    for key, name in KEDA_VALUES_IMAGES.items():
        registry, repository = images.IMAGES[name].reference.rsplit(":", 1)[0].split("/", 1)
        image[key] = {"registry": registry, "repository": repository, "tag": images.tag(cfg.images, name)}
    return {
        "image": {**image, "pullPolicy": "IfNotPresent"},
        "watchNamespace": cfg.kubernetes.namespace,
        "rbac": {"scaledRefKinds": [{"apiGroup": ROLE_SCALER[0].split("/")[0], "kind": ROLE_SCALER[1]},
                                    {"apiGroup": LEADER_WORKER_SET[0].split("/")[0], "kind": LEADER_WORKER_SET[1]}]},
        "networkPolicy": {"enabled": False},
        "asciiArt": False,
    }


# --------------------------------------------------------------------------- the config's envelope
def roles(cfg: StackConfig) -> tuple[Role, ...]:
    """The scaled roles with `autoscaling.<role>Min/Max/Step` (checked against what the stack holds by
    components/config/stack.py); empty when autoscaling is off."""
    if not cfg.autoscaling_on:
        return ()
    found = []
    for base in default_roles(cfg):
        lo, hi, step = cfg.autoscaling.limits(base.name)
        found.append(Role(base.name, lo or base.min, hi or base.max, step or base.step, base.nodes_per_replica,
                          base.sessions_per_replica, base.prefill_tokens_per_s, base.add_s))
    return tuple(found)

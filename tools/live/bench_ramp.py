"""The benchmark driver's ramp (`python -m tools bench --ramp`): a scale-down, a scale-up and a scale-down again,
watched on the HorizontalPodAutoscalers KEDA makes of the stack's ScaledObjects, each held to the plan's clock.

1. settle: no load; every scaled role must come down to its minimum (a fresh stack starts at its full shape).
2. up: the benchmark Job as the load (`benchmark.enabled=true`, its configured concurrency, so many conversations
   that it outlasts the phase); every role must reach its maximum within 1.5 x the plan's time to add a replica.
3. down: the Job deleted (`benchmark.enabled` back, `up`), so the load stops; every role must come back to its
   minimum within the plan's scale-down time (the stabilisation window, one step per period, the drain).

Each phase polls `kubectl get hpa` every POLL_S seconds and ends when its roles are where it wants them or its
bound is spent. `ramp.json` holds every sample and each role's times; a role that never moved fails the step.
The bounds come from the stack output `autoscaledRoles` (components/plan/autoscaling.py scaled_roles_output).
A mixin of `tools.live.bench.Driver`, as `tools.live.bench_steps.Steps` is.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from components.config import BenchmarkConfig
from tools.live.core import StepError
from tools.live.pulumi_stack import BENCHMARK_KEY, CONCURRENCY_KEY, CONVERSATIONS_KEY, RUN_ID_KEY

POLL_S = 30.0
"""Between two reads of the HPAs: twice KEDA's polling interval would miss nothing the HPA acts on (it syncs every
15 s; a replica takes half an hour to add)."""
UP_MARGIN = 1.5
"""A scale-up counts when it lands within this many times the plan's time to add a replica (the scaling-behind
alert's delay, components/observe/observability.py)."""
DOWN_MARGIN = 1.25
ROUNDS = 1000
"""Conversations per slot in the ramp's Job: far more than the up phase lasts; the Job is deleted to end the load."""
RAMP_FILE = "ramp.json"


@dataclass
class Sample:
    at_s: float
    desired: int
    current: int


@dataclass
class Phase:
    name: str
    want: str
    """`min` or `max`: where every role should end."""
    bound_s: float
    started_s: float = 0.0
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    reached_s: dict[str, float] = field(default_factory=dict)
    """Seconds into the phase at which each role's current replicas first equalled its target."""


def target(role: dict[str, Any], want: str) -> int:
    return int(role[want])


def bounds(roles: dict[str, dict[str, Any]]) -> tuple[float, float]:
    """(up, down) bound of a phase: the slowest role's modelled time, with the margins above."""
    return (UP_MARGIN * max(float(r["upSeconds"]) for r in roles.values()),
            DOWN_MARGIN * max(float(r["downSeconds"]) for r in roles.values()))


def lines(phases: list[Phase], roles: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    for phase in phases:
        for name, role in roles.items():
            samples = phase.samples.get(name, [])
            start = samples[0].current if samples else "?"
            end = samples[-1].current if samples else "?"
            model = role["upSeconds"] if phase.want == "max" else role["downSeconds"]
            if name in phase.reached_s:
                what = (f"{start} -> {end} replicas in {phase.reached_s[name] / 60:.1f} min (plan "
                        f"{float(model) / 60:.1f} min)")
            else:
                what = f"{start} -> {end} replicas, not at its {phase.want} ({target(role, phase.want)}) after " \
                       f"{phase.bound_s / 60:.1f} min"
            out.append(f"ramp {phase.name}: {name} {what}")
    return out


def ramp_sessions(roles: dict[str, dict[str, Any]], configured: int) -> int:
    """Sessions at once for the up phase: the benchmark's concurrency, or more where a role's trigger needs more
    sessions in flight to ask for its maximum (loadAtMax)."""
    return max([configured, *(int(r.get("loadAtMax", {}).get("sessions", 0)) for r in roles.values())])


def load_lines(roles: dict[str, dict[str, Any]]) -> list[str]:
    """What each role's trigger needs at the router to ask for its maximum (the plan's loadAtMax)."""
    out = []
    for name, role in roles.items():
        load = role.get("loadAtMax", {})
        if "sessions" in load:
            out.append(f"ramp: {name} asks for {role['max']} replicas at {load['sessions']:,} sessions in flight")
        elif "uncachedPromptTokensPerSecond" in load:
            out.append(f"ramp: {name} asks for {role['max']} replicas at {load['uncachedPromptTokensPerSecond']:,} "
                       "uncached prompt tokens/s at the router")
    return out


class Ramp:
    """step_ramp: Driver.STEPS holds it after smoke when --ramp is given."""

    def step_ramp(self) -> None:
        roles: dict[str, dict[str, Any]] = {name: role for name, role in
                                            (self.outputs.get("autoscaledRoles") or {}).items()
                                            if role["max"] > role["min"]}
        if not roles:
            raise StepError("the stack scales no role between two sizes (stack output autoscaledRoles): a ramp needs "
                            "autoscaling on with some role's max above its min (docs/scaling.md)")
        self.ramp_roles = roles
        up_bound, down_bound = bounds(roles)
        phases = [Phase("settle", "min", down_bound), Phase("up", "max", up_bound), Phase("down", "min", down_bound)]
        self._watch(phases[0], roles)
        if len(phases[0].reached_s) == len(roles):
            try:
                self._load(True)
                self._watch(phases[1], roles)
            finally:
                # The load stops whatever happened, before the down phase or the teardown.
                self._load(False)
                self._write_ramp(phases, roles)
            self._watch(phases[2], roles)
        else:  # a role that never came down has no scale-up to show
            phases = phases[:1]
        self._write_ramp(phases, roles)
        for line in lines(phases, roles):
            self.out(line)
        missed = [f"{p.name} {name}" for p in phases for name in roles if name not in p.reached_s]
        if missed:
            raise StepError(f"the ramp did not see {', '.join(missed)} reach its target within the plan's bound "
                            f"(see {self._path(RAMP_FILE)})")

    def _load(self, on: bool) -> None:
        backend = self.deps.backend
        if on:
            if self.benchmark_previous is None:
                self.benchmark_previous = (backend.get_config(BENCHMARK_KEY),)
                self.run_id_previous = (backend.get_config(RUN_ID_KEY),)
            if self.conversations_previous is None:
                self.conversations_previous = (backend.get_config(CONVERSATIONS_KEY),)
                self.concurrency_previous = (backend.get_config(CONCURRENCY_KEY),)
            slots = self.opts.ramp_concurrency or ramp_sessions(
                self.ramp_roles, int(backend.get_config(CONCURRENCY_KEY) or BenchmarkConfig().concurrency))
            for line in load_lines(self.ramp_roles):
                self.out(line)
            assert self.run_dir is not None
            backend.set_config(BENCHMARK_KEY, "true")
            backend.set_config(CONCURRENCY_KEY, str(slots))
            backend.set_config(RUN_ID_KEY, f"{self.run_dir.name.lower()}-ramp")
            backend.set_config(CONVERSATIONS_KEY, str(slots * ROUNDS))
            self.out(f"ramp: load on ({slots} sessions at once until it is stopped); up to create the Job")
        elif self.conversations_previous is not None and not self.ramp_load_off:
            self._restore_benchmark_config()
            self.ramp_load_off = True
            self.out("ramp: load off; up to delete the Job")
        else:
            return
        self._cli("up", lambda: backend.up(on_output=self.out), self.opts.up_timeout)
        self._read_outputs()

    def _watch(self, phase: Phase, roles: dict[str, dict[str, Any]]) -> None:
        clock = self.deps.clock
        phase.started_s = clock()
        self.out(f"ramp {phase.name}: waiting up to {phase.bound_s / 60:.1f} min for every scaled role at its "
                 f"{phase.want}")
        while True:
            at = clock() - phase.started_s
            for name, role in roles.items():
                status = self.deps.cluster.hpa(self.namespace, role["hpa"])
                phase.samples.setdefault(name, []).append(Sample(round(at, 1), status["desired"], status["current"]))
                if name not in phase.reached_s and status["current"] == target(role, phase.want):
                    phase.reached_s[name] = round(at, 1)
            if len(phase.reached_s) == len(roles) or at >= phase.bound_s:
                return
            self.deps.sleep(min(POLL_S, phase.bound_s - at))

    def _write_ramp(self, phases: list[Phase], roles: dict[str, dict[str, Any]]) -> None:
        record = {"roles": roles, "pollSeconds": POLL_S,
                  "phases": [{**asdict(p), "samples": {n: [asdict(s) for s in ss] for n, ss in p.samples.items()}}
                             for p in phases]}
        self._path(RAMP_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

"""The benchmark driver (`tools.live.bench`) against a fake Automation API, cluster, bucket and billing layer.

The point: whatever fails or stops the run in up, wait, smoke, benchmark or collect (an exception, a
timeout, SIGINT, SIGTERM, SIGHUP, a closed stdout), destroy runs exactly once afterwards, the leftover
listing runs last and run.json says what happened; `--keep` is the only way to skip the destroy; destroy
retries only the known transient failures; a stack that is locked or claimed by someone else is never
destroyed. Signals are real (sent to this process); the Pulumi CLI, kubectl and gcloud are fakes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import stack_document
from tests.fakes import fakegoogle
from tools.live import bench, bench_steps, cloud, core, leftovers, pulumi_stack
from tools.live.pulumi_stack import CLAIM_TAG

STAMP = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
UNREACHABLE = "error: configured Kubernetes cluster is unreachable: dial tcp: lookup 34.1.2.3.nip: no such host"


# --------------------------------------------------------------------------- fakes
class World:
    """Shared state of the fakes: one call log, faults keyed by call name (`up#2` = the second `up`)."""

    def __init__(self, faults: Mapping[str, BaseException | Callable[[], Any]] | None = None,
                 destroy_errors: list[Exception] | None = None, config: Mapping[str, str] | None = None,
                 leftovers: list[str] | None = None, smoke_code: int = 0, resources: int = 0,
                 tags: Mapping[str, str] | None = None):
        self.log: list[tuple[Any, ...]] = []
        self.counts: Counter[str] = Counter()
        self.faults = dict(faults or {})
        self.destroy_errors = list(destroy_errors or [])
        self.config = {bench.TRACK_KEY: "gpu", bench.GCP_PROJECT_KEY: "my-proj", **(config or {})}
        self.leftover_items = list(leftovers or [])
        self.smoke_code = smoke_code
        self.on_destroy: Callable[[], None] | None = None
        self.sleeps: list[float] = []
        self.open_forwards = 0
        self.extra_outputs: dict[str, Any] = {}
        self.resources = resources
        self.tags = dict(tags or {})
        self.claim_lock = threading.Lock()
        self.interrupted = threading.Event()  # set when the driver asks a running CLI to stop
        self.up_seconds = 0.0
        """How long the fake `up` runs after its first lines: no time unless a test's signal or stop lands while it
        runs (most runs only need the step to pass, two `up`s each)."""
        self.now_s = 0.0
        """The fake clock of the ramp's phases: the driver's sleeps move it."""
        self.load = (False, 0.0)
        """(benchmark Job deployed, since when): what the last `up` left running."""
        self.keda = FakeKeda(self, ROLES)

    def hit(self, name: str, *args: Any) -> None:
        self.counts[name] += 1
        self.log.append((name, *args))
        fault = self.faults.get(f"{name}#{self.counts[name]}") or self.faults.get(name)
        if isinstance(fault, BaseException):
            raise fault
        if fault is not None:
            fault()

    def names(self) -> list[str]:
        return [entry[0] for entry in self.log]

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_s += seconds

    def clock(self) -> float:
        return self.now_s


ROLES = {"prefill": {"hpa": "keda-hpa-kimi-k3-1-prefill", "min": 1, "max": 3, "upSeconds": 1085,
                     "downSeconds": 4140, "loadAtMax": {"uncachedPromptTokensPerSecond": 243725}},
         "decode": {"hpa": "keda-hpa-kimi-k3-1-decode", "min": 1, "max": 1, "upSeconds": 1085, "downSeconds": 3000,
                    "loadAtMax": {"sessions": 26}}}
"""The GPU fixture stack's `autoscaledRoles` output (tests/tools/live/test_bench_ramp.py holds it to the plan)."""


class FakeKeda:
    """KEDA and the HPA controller as the cluster would run them: with the benchmark Job's load deployed each role
    wants its maximum after a poll and has it `up_share` of its modelled time to add later; without load it comes
    down to its minimum `down_share` of its modelled time later. A fresh stack starts at its full shape (max)."""

    DETECT_S = 60.0

    def __init__(self, world: World, roles: Mapping[str, Mapping[str, Any]], up_share: float = 0.8,
                 down_share: float = 0.8, no_up: frozenset[str] = frozenset(),
                 no_down: frozenset[str] = frozenset()):
        self.w, self.roles = world, {r["hpa"]: dict(r) for r in roles.values()}
        self.up_share, self.down_share, self.no_up, self.no_down = up_share, down_share, no_up, no_down
        self.current = {hpa: r["max"] for hpa, r in self.roles.items()}

    def status(self, hpa: str) -> dict[str, int]:
        role = self.roles[hpa]
        on, since = self.w.load
        elapsed = self.w.now_s - since
        want = role["max"] if on else role["min"]
        delay = (self.up_share * role["upSeconds"]) if on else (self.down_share * role["downSeconds"])
        if hpa not in (self.no_up if on else self.no_down) and elapsed >= delay:
            self.current[hpa] = want
        desired = want if elapsed >= self.DETECT_S else self.current[hpa]
        return {"current": self.current[hpa], "desired": desired, "min": role["min"], "max": role["max"]}

class FakeBackend:
    def __init__(self, world: World):
        self.w = world

    def select_or_create(self, stack: str) -> None:
        self.w.hit("select", stack)

    def get_config(self, key: str) -> str | None:
        return self.w.config.get(key)

    def set_config(self, key: str, value: str | None) -> None:
        self.w.hit("set_config", key, value)
        if value is None:
            self.w.config.pop(key, None)
        else:
            self.w.config[key] = value

    def get_tag(self, key: str) -> str | None:
        return self.w.tags.get(key)

    def set_tag(self, key: str, value: str | None) -> None:
        self.w.hit("set_tag", key, value)
        if value is None:
            self.w.tags.pop(key, None)
        else:
            self.w.tags[key] = value

    def resource_count(self) -> int:
        return self.w.resources

    def claims(self) -> FakeClaims:
        return FakeClaims(self.w)

    def up(self, on_output: bench.OnOutput) -> None:
        self.w.interrupted.clear()
        on_output("Updating (gpu):")
        self.w.hit("up")
        on_output(" +  gcp:container:Cluster kimi-k3-1-gpu creating")
        if self.w.interrupted.wait(self.w.up_seconds):  # like the CLI: a SIGINT ends the update early, with an error
            raise RuntimeError("error: update canceled")
        self.w.resources = 40
        self.w.load = (self.w.config.get(bench.BENCHMARK_KEY) == "true", self.w.now_s)

    def interrupt(self) -> bool:
        self.w.hit("interrupt")
        self.w.interrupted.set()
        return True

    def outputs(self) -> dict[str, Any]:
        outputs = {"clusterName": "kimi-k3-1-gpu", "kubeconfig": "apiVersion: v1  # SECRET", "namespace": "kimi-k3-1",
                   "bucketUri": "gs://my-proj-kimi-k3-1-weights",
                   "routerService": "kimi-k3-1-epp", "servingZone": "us-central1-b", "nodePools": ["a", "b"],
                   "autoscaledRoles": ROLES}
        outputs |= self.w.extra_outputs
        if self.w.config.get(bench.BENCHMARK_KEY) == "true":
            outputs |= {"benchmarkJob": "kimi-k3-1-inference-perf",
                        "benchmarkResultsUri": "gs://bucket/benchmarks/gpu/run-1"}
        return outputs

    def destroy(self, on_output: bench.OnOutput, env: Mapping[str, str]) -> None:
        self.w.hit("destroy", dict(env))
        if self.w.on_destroy:
            self.w.on_destroy()
        if self.w.destroy_errors:
            raise self.w.destroy_errors.pop(0)
        self.w.resources = 0


class FakeClaims:
    """The backend's compare-and-set, in memory: world.tags[CLAIM_TAG] holds the run id of the claim."""

    atomic = True

    def __init__(self, world: World):
        self.w = world

    def where(self, stack: str) -> str:
        return f"fake://claims/{stack}.json"

    def release_command(self, stack: str) -> str:
        return f"rm fake://claims/{stack}.json"

    def create(self, claim: Any) -> Any:
        with self.w.claim_lock:
            if CLAIM_TAG in self.w.tags:
                return self.get(claim.stack)
            self.w.hit("claim", claim.run)
            self.w.tags[CLAIM_TAG] = claim.run
            return None

    def get(self, stack: str) -> Any:
        from tools.live.claims import Claim

        run = self.w.tags.get(CLAIM_TAG)
        return Claim(run, stack, "2026-01-02T03:34:05+00:00", version=run) if run else None

    def renew(self, claim: Any, until: str) -> Any:
        return claim if self.w.tags.get(CLAIM_TAG) == claim.run else None

    def remove(self, claim: Any) -> bool:
        with self.w.claim_lock:
            if self.w.tags.get(CLAIM_TAG) != claim.run:
                return False
            self.w.hit("release", claim.run)
            del self.w.tags[CLAIM_TAG]
            return True

    def all(self) -> list[Any]:
        return [c for c in [self.get("gpu")] if c]


class FakeCluster:
    def __init__(self, world: World):
        self.w = world

    def connect(self, kubeconfig: str) -> None:
        self.w.hit("connect")

    def wait_ready(self, namespace: str, timeout: float) -> None:
        self.w.hit("wait_ready", namespace)

    def pods(self, namespace: str, selector: str) -> list[str]:
        self.w.hit("pods", selector)
        for role, pods in (("prefill", ["pod/p0", "pod/p1"]), ("decode", ["pod/d0"])):
            if f"llm-d.ai/role={role}" in selector:
                return pods
        return ["pod/engine-0"]

    def gateway_address(self, namespace: str, gateway: str) -> str:
        self.w.hit("gateway_address", gateway)
        return "10.0.0.10"

    @contextlib.contextmanager
    def port_forward(self, namespace: str, target: str, port: int) -> Iterator[str]:
        self.w.hit("port_forward", target, port)
        self.w.open_forwards += 1
        try:
            yield f"http://127.0.0.1:{10000 + self.w.counts['port_forward']}"
        finally:
            self.w.open_forwards -= 1

    def wait_job(self, namespace: str, job: str, timeout: float) -> None:
        self.w.hit("wait_job", job)

    def hpa(self, namespace: str, name: str) -> dict[str, int]:
        self.w.hit("hpa", name)
        return self.w.keda.status(name)


class FakeStorage:
    def __init__(self, world: World):
        self.w = world

    def copy(self, gs_uri: str, local_dir: Path) -> None:
        self.w.hit("copy", gs_uri)
        (local_dir / "summary_lifecycle_metrics.json").write_text("{}")


class FakeBilling:
    def __init__(self, world: World):
        self.w = world

    def leftovers(self, stack_label: str, project: str | None = None, network: str | None = None) -> list[str]:
        self.w.hit("leftovers", stack_label, project, network)
        return list(self.w.leftover_items)


def drive(world: World, tmp_path: Path, *args: str, stack: str = "gpu",
          out: Callable[[str], Any] | None = None, smoke: Callable[[list[str]], int] | None = None,
          backend: FakeBackend | None = None) -> tuple[int, list[str]]:
    lines: list[str] = []

    def fake_smoke(argv: list[str]) -> int:
        world.hit("smoke", tuple(argv))
        return world.smoke_code

    deps = bench.Deps(backend=backend or FakeBackend(world), cluster=FakeCluster(world), storage=FakeStorage(world),
                      billing=FakeBilling(world), smoke=smoke or fake_smoke, sleep=world.sleep, now=lambda: STAMP,
                      out=out or lines.append, clock=world.clock)
    code = bench.main(["--stack", stack, "--work-dir", str(tmp_path), "--out", str(tmp_path / "results"),
                       *args], deps=deps)
    return code, lines


def run_record(tmp_path: Path, stack: str = "gpu") -> dict[str, Any]:
    return json.loads((tmp_path / "results" / stack / "20260102T030405Z" / "run.json").read_text())


def signal_self(signum: int) -> Callable[[], None]:
    """A fault that sends `signum` to this process, as `kill` or a closing terminal would, and gives the main
    thread time to act on it (its handler runs between polls)."""
    def send() -> None:
        os.kill(os.getpid(), signum)
        time.sleep(0.6)
    return send


# The call that carries out each step, in order; a fault there fails that step.
STEP_CALLS = {"up": "up#1", "wait": "wait_ready", "smoke": "smoke", "benchmark": "wait_job", "collect": "copy"}
ORDER = ["up", "wait_ready", "smoke", "wait_job", "copy"]


SIGINT_BEFORE: list[Any] = []
"""The SIGINT handler this process had when the running test started: the driver must put back whatever it found
(default_int_handler at a terminal, SIG_IGN under `nohup` or `make test &`), never a handler of its own choosing."""


@pytest.fixture(autouse=True)
def sigint_before() -> Iterator[None]:
    SIGINT_BEFORE[:] = [signal.getsignal(signal.SIGINT)]
    yield
    assert signal.getsignal(signal.SIGINT) is SIGINT_BEFORE[0], "the test left the SIGINT handler changed"


def assert_handlers_restored() -> None:
    assert signal.getsignal(signal.SIGINT) is SIGINT_BEFORE[0], "handlers restored"


def assert_torn_down_after(world: World, call: str) -> None:
    names = world.names()
    assert names.count("destroy") == 1, names
    assert_handlers_restored()
    name = call.split("#")[0]
    failed_at = max(i for i, n in enumerate(names) if n == name)
    assert names.index("destroy") > failed_at
    assert names[-1] == "leftovers"
    later = ORDER[ORDER.index(name) + 1:]
    assert not set(later) & set(names[failed_at + 1:]), f"steps after the failed {call} ran: {names}"
    assert world.open_forwards == 0


# --------------------------------------------------------------------------- destroy after every failure
def test_success_runs_every_step_then_destroys(tmp_path):
    world = World()
    code, lines = drive(world, tmp_path)
    assert code == 0, "\n".join(lines)
    names = world.names()
    assert [n for n in names if n in ORDER] == ["up", "wait_ready", "smoke", "up", "wait_job", "copy"]
    assert names.count("destroy") == 1 and names.index("destroy") > names.index("copy")
    assert names[-1] == "leftovers"
    assert [line for line in lines if line.startswith("==> ")][1:] == [
        "==> up", "==> wait", "==> smoke", "==> benchmark", "==> collect", "==> destroy",
        "==> leftovers (pulumi-stack=gpu)", "==> summary: up ok, wait ok, smoke ok, benchmark ok, collect ok"]
    assert "nothing billable left under pulumi-stack=gpu" in lines
    run_dir = tmp_path / "results" / "gpu" / "20260102T030405Z"
    assert (run_dir / "summary_lifecycle_metrics.json").is_file()
    assert (run_dir / "report.md").is_file() and f"report: {run_dir / 'report.md'}" in "\n".join(lines)
    assert "SECRET" not in (run_dir / "outputs.json").read_text()
    assert '"destroyed": true' in (run_dir / "run.json").read_text()
    assert world.open_forwards == 0


@pytest.mark.parametrize("step", list(STEP_CALLS))
def test_failure_in_each_step_still_destroys(tmp_path, step):
    world = World(faults={STEP_CALLS[step]: RuntimeError(f"boom in {step}")})
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_FAILED
    assert_torn_down_after(world, STEP_CALLS[step])
    assert f"    problem: {step} failed: boom in {step}" in lines


def test_failure_of_the_benchmark_up_still_destroys(tmp_path):
    world = World(faults={"up#2": RuntimeError("quota")})
    code, _ = drive(world, tmp_path)
    assert code == bench.EXIT_FAILED
    assert_torn_down_after(world, "up#2")


@pytest.mark.parametrize("step", list(STEP_CALLS))
def test_ctrl_c_in_each_step_still_destroys(tmp_path, step):
    world = World(faults={STEP_CALLS[step]: KeyboardInterrupt()})
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_INTERRUPTED
    assert_torn_down_after(world, STEP_CALLS[step])
    assert f"    problem: interrupted (SIGINT (Ctrl-C)) during {step}" in lines


def test_any_other_base_exception_still_destroys_before_propagating(tmp_path):
    world = World(faults={"wait_ready": SystemExit(3)})
    with pytest.raises(SystemExit):
        drive(world, tmp_path)
    assert_torn_down_after(world, "wait_ready")


def test_failing_smoke_exit_code_is_a_failure(tmp_path):
    world = World(smoke_code=1)
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_FAILED
    assert_torn_down_after(world, "smoke")
    assert any("smoke check exited with 1" in line for line in lines)


def test_missing_benchmark_outputs_fail_the_step(tmp_path):
    class NoBenchmark(FakeBackend):
        def outputs(self) -> dict[str, Any]:
            return {k: v for k, v in super().outputs().items() if not k.startswith("benchmark")}

    world = World()
    lines: list[str] = []
    deps = bench.Deps(backend=NoBenchmark(world), cluster=FakeCluster(world), storage=FakeStorage(world),
                      billing=FakeBilling(world), smoke=lambda argv: 0, sleep=world.sleep, now=lambda: STAMP,
                      out=lines.append)
    code = bench.run(bench.Options(stack="gpu", results=tmp_path), deps)
    assert code == bench.EXIT_FAILED
    assert world.names().count("destroy") == 1
    assert any("no `benchmarkJob` output" in line for line in lines)


def test_select_failure_creates_and_destroys_nothing(tmp_path):
    world = World(faults={"select": RuntimeError("backend login needed")})
    code, _ = drive(world, tmp_path)
    assert code == bench.EXIT_FAILED
    assert world.names() == ["select"]


# --------------------------------------------------------------------------- --keep is the only way out
def test_keep_skips_destroy_but_lists_what_runs(tmp_path):
    world = World(leftovers=["GKE cluster: kimi-k3-1-gpu us-central1-b RUNNING"])
    code, lines = drive(world, tmp_path, "--keep")
    assert code == 0
    assert "destroy" not in world.names()
    assert world.names()[-1] == "leftovers"
    assert any("skipped (--keep)" in line and "pulumi destroy --stack gpu" in line for line in lines)
    assert world.config[bench.BENCHMARK_KEY] == "true"  # the deployed Job matches the stack file


@pytest.mark.parametrize("fault", [RuntimeError("boom"), KeyboardInterrupt()], ids=["failure", "ctrl-c"])
def test_keep_holds_after_a_failure_too(tmp_path, fault):
    world = World(faults={"smoke": fault})
    code, _ = drive(world, tmp_path, "--keep")
    assert code != 0
    assert "destroy" not in world.names()


# Every option of the CLI but --keep, with a value: none of them may skip the destroy.
OTHER_OPTIONS: dict[str, list[str]] = {
    "--skip-benchmark": [],
    "--ramp": [],
    "--ramp-concurrency": ["4"],
    "--destroy-retries": ["0"],
    "--backoff-seconds": ["0"],
    "--retry-wait": ["0"],  # the older spelling of --backoff-seconds, accepted for one release
    "--up-timeout": ["60"],
    "--ready-timeout": ["0"],
    "--benchmark-timeout": ["0"],
    "--destroy-timeout": ["60"],
    "--smoke-timeout": ["60"],
    "--claim-lease-seconds": ["60"],
    "--smoke-args": ["--strict", "--skip", "pd-kv-transfer"],
}
ALWAYS_GIVEN = {"--stack", "--work-dir", "--out", "--results", "-h", "--help"}


def test_option_table_covers_the_parser():
    options = {o for action in bench.build_parser()._actions for o in action.option_strings}
    assert options - ALWAYS_GIVEN - {"--keep"} == set(OTHER_OPTIONS)


@pytest.mark.parametrize("option", list(OTHER_OPTIONS))
def test_no_other_option_skips_destroy(tmp_path, option):
    world = World()
    code, _ = drive(world, tmp_path, option, *OTHER_OPTIONS[option])
    assert code == 0
    assert world.names().count("destroy") == 1


def test_skip_benchmark_stops_after_smoke(tmp_path):
    world = World()
    code, lines = drive(world, tmp_path, "--skip-benchmark")
    assert code == 0
    assert world.counts["up"] == 1 and "wait_job" not in world.names() and "copy" not in world.names()
    assert "==> benchmark: skipped (--skip-benchmark)" in lines


# --------------------------------------------------------------------------- destroy retries
def test_transient_destroy_failure_is_retried_with_backoff(tmp_path):
    world = World(destroy_errors=[RuntimeError('namespace "kimi-k3-1" stuck: waiting for finalizers'),
                                  RuntimeError("Error 400: Cluster is running incompatible operation op-123")])
    code, lines = drive(world, tmp_path)
    assert code == 0, "\n".join(lines)
    assert world.names().count("destroy") == 3
    assert world.sleeps == [60.0, 120.0]
    assert any("finalizers still pending (transient)" in line for line in lines)


def test_transient_destroy_failure_gives_up_after_the_retries(tmp_path):
    world = World(destroy_errors=[RuntimeError("PersistentVolumeClaim models is terminating")] * 10)
    code, lines = drive(world, tmp_path, "--destroy-retries", "2", "--backoff-seconds", "5")
    assert code == bench.EXIT_FAILED
    assert world.names().count("destroy") == 3
    assert world.sleeps == [5.0, 10.0]
    assert "    problem: destroy failed" in lines
    assert any(line.startswith("resume with: pulumi destroy --stack gpu") for line in lines)


def test_unknown_destroy_failure_is_not_retried(tmp_path):
    world = World(destroy_errors=[RuntimeError("error: permission denied on resource projects/x")])
    code, _ = drive(world, tmp_path)
    assert code == bench.EXIT_FAILED
    assert world.names().count("destroy") == 1 and world.sleeps == []


def test_unreachable_cluster_retries_once_with_delete_unreachable(tmp_path):
    world = World(destroy_errors=[RuntimeError(UNREACHABLE)])
    code, lines = drive(world, tmp_path)
    assert code == 0, "\n".join(lines)
    envs = [entry[1] for entry in world.log if entry[0] == "destroy"]
    assert envs == [{}, {"PULUMI_K8S_DELETE_UNREACHABLE": "true"}]
    assert world.sleeps == []


def test_unreachable_again_with_the_env_var_gives_up(tmp_path):
    world = World(destroy_errors=[RuntimeError(UNREACHABLE)] * 5)
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_FAILED
    assert world.names().count("destroy") == 2
    assert any(line.startswith("resume with: PULUMI_K8S_DELETE_UNREACHABLE=true pulumi destroy") for line in lines)


def test_unreachable_then_node_pool_still_deleting_keeps_the_env_var(tmp_path):
    world = World(destroy_errors=[RuntimeError("Unauthorized"), RuntimeError("node pool is still being deleted")])
    code, _ = drive(world, tmp_path)
    assert code == 0
    envs = [entry[1] for entry in world.log if entry[0] == "destroy"]
    assert envs == [{}, pulumi_stack.UNREACHABLE_ENV, pulumi_stack.UNREACHABLE_ENV]


@pytest.mark.parametrize(("text", "reason"), [
    ("the stack is currently locked by 1 lock(s)", "stack locked"),
    ("[409] Conflict: Another update is currently in progress.", "stack locked"),
    ("Error waiting for deleting subnetwork: resourceInUseByAnotherResource", "resource still in use"),
    ("googleapi: Error 400: Operation operation-17 is currently deleting a node pool", "node pool"),
    ("timeout while waiting for state to become 'DONE'", "timeout"),
    ("googleapi: Error 503: backendError", "API rate limit"),
])
def test_transient_patterns(text, reason):
    assert (core.classify(text, pulumi_stack.TRANSIENT_PATTERNS) or "").startswith(reason)
    assert core.classify(text, pulumi_stack.UNREACHABLE_PATTERNS) is None


@pytest.mark.parametrize("text", [UNREACHABLE, "dial tcp 34.1.2.3:443: connect: connection refused",
                                  "Get https://34.1.2.3/api: dial tcp 34.1.2.3:443: i/o timeout",
                                  "error: Unauthorized"])
def test_unreachable_patterns(text):
    assert core.classify(text, pulumi_stack.UNREACHABLE_PATTERNS)


# --------------------------------------------------------------------------- signals and a dead stdout
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_signal_during_up_stops_the_cli_then_destroys_once(tmp_path, signum):
    """A CI timeout (SIGTERM), a closed SSH session (SIGHUP) or Ctrl-C while `pulumi up` runs: the CLI is
    asked to stop gracefully, then the own stack is destroyed exactly once and run.json says so."""
    world = World(faults={"up": signal_self(signum)})
    world.up_seconds = 0.05
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_INTERRUPTED, "\n".join(lines)
    assert world.names().count("interrupt") == 1
    assert_torn_down_after(world, "up")
    record = run_record(tmp_path)
    name = bench.INTERRUPTS[signal.Signals(signum)]
    assert record["steps"] == {"up": "interrupted", "wait": "not run", "smoke": "not run", "benchmark": "not run",
                               "collect": "not run"}
    assert record["stopped_by"] == name and record["why"]["up"].startswith(name)
    assert record["destroy"] == {"result": "finished", "attempts": 1, "env": {}} and record["destroyed"] is True
    assert record["leftover_check"] == "complete" and record["phase"] == "done" and record["finished"]
    assert any(f"!! {name} during up: asking pulumi to stop" in line for line in lines)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_signal_during_a_later_step_destroys_once(tmp_path, signum):
    world = World(faults={"wait_ready": signal_self(signum)})
    code, _ = drive(world, tmp_path)
    assert code == bench.EXIT_INTERRUPTED
    assert "interrupt" not in world.names(), "no CLI was running"
    assert_torn_down_after(world, "wait_ready")
    assert run_record(tmp_path)["steps"]["wait"] == "interrupted"


def test_closed_stdout_during_up_still_destroys_once_and_logs_everything(tmp_path):
    """The reader of the driver's stdout goes away while `up` runs (`| head`, a dead terminal): writes fail
    with BrokenPipeError, the run stops, the destroy and the listing still happen and land in driver.log."""
    read_end, write_end = os.pipe()
    closed: list[str] = []

    def sink(line: str) -> None:
        os.write(write_end, (line + "\n").encode())

    def close_reader() -> None:
        os.close(read_end)
        closed.append("yes")

    world = World(faults={"up": close_reader})
    world.up_seconds = 5
    try:
        code, _ = drive(world, tmp_path, out=sink)
    finally:
        os.close(write_end)
        if not closed:
            os.close(read_end)
    assert code == bench.EXIT_FAILED
    assert world.names().count("interrupt") == 1
    assert_torn_down_after(world, "up")
    record = run_record(tmp_path)
    assert record["stopped_by"].startswith("stdout closed: output closed (BrokenPipeError")
    assert record["steps"]["up"] == "stopped" and record["destroyed"] is True
    log = (tmp_path / "results" / "gpu" / "20260102T030405Z" / "driver.log").read_text()
    assert "==> destroy" in log and "destroy of gpu finished" in log and "nothing billable left" in log


def test_interrupt_during_destroy_explains_and_destroy_goes_on(tmp_path):
    """A first interrupt while the teardown already runs (after a failure) does not stop it."""
    world = World(faults={"smoke": RuntimeError("boom")})
    world.on_destroy = signal_self(signal.SIGINT)
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_INTERRUPTED
    assert any("teardown goes on" in line and "pulumi destroy --stack gpu" in line for line in lines)
    assert "destroy of gpu finished" in lines
    assert world.names()[-1] == "leftovers"
    assert_handlers_restored()


def test_second_interrupt_stops_waiting_with_the_resume_command(tmp_path):
    world = World(faults={"smoke": signal_self(signal.SIGINT)})
    world.on_destroy = signal_self(signal.SIGTERM)
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_INTERRUPTED
    resume = next(line for line in lines if "stopped waiting" in line)
    assert "pulumi destroy --stack gpu" in resume and "&& rm fake://claims/gpu.json" in resume
    assert world.names().count("destroy") == 1 and "leftovers" not in world.names()
    record = run_record(tmp_path)
    assert record["destroy"]["result"] == "interrupted" and record["destroyed"] is False
    assert record["resume"] and record["problems"][-1].startswith("stopped waiting (SIGTERM twice)")
    assert_handlers_restored()


def test_a_hang_up_never_stops_waiting(tmp_path):
    world = World(faults={"smoke": signal_self(signal.SIGHUP)})
    world.on_destroy = signal_self(signal.SIGHUP)
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_INTERRUPTED
    assert "destroy of gpu finished" in lines and world.names()[-1] == "leftovers"


def test_up_that_outlives_its_timeout_is_stopped_and_destroyed(tmp_path):
    class Slow(FakeBackend):
        def up(self, on_output: bench.OnOutput) -> None:
            self.w.hit("up")
            if not self.w.interrupted.wait(5):
                raise AssertionError("never asked to stop")
            raise RuntimeError("error: update canceled")

    world = World()
    lines: list[str] = []
    deps = bench.Deps(backend=Slow(world), cluster=FakeCluster(world), storage=FakeStorage(world),
                      billing=FakeBilling(world), smoke=lambda argv: 0, sleep=world.sleep, now=lambda: STAMP,
                      out=lines.append)
    start = time.monotonic()
    code = bench.run(bench.Options(stack="gpu", results=tmp_path / "results", up_timeout=0.5, cancel_grace=2), deps)
    assert time.monotonic() - start < 5
    assert code == bench.EXIT_FAILED
    assert world.names().count("interrupt") == 1 and world.names().count("destroy") == 1
    assert "pulumi up ran longer than 0 s" in run_record(tmp_path)["why"]["up"]


# --------------------------------------------------------------------------- ownership: lock and claim
DIY_LOCK = ("error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or delete "
            "the lock file with `pulumi cancel`.\n  gs://state/.pulumi/locks/organization/kimi-k3-1/gpu/"
            "ec3a6b52.json: created by alice@build-7 (pid 478) at 2026-01-02T03:00:00Z")


def test_lock_held_by_another_process_destroys_nothing(tmp_path):
    holder = pulumi_stack.lock_holder(DIY_LOCK)
    world = World(faults={"up": bench.StackLockedError(DIY_LOCK, holder)})
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_BUSY
    assert "destroy" not in world.names() and "leftovers" not in world.names()
    message = next(line for line in lines if line.startswith("FAILED up: stack gpu is locked by another update"))
    assert "alice@build-7 (pid 478) since 2026-01-02T03:00:00Z" in message
    assert "Nothing was destroyed" in message and "pulumi cancel --stack gpu" in message
    assert CLAIM_TAG not in world.tags, "the claim is released"
    record = run_record(tmp_path)
    assert record["destroy"]["result"].startswith("not run: another process holds the stack's lock")
    assert record["busy"].startswith("stack gpu is locked") and record["steps"]["up"] == "failed"


def test_lock_holder_is_read_from_the_diy_message_and_absent_for_pulumi_cloud():
    assert pulumi_stack.lock_holder(DIY_LOCK) == ("alice@build-7 (pid 478) since 2026-01-02T03:00:00Z, lock file "
                                                 "gs://state/.pulumi/locks/organization/kimi-k3-1/gpu/ec3a6b52.json")
    assert pulumi_stack.lock_holder("[409] Conflict: Another update is currently in progress.") is None
    assert pulumi_stack.is_locked("[409] Conflict: Another update is currently in progress.")


def test_lock_in_the_benchmark_up_is_a_failure_of_our_own_stack(tmp_path):
    world = World(faults={"up#2": bench.StackLockedError(DIY_LOCK, None)})
    code, _ = drive(world, tmp_path)
    assert code == bench.EXIT_FAILED
    assert world.names().count("destroy") == 1


def test_stack_claimed_by_another_run_is_refused(tmp_path):
    world = World(tags={CLAIM_TAG: "20260101T000000Z.other.7"})
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_BUSY
    assert not {"up", "destroy", "claim", "release"} & set(world.names())
    refusal = next(line for line in lines if line.startswith("REFUSED"))
    assert "claimed by benchmark run 20260101T000000Z.other.7 until" in refusal
    assert "release it with `rm fake://claims/gpu.json`" in refusal
    assert world.tags[CLAIM_TAG] == "20260101T000000Z.other.7"


def test_a_backend_without_compare_and_set_is_refused_before_anything(tmp_path):
    """Pulumi Cloud's stack tags have no compare-and-set: two drivers could both claim, so the driver refuses the
    backend in one line, claiming, deploying and destroying nothing (issue 45)."""
    world = World()
    backend = FakeBackend(world)
    backend.claims = lambda: type("TagLike", (FakeClaims,), {"atomic": False})(world)  # type: ignore[method-assign]
    code, lines = drive(world, tmp_path, backend=backend)
    assert code == bench.EXIT_BUSY
    assert not {"up", "destroy", "claim", "release"} & set(world.names())
    [refusal] = [line for line in lines if line.startswith("REFUSED")]
    assert "backend offers no compare-and-set (fake://claims/gpu.json), so two runs could both claim it" in refusal
    assert "`pulumi login gs://<bucket>`" in refusal


def test_stack_with_resources_it_did_not_create_is_refused(tmp_path):
    world = World(resources=12)
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_BUSY
    assert not {"up", "destroy"} & set(world.names())
    assert any("already holds 12 resource(s) that this run did not create" in line for line in lines)


def test_the_claim_lasts_from_before_up_to_after_the_destroy(tmp_path):
    world = World()
    assert drive(world, tmp_path)[0] == 0
    claims = [(i, entry) for i, entry in enumerate(world.log) if entry[0] in ("claim", "release")]
    (set_at, (_, run_id)), (released_at, released) = claims
    assert run_id.startswith("20260102T030405Z.") and released == ("release", run_id)
    assert set_at < world.names().index("up") and released_at > world.names().index("destroy")
    assert run_record(tmp_path)["run_id"] == run_id


def test_a_failed_destroy_keeps_the_claim_and_says_how_to_release_it(tmp_path):
    world = World(destroy_errors=[RuntimeError("error: permission denied")])
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_FAILED
    assert CLAIM_TAG in world.tags
    assert any(line.startswith("resume with: pulumi destroy --stack gpu") and "rm fake://claims/gpu.json" in line
               for line in lines)


# --------------------------------------------------------------------------- leftovers, config, smoke wiring
def test_leftovers_make_the_run_fail(tmp_path):
    world = World(leftovers=["disk: pvc-123 us-central1-b 2048 hyperdisk-ml"])
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_FAILED
    assert "    disk: pvc-123 us-central1-b 2048 hyperdisk-ml" in lines
    assert "    problem: 1 billable resource(s) left" in lines
    assert ("leftovers", "gpu", "my-proj", "kimi-k3-1-gpu") in world.log


def test_incomplete_leftover_check_fails_and_never_says_nothing_left(tmp_path):
    class Broken(FakeBilling):
        def leftovers(self, stack_label: str, project: str | None = None, network: str | None = None) -> list[str]:
            raise leftovers.LeftoverCheckError("disk: permission denied", found=[])

    world = World()
    lines: list[str] = []
    deps = bench.Deps(backend=FakeBackend(world), cluster=FakeCluster(world), storage=FakeStorage(world),
                      billing=Broken(world), smoke=lambda argv: 0, sleep=world.sleep, now=lambda: STAMP,
                      out=lines.append)
    assert bench.run(bench.Options(stack="gpu", results=tmp_path), deps) == bench.EXIT_FAILED
    assert not any(line.startswith("nothing billable left") for line in lines)


def test_stack_label_is_the_gcp_label_value(tmp_path):
    world = World()
    drive(world, tmp_path, stack="Team.GPU")
    assert [entry[1] for entry in world.log if entry[0] == "leftovers"] == ["team-gpu"]


def test_leftover_commands_filter_on_the_stack_label():
    commands = leftovers.leftover_commands("gpu", "my-proj", "kimi-k3-1-gpu")
    by_label = [argv for what, argv in commands if what not in ("NEG", "Cloud Router (NAT)")]
    assert {" ".join(argv[:3]) for argv in by_label} >= {
        "gcloud compute instances", "gcloud compute disks", "gcloud compute forwarding-rules",
        "gcloud container clusters", "gcloud storage buckets", "gcloud artifacts repositories"}
    for argv in by_label:
        assert any(a.endswith("abels.pulumi-stack=gpu") and a.startswith("--filter=") for a in argv), argv
        assert "--project=my-proj" in argv and argv[3] == "list"
    [repos] = [argv for what, argv in commands if what == "Artifact Registry repository"]
    assert "--location=all" in repos  # the engine image's repository sits in the stack's region
    for what, argv in commands:
        if what in ("NEG", "Cloud Router (NAT)"):
            assert "--filter=network~/networks/kimi-k3-1-gpu$" in argv
    assert all(what not in ("NEG", "Cloud Router (NAT)") for what, _ in leftovers.leftover_commands("gpu"))


def test_gcloud_billing_reports_found_and_failed_listings():
    timeouts = []

    def fake_run(argv: list[str], timeout: float) -> str:
        if argv[1:3] == ["auth", "list"]:
            return "ci@my-proj.iam.gserviceaccount.com\n"
        timeouts.append(timeout)
        if argv[2] == "disks":
            return "pvc-1  us-central1-b\t100  pd-balanced\n"
        if argv[2] == "addresses":
            raise core.StepError("gcloud compute addresses: ERROR: permission denied")
        return ""

    with pytest.raises(leftovers.LeftoverCheckError) as caught:
        leftovers.GcloudBilling(run=fake_run).leftovers("gpu", "my-proj")
    assert caught.value.found == ["disk: pvc-1 us-central1-b 100 pd-balanced"]
    assert "IP address: ERROR: permission denied" in str(caught.value)
    assert set(timeouts) == {leftovers.LISTING_TIMEOUT_SECONDS}


def test_a_hung_listing_fails_the_check_within_its_timeout():
    start = time.monotonic()
    with pytest.raises(core.StepError, match="no answer within 0 s"):
        core.run_command([sys.executable, "-c", "import time; time.sleep(30)"], 0.3)
    assert time.monotonic() - start < 5


def test_leftovers_cli_reads_the_stack_config_and_fails_on_leftovers(capsys):
    config = {"gcp.project": "my-proj", "track": "gpu"}

    class Billing:
        def __init__(self, found: list[str]):
            self.found, self.calls = found, []

        def leftovers(self, label: str, project: str | None = None, network: str | None = None) -> list[str]:
            self.calls.append((label, project, network))
            return self.found

    kept = Billing(["bucket: my-proj-kimi-k3-1-weights"])
    assert leftovers.main(["--stack", "gpu"], billing=kept, config=lambda stack, key: config.get(key)) == 0
    assert kept.calls == [("gpu", "my-proj", "kimi-k3-1-gpu")]
    assert "nothing billable left under pulumi-stack=gpu" in capsys.readouterr().out
    left = Billing(["disk: pvc-1 us-central1-b 100 hyperdisk-ml"])
    assert leftovers.main(["--stack", "gpu"], billing=left, config=lambda stack, key: config.get(key)) == 1
    assert "1 resource(s) still billable under pulumi-stack=gpu" in capsys.readouterr().out
    assert leftovers.main(["--stack", "gpu", "--json"], billing=left, config=lambda stack, key: config.get(key)) == 1
    assert json.loads(capsys.readouterr().out) == {
        "stack": "gpu", "label": "gpu", "project": "my-proj",
        "leftovers": ["disk: pvc-1 us-central1-b 100 hyperdisk-ml"], "kept": [], "complete": True, "problem": None}

    class Failing(Billing):
        def leftovers(self, label: str, project: str | None = None, network: str | None = None) -> list[str]:
            raise leftovers.LeftoverCheckError("disks: permission denied", found=list(self.found))

    assert leftovers.main(["--stack", "gpu", "--json"], billing=Failing(["bucket: my-proj-kimi-k3-1-weights"]),
                          config=lambda stack, key: config.get(key)) == 1, "an incomplete check is no all-clear"
    report = json.loads(capsys.readouterr().out)
    assert (report["leftovers"], report["complete"]) == ([], False)
    assert report["kept"] == ["bucket: my-proj-kimi-k3-1-weights"]
    assert report["problem"] == "disks: permission denied"


@pytest.mark.parametrize(("previous", "expected"), [(None, None), ("false", "false")])
def test_benchmark_flag_is_restored_after_destroy(tmp_path, previous, expected):
    world = World(config={bench.BENCHMARK_KEY: previous} if previous else None)
    assert drive(world, tmp_path)[0] == 0
    assert world.config.get(bench.BENCHMARK_KEY) == expected
    # The run id pointed the reports at this run's own folder and is unset again afterwards.
    assert ("set_config", bench.RUN_ID_KEY, "20260102t030405z") in world.log
    assert bench.RUN_ID_KEY not in world.config


def test_smoke_gets_the_router_and_every_serving_pod(tmp_path):
    world = World()
    drive(world, tmp_path, "--smoke-args", "--strict")
    argv = next(entry[1] for entry in world.log if entry[0] == "smoke")
    assert argv[:4] == ("--endpoint", "http://127.0.0.1:10001", "--track", "gpu")
    urls = [argv[i + 1] for i, a in enumerate(argv) if a == "--metrics-url"]
    assert [u.split("=")[0] for u in urls] == ["router", "prefill", "prefill", "decode"]
    assert all(u.endswith("/metrics") for u in urls)
    assert argv[-1] == "--strict"
    forwards = [entry[1:] for entry in world.log if entry[0] == "port_forward"]
    assert forwards == [("svc/kimi-k3-1-epp", 80), ("svc/kimi-k3-1-epp", 9090), ("pod/p0", 8000),
                        ("pod/p1", 8000), ("pod/d0", 8200)]
    selectors = [entry[1] for entry in world.log if entry[0] == "pods"]
    # Every P/D pod serves in DP hybrid-LB mode, so the serving labels alone pick the pods to scrape.
    assert selectors == [f"{cloud.SERVING_SELECTOR},llm-d.ai/role={role}" for role in ("prefill", "decode")]


@pytest.mark.parametrize("track,selector", [
    ("gpu", "llm-d.ai/role=decode,disaggregatedset.x-k8s.io/slice={}"),
    ("tpu", "leaderworkerset.sigs.k8s.io/group-index={}"),
])
def test_smoke_asks_one_serving_pod_of_every_slice(tmp_path, track, selector):
    world = World(config={bench.TRACK_KEY: track})
    world.extra_outputs = {"servingSlices": 3}
    drive(world, tmp_path, stack=track)
    argv = next(entry[1] for entry in world.log if entry[0] == "smoke")
    slices = [argv[i + 1] for i, a in enumerate(argv) if a == "--slice-endpoint"]
    assert [s.split("=", 1)[0] for s in slices] == ["0", "1", "2"]
    selectors = [entry[1] for entry in world.log if entry[0] == "pods"]
    per_slice = [s for s in selectors if s.startswith(cloud.SERVING_SELECTOR) and s[-2] == "="][:3]
    assert per_slice == [f"{cloud.SERVING_SELECTOR},{selector.format(i)}" for i in range(3)]
    # The smoke check talks to the pod's serving port (the decode sidecar, the TPU leader's API).
    assert ("port_forward", "pod/d0" if track == "gpu" else "pod/engine-0", 8000) in world.log


def test_gateway_mode_smoke_uses_the_gateway_address(tmp_path):
    world = World()
    world.extra_outputs = {"routerMode": "gateway", "gatewayName": "llm-d-inference-gateway"}
    drive(world, tmp_path)
    argv = next(entry[1] for entry in world.log if entry[0] == "smoke")
    assert argv[:2] == ("--endpoint", "http://10.0.0.10")
    assert ("gateway_address", "llm-d-inference-gateway") in world.log
    assert ("svc/kimi-k3-1-epp", 80) not in [entry[1:] for entry in world.log if entry[0] == "port_forward"]


def test_smoke_on_tpu_uses_engine_metrics_and_user_urls_replace_them(tmp_path):
    world = World(config={bench.TRACK_KEY: "tpu"})
    drive(world, tmp_path, stack="tpu")
    argv = next(entry[1] for entry in world.log if entry[0] == "smoke")
    assert [argv[i + 1].split("=")[0] for i, a in enumerate(argv) if a == "--metrics-url"] == ["router", "engine"]
    assert "--engine" not in argv  # the default vLLM-TorchTPU

    world = World(config={bench.TRACK_KEY: "tpu", bench.TPU_ENGINE_KEY: "sglang-torchtpu"})
    drive(world, tmp_path, stack="tpu")
    argv = next(entry[1] for entry in world.log if entry[0] == "smoke")
    assert argv[argv.index("--engine") + 1] == "sglang"  # a user's SGLang build exports SGLang's metrics

    world = World()
    drive(world, tmp_path, "--smoke-args", "--metrics-url", "router=http://x/metrics")
    argv = next(entry[1] for entry in world.log if entry[0] == "smoke")
    assert [a for a in argv if "=" in a] == ["router=http://x/metrics"]
    assert world.counts["port_forward"] == 1


# --------------------------------------------------------------------------- the real Automation API adapter
class _Workspace:
    def __init__(self) -> None:
        self.env_vars: dict[str, str] = {"PULUMI_CONFIG_PASSPHRASE": "x"}
        self.pulumi_command = type("Cmd", (), {"command": sys.executable})()


class _Stack:
    """What AutomationBackend uses of `pulumi.automation.Stack`."""

    def __init__(self, up_error: Exception | None = None) -> None:
        self.workspace = _Workspace()
        self.calls: list[dict[str, Any]] = []
        self.up_error = up_error

    def destroy(self, **kwargs: Any) -> None:
        self.calls.append({"kwargs": kwargs, "env": dict(self.workspace.env_vars)})

    def up(self, **kwargs: Any) -> None:
        self.calls.append({"kwargs": kwargs})
        if self.up_error:
            raise self.up_error


def test_automation_destroy_passes_env_refreshes_and_restores_the_workspace():
    backend = pulumi_stack.AutomationBackend(Path("."))
    stack = _Stack()
    backend._stack = stack
    backend.destroy(on_output=print, env=pulumi_stack.UNREACHABLE_ENV)
    (call,) = stack.calls
    assert call["kwargs"]["refresh"] is True and call["kwargs"]["continue_on_error"] is True
    assert call["env"] == {"PULUMI_CONFIG_PASSPHRASE": "x", "PULUMI_K8S_DELETE_UNREACHABLE": "true"}
    assert stack.workspace.env_vars == {"PULUMI_CONFIG_PASSPHRASE": "x"}


def test_automation_up_runs_the_policy_pack_and_turns_a_held_lock_into_stack_locked(tmp_path):
    from pulumi.automation import errors
    from pulumi.automation._cmd import CommandResult

    backend = pulumi_stack.AutomationBackend(tmp_path)
    backend._stack = _Stack()
    backend.up(on_output=print)
    assert backend._stack.calls[0]["kwargs"]["policy_packs"] == [str((tmp_path / "policy").resolve())]
    # The Automation API's own classification of the CLI's lock message (errors.create_command_error).
    locked = errors.create_command_error(CommandResult(stdout="", stderr=DIY_LOCK, code=255))
    assert isinstance(locked, errors.ConcurrentUpdateError)
    backend._stack = _Stack(up_error=locked)
    with pytest.raises(pulumi_stack.StackLockedError) as caught:
        backend.up(on_output=print)
    assert caught.value.holder.startswith("alice@build-7 (pid 478)")


@pytest.mark.skipif(not hasattr(os, "setsid"), reason="POSIX sessions only")
def test_session_wrapper_runs_the_real_command_in_a_new_session_and_records_its_pid(tmp_path):
    wrapper = pulumi_stack.session_wrapper(sys.executable, tmp_path)
    out = subprocess.run([str(wrapper), "-c", "import os, sys; print(os.getsid(0), os.getpid(), sys.argv[1])", "arg"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[2] == "arg"
    assert int(out[0]) != os.getsid(0)
    assert (tmp_path / "pid").read_text() == out[1]


@pytest.mark.skipif(not hasattr(os, "setsid"), reason="POSIX sessions only")
def test_interrupt_sends_one_sigint_to_the_running_cli(tmp_path):
    """The real signal path: the CLI (here a Python stand-in, started through the session wrapper) gets
    SIGINT, which it reports as a KeyboardInterrupt, only while an up/destroy runs."""
    backend = pulumi_stack.AutomationBackend(tmp_path)
    wrapper = pulumi_stack.session_wrapper(sys.executable, Path(backend._folder.name))
    script = "import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    print('stopped gracefully')\n"
    assert backend.interrupt() is False, "no CLI runs"
    proc = subprocess.Popen([str(wrapper), "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not backend._pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # past the stand-in's imports, inside its sleep
        backend._running = True
        assert backend.interrupt() is True
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert out.strip() == "stopped gracefully"


def test_kept_checkpoint_bucket_is_not_a_leftover_and_needs_no_config(tmp_path):
    """The bucket a destroy keeps by design does not fail the run, and nothing is written to the stack's config for
    the next `up` (which takes the bucket back by itself: test_up_destroy_up_needs_nothing_set)."""
    world = World(leftovers=["bucket: my-proj-kimi-k3-1-weights"])
    code, lines = drive(world, tmp_path)
    assert code == 0, "\n".join(lines)
    assert ("set_config", bench.BUCKET_EXISTS_KEY, "true") not in world.log
    assert any("kept by design" in line for line in lines)
    assert any("the next up takes it back, nothing to set" in line for line in lines)


def test_deleted_checkpoint_bucket_left_behind_is_a_leftover(tmp_path):
    world = World(leftovers=["bucket: my-proj-kimi-k3-1-weights"],
                  config={bench.DELETE_CHECKPOINT_KEY: "true"})
    code, _ = drive(world, tmp_path)
    assert code == bench.EXIT_FAILED
    assert ("set_config", bench.BUCKET_EXISTS_KEY, "true") not in world.log


def test_a_trickling_router_cannot_delay_the_teardown_past_the_smoke_deadline(tmp_path):
    """The real smoke check against a router that answers a byte at a time: the smoke step fails at its total
    deadline and the destroy follows right after, however long the router would go on."""
    from tests.tools.live.test_smoke import Trickle, serve

    with serve(Trickle) as router:
        class Forwarding(FakeCluster):
            @contextlib.contextmanager
            def port_forward(self, namespace: str, target: str, port: int) -> Iterator[str]:
                self.w.hit("port_forward", target, port)
                yield router

        world = World()
        lines: list[str] = []
        deps = bench.Deps(backend=FakeBackend(world), cluster=Forwarding(world), storage=FakeStorage(world),
                          billing=FakeBilling(world), sleep=world.sleep, now=lambda: STAMP,
                          out=lines.append)
        start = time.monotonic()
        code = bench.main(["--stack", "gpu", "--work-dir", str(tmp_path), "--out", str(tmp_path / "results"),
                           "--smoke-args", "--request-timeout", "1", "--step-timeout", "60",
                           "--backoff-seconds", "0.05", "--total-timeout", "2"], deps=deps)
        took = time.monotonic() - start
    assert code == bench.EXIT_FAILED
    assert took < 5, f"teardown started only after {took:.1f}s"
    names = world.names()
    assert names.count("destroy") == 1 and names[-1] == "leftovers" and "wait_job" not in names
    assert run_record(tmp_path)["steps"]["smoke"] == "failed"
    assert any(line.startswith("FAIL completions: POST /v1/completions: timed out after") for line in lines)


# --------------------------------------------------------------------------- the output path never blocks
def test_console_never_blocks_its_caller_and_a_stuck_sink_never_stops_the_log(tmp_path):
    released = threading.Event()
    console = core.Console(sink=lambda line: released.wait(10))
    console.open_log(tmp_path / "driver.log")
    start = time.monotonic()
    for i in range(500):
        console(f"line {i}")
    assert time.monotonic() - start < 0.5
    deadline = time.monotonic() + 5
    while (tmp_path / "driver.log").read_text().count("\n") < 500:
        assert time.monotonic() < deadline, "the log stopped behind a stuck sink"
        time.sleep(0.05)
    released.set()
    console.close()


def test_a_sink_whose_output_comes_back_into_the_console_does_not_deadlock():
    """The smoke-step deadlock of issue 21: the sink's print went back into the console while it held its lock."""
    seen: list[str] = []

    def sink(line: str) -> None:
        seen.append(line)
        if not line.startswith("echo"):
            console(f"echo {line}")

    console = core.Console(sink=sink)
    console("a")
    deadline = time.monotonic() + 5
    while len(seen) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    console.close()
    assert seen == ["a", "echo a"]


def test_help_and_readme_state_every_exit_code():
    help_text = " ".join(bench.build_parser().format_help().split())
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    for code in (bench.EXIT_OK, bench.EXIT_FAILED, bench.EXIT_USAGE, bench.EXIT_BUSY, bench.EXIT_INTERRUPTED):
        assert f" {code} " in help_text
        assert f"\n| {code} | " in readme


# --------------------------------------------------------------------------- load per slice (docs/scaling.md)
class _SliceMetrics(ThreadingHTTPServer):
    """Loopback engines: pod N's finished-request counter grows by N x 10 between the two scrapes."""

    daemon_threads = True

    def __init__(self) -> None:
        self.scrapes: dict[str, int] = {}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(handler) -> None:  # noqa: N805
                pod = handler.path.split("/")[1]
                seen = self.scrapes[pod] = self.scrapes.get(pod, 0) + 1
                count = 100 + (seen - 1) * 10 * int(pod[1:])
                body = (f'vllm:request_success_total{{finished_reason="stop"}} {count}\n').encode()
                handler.send_response(200)
                handler.send_header("Content-Type", "text/plain")
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_benchmark_writes_the_load_of_every_slice(tmp_path):
    server = _SliceMetrics()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    world = World()
    world.extra_outputs = {"servingSlices": 2}

    class Cluster(FakeCluster):
        def pods(self, namespace: str, selector: str) -> list[str]:
            self.w.hit("pods", selector)
            if "disaggregatedset.x-k8s.io/slice=" in selector:
                return [f"pod/p{int(selector.rsplit('=', 1)[1]) + 1}"]
            return super().pods(namespace, selector)

        @contextlib.contextmanager
        def port_forward(self, namespace: str, target: str, port: int) -> Iterator[str]:
            self.w.hit("port_forward", target, port)
            yield f"{base}/{target.split('/')[1]}" if port == 8200 and target.startswith("pod/p") else base

    lines: list[str] = []
    deps = bench.Deps(backend=FakeBackend(world), cluster=Cluster(world), storage=FakeStorage(world),
                      billing=FakeBilling(world), smoke=lambda argv: 0, sleep=world.sleep, now=lambda: STAMP,
                      out=lines.append)
    try:
        bench.main(["--stack", "gpu", "--work-dir", str(tmp_path), "--out", str(tmp_path / "results")], deps=deps)
    finally:
        server.shutdown()
        server.server_close()
    run = tmp_path / "results" / "gpu" / "20260102T030405Z"
    load = json.loads((run / "slices.json").read_text())
    assert load["slices"] == {"0": {"requests": 10.0, "share": 10 / 30}, "1": {"requests": 20.0, "share": 20 / 30}}
    assert "slice 1: 20 requests (67%)" in lines
    # report.md gets the same figures as a table (tools.live.bench_steps._write_report appends slice_load_table).
    assert "| 1 | 20 | 67% |" in bench_steps.slice_load_table(load)


def test_slice_load_without_a_reading_says_not_measured():
    load = bench_steps.slice_load({"0": 5.0, "1": None}, {"0": 9.0, "1": 3.0})
    assert load["slices"]["1"] == {"requests": None, "share": None}
    assert bench_steps.slice_load_lines(load) == ["slice 0: 4 requests (100%)", "slice 1: not measured"]
    assert "| 1 | not measured |  |" in bench_steps.slice_load_table(load)


def test_a_terminal_that_never_takes_output_cannot_hold_the_signal_or_the_teardown(tmp_path, monkeypatch):
    """The signal path does not go through the output path: with a sink that blocks forever (a paused terminal,
    a pipe nobody reads), SIGTERM still leaves the step, the destroy runs once and driver.log has every line.
    The console gives up on the sink after DRAIN_SECONDS; 1 s here instead of 5 proves the same bound."""
    monkeypatch.setattr(core.Console, "DRAIN_SECONDS", 1.0)
    stuck = threading.Event()
    world = World(faults={"wait_ready": signal_self(signal.SIGTERM)})
    start = time.monotonic()
    code, _ = drive(world, tmp_path, out=lambda line: stuck.wait(60))
    took = time.monotonic() - start
    stuck.set()
    assert code == bench.EXIT_INTERRUPTED and took < 15, took
    assert_torn_down_after(world, "wait_ready")
    log = (tmp_path / "results" / "gpu" / "20260102T030405Z" / "driver.log").read_text()
    assert "==> destroy" in log and "==> summary:" in log


def test_leftovers_without_a_gcloud_login_is_one_line_in_seconds(capsys, monkeypatch):
    """No active account: one line naming the fix, before any listing (each would print gcloud's hint)."""
    for name in leftovers.CREDENTIAL_OVERRIDES:
        monkeypatch.delenv(name, raising=False)
    calls = []

    def fake_run(argv: list[str], timeout: float) -> str:
        calls.append(argv)
        return ""  # `gcloud auth list` with no active account prints nothing

    start = time.monotonic()
    code = leftovers.main(["--stack", "gpu", "--project", "my-proj"], billing=leftovers.GcloudBilling(run=fake_run))
    assert code == core.EXIT_USAGE and time.monotonic() - start < 10
    assert [argv[1:3] for argv in calls] == [["auth", "list"]]
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: gcloud has no active account: run `gcloud auth login`")


def test_the_same_listing_error_is_said_once():
    def fake_run(argv: list[str], timeout: float) -> str:
        if argv[1:3] == ["auth", "list"]:
            return "me@example.com\n"
        raise core.StepError(f"{' '.join(argv[:3])}: ERROR: network unreachable")

    with pytest.raises(leftovers.LeftoverCheckError) as caught:
        leftovers.GcloudBilling(run=fake_run).leftovers("gpu", "my-proj")
    assert str(caught.value).count("network unreachable") == 1, str(caught.value)
    assert str(caught.value).startswith("VM instance, disk, forwarding rule, IP address, GKE cluster, bucket, "
                                        "Artifact Registry repository: ")


def test_leftovers_reads_the_stack_file_without_the_pulumi_cli(monkeypatch):
    """The committed stack file holds gcp.project: read as the CLI reads it, no `pulumi config get` needed."""
    monkeypatch.setenv("PATH", "/nonexistent")
    assert leftovers._config("gpu", "gcp.project") == "my-gcp-project"
    assert leftovers._config("gpu", "track") == "gpu"
    with pytest.raises(leftovers.ConfigUnavailableError, match="pulumi CLI is not on PATH"):
        leftovers._config("no-such-stack", "gcp.project")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_smoke_subprocess_dies_with_a_sigkilled_driver():
    """The driver starts the smoke check through bench_steps.smoke_command; SIGKILL the driver (no handler runs)
    and the kernel kills the check too."""
    parent = ("import subprocess, sys\n"
              "from tools.live import bench_steps\n"
              "bench_steps.SMOKE_COMMAND = ('-c', 'import time; time.sleep(60)')\n"
              "child = subprocess.Popen(bench_steps.smoke_command([]))\n"
              "print(child.pid, flush=True)\n"
              "child.wait()\n")
    driver = subprocess.Popen([sys.executable, "-c", parent], cwd=bench_steps.ROOT, stdout=subprocess.PIPE, text=True)
    try:
        child = int(driver.stdout.readline())
        time.sleep(0.3)  # the child has run prctl and exec'd its command
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(5)
        deadline = time.monotonic() + 5
        while Path(f"/proc/{child}").exists() and "Z" not in Path(f"/proc/{child}/stat").read_text().split()[2]:
            assert time.monotonic() < deadline, "the smoke subprocess outlived its driver"
            time.sleep(0.05)
    finally:
        if driver.poll() is None:
            driver.kill()


@pytest.mark.parametrize("kind", ["gs", "file"])
def test_a_claim_is_one_compare_and_set_and_only_its_holder_renews_or_removes_it(tmp_path, monkeypatch, kind):
    from tests.fakes.gcsemulator import GcsEmulator
    from tools.live import claims

    def check(store: claims.ClaimStore) -> None:
        a = claims.Claim("run-a", "gpu", "2026-01-01T00:00:00+00:00")
        assert store.create(a) is None
        assert store.create(claims.Claim("run-b", "gpu", "2026-01-01T00:00:00+00:00")).run == "run-a"
        held = store.get("gpu")
        assert not store.remove(claims.Claim("run-b", "gpu", held.deadline, version=held.version))
        renewed = store.renew(held, "2026-01-01T00:30:00+00:00")
        assert renewed is not None and store.renew(held, "2026-01-02T00:00:00+00:00") is None, "a stale holder"
        assert [c.run for c in store.all()] == ["run-a"] and store.all()[0].expired(datetime(2026, 1, 1, 1, tzinfo=UTC))
        assert store.remove(renewed) and store.get("gpu") is None

    if kind == "file":
        check(claims.store_for(f"file://{tmp_path}", "kimi-k3-1"))
        return
    with GcsEmulator() as gcs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
        from google.cloud import storage

        storage.Client().create_bucket("state")
        check(claims.store_for("gs://state/team", "kimi-k3-1"))


class CloudBackend(FakeBackend):
    """`up` meets the checkpoint bucket as the provider would: the program's own choice (preflight.bucket_use, asked
    of the fake Google) must not create a bucket that exists; a destroy keeps it (storage.deleteCheckpointOnDestroy
    off), with the labels the stack gave it."""

    def __init__(self, world: World, google: Any):
        super().__init__(world)
        from components.config import parse_config

        raw = {k.removeprefix("kimi-k3-1:"): v for k, v in stack_document("gpu")["config"].items()
               if k.startswith("kimi-k3-1:")}
        self.cfg = parse_config(raw, "gpu")
        self.google = google
        self.uses: list[str] = []

    def up(self, on_output: bench.OnOutput) -> None:
        from components.checks import preflight
        from components.plan.naming import resource_labels

        client = preflight.Google(requests.Session(), self.google.url, 5.0)
        use = preflight.bucket_use(self.cfg, "gpu", google=client)
        self.uses.append(use)
        buckets, name = self.google.state["buckets"], self.cfg.bucket_name
        if use == "create" and name in buckets:
            raise RuntimeError(f"error: googleapi: Error 409: the bucket {name} already exists")
        buckets[name] = {"kind": "storage#bucket", "name": name, "projectNumber": "123456789012",
                         "labels": resource_labels(self.cfg, "gpu")}
        super().up(on_output)


def test_up_destroy_up_needs_nothing_set(tmp_path):
    """Up, destroy (the bucket kept), up again, with no config change: the second up takes the kept bucket back
    (import) instead of failing to create it, and nothing is written to the stack's config."""
    with fakegoogle.FakeGoogle() as google:
        world = World(leftovers=["bucket: my-proj-kimi-k3-1-weights"])
        backend = CloudBackend(world, google)
        first, lines = drive(world, tmp_path / "1", backend=backend)
        assert first == 0, "\n".join(lines)
        second, lines = drive(world, tmp_path / "2", backend=backend)
        assert second == 0, "\n".join(lines)
    # Each run ups twice (the benchmark is turned on for the second): after the first, the bucket is in the stack's
    # state, where the import option is a no-op; after the destroy it is imported back.
    assert backend.uses == ["create", "import", "import", "import"]
    assert world.names().count("up") == 4 and world.names().count("destroy") == 2
    assert not [entry for entry in world.log if entry[0] == "set_config" and entry[1] == bench.BUCKET_EXISTS_KEY]
    assert any("the next up takes it back, nothing to set" in line for line in lines)

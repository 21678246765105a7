"""The benchmark driver (`tools.bench`) against a fake Automation API, cluster, bucket and billing layer.

The point: whatever fails (or Ctrl-C) in up, wait, smoke, benchmark or collect, destroy runs exactly once
afterwards and the exit code is non-zero; `--keep` is the only way to skip it; destroy retries only the
known transient failures; the leftover check runs last and decides the exit code too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tools import bench

STAMP = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
UNREACHABLE = "error: configured Kubernetes cluster is unreachable: dial tcp: lookup 34.1.2.3.nip: no such host"


# --------------------------------------------------------------------------- fakes
class World:
    """Shared state of the fakes: one call log, faults keyed by call name (`up#2` = the second `up`)."""

    def __init__(self, faults: Mapping[str, BaseException] | None = None, destroy_errors: list[Exception] | None = None,
                 config: Mapping[str, str] | None = None, leftovers: list[str] | None = None, smoke_code: int = 0):
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

    def hit(self, name: str, *args: Any) -> None:
        self.counts[name] += 1
        self.log.append((name, *args))
        fault = self.faults.get(f"{name}#{self.counts[name]}") or self.faults.get(name)
        if fault is not None:
            raise fault

    def names(self) -> list[str]:
        return [entry[0] for entry in self.log]

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


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

    def up(self, on_output: bench.OnOutput) -> None:
        on_output("Updating (gpu):")
        self.w.hit("up")

    def outputs(self) -> dict[str, Any]:
        outputs = {"clusterName": "kimi-k3-1-gpu", "kubeconfig": "apiVersion: v1  # SECRET", "namespace": "kimi-k3-1",
                   "bucketUri": "gs://my-proj-kimi-k3-1-weights",
                   "routerService": "kimi-k3-1-epp", "servingZone": "us-central1-b", "nodePools": ["a", "b"]}
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


def drive(world: World, tmp_path: Path, *args: str, stack: str = "gpu") -> tuple[int, list[str]]:
    lines: list[str] = []

    def smoke(argv: list[str]) -> int:
        world.hit("smoke", tuple(argv))
        return world.smoke_code

    deps = bench.Deps(backend=FakeBackend(world), cluster=FakeCluster(world), storage=FakeStorage(world),
                      billing=FakeBilling(world), smoke=smoke, sleep=world.sleep, now=lambda: STAMP,
                      out=lines.append)
    code = bench.main(["--stack", stack, "--work-dir", str(tmp_path), "--results", str(tmp_path / "results"),
                       *args], deps=deps)
    return code, lines


# The call that carries out each step, in order; a fault there fails that step.
STEP_CALLS = {"up": "up#1", "wait": "wait_ready", "smoke": "smoke", "benchmark": "wait_job", "collect": "copy"}
ORDER = ["up", "wait_ready", "smoke", "wait_job", "copy"]


def assert_torn_down_after(world: World, call: str) -> None:
    names = world.names()
    assert names.count("destroy") == 1, names
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
    assert f"    problem: interrupted (Ctrl-C) during {step}" in lines


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
    "--destroy-retries": ["0"],
    "--retry-wait": ["0"],
    "--ready-timeout": ["0"],
    "--benchmark-timeout": ["0"],
    "--smoke-args": ["--strict", "--skip", "pd-kv-transfer"],
}
ALWAYS_GIVEN = {"--stack", "--work-dir", "--results", "-h", "--help"}


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
    code, lines = drive(world, tmp_path, "--destroy-retries", "2", "--retry-wait", "5")
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
    assert envs == [{}, bench.UNREACHABLE_ENV, bench.UNREACHABLE_ENV]


@pytest.mark.parametrize(("text", "reason"), [
    ("the stack is currently locked by 1 lock(s)", "stack locked"),
    ("[409] Conflict: Another update is currently in progress.", "stack locked"),
    ("Error waiting for deleting subnetwork: resourceInUseByAnotherResource", "resource still in use"),
    ("googleapi: Error 400: Operation operation-17 is currently deleting a node pool", "node pool"),
    ("timeout while waiting for state to become 'DONE'", "timeout"),
    ("googleapi: Error 503: backendError", "API rate limit"),
])
def test_transient_patterns(text, reason):
    assert (bench.classify(text, bench.TRANSIENT_PATTERNS) or "").startswith(reason)
    assert bench.classify(text, bench.UNREACHABLE_PATTERNS) is None


@pytest.mark.parametrize("text", [UNREACHABLE, "dial tcp 34.1.2.3:443: connect: connection refused",
                                  "Get https://34.1.2.3/api: dial tcp 34.1.2.3:443: i/o timeout",
                                  "error: Unauthorized"])
def test_unreachable_patterns(text):
    assert bench.classify(text, bench.UNREACHABLE_PATTERNS)


# --------------------------------------------------------------------------- Ctrl-C during teardown
def test_second_ctrl_c_during_destroy_explains_and_destroy_goes_on(tmp_path):
    world = World(faults={"smoke": KeyboardInterrupt()})
    world.on_destroy = lambda: signal.raise_signal(signal.SIGINT)
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_INTERRUPTED
    assert any("teardown goes on" in line and "pulumi destroy --stack gpu" in line for line in lines)
    assert "destroy of gpu finished" in lines
    assert world.names()[-1] == "leftovers"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_third_ctrl_c_stops_waiting_with_the_resume_command(tmp_path):
    world = World(faults={"smoke": KeyboardInterrupt()})

    def two_presses() -> None:
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)

    world.on_destroy = two_presses
    code, lines = drive(world, tmp_path)
    assert code == bench.EXIT_INTERRUPTED
    assert any("stopped waiting" in line and "pulumi destroy --stack gpu" in line for line in lines)
    assert "    problem: teardown interrupted (Ctrl-C twice)" in lines
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


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
            raise bench.LeftoverCheckError("disk: permission denied", found=[])

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
    commands = bench.leftover_commands("gpu", "my-proj", "kimi-k3-1-gpu")
    by_label = [argv for what, argv in commands if what not in ("NEG", "Cloud Router (NAT)")]
    assert {" ".join(argv[:3]) for argv in by_label} >= {
        "gcloud compute instances", "gcloud compute disks", "gcloud compute forwarding-rules",
        "gcloud container clusters", "gcloud storage buckets"}
    for argv in by_label:
        assert any(a.endswith("abels.pulumi-stack=gpu") and a.startswith("--filter=") for a in argv), argv
        assert "--project=my-proj" in argv and argv[3] == "list"
    for what, argv in commands:
        if what in ("NEG", "Cloud Router (NAT)"):
            assert "--filter=network~/networks/kimi-k3-1-gpu$" in argv
    assert all(what not in ("NEG", "Cloud Router (NAT)") for what, _ in bench.leftover_commands("gpu"))


def test_gcloud_billing_reports_found_and_failed_listings():
    def fake_run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        if argv[2] == "disks":
            return subprocess.CompletedProcess(argv, 0, "pvc-1  us-central1-b\t100  pd-balanced\n", "")
        if argv[2] == "addresses":
            return subprocess.CompletedProcess(argv, 1, "", "ERROR: permission denied\n")
        return subprocess.CompletedProcess(argv, 0, "", "")

    with pytest.raises(bench.LeftoverCheckError) as caught:
        bench.GcloudBilling(run=fake_run).leftovers("gpu", "my-proj")
    assert caught.value.found == ["disk: pvc-1 us-central1-b 100 pd-balanced"]
    assert "IP address: ERROR: permission denied" in str(caught.value)


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
    assert selectors == [f"{bench.SERVING_SELECTOR},llm-d.ai/role={role}" for role in ("prefill", "decode")]


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
    assert "--engine" not in argv  # the default sglang-jax: smoke knows which metrics it lacks

    world = World(config={bench.TRACK_KEY: "tpu", bench.ENGINE_PROFILE_KEY: "day0"})
    drive(world, tmp_path, stack="tpu")
    argv = next(entry[1] for entry in world.log if entry[0] == "smoke")
    assert argv[argv.index("--engine") + 1] == "sglang"  # the day-0 build exports SGLang's metrics

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
    def __init__(self) -> None:
        self.workspace = _Workspace()
        self.calls: list[dict[str, Any]] = []

    def destroy(self, **kwargs: Any) -> None:
        self.calls.append({"kwargs": kwargs, "env": dict(self.workspace.env_vars),
                           "command": self.workspace.pulumi_command.command})


def test_automation_destroy_passes_env_refreshes_and_restores_the_workspace():
    backend = bench.AutomationBackend(Path("."))
    stack = _Stack()
    backend._stack = stack
    original = stack.workspace.pulumi_command
    backend.destroy(on_output=print, env=bench.UNREACHABLE_ENV)
    (call,) = stack.calls
    assert call["kwargs"]["refresh"] is True and call["kwargs"]["continue_on_error"] is True
    assert call["env"] == {"PULUMI_CONFIG_PASSPHRASE": "x", "PULUMI_K8S_DELETE_UNREACHABLE": "true"}
    if hasattr(os, "setsid"):
        assert call["command"] != sys.executable and call["command"].endswith("pulumi")
    assert stack.workspace.env_vars == {"PULUMI_CONFIG_PASSPHRASE": "x"}
    assert stack.workspace.pulumi_command is original


@pytest.mark.skipif(not hasattr(os, "setsid"), reason="POSIX sessions only")
def test_session_wrapper_runs_the_real_command_in_a_new_session(tmp_path):
    wrapper = bench.session_wrapper(sys.executable, tmp_path)
    out = subprocess.run([str(wrapper), "-c", "import os, sys; print(os.getsid(0), sys.argv[1])", "arg"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[1] == "arg"
    assert int(out[0]) != os.getsid(0)


def test_kept_checkpoint_bucket_is_not_a_leftover_and_is_adopted_next_time(tmp_path):
    """The bucket a destroy keeps by design does not fail the run, and the next `up` uses it rather than
    trying to create it again (storage.bucketExists)."""
    world = World(leftovers=["bucket: my-proj-kimi-k3-1-weights"])
    code, lines = drive(world, tmp_path)
    assert code == 0, "\n".join(lines)
    assert ("set_config", bench.BUCKET_EXISTS_KEY, "true") in world.log
    assert world.names().index("set_config", world.names().index("destroy")) > world.names().index("destroy")
    assert any("kept by design" in line for line in lines)


def test_deleted_checkpoint_bucket_left_behind_is_a_leftover(tmp_path):
    world = World(leftovers=["bucket: my-proj-kimi-k3-1-weights"],
                  config={bench.DELETE_CHECKPOINT_KEY: "true"})
    code, _ = drive(world, tmp_path)
    assert code == bench.EXIT_FAILED
    assert ("set_config", bench.BUCKET_EXISTS_KEY, "true") not in world.log

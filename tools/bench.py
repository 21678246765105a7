"""Benchmark driver (issue 7): one stack up, checked, benchmarked and torn down again, in one command.

    python -m tools.bench --stack gpu [--results ./bench-results] [--keep] [--skip-benchmark]
        [--destroy-retries 3] [--smoke-args --skip pd-kv-transfer ...]

Steps, each announced by a `==> <step>` line:
1. up: select (or create) the stack in --work-dir and `pulumi up` it, streaming the engine's progress.
2. wait: the serving pods and the router pods Ready (`kubectl wait`, with the stack's own kubeconfig).
3. smoke: `tools.smoke` through a port-forward of the router Service (`routerService`, port 80); the
   metrics URLs are port-forwards of the router (9090) and of every serving leader pod.
4. benchmark: `kimi-k3-1:benchmark.enabled=true`, `up` again, wait for the inference-perf Job (`benchmarkJob`).
5. collect: copy `benchmarkResultsUri` to <results>/<stack>/<UTC timestamp>/, next to `outputs.json`,
   `smoke.log` and `run.json` (what ran, what failed, what was left).
Then, in a `finally` that also runs after a failed step or Ctrl-C: `pulumi destroy --refresh` unless --keep
(--keep is the only way to skip it). A destroy that fails on a known transient error (finalizers, PVCs,
node pools or cluster operations still running, resources in use, timeouts, the stack lock of an
interrupted `up`) is retried with backoff; when the cluster is already gone it is retried once with
PULUMI_K8S_DELETE_UNREACHABLE=true (https://github.com/pulumi/pulumi-kubernetes/issues/2463). During teardown
Ctrl-C does not stop the destroy: the first press prints how to resume, the second stops waiting. Last,
everything still carrying the stack's `pulumi-stack` label is listed; the exit code is 0 only if every step
passed, the destroy finished and nothing billable is left (1 otherwise, 130 after Ctrl-C, 2 for a missing tool).

The driver talks to the world only through four small protocols (`Backend`, `Cluster`, `Storage`,
`Billing`), so tests run it against fakes; the real ones use `pulumi.automation`, kubectl and gcloud.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TextIO

from components import catalog, contract
from components.cost import cost_per_million_tokens
from components.naming import label_value

PROJECT = catalog.GUIDE_NAME  # the Pulumi project, so also the config namespace
TRACK_KEY = f"{PROJECT}:track"
GCP_PROJECT_KEY = f"{PROJECT}:gcp.project"
CLUSTER_NAME_KEY = f"{PROJECT}:cluster.name"
BENCHMARK_KEY = f"{PROJECT}:benchmark.enabled"
RUN_ID_KEY = f"{PROJECT}:benchmark.runId"
BUCKET_EXISTS_KEY = f"{PROJECT}:storage.bucketExists"
DELETE_CHECKPOINT_KEY = f"{PROJECT}:storage.deleteCheckpointOnDestroy"
ENGINE_PROFILE_KEY = f"{PROJECT}:tpu.engineProfile"
UNREACHABLE_ENV = {"PULUMI_K8S_DELETE_UNREACHABLE": "true"}
ROUTER_PORT = contract.ROUTER_SERVICE_PORT  # the routerService port the smoke check talks to
ROUTER_METRICS_PORT = 9090  # EPP metrics (tools.smoke epilog)
SERVING_SELECTOR = ",".join(f"{k}={v}" for k, v in contract.SERVING_LABELS.items())
ROUTER_SELECTOR = contract.ROUTER_MODE_LABEL  # "key exists"
RETRY_WAIT_CAP_SECONDS = 600.0
REQUIRED_TOOLS = ("pulumi", "kubectl", "gcloud", "gke-gcloud-auth-plugin")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

OnOutput = Callable[[str], Any]


class StepError(Exception):
    """A step failed in a way the driver detected itself (as opposed to an error from a tool)."""


class LeftoverCheckError(Exception):
    """Some leftover listings failed: `found` holds what the others found."""

    def __init__(self, message: str, found: Sequence[str]):
        super().__init__(message)
        self.found = list(found)


# --------------------------------------------------------------------------- the protocols
class Backend(Protocol):
    """The stack, as the Pulumi Automation API sees it."""

    def select_or_create(self, stack: str) -> None: ...

    def get_config(self, key: str) -> str | None:
        """The plain value of a full key (`kimi-k3-1:track`), or None if it is not set."""

    def set_config(self, key: str, value: str | None) -> None:
        """Set a full key in Pulumi.<stack>.yaml; None removes it."""

    def up(self, on_output: OnOutput) -> None: ...

    def outputs(self) -> dict[str, Any]:
        """Stack outputs as plain values (secrets included: never print them wholesale)."""

    def destroy(self, on_output: OnOutput, env: Mapping[str, str]) -> None:
        """`pulumi destroy --refresh --continue-on-error` with `env` added to the CLI's environment."""


class Cluster(Protocol):
    """The kubectl-ish steps, against the stack's cluster."""

    def connect(self, kubeconfig: str) -> None: ...

    def wait_ready(self, namespace: str, timeout: float) -> None: ...

    def pods(self, namespace: str, selector: str) -> list[str]:
        """Names (`pod/<name>`) of the running pods matching a label selector."""

    def port_forward(self, namespace: str, target: str, port: int) -> AbstractContextManager[str]:
        """Forward a local port to `target` (`svc/<name>` or `pod/<name>`); yields `http://127.0.0.1:<port>`."""

    def wait_job(self, namespace: str, job: str, timeout: float) -> None:
        """Return when the Job completed; raise if it failed or the timeout ran out."""

    def gateway_address(self, namespace: str, gateway: str) -> str:
        """The first address a Gateway reports (gateway mode has no router Service port to forward)."""


class Storage(Protocol):
    def copy(self, gs_uri: str, local_dir: Path) -> None: ...


class Billing(Protocol):
    def leftovers(self, stack_label: str, project: str | None = None, network: str | None = None) -> list[str]:
        """One line per billable resource still labelled `pulumi-stack=<stack_label>` (plus, when `network` is
        given, the unlabelled NEGs and Cloud NAT routers of that VPC). Raises LeftoverCheckError if a listing
        failed."""


# --------------------------------------------------------------------------- destroy error classes
# (what the error text says, a regex over the whole CommandError text). Checked in this order.
UNREACHABLE_PATTERNS: tuple[tuple[str, str], ...] = (
    ("cluster unreachable", r"cluster is unreachable|unable to load schema information"),
    ("cluster DNS name gone", r"no such host"),
    ("cluster refused the connection", r"connection refused|dial tcp [^\n]*i/o timeout"),
    ("cluster credentials rejected", r"Unauthorized|server has asked for the client to provide credentials"),
)
TRANSIENT_PATTERNS: tuple[tuple[str, str], ...] = (
    ("stack locked by another update (an interrupted `up` still finishing?)",
     r"currently locked by|Another update is currently in progress|\[409\] Conflict"),
    ("finalizers still pending", r"finalizer"),
    ("PersistentVolumeClaim still terminating", r"PersistentVolumeClaim|\bpvc\b"),
    ("node pool or cluster operation still running",
     r"is still being deleted|operation in progress|incompatible operation|currently (?:being )?deleted|"
     r"another operation|operation .* is currently"),
    ("resource still in use (NEGs, subnets, firewall rules)",
     r"resourceInUseByAnotherResource|is already being used by|resourceNotReady|still in use"),
    ("timeout", r"timed? ?out|deadline exceeded"),
    ("API rate limit or server error", r"rateLimitExceeded|Error 429|Error 50[0234]\b|backendError"),
)
HINTS = {
    "stack locked by another update (an interrupted `up` still finishing?)":
        "if no other pulumi process runs on this stack, remove the stale lock with `pulumi cancel`",
    "finalizers still pending":
        "look for stuck objects with `kubectl get all,pvc -n <namespace>` and their metadata.finalizers",
}


def classify(text: str, patterns: Sequence[tuple[str, str]]) -> str | None:
    """The first pattern's reason that matches `text` (case-insensitive), or None."""
    for reason, pattern in patterns:
        if re.search(pattern, text, re.IGNORECASE):
            return reason
    return None


def _tail(text: str, lines: int = 12) -> str:
    kept = [line for line in str(text).splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


# --------------------------------------------------------------------------- options and wiring
@dataclass
class Options:
    stack: str
    work_dir: Path = Path(".")
    results: Path = Path("bench-results")
    keep: bool = False
    skip_benchmark: bool = False
    destroy_retries: int = 3
    retry_wait: float = 60.0
    ready_timeout: float = 3600.0
    benchmark_timeout: float = 7200.0
    smoke_args: list[str] = field(default_factory=list)


def _print(line: str) -> None:
    print(line, flush=True)


@dataclass
class Deps:
    backend: Backend
    cluster: Cluster
    storage: Storage
    billing: Billing
    smoke: Callable[[list[str]], int] | None = None  # default: tools.smoke.main
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    out: OnOutput = _print


class _Tee:
    """stdout for the smoke check: the terminal and smoke.log."""

    def __init__(self, *streams: TextIO):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


# --------------------------------------------------------------------------- the driver
class Driver:
    STEPS = ("up", "wait", "smoke", "benchmark", "collect")

    def __init__(self, opts: Options, deps: Deps):
        self.opts = opts
        self.deps = deps
        self.out = deps.out
        self.label = label_value(opts.stack)
        self.outputs: dict[str, Any] = {}
        self.track = "gpu"
        self.project: str | None = None
        self.run_dir: Path | None = None
        self.steps: dict[str, str] = {}
        self.problems: list[str] = []
        self.interrupted = False
        self.benchmark_previous: tuple[str | None] | None = None  # set once benchmark.enabled was changed
        self.run_id_previous: tuple[str | None] | None = None  # likewise benchmark.runId
        self.sigints = 0
        self.leftovers: list[str] = []
        self.destroy_env: dict[str, str] = {}  # what the last destroy attempt ran with

    @property
    def resume(self) -> str:
        env = "".join(f"{key}={value} " for key, value in self.destroy_env.items())
        return f"{env}pulumi destroy --stack {self.opts.stack} --cwd {self.opts.work_dir.resolve()} --refresh"

    # ---------------------------------------------------------------- run
    def run(self) -> int:
        self.out(f"==> stack {self.opts.stack} (work dir {self.opts.work_dir.resolve()})")
        try:
            self.deps.backend.select_or_create(self.opts.stack)
            self.track = self.deps.backend.get_config(TRACK_KEY) or self.opts.stack
            self.project = self.deps.backend.get_config(GCP_PROJECT_KEY)
        except KeyboardInterrupt:
            self.out("interrupted before the stack was selected: nothing was created, nothing to destroy")
            return EXIT_INTERRUPTED
        except Exception as err:
            self.out(f"FAILED: could not select or create stack {self.opts.stack}: {err}")
            return EXIT_FAILED
        stamp = self.deps.now().strftime("%Y%m%dT%H%M%SZ")
        self.run_dir = self.opts.results / self.opts.stack / stamp
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.out(f"results folder: {self.run_dir}")

        step = "up"
        try:
            for step in self.STEPS:
                if self.opts.skip_benchmark and step in ("benchmark", "collect"):
                    self.out(f"==> {step}: skipped (--skip-benchmark)")
                    self.steps[step] = "skipped"
                    continue
                self.out(f"==> {step}")
                self.steps[step] = "running"
                getattr(self, f"step_{step}")()
                self.steps[step] = "ok"
        except KeyboardInterrupt:
            self.interrupted = True
            self.steps[step] = "interrupted"
            self.problems.append(f"interrupted (Ctrl-C) during {step}")
            self.out(f"\n!! Ctrl-C during {step}: tearing down (Ctrl-C again only prints how to resume)")
        except Exception as err:
            self.steps[step] = "failed"
            self.problems.append(f"{step} failed: {err}")
            self.out(f"FAILED {step}: {_tail(str(err))}")
        finally:
            self.teardown()
        return self.report()

    # ---------------------------------------------------------------- steps
    def step_up(self) -> None:
        self.deps.backend.up(on_output=self.out)
        self._read_outputs()
        hourly = self.outputs.get("hourlyCostUsd")
        if hourly is not None:
            known = "" if self.outputs.get("hourlyCostComplete") else " plus unpriced items (see `make plan`)"
            self.out(f"estimated cost while the stack is up: ${float(hourly):,.2f}/hour{known}")

    def step_wait(self) -> None:
        self.deps.cluster.wait_ready(self.namespace, self.opts.ready_timeout)

    def step_smoke(self) -> None:
        router = self.outputs.get("routerService") or f"{PROJECT}-epp"
        user_metrics = any(a == "--metrics-url" or a.startswith("--metrics-url=") for a in self.opts.smoke_args)
        with ExitStack() as forwards:
            if self.outputs.get("routerMode") == "gateway":
                # An internal Gateway is reachable only from the VPC; --smoke-args --endpoint URL overrides.
                endpoint = "http://" + self.deps.cluster.gateway_address(self.namespace, self.outputs["gatewayName"])
            else:
                endpoint = forwards.enter_context(self.deps.cluster.port_forward(self.namespace, f"svc/{router}",
                                                                                 ROUTER_PORT))
            metrics = [] if user_metrics else self._metrics_forwards(forwards, router)
            argv = ["--endpoint", endpoint, "--track", self.track, *metrics, *self._engine_args(),
                    *self.opts.smoke_args]
            self.out(f"python -m tools.smoke {' '.join(argv)}")
            code = self._run_smoke(argv)
        if code != 0:
            raise StepError(f"smoke check exited with {code} (see {self._path('smoke.log')})")

    def step_benchmark(self) -> None:
        backend = self.deps.backend
        if self.benchmark_previous is None:
            self.benchmark_previous = (backend.get_config(BENCHMARK_KEY),)
            self.run_id_previous = (backend.get_config(RUN_ID_KEY),)
        backend.set_config(BENCHMARK_KEY, "true")
        # Reports of this run go to their own folder, so collect copies this run's only.
        assert self.run_dir is not None
        backend.set_config(RUN_ID_KEY, self.run_dir.name.lower())
        self.out(f"{BENCHMARK_KEY}=true, {RUN_ID_KEY}={self.run_dir.name.lower()}; up again to create the Job")
        backend.up(on_output=self.out)
        self._read_outputs()
        job = self.outputs.get("benchmarkJob")
        if not job:
            raise StepError("the stack has no `benchmarkJob` output after `up` with benchmark.enabled=true")
        self.out(f"waiting for Job {self.namespace}/{job} (timeout {self.opts.benchmark_timeout:.0f} s)")
        self.deps.cluster.wait_job(self.namespace, job, self.opts.benchmark_timeout)

    def step_collect(self) -> None:
        uri = self.outputs.get("benchmarkResultsUri")
        if not uri:
            raise StepError("the stack has no `benchmarkResultsUri` output")
        assert self.run_dir is not None
        before = _files(self.run_dir)
        self.out(f"copying {uri} -> {self.run_dir}")
        self.deps.storage.copy(uri, self.run_dir)
        copied = _files(self.run_dir) - before
        if not copied:
            raise StepError(f"no benchmark results found under {uri}")
        self.out(f"{len(copied)} result file(s) in {self.run_dir}")
        self._report_cost()

    def _report_cost(self) -> None:
        """Cost per million output tokens from the stack's hourly estimate and the measured throughput."""
        hourly = self.outputs.get("hourlyCostUsd")
        tps = measured_output_tokens_per_second(self.run_dir)
        if not hourly or not tps:
            self.out("cost per million output tokens: unknown (no hourly estimate or no output throughput found)")
            return
        partial = "" if self.outputs.get("hourlyCostComplete") else " (prices incomplete: set kimi-k3-1:cost.*)"
        self.out(f"cost per million output tokens: ${cost_per_million_tokens(float(hourly), tps):,.2f} "
                 f"at {tps:,.0f} output tokens/s and ${float(hourly):,.2f}/h{partial}")

    # ---------------------------------------------------------------- helpers of the steps
    @property
    def namespace(self) -> str:
        return self.outputs.get("namespace") or PROJECT

    def _read_outputs(self) -> None:
        self.outputs = dict(self.deps.backend.outputs())
        shown = {k: v for k, v in self.outputs.items() if k != "kubeconfig"}
        self._path("outputs.json").write_text(json.dumps(shown, indent=2, sort_keys=True, default=str) + "\n")
        for key in ("clusterName", "servingZone", "namespace", "nodePools", "bucketUri"):
            if key in shown:
                self.out(f"    {key}: {shown[key]}")
        kubeconfig = self.outputs.get("kubeconfig")
        if not kubeconfig:
            raise StepError("the stack has no `kubeconfig` output")
        self.deps.cluster.connect(kubeconfig)

    def _engine_args(self) -> list[str]:
        """The day-0 TPU build exports SGLang's metrics, the default sglang-jax does not (components/metrics.py)."""
        if any(a == "--engine" or a.startswith("--engine=") for a in self.opts.smoke_args):
            return []
        if self.track == "tpu" and self._config(ENGINE_PROFILE_KEY) == "day0":
            return ["--engine", "sglang"]
        return []

    def _metrics_forwards(self, forwards: ExitStack, router: str) -> list[str]:
        """`--metrics-url ROLE=URL` for the router and for every serving leader pod of the track."""
        cluster, ns = self.deps.cluster, self.namespace
        url = forwards.enter_context(cluster.port_forward(ns, f"svc/{router}", ROUTER_METRICS_PORT))
        args = ["--metrics-url", f"router={url}{contract.METRICS_PATH}"]
        if self.track == "gpu":
            roles = (("prefill", contract.MODEL_SERVER_PORT), ("decode", contract.DECODE_ENGINE_PORT))
        else:
            roles = (("engine", contract.MODEL_SERVER_PORT),)
        for role, port in roles:
            # Every pod with the serving labels serves: all P/D pods (DP hybrid LB), the TPU leaders only.
            selector = SERVING_SELECTOR
            if role != "engine":
                selector += f",{contract.ROLE_LABEL}={role}"
            pods = cluster.pods(ns, selector)
            if not pods:
                raise StepError(f"no running {role} leader pod matches {selector}")
            for pod in pods:
                url = forwards.enter_context(cluster.port_forward(ns, pod, port))
                args += ["--metrics-url", f"{role}={url}{contract.METRICS_PATH}"]
        return args

    def _run_smoke(self, argv: list[str]) -> int:
        smoke = self.deps.smoke
        if smoke is None:
            from tools import smoke as smoke_module

            smoke = smoke_module.main
        with self._path("smoke.log").open("w") as log, contextlib.redirect_stdout(_Tee(sys.stdout, log)):
            return smoke(argv)

    def _path(self, name: str) -> Path:
        assert self.run_dir is not None
        return self.run_dir / name

    # ---------------------------------------------------------------- teardown
    def teardown(self) -> None:
        with self._sigint_guard():
            try:
                if self.opts.keep:
                    self.out(f"==> destroy: skipped (--keep); the stack keeps running and billing. Later: "
                             f"{self.resume}")
                    if self.benchmark_previous is not None:
                        self.out(f"note: {BENCHMARK_KEY} stays true in Pulumi.{self.opts.stack}.yaml "
                                 "(the benchmark Job is deployed)")
                else:
                    self._restore_benchmark_config()  # destroy does not run the program: order is free
                    self.out("==> destroy")
                    if not self.destroy_with_retries():
                        self.problems.append("destroy failed")
                        self.out(f"resume with: {self.resume}")
                    else:
                        self._adopt_kept_bucket()
                self.list_leftovers()
            except KeyboardInterrupt:
                self.interrupted = True
                self.problems.append("teardown interrupted (Ctrl-C twice)")
                self.out("\n!! stopped waiting. A destroy that was running may go on in the background; "
                         f"check and finish it with: {self.resume}")
        self._write_run_record()

    def destroy_with_retries(self) -> bool:
        env: dict[str, str] = {}
        retries_left = self.opts.destroy_retries
        delay = self.opts.retry_wait
        attempt = 0
        while True:
            attempt += 1
            with_env = " with PULUMI_K8S_DELETE_UNREACHABLE=true" if env else ""
            self.out(f"--> pulumi destroy, attempt {attempt}{with_env}")
            self.destroy_env = dict(env)
            try:
                self.deps.backend.destroy(on_output=self.out, env=dict(env))
            except Exception as err:
                text = str(err)
            else:
                self.out(f"destroy of {self.opts.stack} finished")
                return True
            unreachable = classify(text, UNREACHABLE_PATTERNS)
            if unreachable and not env:
                self.out(f"destroy failed: {unreachable}. Retrying once with PULUMI_K8S_DELETE_UNREACHABLE=true: "
                         "the Kubernetes objects of a deleted cluster are dropped from the state")
                env = dict(UNREACHABLE_ENV)
                continue
            transient = classify(text, TRANSIENT_PATTERNS)
            if transient and retries_left > 0:
                retries_left -= 1
                self.out(f"destroy failed: {transient} (transient). Retrying in {delay:.0f} s "
                         f"({retries_left} more retr{'y' if retries_left == 1 else 'ies'} after this one)")
                self.deps.sleep(delay)
                delay = min(delay * 2, RETRY_WAIT_CAP_SECONDS)
                continue
            reason = transient or unreachable or "not a known transient error"
            self.out(f"destroy failed ({reason}), giving up after {attempt} attempt(s):\n{_tail(text)}")
            if reason in HINTS:
                self.out(f"hint: {HINTS[reason]}")
            return False

    @property
    def kept_bucket(self) -> str | None:
        """The checkpoint bucket a destroy keeps by design (storage.deleteCheckpointOnDestroy off)."""
        if (self._config(DELETE_CHECKPOINT_KEY) or "false").lower() == "true":
            return None
        uri = self.outputs.get("bucketUri") or ""
        return uri.removeprefix("gs://") or None

    def _adopt_kept_bucket(self) -> None:
        """The next `up` must use the kept bucket instead of creating it again (that would fail: it exists)."""
        bucket = self.kept_bucket
        if not bucket or (self._config(BUCKET_EXISTS_KEY) or "").lower() == "true":
            return
        try:
            self.deps.backend.set_config(BUCKET_EXISTS_KEY, "true")
        except Exception as err:
            self.problems.append(f"could not set {BUCKET_EXISTS_KEY}: {err}")
            return
        self.out(f"gs://{bucket} was kept with the checkpoint; {BUCKET_EXISTS_KEY}=true so the next up uses it")

    def _restore_benchmark_config(self) -> None:
        for key, saved in ((BENCHMARK_KEY, self.benchmark_previous), (RUN_ID_KEY, self.run_id_previous)):
            if saved is None:
                continue
            previous = saved[0]
            try:
                self.deps.backend.set_config(key, previous)
            except Exception as err:
                self.problems.append(f"could not restore {key}: {err}")
                continue
            self.out(f"{key} restored to {previous if previous is not None else '(unset)'}")

    def list_leftovers(self) -> None:
        self.out(f"==> leftovers (pulumi-stack={self.label})")
        network = self.outputs.get("clusterName") or self._config(CLUSTER_NAME_KEY) or f"{PROJECT}-{self.track}"
        try:
            self.leftovers = list(self.deps.billing.leftovers(self.label, self.project, network))
        except LeftoverCheckError as err:
            self.leftovers = err.found
            self.problems.append(f"leftover check incomplete: {err}")
            self.out(f"could not check everything: {err}")
        except Exception as err:
            self.problems.append(f"leftover check failed: {err}")
            self.out(f"could not list leftovers: {err}")
            return
        bucket = self.kept_bucket
        kept = [line for line in self.leftovers if bucket and line.split(": ", 1)[-1].strip() in (bucket, f"gs://{bucket}",
                                                                                                f"gs://{bucket}/")]
        self.leftovers = [line for line in self.leftovers if line not in kept]
        for line in kept:
            self.out(f"    {line}  (kept by design: the checkpoint copy; storage.deleteCheckpointOnDestroy=false)")
        for line in self.leftovers:
            self.out(f"    {line}")
        if self.leftovers:
            what = "kept (--keep)" if self.opts.keep else "still billable"
            self.out(f"{len(self.leftovers)} resource(s) {what} under pulumi-stack={self.label}")
            if not self.opts.keep:
                self.problems.append(f"{len(self.leftovers)} billable resource(s) left")
        elif not any(p.startswith("leftover check") for p in self.problems):
            self.out(f"nothing billable left under pulumi-stack={self.label}")

    def _config(self, key: str) -> str | None:
        try:
            return self.deps.backend.get_config(key)
        except Exception:
            return None

    @contextlib.contextmanager
    def _sigint_guard(self) -> Iterator[None]:
        """During teardown the first Ctrl-C only explains; the second raises KeyboardInterrupt."""

        def handler(signum: int, frame: object) -> None:
            self.sigints += 1
            if self.sigints == 1:
                self.out("\n!! Ctrl-C: the teardown goes on (a half-done destroy leaves billable resources). "
                         f"Press Ctrl-C again to stop waiting; resume any time with: {self.resume}")
                return
            raise KeyboardInterrupt

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    # ---------------------------------------------------------------- report
    def _write_run_record(self) -> None:
        if self.run_dir is None:
            return
        record = {"stack": self.opts.stack, "track": self.track, "steps": self.steps,
                  "destroyed": not self.opts.keep and "destroy failed" not in self.problems,
                  "kept": self.opts.keep, "leftovers": self.leftovers, "problems": self.problems,
                  "finished": self.deps.now().isoformat()}
        with contextlib.suppress(OSError):
            self._path("run.json").write_text(json.dumps(record, indent=2) + "\n")

    def report(self) -> int:
        done = ", ".join(f"{step} {status}" for step, status in self.steps.items())
        self.out(f"==> summary: {done or 'no step ran'}")
        for problem in self.problems:
            self.out(f"    problem: {problem}")
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.problems else EXIT_OK


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


def run(opts: Options, deps: Deps) -> int:
    return Driver(opts, deps).run()


# --------------------------------------------------------------------------- real implementations
class AutomationBackend:
    """`pulumi.automation` against the project in work_dir (Pulumi.yaml, Pulumi.<stack>.yaml)."""

    def __init__(self, work_dir: Path):
        self.work_dir = work_dir
        self._stack: Any = None

    def select_or_create(self, stack: str) -> None:
        from pulumi import automation as auto

        self._stack = auto.create_or_select_stack(stack_name=stack, work_dir=str(self.work_dir.resolve()))

    def get_config(self, key: str) -> str | None:
        from pulumi import automation as auto

        try:
            return self._stack.get_config(key).value
        except auto.CommandError:  # the CLI fails on a key that is not set
            return None

    def set_config(self, key: str, value: str | None) -> None:
        from pulumi import automation as auto

        if value is None:
            self._stack.remove_config(key)
        else:
            self._stack.set_config(key, auto.ConfigValue(value=value))

    def up(self, on_output: OnOutput) -> None:
        self._stack.up(on_output=on_output, on_error=on_output)

    def outputs(self) -> dict[str, Any]:
        return {key: out.value for key, out in self._stack.outputs().items()}

    def destroy(self, on_output: OnOutput, env: Mapping[str, str]) -> None:
        workspace = self._stack.workspace
        saved_env, saved_command = dict(workspace.env_vars), workspace.pulumi_command
        with tempfile.TemporaryDirectory(prefix="bench-pulumi-") as folder:
            workspace.env_vars = {**saved_env, **env}
            workspace.pulumi_command = _own_session_command(saved_command, Path(folder))
            try:
                self._stack.destroy(on_output=on_output, on_error=on_output, refresh=True, continue_on_error=True)
            finally:
                workspace.env_vars, workspace.pulumi_command = saved_env, saved_command


def session_wrapper(real: str, folder: Path) -> Path:
    """An executable that runs `real` with the same arguments in a new session, so the Ctrl-C that the
    terminal sends to its foreground process group does not cancel a running destroy."""
    path = folder / "pulumi"
    path.write_text(f"#!{sys.executable}\nimport os, sys\ntry:\n    os.setsid()\nexcept OSError:\n    pass\n"
                    f"os.execv({real!r}, [{real!r}, *sys.argv[1:]])\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _own_session_command(command: Any, folder: Path) -> Any:
    """A copy of the workspace's PulumiCommand that runs the CLI through `session_wrapper` (POSIX only)."""
    real = shutil.which(command.command)
    if not hasattr(os, "setsid") or real is None:
        return command
    wrapped = copy.copy(command)
    wrapped.command = str(session_wrapper(real, folder))
    return wrapped


class KubectlCluster:
    """kubectl with the stack's kubeconfig (exec auth through gke-gcloud-auth-plugin; no token on disk)."""

    POLL_SECONDS = 15.0

    def __init__(self, out: OnOutput = _print, sleep: Callable[[float], None] = time.sleep):
        self.out = out
        self.sleep = sleep
        self._folder = tempfile.TemporaryDirectory(prefix="bench-kube-")
        self.kubeconfig = Path(self._folder.name) / "kubeconfig"

    def connect(self, kubeconfig: str) -> None:
        fd = os.open(self.kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(kubeconfig)

    def _cmd(self, *args: str) -> list[str]:
        return ["kubectl", "--kubeconfig", str(self.kubeconfig), *args]

    def _run(self, *args: str, timeout: float | None = None) -> str:
        proc = subprocess.run(self._cmd(*args), capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise StepError(f"kubectl {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def pods(self, namespace: str, selector: str) -> list[str]:
        out = self._run("get", "pods", "-n", namespace, "-l", selector, "--field-selector=status.phase=Running",
                        "-o", "name")
        return [line.strip() for line in out.splitlines() if line.strip()]

    def wait_ready(self, namespace: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for what, selector in (("serving pods", SERVING_SELECTOR), ("router pods", ROUTER_SELECTOR)):
            while not self._run("get", "pods", "-n", namespace, "-l", selector, "-o", "name").strip():
                if time.monotonic() > deadline:
                    raise StepError(f"no {what} ({selector}) in {namespace} after {timeout:.0f} s")
                self.sleep(self.POLL_SECONDS)
            remaining = max(1, int(deadline - time.monotonic()))
            self.out(f"waiting up to {remaining} s for {what} to be Ready")
            self._run("wait", "--for=condition=Ready", "pod", "-n", namespace, "-l", selector,
                      f"--timeout={remaining}s")

    @contextlib.contextmanager
    def port_forward(self, namespace: str, target: str, port: int) -> Iterator[str]:
        proc = subprocess.Popen(self._cmd("port-forward", "-n", namespace, "--address", "127.0.0.1", target,
                                          f":{port}"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert proc.stdout is not None
            seen: list[str] = []
            local = None
            for line in proc.stdout:  # "Forwarding from 127.0.0.1:41234 -> 8081"
                match = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
                if match:
                    local = match.group(1)
                    break
                seen.append(line.strip())
            if local is None:
                raise StepError(f"kubectl port-forward {target} {port} failed: {_tail(chr(10).join(seen), 4)}")
            # keep reading: kubectl logs every connection, and a full pipe would stall it
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            yield f"http://127.0.0.1:{local}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()

    def gateway_address(self, namespace: str, gateway: str) -> str:
        address = self._run("get", "gateway", gateway, "-n", namespace,
                            "-o", "jsonpath={.status.addresses[0].value}").strip()
        if not address:
            raise StepError(f"gateway {namespace}/{gateway} reports no address yet")
        return address

    def wait_job(self, namespace: str, job: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            status = json.loads(self._run("get", "job", job, "-n", namespace, "-o", "json")).get("status", {})
            conditions = {c.get("type"): c for c in status.get("conditions", []) if c.get("status") == "True"}
            if "Complete" in conditions:
                return
            if "Failed" in conditions:
                logs = subprocess.run(self._cmd("logs", f"job/{job}", "-n", namespace, "--tail=40"),
                                      capture_output=True, text=True).stdout
                reason = conditions["Failed"].get("message") or conditions["Failed"].get("reason", "")
                raise StepError(f"Job {job} failed: {reason}\n{logs}")
            now = f"active={status.get('active', 0)} succeeded={status.get('succeeded', 0)} " \
                  f"failed={status.get('failed', 0)}"
            if now != last:
                self.out(f"    job {job}: {now}")
                last = now
            if time.monotonic() > deadline:
                raise StepError(f"Job {job} did not finish within {timeout:.0f} s")
            self.sleep(self.POLL_SECONDS)


class GcloudStorage:
    def copy(self, gs_uri: str, local_dir: Path) -> None:
        local_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["gcloud", "storage", "rsync", "--recursive", gs_uri.rstrip("/"), str(local_dir)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise StepError(f"gcloud storage rsync {gs_uri}: {proc.stderr.strip()}")


def leftover_commands(stack_label: str, project: str | None = None,
                      network: str | None = None) -> list[tuple[str, list[str]]]:
    """Every gcloud listing of the leftover check: (what, argv). The one place these commands live."""
    by_label = f"labels.pulumi-stack={stack_label}"
    proj = [f"--project={project}"] if project else []
    compute = [
        ("VM instance", "instances", "value(name,zone.basename(),status)"),
        ("disk", "disks", "value(name,zone.basename(),sizeGb,type.basename())"),
        ("forwarding rule", "forwarding-rules", "value(name,region.basename(),IPAddress)"),
        ("IP address", "addresses", "value(name,region.basename(),address)"),
    ]
    commands = [(what, ["gcloud", "compute", group, "list", f"--filter={by_label}", f"--format={fmt}", *proj])
                for what, group, fmt in compute]
    commands += [
        ("GKE cluster", ["gcloud", "container", "clusters", "list",
                         f"--filter=resourceLabels.pulumi-stack={stack_label}", "--format=value(name,location,status)",
                         *proj]),
        ("bucket", ["gcloud", "storage", "buckets", "list", f"--filter={by_label}", "--format=value(name)", *proj]),
    ]
    if network:  # NEGs and Cloud Routers (NAT) carry no labels: matched by the stack's VPC (named like the cluster)
        in_vpc = f"--filter=network~/networks/{network}$"
        commands += [
            ("NEG", ["gcloud", "compute", "network-endpoint-groups", "list", in_vpc,
                     "--format=value(name,zone.basename(),size)", *proj]),
            ("Cloud Router (NAT)", ["gcloud", "compute", "routers", "list", in_vpc,
                                    "--format=value(name,region.basename())", *proj]),
        ]
    return commands


class GcloudBilling:
    def __init__(self, run: Callable[..., subprocess.CompletedProcess] = subprocess.run):
        self._run = run

    def leftovers(self, stack_label: str, project: str | None = None, network: str | None = None) -> list[str]:
        found, failed = [], []
        for what, argv in leftover_commands(stack_label, project, network):
            proc = self._run(argv, capture_output=True, text=True)
            if proc.returncode != 0:
                failed.append(f"{what}: {_tail(proc.stderr, 2)}")
                continue
            found += [f"{what}: {' '.join(line.split())}" for line in proc.stdout.splitlines() if line.strip()]
        if failed:
            raise LeftoverCheckError("; ".join(failed), found)
        return found


# --------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench",
        description="up -> wait -> smoke -> benchmark -> collect -> destroy (always, unless --keep) for one stack, "
                    "then list anything still billable under its pulumi-stack label.",
        epilog="Ctrl-C tears the stack down; during the teardown a first Ctrl-C only explains and a second one "
               "stops waiting. Exit 0 only if every step passed, the destroy finished and nothing is left.")
    parser.add_argument("--stack", required=True, help="stack name (Pulumi.<stack>.yaml), e.g. gpu or tpu")
    parser.add_argument("--work-dir", type=Path, default=Path("."), help="the Pulumi project folder (default .)")
    parser.add_argument("--results", type=Path, default=Path("bench-results"),
                        help="results go to <results>/<stack>/<UTC timestamp>/ (default %(default)s)")
    parser.add_argument("--keep", action="store_true",
                        help="leave the stack up at the end (the only way to skip the destroy)")
    parser.add_argument("--skip-benchmark", action="store_true", help="stop after the smoke check")
    parser.add_argument("--destroy-retries", type=_non_negative_int, default=3,
                        help="retries of a destroy that failed on a known transient error (default %(default)s)")
    parser.add_argument("--retry-wait", type=_non_negative_float, default=60.0,
                        help="seconds before the first destroy retry, doubling each time (default %(default)s)")
    parser.add_argument("--ready-timeout", type=_non_negative_float, default=3600.0,
                        help="seconds for the serving and router pods to be Ready (default %(default)s)")
    parser.add_argument("--benchmark-timeout", type=_non_negative_float, default=7200.0,
                        help="seconds for the benchmark Job to complete (default %(default)s)")
    parser.add_argument("--smoke-args", nargs=argparse.REMAINDER, default=[],
                        help="everything after it goes to `python -m tools.smoke` (must come last); a "
                             "--metrics-url there replaces the driver's own port-forwarded metrics URLs")
    return parser


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text}")
    return value


def options_from_args(args: argparse.Namespace) -> Options:
    return Options(stack=args.stack, work_dir=args.work_dir, results=args.results, keep=args.keep,
                   skip_benchmark=args.skip_benchmark, destroy_retries=args.destroy_retries,
                   retry_wait=args.retry_wait, ready_timeout=args.ready_timeout,
                   benchmark_timeout=args.benchmark_timeout, smoke_args=list(args.smoke_args))


def real_deps(opts: Options) -> Deps:
    return Deps(backend=AutomationBackend(opts.work_dir), cluster=KubectlCluster(), storage=GcloudStorage(),
                billing=GcloudBilling())


def main(argv: Sequence[str] | None = None, deps: Deps | None = None) -> int:
    opts = options_from_args(build_parser().parse_args(argv))
    if deps is None:
        missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
        if missing:
            print(f"missing on PATH: {', '.join(missing)}; nothing was created", file=sys.stderr)
            return EXIT_USAGE
        deps = real_deps(opts)
    return run(opts, deps)



OUTPUT_RATE_KEY = re.compile(r"^output_tokens?_per_s(ec(ond)?)?$")
"""Assumption: inference-perf's summary reports name the generated-token rate like `output_tokens_per_sec`;
the config schema (https://github.com/kubernetes-sigs/inference-perf/blob/7de5ef2/inference_perf/config/config.py) does
not cover report contents."""


def measured_output_tokens_per_second(folder: Path | None) -> float | None:
    """The largest output-token rate in any JSON report of the run (the whole-run summary, not a stage)."""
    if folder is None:
        return None
    rates: list[float] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if OUTPUT_RATE_KEY.match(str(key)) and isinstance(value, int | float):
                    rates.append(float(value))
                elif isinstance(value, dict) and OUTPUT_RATE_KEY.match(str(key)) and "mean" in value:
                    rates.append(float(value["mean"]))
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in folder.rglob("*.json"):
        with contextlib.suppress(ValueError, OSError):
            walk(json.loads(path.read_text()))
    return max(rates) if rates else None

if __name__ == "__main__":
    sys.exit(main())

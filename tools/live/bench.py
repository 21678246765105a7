"""Benchmark driver: one stack up, checked, benchmarked and torn down again, in one command.

    python -m tools bench --stack gpu [--out ./bench-results] [--keep] [--skip-benchmark] [--ramp]
        [--destroy-retries 3] [--up-timeout 5400] [--smoke-args --skip pd-kv-transfer ...]

Steps, each announced by a `==> <step>` line:
1. up: `pulumi up` with the policy pack (`policy/`, mandatory), streaming the engine's progress.
2. wait: the serving pods and the router pods Ready (`kubectl wait`, with the stack's own kubeconfig).
3. smoke: `python -m tools smoke` in a subprocess of its own (deadline --smoke-timeout) through a port-forward of
   the router Service (`routerService`, port 80); the metrics URLs are port-forwards of the router (9090) and of
   every serving leader pod. Its lines go to the console and smoke.log.
(with --ramp) ramp: a scale-down, a scale-up under the benchmark Job's load and a scale-down once it is deleted, each
   watched on the scaled roles' HPAs and held to the plan's times (tools/live/bench_ramp.py, ramp.json).
4. benchmark: `kimi-k3-1:benchmark.enabled=true`, `up` again, wait for the inference-perf Job (`benchmarkJob`).
5. collect: copy `benchmarkResultsUri` to <results>/<stack>/<UTC timestamp>/, next to `outputs.json`,
   `smoke.log`, `driver.log` (every line printed) and `run.json` (each step's status and why it failed,
   what stopped the run, the destroy attempts, what was left), rewritten at every change.

Ownership: the driver destroys only what it created. Before `up` it claims the stack with the stack tag
`kimi-k3-1:bench-run=<run id>` and refuses (exit 3, nothing touched) a stack another run claimed or one
that already holds resources. If `up` finds the stack locked by another process it destroys nothing,
names the lock holder when the backend says, and exits 3. The claim is released once the destroy finished.

Teardown: once `up` has started, every end of the run (a failed step, an exception, a step's timeout,
SIGINT, SIGTERM, SIGHUP, a closed stdout) leads to one `pulumi destroy --refresh` (unless --keep) and the
leftover listing (`tools.live.leftovers`). A signal during `up` first asks the Pulumi CLI to stop gracefully
(it finishes what is in flight and saves the state), then destroys. Transient destroy failures are retried
with backoff, an unreachable cluster once with PULUMI_K8S_DELETE_UNREACHABLE=true. Output to a dead pipe
goes on into driver.log. Only a second SIGINT/SIGTERM stops waiting; it prints how to resume.
Stop requests take a path of their own: signal handlers and the output only queue (no locks), so neither a
stuck terminal nor a step's output can delay the teardown.
Exit: 0 all passed, destroyed and nothing left; 1 otherwise; 2 usage or missing tool; 3 stack busy; 130
interrupted (see EXIT_CODES).

The driver reaches the world only through four small protocols (`Backend` in tools.live.pulumi_stack, `Cluster`
and `Storage` in tools.live.cloud, `Billing`), so tests run it against fakes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from components.plan.naming import label_value
from tools import deprecated, prog
from tools.live.bench_ramp import Ramp
from tools.live.bench_steps import Steps, measured_output_tokens_per_second
from tools.live.bench_teardown import Teardown
from tools.live.claims import LEASE_S, RENEW_S, Claim, ClaimStore
from tools.live.claims import deadline as claim_deadline
from tools.live.cloud import Cluster, GcloudStorage, KubectlCluster
from tools.live.core import (
    EXIT_BUSY,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    INTERRUPTS,
    Console,
    OnOutput,
    StepError,
    Stopper,
    StopRequest,
    StopWaiting,
    Watch,
    bounded_number,
    exit_now,
    print_line,
    run_bounded,
    tail,
)
from tools.live.leftovers import GcloudBilling
from tools.live.pulumi_stack import (
    BENCHMARK_KEY,
    BUCKET_EXISTS_KEY,
    DELETE_CHECKPOINT_KEY,
    GCP_PROJECT_KEY,
    RUN_ID_KEY,
    TPU_ENGINE_KEY,
    TRACK_KEY,
    AutomationBackend,
    Backend,
    StackLockedError,
)
from tools.live.smoke import TOTAL_SECONDS as SMOKE_TOTAL_SECONDS

# What tests and other commands use from here (tools.live.report reads run.json, not these).
__all__ = ["BENCHMARK_KEY", "BUCKET_EXISTS_KEY", "DELETE_CHECKPOINT_KEY", "TPU_ENGINE_KEY", "EXIT_BUSY",
           "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "GCP_PROJECT_KEY", "INTERRUPTS", "OnOutput",
           "RUN_ID_KEY", "StackLockedError", "StepError", "TRACK_KEY", "measured_output_tokens_per_second"]

REQUIRED_TOOLS = ("pulumi", "kubectl", "gcloud", "gke-gcloud-auth-plugin")
SMOKE_TIMEOUT = SMOKE_TOTAL_SECONDS + 60.0
"""The smoke step's deadline: the smoke check's own total (--total-timeout default) plus a minute to start."""
EXIT_CODES = (f"Exit codes: {EXIT_OK} every step passed, the destroy finished and nothing billable is left; "
              f"{EXIT_FAILED} a step, the destroy or the leftover check failed, or stdout closed (run.json says "
              "which); "
              f"{EXIT_USAGE} usage error or a required tool missing (nothing created); "
              f"{EXIT_BUSY} the stack is locked or claimed by someone else (nothing touched); "
              f"{EXIT_INTERRUPTED} stopped by SIGINT, SIGTERM or SIGHUP (torn down unless --keep; after a second "
              "SIGINT/SIGTERM it stops waiting and prints how to resume).")


class Storage(Protocol):
    def copy(self, gs_uri: str, local_dir: Path) -> None: ...


class Billing(Protocol):
    def leftovers(self, stack_label: str, project: str | None = None, network: str | None = None) -> list[str]:
        """One line per billable resource still labelled `pulumi-stack=<stack_label>` (tools.live.leftovers);
        raises LeftoverCheckError if a listing failed."""


@dataclass
class Options:
    stack: str
    work_dir: Path = Path(".")
    results: Path = Path("bench-results")
    keep: bool = False
    skip_benchmark: bool = False
    destroy_retries: int = 3
    retry_wait: float = 60.0
    up_timeout: float = 5400.0
    ready_timeout: float = 3600.0
    benchmark_timeout: float = 7200.0
    destroy_timeout: float = 5400.0
    smoke_timeout: float = SMOKE_TIMEOUT
    cancel_grace: float = 900.0  # how long a CLI asked to stop may take to save its state and exit
    claim_lease: float = LEASE_S
    """The claim's deadline is this far ahead, renewed every min(RENEW_S, lease / 6) while the driver lives."""
    smoke_args: list[str] = field(default_factory=list)
    ramp: bool = False
    """Run the ramp step (tools/live/bench_ramp.py) after smoke."""
    ramp_concurrency: int | None = None
    """Sessions at once during the ramp's load; None: benchmark.concurrency."""


@dataclass
class Deps:
    backend: Backend
    cluster: Cluster
    storage: Storage
    billing: Billing
    smoke: Callable[[list[str]], int] | None = None  # default: `python -m tools smoke` in a subprocess
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    out: OnOutput = print_line
    clock: Callable[[], float] = time.monotonic
    """Seconds, for the ramp's phases."""


# --------------------------------------------------------------------------- the driver
class Driver(Ramp, Steps, Teardown):
    STEPS = ("up", "wait", "smoke", "benchmark", "collect")

    def __init__(self, opts: Options, deps: Deps):
        if opts.ramp:
            self.STEPS = ("up", "wait", "smoke", "ramp", "benchmark", "collect")
        self.opts = opts
        self.deps = deps
        self.console = Console(deps.out, on_dead=self._output_died)
        self.out = self.console
        if hasattr(deps.cluster, "out"):  # kubectl progress lines go through the same dead-pipe-proof console
            deps.cluster.out = self.out
        self.stopper = Stopper(self._on_stop)
        self.label = label_value(opts.stack)
        stamp = deps.now()
        self.stamp = stamp.strftime("%Y%m%dT%H%M%SZ")
        host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:40]
        self.run_id = f"{self.stamp}.{host}.{os.getpid()}"
        self.outputs: dict[str, Any] = {}
        self.track = "gpu"
        self.project: str | None = None
        self.run_dir: Path | None = None
        self.phase = "prepare"  # prepare -> steps -> teardown -> done
        self.steps: dict[str, str] = {}
        self.why: dict[str, str] = {}
        self.problems: list[str] = []
        self.stop_reason: str | None = None
        self.busy: str | None = None  # why the stack was not ours to touch
        self.claimed = False
        self.claim: Claim | None = None
        self.claim_store: ClaimStore | None = None
        self.renewer: threading.Thread | None = None
        self.up_started = False
        self.cli: Watch | None = None  # the running up/destroy CLI's deadline
        self.cli_name: str | None = None
        self.destroy_attempts = 0
        self.destroy_result = "not run"
        self.leftovers: list[str] = []
        self.leftover_check = "not run"
        self.benchmark_previous: tuple[str | None] | None = None  # set once benchmark.enabled was changed
        self.run_id_previous: tuple[str | None] | None = None  # likewise benchmark.runId
        self.conversations_previous: tuple[str | None] | None = None  # likewise benchmark.conversations (ramp)
        self.concurrency_previous: tuple[str | None] | None = None  # likewise benchmark.concurrency (ramp)
        self.ramp_load_off = False
        self.destroy_env: dict[str, str] = {}  # what the last destroy attempt ran with

    @property
    def resume(self) -> str:
        env = "".join(f"{key}={value} " for key, value in self.destroy_env.items())
        where = f"--stack {self.opts.stack} --cwd {self.opts.work_dir.resolve()}"
        release = (f" && {self.claim_store.release_command(self.opts.stack)}"
                   if self.claimed and self.claim_store is not None else "")
        return f"{env}pulumi destroy {where} --refresh{release}"

    # ---------------------------------------------------------------- stop requests
    def _output_died(self, reason: str) -> None:
        self.stopper.request(f"stdout closed: {reason}")

    def _on_stop(self, reason: str) -> None:
        """A first stop request (main thread): leave the step, or let a running CLI stop gracefully."""
        first = self.stop_reason is None
        self.stop_reason = self.stop_reason or reason
        again = "Ctrl-C (or SIGTERM) again stops waiting"
        if self.phase in ("prepare", "steps") and self.cli is not None and self.cli_name == "up":
            if first:
                self.out(f"\n!! {reason} during up: asking pulumi to stop (it finishes what is in flight and saves "
                         f"the state, at most {self.opts.cancel_grace:.0f} s), then tearing down. {again}.")
            self.cli.stop(reason)
            return
        if self.phase in ("prepare", "steps"):
            self.out(f"\n!! {reason} during {self._current_step()}: tearing down. {again}.")
            raise StopRequest(reason)
        if self.phase == "teardown":
            self.out(f"\n!! {reason}: the teardown goes on (a half-done destroy leaves billable resources). "
                     f"{again}; resume any time with: {self.resume}")

    def _current_step(self) -> str:
        return next((s for s, status in self.steps.items() if status == "running"), self.phase)

    def _cli(self, name: str, call: Callable[[], None], seconds: float) -> None:
        """Run an up/destroy in a worker thread within `seconds`, stoppable gracefully."""
        self.cli = Watch(seconds, self.opts.cancel_grace, on_stop=self.deps.backend.interrupt)
        self.cli_name = name
        try:
            run_bounded(call, self.cli, f"pulumi {name}", check=self.stopper.check)
        except Exception as err:
            if self.stop_reason and name == "up":
                raise StopRequest(self.stop_reason) from err
            raise
        finally:
            self.cli = self.cli_name = None
        if self.stop_reason and name == "up":
            raise StopRequest(self.stop_reason)

    # ---------------------------------------------------------------- run
    def run(self) -> int:
        with self.stopper.installed():
            try:
                code = self._run()
            except StopWaiting as stop:
                code = self._stopped_waiting(str(stop))
        self.console.close()
        return code

    def _run(self) -> int:
        self.out(f"==> stack {self.opts.stack} (work dir {self.opts.work_dir.resolve()}, run {self.run_id})")
        self.steps = {step: "not run" for step in self.STEPS}
        try:
            refused = self.prepare()
        except KeyboardInterrupt as stop:
            self.stop_reason = self.stop_reason or getattr(stop, "reason", INTERRUPTS[signal.SIGINT])
            self.problems.append(f"stopped before up ({self.stop_reason}): nothing was created")
            self.out("stopped before up: nothing was created, nothing to destroy")
            self._release_claim()
            return self.report()
        except Exception as err:
            self.out(f"FAILED: could not prepare stack {self.opts.stack}: {err}")
            self._release_claim()
            if self.run_dir is None:
                return EXIT_FAILED
            self.problems.append(f"prepare failed: {err}")
            return self.report()
        if refused is not None:
            return self.report()

        self.phase = "steps"
        step = "up"
        try:
            for step in self.STEPS:
                self._run_step(step)
        except StopWaiting:
            raise
        except StackLockedError as err:
            if self._locked_before_anything(step, err):
                return self.report()
            self._failed(step, err)
        except KeyboardInterrupt as stop:  # StopRequest, or a Ctrl-C that reached code without our handler
            reason = getattr(stop, "reason", INTERRUPTS[signal.SIGINT])
            self.stop_reason = self.stop_reason or reason
            self.steps[step] = "interrupted" if reason in INTERRUPTS.values() else "stopped"
            cause = f"; {tail(str(stop.__cause__), 3)}" if stop.__cause__ else ""
            self.why[step] = f"{reason}{cause}"
            self.problems.append(f"{self.steps[step]} ({reason}) during {step}")
        except Exception as err:
            self._failed(step, err)
        except BaseException as err:  # SystemExit and the like: still tear down, then let it go on
            self._failed(step, err)
            self.teardown()
            raise
        self.teardown()
        return self.report()

    def _run_step(self, step: str) -> None:
        if self.opts.skip_benchmark and step in ("benchmark", "collect"):
            self.out(f"==> {step}: skipped (--skip-benchmark)")
            self.steps[step] = "skipped"
            return
        self.out(f"==> {step}")
        self.steps[step] = "running"
        self._write_run_record()
        getattr(self, f"step_{step}")()
        self.steps[step] = "ok"
        self.stopper.check()

    def _failed(self, step: str, err: BaseException) -> None:
        self.steps[step] = "failed"
        self.why[step] = tail(str(err) or type(err).__name__, 6)
        self.problems.append(f"{step} failed: {tail(str(err), 1) or type(err).__name__}")
        self.out(f"FAILED {step}: {tail(str(err))}")

    def _locked_before_anything(self, step: str, err: StackLockedError) -> bool:
        """The first `up` found another process's lock: nothing of ours exists, so destroy nothing."""
        if step != "up" or self.benchmark_previous is not None:
            return False
        holder = err.holder or "the backend does not say who (Pulumi Cloud: see the stack's Activity page)"
        self.busy = f"stack {self.opts.stack} is locked by another update: {holder}"
        self.steps[step], self.why[step] = "failed", self.busy
        self.destroy_result = "not run: another process holds the stack's lock; this run created nothing"
        self.problems.append(self.busy)
        self.out(f"FAILED up: {self.busy}.\n    Nothing was destroyed: the stack is another process's update. Wait "
                 f"for it to finish and run again; if no pulumi process runs on it any more, clear the stale lock "
                 f"with `pulumi cancel --stack {self.opts.stack}` "
                 "(https://www.pulumi.com/docs/iac/cli/commands/pulumi_cancel/) and run again.")
        self._release_claim()
        return True

    def prepare(self) -> int | None:
        """Select the stack and claim it for this run; an exit code if it is not ours to touch."""
        backend = self.deps.backend
        backend.select_or_create(self.opts.stack)
        self.track = backend.get_config(TRACK_KEY) or self.opts.stack
        self.project = backend.get_config(GCP_PROJECT_KEY)
        self.run_dir = self.opts.results / self.opts.stack / self.stamp
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.console.open_log(self._path("driver.log"))
        self.out(f"results folder: {self.run_dir}")
        where = f"--stack {self.opts.stack} --cwd {self.opts.work_dir.resolve()}"
        self.claim_store = store = backend.claims()
        if not store.atomic:
            # Two drivers started together could both read "free" and both claim: refuse before touching anything.
            return self._refuse(
                f"stack {self.opts.stack}'s backend offers no compare-and-set ({store.where(self.opts.stack)}), so "
                "two runs could both claim it",
                "run benchmarks on a stack in a Cloud Storage or local backend, whose claims are atomic "
                "(`pulumi login gs://<bucket>` or `pulumi login file://<folder>`; README.md, Run a benchmark)")
        mine = Claim(self.run_id, self.opts.stack, claim_deadline(self.deps.now(), self.opts.claim_lease),
                     socket.gethostname())
        held = store.create(mine)
        if held is not None and held.unreadable:
            return self._refuse(
                f"stack {self.opts.stack} has a claim that cannot be read ({held.unreadable}; "
                f"{store.where(self.opts.stack)})",
                "it may be a live run's, so nothing reaps it; if no run holds the stack, remove it with "
                f"`{store.release_command(self.opts.stack)}`")
        if held is not None:
            return self._refuse(
                f"stack {self.opts.stack} is claimed by benchmark run {held.run} until {held.deadline} "
                f"({store.where(self.opts.stack)})",
                "if that run is over and its stack destroyed, release it with "
                f"`{store.release_command(self.opts.stack)}`; "
                "past its deadline `python -m tools reap` destroys the stack and releases it")
        self.claim = store.get(self.opts.stack)
        if self.claim is None or self.claim.run != self.run_id:
            return self._refuse(f"stack {self.opts.stack} was just claimed by benchmark run "
                                f"{self.claim.run if self.claim else '(gone)'}", "use another stack")
        self.claimed = True
        self.out(f"claimed stack {self.opts.stack} for this run until {self.claim.deadline}, renewed while the "
                 f"driver lives ({store.where(self.opts.stack)})")
        self._renew_claim_in_background()
        count = backend.resource_count()
        if count:
            self._release_claim()
            return self._refuse(f"stack {self.opts.stack} already holds {count} resource(s) that this run did not "
                                "create (a kept or interrupted run, or someone's deployment)",
                                f"the driver destroys only what it creates: finish them with `pulumi destroy {where}`, "
                                "or run on a stack of your own (copy the stack file to Pulumi.<name>.yaml)")
        self._write_run_record()
        return None

    def _renew_claim_in_background(self) -> None:
        """Push the claim's deadline ahead while this process lives; a dead driver's claim expires and the
        reaper destroys its stack (tools.live.claims)."""
        period = min(RENEW_S, self.opts.claim_lease / 6)
        stop = threading.Event()
        self.renewer_stop = stop

        def renew() -> None:
            while not stop.wait(period):
                claim, store = self.claim, self.claim_store
                if claim is None or store is None or not self.claimed:
                    return
                try:
                    renewed = store.renew(claim, claim_deadline(self.deps.now(), self.opts.claim_lease))
                except Exception as err:  # noqa: BLE001 - retried next period; the lease is the bound
                    self.out(f"note: could not renew the claim ({tail(str(err), 1)}); retrying")
                    continue
                if renewed is None:
                    self.claimed = False
                    self.problems.append("the claim was taken away (expired and reaped, or removed by a person)")
                    self.out("!! the claim on the stack was taken away; this run no longer owns it")
                    return
                self.claim = renewed

        self.renewer = threading.Thread(target=renew, name="bench-claim", daemon=True)
        self.renewer.start()

    def _refuse(self, why: str, what_to_do: str) -> int:
        self.busy = why
        self.problems.append(why)
        self.destroy_result = "not run: the stack is not this run's"
        self.out(f"REFUSED: {why}.\n    Nothing was changed or destroyed; {what_to_do}.")
        return EXIT_BUSY

def run(opts: Options, deps: Deps) -> int:
    return Driver(opts, deps).run()


# --------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog("bench"),
        description="up -> wait -> smoke -> benchmark -> collect -> destroy (always, unless --keep) for one stack, "
                    "then list anything still billable under its pulumi-stack label.",
        epilog="SIGINT, SIGTERM, SIGHUP or a closed stdout tear the stack down; a second SIGINT/SIGTERM stops waiting "
               "and prints how to resume. The smoke check runs as a subprocess under --smoke-timeout, so neither its "
               "output nor a hung endpoint can hold the teardown. " + EXIT_CODES)
    parser.add_argument("--stack", required=True, metavar="NAME",
                        help="stack name (Pulumi.<stack>.yaml), e.g. gpu or tpu")
    parser.add_argument("--work-dir", type=Path, default=Path("."), help="the Pulumi project folder (default .)")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), metavar="FOLDER",
                        help="output folder: results go to <out>/<stack>/<UTC timestamp>/ (default %(default)s; "
                             "was --results)")
    deprecated(parser, "--results", "--out", type=Path)
    parser.add_argument("--keep", action="store_true",
                        help="leave the stack up at the end (the only way to skip the destroy)")
    parser.add_argument("--skip-benchmark", action="store_true", help="stop after the smoke check (or the ramp)")
    parser.add_argument("--ramp", action="store_true",
                        help="after the smoke check, exercise autoscaling: every scaled role down to its minimum, up "
                             "to its maximum under load and down again, each within the plan's times (ramp.json)")
    parser.add_argument("--ramp-concurrency", type=bounded_number(int, 1, 100000), default=None, metavar="SESSIONS",
                        help="sessions at once during the ramp's load (default: benchmark.concurrency)")
    parser.add_argument("--destroy-retries", type=bounded_number(int, 0, 20), default=3,
                        help="retries of a destroy that failed on a known transient error (default %(default)s)")
    backoff = bounded_number(float, 0, 3600)
    parser.add_argument("--backoff-seconds", type=backoff, default=60.0, metavar="SECONDS",
                        help="delay before the first destroy retry, doubling each time (default %(default)s; "
                             "was --retry-wait)")
    deprecated(parser, "--retry-wait", "--backoff-seconds", type=backoff)
    parser.add_argument("--up-timeout", type=bounded_number(float, 1, 86400), default=5400.0, metavar="SECONDS",
                        help="time for each `pulumi up`; then it is asked to stop (seconds, default %(default)s)")
    parser.add_argument("--ready-timeout", type=bounded_number(float, 0, 86400), default=3600.0, metavar="SECONDS",
                        help="time for the serving and router pods to be Ready (seconds, default %(default)s)")
    parser.add_argument("--benchmark-timeout", type=bounded_number(float, 0, 172800), default=7200.0,
                        metavar="SECONDS", help="time for the benchmark Job to complete (seconds, default %(default)s)")
    parser.add_argument("--destroy-timeout", type=bounded_number(float, 1, 86400), default=5400.0, metavar="SECONDS",
                        help="time for each destroy attempt; then it is asked to stop (seconds, default %(default)s)")
    parser.add_argument("--smoke-timeout", type=bounded_number(float, 1, 86400), default=SMOKE_TIMEOUT,
                        metavar="SECONDS",
                        help="time for the smoke check (a subprocess); then it is stopped and the step fails. "
                             "Raise it with a larger --total-timeout in --smoke-args (seconds, default %(default)s)")
    parser.add_argument("--claim-lease-seconds", type=bounded_number(float, 1, 86400), default=LEASE_S,
                        metavar="SECONDS",
                        help="the stack's claim expires this long after the driver last renewed it; then "
                             "`python -m tools reap` (the teardown workflow, every 15 min) destroys the stack "
                             "(default %(default)s)")
    parser.add_argument("--smoke-args", nargs=argparse.REMAINDER, default=[],
                        help="everything after it goes to `python -m tools smoke` (must come last); a "
                             "--metrics-url there replaces the driver's own port-forwarded metrics URLs")
    return parser


def options_from_args(args: argparse.Namespace) -> Options:
    return Options(stack=args.stack, work_dir=args.work_dir, results=args.out, keep=args.keep,
                   skip_benchmark=args.skip_benchmark, destroy_retries=args.destroy_retries,
                   retry_wait=args.backoff_seconds, up_timeout=args.up_timeout, ready_timeout=args.ready_timeout,
                   benchmark_timeout=args.benchmark_timeout, destroy_timeout=args.destroy_timeout,
                   smoke_timeout=args.smoke_timeout, claim_lease=args.claim_lease_seconds,
                   smoke_args=list(args.smoke_args), ramp=args.ramp, ramp_concurrency=args.ramp_concurrency)


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


if __name__ == "__main__":
    # A second interrupt may leave threads that read a still-running CLI's output: do not wait for them.
    exit_now(main())

"""The end of every benchmark run (`tools.live.bench`): destroy with retries, the leftover listing, releasing the
claim, and the run record (run.json) and summary. A mixin of `tools.live.bench.Driver`, which owns the state."""

from __future__ import annotations

import contextlib
import json

from components.config import default_cluster_name
from tools.live.core import (
    EXIT_BUSY,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    INTERRUPTS,
    StopRequest,
    StopWaiting,
    classify,
    tail,
)
from tools.live.leftovers import LeftoverCheckError, split_kept_bucket
from tools.live.pulumi_stack import (
    BENCHMARK_KEY,
    CLUSTER_NAME_KEY,
    CONCURRENCY_KEY,
    CONVERSATIONS_KEY,
    DELETE_CHECKPOINT_KEY,
    HINTS,
    RUN_ID_KEY,
    TRANSIENT_PATTERNS,
    UNREACHABLE_ENV,
    UNREACHABLE_PATTERNS,
)

RETRY_WAIT_CAP_SECONDS = 600.0


class Teardown:
    """teardown() and what it needs; report() and the run record."""

    def teardown(self) -> None:
        self.phase = "teardown"
        self._write_run_record()
        try:
            if self.opts.keep:
                self.destroy_result = "skipped (--keep)"
                self._release_claim()  # a kept stack is the user's: no deadline, the reaper leaves it alone
                self.out(f"==> destroy: skipped (--keep); the stack keeps running and billing. Later: {self.resume}")
                if self.benchmark_previous is not None:
                    self.out(f"note: {BENCHMARK_KEY} stays true in Pulumi.{self.opts.stack}.yaml "
                             "(the benchmark Job is deployed)")
            else:
                self._restore_benchmark_config()  # destroy does not run the program: order is free
                self.out("==> destroy")
                if self.destroy_with_retries():
                    self.destroy_result = "finished"
                    self._note_kept_bucket()
                    self._release_claim()
                else:
                    self.destroy_result = "failed"
                    self.problems.append("destroy failed")
                    self.out(f"resume with: {self.resume}")
            self._write_run_record()
            self.list_leftovers()
        except (StopWaiting, StopRequest):
            raise
        except Exception as err:  # a bug here must not hide what is left: say so and keep the record
            self.problems.append(f"teardown failed: {err}")
            self.out(f"FAILED teardown: {tail(str(err))}\nresume with: {self.resume}")
        self.phase = "done"
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
            self.destroy_attempts += 1
            self._write_run_record()
            try:
                self._cli("destroy", lambda env=dict(env): self.deps.backend.destroy(on_output=self.out, env=env),
                          self.opts.destroy_timeout)
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
            self.out(f"destroy failed ({reason}), giving up after {attempt} attempt(s):\n{tail(text)}")
            if reason in HINTS:
                self.out(f"hint: {HINTS[reason]}")
            return False

    def _release_claim(self) -> None:
        """Remove this run's claim, and only this run's (the store removes it only at the version we hold)."""
        if not self.claimed or self.claim is None or self.claim_store is None:
            return
        stop = getattr(self, "renewer_stop", None)
        if stop is not None:
            stop.set()
        if self.renewer is not None:
            self.renewer.join(timeout=30)
        self.claimed = False
        try:
            removed = self.claim_store.remove(self.claim)
        except Exception as err:
            self.claimed = True
            self.problems.append(f"could not release the claim {self.claim_store.where(self.opts.stack)}: {err}")
            return
        if removed:
            self.out(f"released the claim on stack {self.opts.stack}")
        else:
            self.out(f"note: the claim on stack {self.opts.stack} was no longer this run's; left alone")

    @property
    def kept_bucket(self) -> str | None:
        """The checkpoint bucket a destroy keeps by design (storage.deleteCheckpointOnDestroy off)."""
        if (self._config(DELETE_CHECKPOINT_KEY) or "false").lower() == "true":
            return None
        uri = self.outputs.get("bucketUri") or ""
        return uri.removeprefix("gs://") or None

    def _note_kept_bucket(self) -> None:
        """The next `up` takes the kept bucket back by itself (components/checks/preflight.py find_bucket)."""
        bucket = self.kept_bucket
        if bucket:
            self.out(f"gs://{bucket} was kept with the checkpoint; the next up takes it back, nothing to set")

    def _restore_benchmark_config(self) -> None:
        for key, saved in ((BENCHMARK_KEY, self.benchmark_previous), (RUN_ID_KEY, self.run_id_previous),
                           (CONVERSATIONS_KEY, self.conversations_previous),
                           (CONCURRENCY_KEY, self.concurrency_previous)):
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
        network = (self.outputs.get("clusterName") or self._config(CLUSTER_NAME_KEY)
                   or default_cluster_name(self.opts.stack))
        try:
            found = list(self.deps.billing.leftovers(self.label, self.project, network))
            self.leftover_check = "complete"
        except LeftoverCheckError as err:
            found = err.found
            self.leftover_check = "incomplete"
            self.problems.append(f"leftover check incomplete: {err}")
            self.out(f"could not check everything: {err}")
        except Exception as err:
            self.leftover_check = "failed"
            self.problems.append(f"leftover check failed: {err}")
            self.out(f"could not list leftovers: {err}")
            return
        self.leftovers, kept = split_kept_bucket(found, self.kept_bucket)
        for line in kept:
            self.out(f"    {line}  (kept by design: the checkpoint copy; storage.deleteCheckpointOnDestroy=false)")
        for line in self.leftovers:
            self.out(f"    {line}")
        if self.leftovers:
            what = "kept (--keep)" if self.opts.keep else "still billable"
            self.out(f"{len(self.leftovers)} resource(s) {what} under pulumi-stack={self.label}")
            if not self.opts.keep:
                self.problems.append(f"{len(self.leftovers)} billable resource(s) left")
        elif self.leftover_check == "complete":
            self.out(f"nothing billable left under pulumi-stack={self.label}")

    def _config(self, key: str) -> str | None:
        try:
            return self.deps.backend.get_config(key)
        except Exception:
            return None

    def _stopped_waiting(self, reason: str) -> int:
        """A second interrupt: leave now, say what may still run and how to finish."""
        self.stop_reason = self.stop_reason or reason
        self.problems.append(f"stopped waiting ({reason} twice) during {self.phase}")
        if self.destroy_result in ("not run", "failed") and self.up_started and not self.opts.keep:
            self.destroy_result = "interrupted" if self.destroy_attempts else "not run: stopped waiting"
        running = f" The pulumi {self.cli_name} it started goes on in the background." if self.cli_name else ""
        self.out(f"\n!! stopped waiting.{running} Check the stack and finish it with: {self.resume}")
        self.phase = "done"
        self._write_run_record()
        return EXIT_INTERRUPTED

    # ---------------------------------------------------------------- report
    def _write_run_record(self) -> None:
        if self.run_dir is None:
            return
        record = {
            "stack": self.opts.stack, "track": self.track, "run_id": self.run_id, "phase": self.phase,
            "steps": self.steps, "why": self.why, "stopped_by": self.stop_reason, "busy": self.busy,
            "destroy": {"result": self.destroy_result, "attempts": self.destroy_attempts, "env": self.destroy_env},
            "destroyed": self.destroy_result == "finished", "kept": self.opts.keep,
            "leftover_check": self.leftover_check, "leftovers": self.leftovers, "problems": self.problems,
            "resume": None if self.destroy_result in ("finished", "skipped (--keep)") or not self.up_started
            else self.resume,
            "finished": self.deps.now().isoformat() if self.phase == "done" else None,
        }
        with contextlib.suppress(OSError):
            tmp = self._path("run.json.tmp")
            tmp.write_text(json.dumps(record, indent=2) + "\n")
            tmp.replace(self._path("run.json"))

    def report(self) -> int:
        self.phase = "done"
        done = ", ".join(f"{step} {status}" for step, status in self.steps.items() if status != "not run")
        self.out(f"==> summary: {done or 'no step ran'}")
        for problem in self.problems:
            self.out(f"    problem: {problem}")
        self._write_run_record()
        if self.busy:
            return EXIT_BUSY
        if self.stop_reason in INTERRUPTS.values():
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.problems else EXIT_OK

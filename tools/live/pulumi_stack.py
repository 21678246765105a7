"""The driver's stack through Pulumi's Automation API: claim, up (with the policy pack), a graceful stop
of a running CLI, destroy, and what a lock or destroy error means.

Every CLI call runs through `session_wrapper`, in a session of its own: the Ctrl-C a terminal sends to
its foreground process group reaches only the driver, which decides what the CLI gets: one SIGINT, which
the engine treats as a cancellation that drives the operation to a safe point before it returns (a second
one would terminate it at once: https://github.com/pulumi/pulumi/pull/1231).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from components.facts import catalog
from tools.live.claims import ClaimStore, TagClaims, store_for
from tools.live.core import OnOutput

PROJECT = catalog.GUIDE_NAME  # the Pulumi project, so also the config namespace
# The config keys the benchmark driver reads or sets.
TRACK_KEY = f"{PROJECT}:track"
GCP_PROJECT_KEY = f"{PROJECT}:gcp.project"
CLUSTER_NAME_KEY = f"{PROJECT}:cluster.name"
BENCHMARK_KEY = f"{PROJECT}:benchmark.enabled"
RUN_ID_KEY = f"{PROJECT}:benchmark.runId"
CONVERSATIONS_KEY = f"{PROJECT}:benchmark.conversations"
CONCURRENCY_KEY = f"{PROJECT}:benchmark.concurrency"
BUCKET_EXISTS_KEY = f"{PROJECT}:storage.bucketExists"
DELETE_CHECKPOINT_KEY = f"{PROJECT}:storage.deleteCheckpointOnDestroy"
TPU_ENGINE_KEY = f"{PROJECT}:tpu.engine"

CLAIM_TAG = f"{PROJECT}:bench-run"
"""Stack tag naming the benchmark run that owns the stack (DIY backends keep stack tags since Pulumi
v3.211.0: https://github.com/pulumi/pulumi/pull/19882)."""
POLICY_PACK = "policy"
"""The CrossGuard pack folder `up` runs (enforcement mandatory: a violation fails the update)."""


class StackLockedError(Exception):
    """Another process holds the stack's update lock; `holder` is who, when the backend says."""

    def __init__(self, message: str, holder: str | None):
        super().__init__(message)
        self.holder = holder


# What the backends print for a held lock (both turn into `ConcurrentUpdateError` in the Automation API:
# https://github.com/pulumi/pulumi/blob/master/sdk/python/lib/pulumi/automation/errors.py). Pulumi Cloud:
# "[409] Conflict: Another update is currently in progress." and no holder
# (https://www.pulumi.com/docs/iac/operations/troubleshooting/update-conflicts/). DIY backends name the lock
# file and its holder: "<url>/.pulumi/locks/...json: created by user@host (pid 42) at 2025-09-23T13:21:31Z".
LOCKED_PATTERN = r"currently locked by|Another update is currently in progress|\[409\] Conflict"
_HOLDER = re.compile(r"(?P<file>\S+\.json): created by (?P<who>\S+) \(pid (?P<pid>\d+)\) at (?P<at>\S+)")


def lock_holder(text: str) -> str | None:
    """`user@host (pid N) since <time>, lock file <url>` from a DIY backend's lock error, else None."""
    match = _HOLDER.search(text)
    if not match:
        return None
    return f"{match['who']} (pid {match['pid']}) since {match['at']}, lock file {match['file']}"


def is_locked(text: str) -> bool:
    return re.search(LOCKED_PATTERN, text, re.IGNORECASE) is not None


# --------------------------------------------------------------------------- destroy error classes
# (what the error text says, a regex over the whole CommandError text). Checked in this order.
UNREACHABLE_PATTERNS: tuple[tuple[str, str], ...] = (
    ("cluster unreachable", r"cluster is unreachable|unable to load schema information"),
    ("cluster DNS name gone", r"no such host"),
    ("cluster refused the connection", r"connection refused|dial tcp [^\n]*i/o timeout"),
    ("cluster credentials rejected", r"Unauthorized|server has asked for the client to provide credentials"),
)
LOCKED_REASON = "stack locked by another update (an interrupted `up` still finishing?)"
TRANSIENT_PATTERNS: tuple[tuple[str, str], ...] = (
    (LOCKED_REASON, LOCKED_PATTERN),
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
    LOCKED_REASON: "if no other pulumi process runs on this stack, remove the stale lock with `pulumi cancel` "
                   "(https://www.pulumi.com/docs/iac/cli/commands/pulumi_cancel/)",
    "finalizers still pending":
        "look for stuck objects with `kubectl get all,pvc -n <namespace>` and their metadata.finalizers",
}
UNREACHABLE_ENV = {"PULUMI_K8S_DELETE_UNREACHABLE": "true"}


class Backend(Protocol):
    """The stack, as the Pulumi Automation API sees it."""

    def select_or_create(self, stack: str) -> None: ...

    def get_config(self, key: str) -> str | None:
        """The plain value of a full key (`kimi-k3-1:track`), or None if it is not set."""

    def set_config(self, key: str, value: str | None) -> None:
        """Set a full key in Pulumi.<stack>.yaml; None removes it."""

    def get_tag(self, key: str) -> str | None:
        """A stack tag's value, or None if it is not set (or the backend keeps no tags)."""

    def set_tag(self, key: str, value: str | None) -> None:
        """Set a stack tag; None removes it."""

    def resource_count(self) -> int:
        """Resources in the stack's state, not counting the stack itself and providers."""

    def claims(self) -> ClaimStore:
        """Where benchmark runs claim stacks of this backend (tools.live.claims)."""

    def up(self, on_output: OnOutput) -> None:
        """`pulumi up` with the policy pack; StackLockedError if another process holds the lock."""

    def interrupt(self) -> bool:
        """Ask a running `up`/`destroy` CLI to stop gracefully (one SIGINT); False if none runs."""

    def outputs(self) -> dict[str, Any]:
        """Stack outputs as plain values (secrets included: never print them wholesale)."""

    def destroy(self, on_output: OnOutput, env: Mapping[str, str]) -> None:
        """`pulumi destroy --refresh --continue-on-error` with `env` added to the CLI's environment."""


def session_wrapper(real: str, folder: Path) -> Path:
    """An executable that records its pid in `folder/pid`, then runs `real` with the same arguments in a
    new session (same pid: exec), so the terminal's Ctrl-C does not reach the CLI and the driver can. SIGINT is
    put back to its default first: a driver started in the background (`nohup`, `&`) inherits it ignored, and the
    CLI would then never hear the driver's graceful stop."""
    path = folder / "pulumi"
    pid_file = folder / "pid"
    path.write_text(f"#!{sys.executable}\nimport os, signal, sys\nsignal.signal(signal.SIGINT, signal.SIG_DFL)\n"
                    "try:\n    os.setsid()\nexcept OSError:\n    pass\n"
                    f"with open({str(pid_file)!r}, 'w') as f:\n    f.write(str(os.getpid()))\n"
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


class AutomationBackend:
    """`pulumi.automation` against the project in work_dir (Pulumi.yaml, Pulumi.<stack>.yaml)."""

    def __init__(self, work_dir: Path, policy_packs: Sequence[str] = (POLICY_PACK,)):
        self.work_dir = work_dir
        self.policy_packs = [str((work_dir / pack).resolve()) for pack in policy_packs]
        self._stack: Any = None
        self._folder = tempfile.TemporaryDirectory(prefix="bench-pulumi-")
        self._pid_file = Path(self._folder.name) / "pid"
        self._running = False

    def select_or_create(self, stack: str) -> None:
        from pulumi import automation as auto

        self._stack = auto.create_or_select_stack(stack_name=stack, work_dir=str(self.work_dir.resolve()))
        workspace = self._stack.workspace
        workspace.pulumi_command = _own_session_command(workspace.pulumi_command, Path(self._folder.name))

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

    def get_tag(self, key: str) -> str | None:
        from pulumi import automation as auto

        try:
            return self._stack.get_tag(key) or None
        except auto.CommandError:  # not set
            return None

    def set_tag(self, key: str, value: str | None) -> None:
        if value is None:
            self._stack.remove_tag(key)
        else:
            self._stack.set_tag(key, value)

    def claims(self) -> ClaimStore:
        store = store_for(self._stack.workspace.who_am_i().url, PROJECT)
        return store if store is not None else TagClaims(self.get_tag, self.set_tag, self._stack.name, PROJECT,
                                                         str(self.work_dir.resolve()))

    def resource_count(self) -> int:
        resources = self._stack.export_stack().deployment.get("resources") or []
        return sum(1 for r in resources if not str(r.get("type", "")).startswith("pulumi:"))

    def _run(self, call: Any) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._pid_file.unlink()
        self._running = True
        try:
            call()
        finally:
            self._running = False

    def up(self, on_output: OnOutput) -> None:
        from pulumi import automation as auto

        try:
            self._run(lambda: self._stack.up(on_output=on_output, on_error=on_output, policy_packs=self.policy_packs))
        except auto.ConcurrentUpdateError as err:
            raise StackLockedError(str(err), lock_holder(str(err))) from None

    def interrupt(self) -> bool:
        if not self._running:
            return False
        try:
            os.kill(int(self._pid_file.read_text().strip()), signal.SIGINT)
        except (OSError, ValueError):
            return False
        return True

    def outputs(self) -> dict[str, Any]:
        return {key: out.value for key, out in self._stack.outputs().items()}

    def destroy(self, on_output: OnOutput, env: Mapping[str, str]) -> None:
        workspace = self._stack.workspace
        saved_env = dict(workspace.env_vars)
        workspace.env_vars = {**saved_env, **env}
        try:
            self._run(lambda: self._stack.destroy(on_output=on_output, on_error=on_output, refresh=True,
                                                  continue_on_error=True))
        finally:
            workspace.env_vars = saved_env

"""Work a test session starts once, in the background, as soon as collection ends, and tests wait for.

The session's plans (the fixture stacks and every variant of tests/conftest.py) and the real inference-perf run
are whole commands a user could run. Started when collection ends they overlap the first tests instead of holding
up whichever test needs them first, and under pytest-xdist (`-n`, pyproject.toml) every worker shares the one
result instead of rendering its own: the first process to take a job's lock starts it, the others find it
started. Each job runs `python -m tests.background FOLDER -- ARGV...`: ARGV with a deadline, its stdout and
stderr kept in FOLDER, its exit code written last (`rc`), which is what a waiting test polls for (bounded).

The folder they share comes from KIMI_TEST_SHARED, which the session's first process sets (tests/conftest.py,
pytest_configure) before xdist starts its workers, and removes when the session ends."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SHARED_ENV = "KIMI_TEST_SHARED"
JOB_TIMEOUT_S = 900
"""Longest a job may run (a plan of twenty stacks on a loaded 2-core machine takes well under a minute)."""
POLL_S = 0.05


class Job:
    """One background command's folder: out.txt, err.txt, then rc."""

    def __init__(self, name: str):
        self.folder = Path(os.environ[SHARED_ENV]) / name

    def start_once(self, argv: list[str], prepare: Callable[[Path], None] | None = None, cwd: Path | None = None,
                   env: dict[str, str] | None = None) -> None:
        """Start `argv` unless this session started it already; `prepare(folder)` runs first, under the lock."""
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        with open(self.folder.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.folder.exists():
                return
            self.folder.mkdir()
            if prepare is not None:
                prepare(self.folder)
            subprocess.Popen([sys.executable, "-m", "tests.background", str(self.folder), "--", *argv],
                             cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)

    def wait(self, timeout: float = JOB_TIMEOUT_S + 60) -> subprocess.CompletedProcess:
        """The finished command (its exit code, stdout and stderr); fails if it never started or took too long."""
        assert self.folder.exists(), f"background job {self.folder.name} was never started"
        deadline = time.monotonic() + timeout
        while not (self.folder / "rc").exists():
            assert time.monotonic() < deadline, f"background job {self.folder.name} did not end in {timeout} s"
            time.sleep(POLL_S)
        return subprocess.CompletedProcess([], int((self.folder / "rc").read_text()),
                                           (self.folder / "out.txt").read_text(errors="replace"),
                                           (self.folder / "err.txt").read_text(errors="replace"))


def _run(folder: Path, argv: list[str]) -> int:
    with open(folder / "out.txt", "w") as out, open(folder / "err.txt", "w") as err:
        try:
            code = subprocess.run(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                  timeout=JOB_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            print(f"took longer than {JOB_TIMEOUT_S} s", file=err)
            code = 124
    (folder / "rc.tmp").write_text(str(code))
    (folder / "rc.tmp").rename(folder / "rc")
    return code


if __name__ == "__main__":
    separator = sys.argv.index("--")
    sys.exit(_run(Path(sys.argv[1]), sys.argv[separator + 1:]))

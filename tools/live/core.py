"""Shared core of the commands that act on a live stack (`tools.live.bench`, `tools.live.leftovers`, `tools.kube`):
output that survives a dead terminal, stop signals, deadlines and bounded subprocesses.

Why a core: a benchmark stack bills by the hour, so these commands must reach their teardown whatever
happens to the process, and no wait may be open-ended.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUSY, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
"""Exit codes: EXIT_BUSY = the stack is locked or claimed by someone else (nothing was touched)."""

OnOutput = Callable[[str], Any]
POLL_SECONDS = 0.2
"""How often a thread waiting on a worker looks at the clock and at pending signals."""


class StepError(Exception):
    """A step failed in a way the command detected itself (as opposed to an error from a tool)."""


class StopRequest(KeyboardInterrupt):
    """Leave the current step now and tear down: a signal, a dead output or a deadline asked for it.

    A KeyboardInterrupt so that `except Exception` in step code never swallows it, and so that
    `subprocess.Popen.__exit__` does not wait for its child (it only does for KeyboardInterrupt)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class StopWaiting(KeyboardInterrupt):
    """A second interrupt: stop waiting, even for the teardown."""


def tail(text: str, lines: int = 12) -> str:
    kept = [line for line in str(text).splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def classify(text: str, patterns: Sequence[tuple[str, str]]) -> str | None:
    """The first pattern's reason that matches `text` (case-insensitive), or None."""
    for reason, pattern in patterns:
        if re.search(pattern, text, re.IGNORECASE):
            return reason
    return None


def print_line(line: str) -> None:
    print(line, flush=True)


# --------------------------------------------------------------------------- output
class Console:
    """Line output to a sink (stdout by default) and, once opened, a log file, that never blocks its caller.

    A call only appends the line to a deque (atomic, no lock), so any thread and a signal handler may write at
    any moment: nothing can re-enter a held lock (a sink whose output comes back here, a handler that interrupts
    a write) and a stuck terminal cannot stall the caller. Two threads do the writing: one writes every line to
    the log (keeping lines in memory until the log opens) and hands it on, the other gives it to the sink, so a
    sink that hangs never stops the log. A sink that fails (a closed pipe, a hung-up terminal) is marked dead and
    `on_dead` is called once. `close()` drains both within DRAIN_SECONDS."""

    IDLE_SECONDS = 0.02
    DRAIN_SECONDS = 5.0

    def __init__(self, sink: OnOutput = print_line, on_dead: Callable[[str], None] | None = None):
        self.sink = sink
        self.on_dead = on_dead
        self.dead: str | None = None
        self._lines: collections.deque[str] = collections.deque()
        self._to_sink: collections.deque[str] = collections.deque()
        self._log: TextIO | None = None
        self._early: list[str] = []
        self._closing = False
        self._logger = threading.Thread(target=self._write_log, name="console-log", daemon=True)
        self._printer = threading.Thread(target=self._write_sink, name="console-sink", daemon=True)
        self._logger.start()
        self._printer.start()

    def __call__(self, line: str) -> None:
        self._lines.append(str(line))

    def _write_log(self) -> None:
        while True:
            try:
                line = self._lines.popleft()
            except IndexError:
                if self._closing:
                    return
                time.sleep(self.IDLE_SECONDS)
                continue
            log = self._log
            if log is None:
                self._early.append(line)
            else:
                with contextlib.suppress(OSError, ValueError):
                    if self._early:
                        log.write("".join(early + "\n" for early in self._early))
                        self._early.clear()
                    log.write(line + "\n")
                    log.flush()
            self._to_sink.append(line)

    def _write_sink(self) -> None:
        while True:
            try:
                line = self._to_sink.popleft()
            except IndexError:
                if self._closing and not self._logger.is_alive():
                    return
                time.sleep(self.IDLE_SECONDS)
                continue
            if self.dead is not None:
                continue
            try:
                self.sink(line)
            except (OSError, ValueError) as err:  # BrokenPipeError, EIO after a hang-up, closed file
                self.dead = f"output closed ({type(err).__name__}: {err})"
                if self.on_dead is not None:
                    self.on_dead(self.dead)

    def open_log(self, path: Path) -> None:
        """Open the log; lines written so far go in first (the log thread owns the file from here on)."""
        self._log = path.open("a")

    def close(self) -> None:
        """Write out what is queued (within DRAIN_SECONDS; a sink that hangs is left behind), close the log."""
        self._closing = True
        deadline = Deadline(self.DRAIN_SECONDS)
        self._logger.join(deadline.remaining())
        self._printer.join(deadline.remaining())
        log, self._log = self._log, None
        if log is not None and not self._logger.is_alive():
            with contextlib.suppress(OSError, ValueError):
                log.write("".join(line + "\n" for line in self._early))
                log.close()


# --------------------------------------------------------------------------- signals
INTERRUPTS = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP (hang-up)"}
STOP_WAITING = (signal.SIGINT, signal.SIGTERM)
"""Signals whose second arrival stops waiting. A hang-up never does: nobody is left to ask for it."""


class Stopper:
    """Turns SIGINT, SIGTERM, SIGHUP and other stop requests (a dead output, a deadline) into one
    orderly stop, on a path of its own: no lock, nothing it waits for on the output side (the Console only
    queues). `handle(reason)` decides, in the main thread, what the current phase does with a
    first request: raise StopRequest (leave the step), or return (the caller keeps waiting, e.g. for a
    destroy). The second SIGINT/SIGTERM raises StopWaiting, whatever the phase."""

    def __init__(self, handle: Callable[[str], None]):
        self.handle = handle
        self.interrupts = 0
        self.first: str | None = None  # the first reason a stop was asked for
        self._pending: collections.deque[str] = collections.deque()  # lock-free: signal handlers append too
        self._previous: dict[int, Any] = {}

    @contextlib.contextmanager
    def installed(self) -> Iterator[Stopper]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        for signum in (*INTERRUPTS, signal.SIGUSR1):
            self._previous[signum] = signal.signal(signum, self._on_signal)
        try:
            yield self
        finally:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
            self._previous.clear()

    def request(self, reason: str) -> None:
        """Ask for a stop from any thread or a signal handler; the main thread acts on it (now, if this is the
        main thread). Takes no lock: a handler that interrupts the main thread anywhere cannot deadlock here."""
        self.first = self.first or reason
        self._pending.append(reason)
        if threading.current_thread() is threading.main_thread():
            self.check()
        elif self._previous:  # wake the main thread from a blocking call; its handler runs check()
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)

    def check(self) -> None:
        """Act on pending requests (main thread only): may raise StopRequest or StopWaiting."""
        while True:
            try:
                reason = self._pending.popleft()
            except IndexError:
                return
            self.handle(reason)

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum == signal.SIGUSR1:
            self.check()
            return
        name = INTERRUPTS[signal.Signals(signum)]
        self.interrupts += 1
        if self.interrupts > 1 and signum in STOP_WAITING:
            raise StopWaiting(name)
        self.request(name)


# --------------------------------------------------------------------------- deadlines
class Deadline:
    """A point in time on the monotonic clock; `remaining()` never goes below 0."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.seconds = seconds
        self.at = clock() + seconds

    def remaining(self) -> float:
        return max(0.0, self.at - self.clock())

    @property
    def passed(self) -> bool:
        return self.clock() >= self.at


class Watch:
    """The overall deadline of a call that `run_bounded` waits for. When it passes, or `stop()` is called
    (a signal), `on_stop` asks the call to end and `grace` more seconds are allowed; past those the
    waiting thread gives up on it."""

    def __init__(self, seconds: float, grace: float, on_stop: Callable[[], Any] = lambda: None):
        self.seconds, self.grace, self.on_stop = seconds, grace, on_stop
        self.deadline = Deadline(seconds)
        self.stopping: str | None = None

    def stop(self, reason: str) -> None:
        if self.stopping is None:
            self.stopping = reason
            self.on_stop()
            self.deadline = Deadline(self.grace)


def run_bounded(fn: Callable[[], Any], watch: Watch, what: str, check: Callable[[], None] = lambda: None) -> Any:
    """Run `fn` in a worker thread and wait for it within `watch`'s deadline; `check` runs on every poll in
    this thread (a Stopper's pending requests). Exceptions of `fn` are re-raised here."""
    done = threading.Event()
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["value"] = fn()
        except BaseException as err:  # re-raised in the waiting thread
            result["error"] = err
        finally:
            done.set()

    threading.Thread(target=work, name=what, daemon=True).start()
    while not done.wait(POLL_SECONDS):
        check()
        if not watch.deadline.passed:
            continue
        if watch.stopping is None:
            watch.stop(f"{what} ran longer than {watch.seconds:.0f} s")
        else:
            raise StepError(f"{what} did not end {watch.grace:.0f} s after it was asked to stop "
                            f"({watch.stopping}); stopped waiting for it")
    error = result.get("error")
    if isinstance(error, Exception) and watch.stopping is not None:
        raise StepError(f"{what} stopped ({watch.stopping}): {tail(str(error), 6)}") from error
    if error is not None:
        raise error
    return result.get("value")


def bounded_number(kind: type, low: float, high: float, above_low: bool = False) -> Callable[[str], Any]:
    """An argparse type: a finite number of `kind` in [low, high] (an absurd value is a usage error)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text}") from None
        if not low <= value <= high or (above_low and value == low):
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}: {text}")
        return value

    return parse


def run_command(argv: Sequence[str], timeout: float, what: str | None = None) -> str:
    """Run a command to completion within `timeout` seconds; its stdout, or StepError with its stderr."""
    label = what or " ".join(argv[:3])
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise StepError(f"{label}: no answer within {timeout:.0f} s") from None
    except OSError as err:
        raise StepError(f"{label}: {err}") from None
    if proc.returncode != 0:
        raise StepError(f"{label}: {tail(proc.stderr.strip() or proc.stdout.strip(), 6)}")
    return proc.stdout


def exit_now(code: int) -> None:
    """Leave without waiting for threads that still read a running CLI's output (a StopWaiting exit)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    import os

    os._exit(code)

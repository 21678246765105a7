"""Progress lines where the user waits: bytes done of total, rate, ETA, at a steady interval."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def human_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:,.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1000
    raise AssertionError("unreachable")


def human_seconds(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class Progress:
    """Counts bytes from every worker; a daemon thread logs a line every `interval_s` seconds."""

    def __init__(self, total_bytes: int, total_files: int, log: Callable[[str], None], interval_s: float):
        self.total_bytes, self.total_files = total_bytes, total_files
        self.log, self.interval_s = log, interval_s
        self.done_bytes = 0
        self.done_files = 0
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="staging-progress", daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def add_bytes(self, count: int) -> None:
        with self._lock:
            self.done_bytes += count

    def file_done(self) -> None:
        with self._lock:
            self.done_files += 1

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def line(self) -> str:
        with self._lock:
            done, files = self.done_bytes, self.done_files
        elapsed = max(self.elapsed_s, 1e-6)
        rate = done / elapsed
        share = done / self.total_bytes * 100 if self.total_bytes else 100.0
        eta = human_seconds((self.total_bytes - done) / rate) if rate > 0 else "unknown"
        return (f"progress: {human_bytes(done)} of {human_bytes(self.total_bytes)} ({share:.1f}%), "
                f"{human_bytes(rate)}/s, ETA {eta}, {files} of {self.total_files} files")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.log(self.line())

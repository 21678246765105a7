"""Every live command, run as users run it on a machine that lacks what it needs (no Pulumi CLI, no gcloud, nothing
listening at the endpoint), ends within 10 s with one line on stderr naming the real cause."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


CASES = {
    # command line (PORT is a loopback port nothing listens on) -> what the one line must say
    "ask without the pulumi CLI": (["ask", "--stack", "gpu", "hello"], "the pulumi CLI is not on PATH"),
    "ask with nothing at the endpoint": (["ask", "--endpoint", "http://127.0.0.1:PORT", "hello"], "cannot reach"),
    "bench without the pulumi CLI": (["bench", "--stack", "gpu"], "missing on PATH: pulumi"),
    "leftovers without gcloud": (["leftovers", "--stack", "gpu"], "gcloud is not on PATH"),
    "leftovers of a stack with no file and no pulumi CLI": (["leftovers", "--stack", "elsewhere"],
                                                            "the pulumi CLI is not on PATH"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_missing_tool_or_endpoint_is_one_line_in_seconds(case: str, tmp_path: Path):
    argv, cause = CASES[case]
    argv = [arg.replace("PORT", str(_closed_port())) for arg in argv]
    # PATH holds only an empty folder: no pulumi, gcloud or kubectl, as on a fresh laptop.
    env = {**os.environ, "PATH": str(tmp_path), "HOME": str(tmp_path)}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tools", *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    took = time.monotonic() - start
    assert took < 10, f"{case}: {took:.1f} s"
    assert proc.returncode in (1, 2), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    # `ask` says what it asks before it asks; the cause is the one line after it.
    lines = [line for line in lines if not line.startswith("asking ")]
    assert len(lines) == 1 and cause in lines[0], proc.stderr

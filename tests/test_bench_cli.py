"""The real benchmark driver, started as users start it (`python -m tools bench`), with its default output sink
(its stdout, a pipe here), its default Automation API backend and its default smoke subprocess (the real
`tools.live.smoke`). Only the cloud is fake: `pulumi`, `kubectl` and `gcloud` on PATH (tests/fake_cli.py), and a router
that accepts the smoke check's request and never answers.

The point: a smoke check that prints and then hangs cannot hold the teardown. SIGTERM mid-smoke gives exactly one
destroy of the driver's own stack within 30 s, the claim is released and the smoke process is gone."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests import fake_cli

ROOT = Path(__file__).resolve().parent.parent
CLAIM_TAG = "kimi-k3-1:bench-run"
OUTPUTS = {"clusterName": "kimi-k3-1-gpu", "kubeconfig": "apiVersion: v1\nkind: Config\n", "namespace": "kimi-k3-1",
           "routerService": "kimi-k3-1-epp", "bucketUri": "gs://p-kimi-k3-1-weights", "servingZone": "us-central1-b"}


class SilentRouter:
    """Accepts connections, reads the request and never answers; records when a client goes away."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        self.closed = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        self.requests += 1
        conn.settimeout(0.2)
        with conn:
            while not self.stop.is_set():
                try:
                    if conn.recv(65536) == b"":
                        break
                except TimeoutError:
                    continue
                except OSError:
                    break
        self.closed.set()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def _project(folder: Path) -> Path:
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text("name: kimi-k3-1\nruntime: python\n")
    (folder / "Pulumi.gpu.yaml").write_text("config: {}\n")
    return folder


def test_sigterm_mid_smoke_destroys_once_within_30s_and_releases_the_claim(tmp_path):
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    fake_cli.install(bin_dir, state, config={"kimi-k3-1:track": "gpu", "kimi-k3-1:gcp.project": "p"},
                     outputs=OUTPUTS)
    router = SilentRouter()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_CLI_STATE": str(state),
           "FAKE_FORWARD_PORT": str(router.port), "PULUMI_SKIP_UPDATE_CHECK": "true", "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "tools", "bench", "--stack", "gpu", "--work-dir", str(_project(tmp_path / "proj")),
            "--out", str(tmp_path / "results"), "--destroy-retries", "0",
            "--smoke-args", "--metrics-url", "router=http://127.0.0.1:9/metrics", "--request-timeout", "600",
            "--total-timeout", "900"]
    driver = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in driver.stdout], daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        while not any(line.startswith("smoke check:") for line in seen):  # the smoke check printed ...
            assert time.monotonic() < deadline and driver.poll() is None, "\n".join(seen)
            try:
                seen.append(lines.get(timeout=0.5))
            except queue.Empty:
                continue
        deadline = time.monotonic() + 10
        while not router.requests:  # ... and now hangs on its first request
            assert time.monotonic() < deadline, "\n".join(seen)
            time.sleep(0.1)
        time.sleep(0.5)
        start = time.monotonic()
        driver.send_signal(signal.SIGTERM)
        code = driver.wait(timeout=30)
        took = time.monotonic() - start
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        router.close()
    while not lines.empty():
        seen.append(lines.get())
    output = "\n".join(seen)
    calls = fake_cli.calls(state)
    destroys = [c for c in calls if c[:2] == ["pulumi", "destroy"]]
    assert took < 30, output
    assert code == 130, output  # interrupted (README: exit codes)
    assert len(destroys) == 1 and destroys[0][destroys[0].index("--stack") + 1] == "gpu", (destroys, output)
    assert ["pulumi", "stack", "tag", "rm", CLAIM_TAG, "--stack", "gpu"] in calls, output
    assert CLAIM_TAG not in fake_cli.stack(state)["tags"] and fake_cli.stack(state)["resources"] == []
    assert router.closed.wait(5), "the smoke check's connection is still open: its process outlived the driver"
    assert "SIGTERM during smoke" in output and "==> destroy" in output


def test_a_stack_claimed_by_another_run_exits_3_through_the_cli_and_touches_nothing(tmp_path):
    """The lock class of the exit codes (tools/__main__.py): `python -m tools bench` on a stack another run
    holds refuses with 3 before any `up`, `destroy` or tag change."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    fake_cli.install(bin_dir, state, config={"kimi-k3-1:track": "gpu", "kimi-k3-1:gcp.project": "p"},
                     outputs=OUTPUTS)
    held = fake_cli.stack(state) | {"tags": {CLAIM_TAG: "20260101T000000Z.other.7"}}
    (state / "stack.json").write_text(json.dumps(held))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_CLI_STATE": str(state),
           "PULUMI_SKIP_UPDATE_CHECK": "true"}
    proc = subprocess.run([sys.executable, "-m", "tools", "bench", "--stack", "gpu", "--work-dir",
                           str(_project(tmp_path / "proj")), "--out", str(tmp_path / "results")],
                          cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "claimed by benchmark run 20260101T000000Z.other.7" in proc.stdout + proc.stderr
    touched = [c for c in fake_cli.calls(state) if c[:2] in (["pulumi", "up"], ["pulumi", "destroy"])
               or c[:4] in (["pulumi", "stack", "tag", "set"], ["pulumi", "stack", "tag", "rm"])]
    assert not touched and fake_cli.stack(state)["tags"] == {CLAIM_TAG: "20260101T000000Z.other.7"}

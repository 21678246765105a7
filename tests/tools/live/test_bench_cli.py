"""The real benchmark driver, started as users start it (`python -m tools bench`), with its default output sink
(its stdout, a pipe here), its default Automation API backend and its default smoke subprocess (the real
`tools.live.smoke`). Only the cloud is fake: `pulumi`, `kubectl` and `gcloud` on PATH (tests/fakes/fake_cli.py), and
a router
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
from datetime import UTC, datetime
from pathlib import Path

from tests.fakes import fake_cli

ROOT = Path(__file__).resolve().parents[3]
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
    assert "released the claim on stack gpu" in output and not fake_cli.claims(state), output
    assert fake_cli.stack(state)["resources"] == []
    assert router.closed.wait(5), "the smoke check's connection is still open: its process outlived the driver"
    assert "SIGTERM during smoke" in output and "==> destroy" in output


def test_a_stack_claimed_by_another_run_exits_3_through_the_cli_and_touches_nothing(tmp_path):
    """The lock class of the exit codes (tools/__main__.py): `python -m tools bench` on a stack another run
    holds refuses with 3 before any `up`, `destroy` or claim change."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    fake_cli.install(bin_dir, state, config={"kimi-k3-1:track": "gpu", "kimi-k3-1:gcp.project": "p"},
                     outputs=OUTPUTS)
    held = {"run": "20260101T000000Z.other.7", "stack": "gpu", "deadline": "2099-01-01T00:00:00+00:00"}
    claim = state / "backend" / ".pulumi" / "bench-claims" / "kimi-k3-1" / "gpu.json"
    claim.parent.mkdir(parents=True)
    claim.write_text(json.dumps(held))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_CLI_STATE": str(state),
           "PULUMI_SKIP_UPDATE_CHECK": "true"}
    proc = subprocess.run([sys.executable, "-m", "tools", "bench", "--stack", "gpu", "--work-dir",
                           str(_project(tmp_path / "proj")), "--out", str(tmp_path / "results")],
                          cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "claimed by benchmark run 20260101T000000Z.other.7" in proc.stdout + proc.stderr
    touched = [c for c in fake_cli.calls(state) if c[:2] in (["pulumi", "up"], ["pulumi", "destroy"])]
    assert not touched and fake_cli.claims(state) == {"gpu": held}


def _reader(proc: subprocess.Popen) -> list[str]:
    seen: list[str] = []
    threading.Thread(target=lambda: [seen.append(line.rstrip("\n")) for line in proc.stdout], daemon=True).start()
    return seen


def test_two_drivers_one_claim_and_a_sigkilled_winner_is_reaped_after_its_deadline(tmp_path):
    """Two drivers started 1 s apart on one stack: exactly one claims it (the backend's exclusive create), the
    other exits 3 and leaves the claim alone. The winner is killed with SIGKILL mid-`up`: nobody renews its
    claim, and once its deadline passed `python -m tools reap` destroys the stack, lists leftovers and releases
    the claim, without any list of stacks."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    fake_cli.install(bin_dir, state, config={"kimi-k3-1:track": "gpu", "kimi-k3-1:gcp.project": "p"},
                     outputs=OUTPUTS)
    project = _project(tmp_path / "proj")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_CLI_STATE": str(state),
           "PULUMI_SKIP_UPDATE_CHECK": "true", "PYTHONUNBUFFERED": "1", "FAKE_UP_SECONDS": "60"}
    argv = [sys.executable, "-m", "tools", "bench", "--stack", "gpu", "--work-dir", str(project),
            "--out", str(tmp_path / "results"), "--claim-lease-seconds", "3"]
    drivers, outputs = [], []
    try:
        for _ in range(2):
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, stdin=subprocess.DEVNULL, start_new_session=True)
            drivers.append(proc)
            outputs.append(_reader(proc))
            time.sleep(1)
        deadline = time.monotonic() + 60
        while all(d.poll() is None for d in drivers):
            assert time.monotonic() < deadline, outputs
            time.sleep(0.1)
        loser = next(i for i, d in enumerate(drivers) if d.poll() is not None)
        winner = 1 - loser
        assert drivers[loser].wait() == 3, outputs[loser]
        assert any(line.startswith("REFUSED: stack gpu is claimed by benchmark run") for line in outputs[loser])
        while not (state / "up.pid").exists():  # the winner's `up` is creating the cluster
            assert time.monotonic() < deadline and drivers[winner].poll() is None, outputs[winner]
            time.sleep(0.1)
        claimed = [i for i, out in enumerate(outputs) if any(line.startswith("claimed stack gpu") for line in out)]
        run_id = next(line for line in outputs[winner] if line.startswith("==> stack gpu")).split("run ")[-1][:-1]
        assert claimed == [winner] and fake_cli.claims(state)["gpu"]["run"] == run_id, "the loser left it alone"
        os.killpg(drivers[winner].pid, signal.SIGKILL)
        drivers[winner].wait(10)
        os.kill(int((state / "up.pid").read_text()), signal.SIGKILL)  # the orphaned CLI, in its own session
        assert fake_cli.stack(state)["resources"], "the killed run left its stack up"
        expires = datetime.fromisoformat(fake_cli.claims(state)["gpu"]["deadline"])
        time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.2)
        reap = subprocess.run([sys.executable, "-m", "tools", "reap", "--work-dir", str(project)], cwd=ROOT, env=env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    finally:
        for proc in drivers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert reap.returncode == 0, reap.stdout + reap.stderr
    assert f"claim of run {run_id} expired" in reap.stdout and "==> leftovers (pulumi-stack=gpu)" in reap.stdout
    destroys = [c for c in fake_cli.calls(state) if c[:2] == ["pulumi", "destroy"]]
    assert len(destroys) == 1 and fake_cli.stack(state)["resources"] == [] and not fake_cli.claims(state)

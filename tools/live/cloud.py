"""The live stack's cluster (kubectl) and bucket (gcloud storage), for `tools.live.bench`: readiness, Job, port-forward
and copy waits, each with an overall deadline (the driver must reach its teardown whatever the cluster does)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from components.facts import contract
from tools.live.core import Deadline, OnOutput, StepError, print_line, run_command, tail

SERVING_SELECTOR = ",".join(f"{k}={v}" for k, v in contract.SERVING_LABELS.items())
ROUTER_SELECTOR = contract.ROUTER_MODE_LABEL  # "key exists"
KUBECTL_CALL_SECONDS = 120.0
"""One kubectl get/logs call; a hung API server fails the step instead of stalling it."""
PORT_FORWARD_START_SECONDS = 60.0
"""How long `kubectl port-forward` may take to report its local port."""


class Cluster(Protocol):
    """The kubectl-ish steps, against the stack's cluster."""

    def connect(self, kubeconfig: str) -> None: ...

    def wait_ready(self, namespace: str, timeout: float) -> None: ...

    def pods(self, namespace: str, selector: str) -> list[str]:
        """Names (`pod/<name>`) of the running pods matching a label selector."""

    def port_forward(self, namespace: str, target: str, port: int) -> AbstractContextManager[str]:
        """Forward a local port to `target` (`svc/<name>` or `pod/<name>`); yields `http://127.0.0.1:<port>`."""

    def wait_job(self, namespace: str, job: str, timeout: float) -> None:
        """Return when the Job completed; raise if it failed or the timeout ran out."""

    def gateway_address(self, namespace: str, gateway: str) -> str:
        """The first address a Gateway reports (gateway mode has no router Service port to forward)."""

    def hpa(self, namespace: str, name: str) -> dict[str, int]:
        """A HorizontalPodAutoscaler's `current`, `desired`, `min` and `max` replicas (`bench --ramp`)."""


class KubectlCluster:
    """kubectl with the stack's kubeconfig (exec auth through gke-gcloud-auth-plugin; no token on disk)."""

    POLL_SECONDS = 15.0

    def __init__(self, out: OnOutput = print_line, sleep: Callable[[float], None] = time.sleep):
        self.out = out
        self.sleep = sleep
        self._folder = tempfile.TemporaryDirectory(prefix="bench-kube-")
        self.kubeconfig = Path(self._folder.name) / "kubeconfig"

    def connect(self, kubeconfig: str) -> None:
        fd = os.open(self.kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(kubeconfig)

    def _cmd(self, *args: str) -> list[str]:
        return ["kubectl", "--kubeconfig", str(self.kubeconfig), *args]

    def _run(self, *args: str, timeout: float = KUBECTL_CALL_SECONDS) -> str:
        return run_command(self._cmd(*args), timeout, what=f"kubectl {' '.join(args[:4])}")

    def pods(self, namespace: str, selector: str) -> list[str]:
        out = self._run("get", "pods", "-n", namespace, "-l", selector, "--field-selector=status.phase=Running",
                        "-o", "name")
        return [line.strip() for line in out.splitlines() if line.strip()]

    def wait_ready(self, namespace: str, timeout: float) -> None:
        deadline = Deadline(timeout)
        for what, selector in (("serving pods", SERVING_SELECTOR), ("router pods", ROUTER_SELECTOR)):
            while not self._run("get", "pods", "-n", namespace, "-l", selector, "-o", "name",
                                timeout=min(KUBECTL_CALL_SECONDS, deadline.remaining() + 5)).strip():
                if deadline.passed:
                    raise StepError(f"no {what} ({selector}) in {namespace} after {timeout:.0f} s")
                self.sleep(min(self.POLL_SECONDS, deadline.remaining()))
            remaining = max(1, int(deadline.remaining()))
            self.out(f"waiting up to {remaining} s for {what} to be Ready")
            self._run("wait", "--for=condition=Ready", "pod", "-n", namespace, "-l", selector,
                      f"--timeout={remaining}s", timeout=remaining + 30)

    @contextlib.contextmanager
    def port_forward(self, namespace: str, target: str, port: int) -> Iterator[str]:
        proc = subprocess.Popen(self._cmd("port-forward", "-n", namespace, "--address", "127.0.0.1", target,
                                          f":{port}"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdout is not None
            lines: queue.Queue[str | None] = queue.Queue()

            def read() -> None:  # kubectl logs every connection: keep reading, a full pipe would stall it
                for line in proc.stdout:  # type: ignore[union-attr]
                    lines.put(line)
                lines.put(None)

            threading.Thread(target=read, daemon=True).start()
            local = wait_for_forward(lines, Deadline(PORT_FORWARD_START_SECONDS),
                                     f"kubectl port-forward {target} {port}")
            yield f"http://127.0.0.1:{local}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def hpa(self, namespace: str, name: str) -> dict[str, int]:
        """An HPA's `current`, `desired`, `min` and `max` replicas (`kubectl get hpa -o json`; a status not yet
        written counts as 0)."""
        found = json.loads(self._run("get", "hpa", name, "-n", namespace, "-o", "json"))
        spec, status = found.get("spec", {}), found.get("status", {})
        return {"current": int(status.get("currentReplicas") or 0), "desired": int(status.get("desiredReplicas") or 0),
                "min": int(spec.get("minReplicas") or 1), "max": int(spec.get("maxReplicas") or 0)}

    def gateway_address(self, namespace: str, gateway: str) -> str:
        address = self._run("get", "gateway", gateway, "-n", namespace,
                            "-o", "jsonpath={.status.addresses[0].value}").strip()
        if not address:
            raise StepError(f"gateway {namespace}/{gateway} reports no address yet")
        return address

    def wait_job(self, namespace: str, job: str, timeout: float) -> None:
        deadline = Deadline(timeout)
        last = ""
        while True:
            status = json.loads(self._run("get", "job", job, "-n", namespace, "-o", "json")).get("status", {})
            conditions = {c.get("type"): c for c in status.get("conditions", []) if c.get("status") == "True"}
            if "Complete" in conditions:
                return
            if "Failed" in conditions:
                try:
                    logs = self._run("logs", f"job/{job}", "-n", namespace, "--tail=40")
                except StepError as err:
                    logs = f"(no logs: {err})"
                reason = conditions["Failed"].get("message") or conditions["Failed"].get("reason", "")
                raise StepError(f"Job {job} failed: {reason}\n{logs}")
            now = f"active={status.get('active', 0)} succeeded={status.get('succeeded', 0)} " \
                  f"failed={status.get('failed', 0)}"
            if now != last:
                self.out(f"    job {job}: {now}")
                last = now
            if deadline.passed:
                raise StepError(f"Job {job} did not finish within {timeout:.0f} s")
            self.sleep(min(self.POLL_SECONDS, deadline.remaining()))


def wait_for_forward(lines: queue.Queue[str | None], deadline: Deadline, what: str) -> str:
    """The local port from kubectl's `Forwarding from 127.0.0.1:<port> -> <port>` line, within the deadline."""
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=max(0.01, min(1.0, deadline.remaining())))
        except queue.Empty:
            if deadline.passed:
                raise StepError(f"{what}: no local port within {deadline.seconds:.0f} s: "
                                f"{tail(chr(10).join(seen), 4)}") from None
            continue
        if line is None:
            raise StepError(f"{what} failed: {tail(chr(10).join(seen), 4)}")
        match = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
        if match:
            return match.group(1)
        seen.append(line.strip())


class GcloudStorage:
    """Copies the benchmark reports out of the bucket, within a deadline."""

    def __init__(self, timeout: float = 1800.0):
        self.timeout = timeout

    def copy(self, gs_uri: str, local_dir: Path) -> None:
        local_dir.mkdir(parents=True, exist_ok=True)
        run_command(["gcloud", "storage", "rsync", "--recursive", gs_uri.rstrip("/"), str(local_dir)], self.timeout,
                    what=f"gcloud storage rsync {gs_uri}")

"""One preloaded plan process per test session, so the tests' many small plans skip the provider imports.

A single-stack `python -m tools plan` spends most of its time importing the provider packages (docs/architecture.md,
tools/preview/lazy_packages.py). `make plan` with several stacks already imports them once and forks a child per
stack (tools.preview.plan.render_all); this server does the same for the whole session: it preloads once, and
for each request forks a child that runs `tools.preview.plan.main(args)` with the caller's environment, its
stdout and stderr captured. The child then forks per stack exactly as `make plan` does, so every request goes
through the same code as the CLI's several-stack path. A request may run `tools.preview.plan_diff.main(args)`
instead, which renders each git ref in a child forked after its `preload_providers` (here: finding them loaded).
The session's main plan (conftest `plan_root`) and tests/tools/preview/test_plan_diff.py's end-to-end `python -m
tools diff` still
run as fresh processes, the way users start them.
"""

from __future__ import annotations

import atexit
import json
import selectors
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLAN, DIFF = "tools.preview.plan", "tools.preview.plan_diff"
"""The modules requests run: the plan, and the plan diff, whose renders of git refs fork from a process with the
providers loaded (tools.preview.plan_diff.render_trees) as this one has them; or any module with a `main(args)`
(tests/swapped_image_render.py)."""
REQUEST_TIMEOUT_S = 900
"""Longest one request may take (a plan of many stacks on a loaded machine)."""

SERVER = r"""
import importlib, json, os, sys, tempfile, time
sys.path.insert(0, os.getcwd())
from tools.preview import plan, render
render.preload()
print(json.dumps({"ready": True}), flush=True)

def run(module, args, env):
    os.environ.clear()
    os.environ.update(env)
    try:
        return importlib.import_module(module).main(args)
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
            return 1
        return stop.code or 0

for line in sys.stdin:
    request = json.loads(line)
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    pid = plan.fork_call(lambda: run(request["module"], request["args"], request["env"]), out.fileno(), err.fileno())
    deadline = time.monotonic() + request["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            code = -9
            break
        time.sleep(0.02)
    out.seek(0)
    err.seek(0)
    print(json.dumps({"code": code, "out": out.read(), "err": err.read()}), flush=True)
"""


class PlanServer:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        atexit.register(self.close)
        assert self._reply(REQUEST_TIMEOUT_S) == {"ready": True}

    def _reply(self, timeout: float) -> dict:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                self.close()
                raise TimeoutError(f"plan server gave no answer in {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"plan server exited ({self.proc.wait(timeout=10)})")
        return json.loads(line)

    def run(self, args: list[str], env: dict[str, str], module: str = PLAN) -> subprocess.CompletedProcess:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"module": module, "args": args, "env": env, "timeout": REQUEST_TIMEOUT_S})
                              + "\n")
        self.proc.stdin.flush()
        reply = self._reply(REQUEST_TIMEOUT_S + 60)
        return subprocess.CompletedProcess(["python", "-m", module, *args], reply["code"], reply["out"], reply["err"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


_server: PlanServer | None = None


def run(args: list[str], env: dict[str, str], module: str = PLAN) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` (by default the plan) with `env`, as a child forked from the preloaded process."""
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = PlanServer()
    return _server.run(args, env, module)

"""One preloaded plan process per test session, so the tests' many small plans skip the provider imports.

A single-stack `python -m tools plan` spends most of its time importing the provider packages (docs/architecture.md,
tools/preview/lazy_packages.py). `make plan` with several stacks already imports them once and forks a child per
stack (tools.preview.plan.render_all); this server does the same for the whole session: it preloads once, and
for each request forks a child that runs `tools.preview.plan.main(args)` with the caller's environment, its
stdout and stderr captured. The child then forks per stack exactly as `make plan` does, so every request goes
through the same code as the CLI's several-stack path. A request may run `tools.preview.plan_diff.main(args)`
instead, which renders each git ref in a child forked after its `preload_providers` (here: finding them loaded).
The session's main plan (conftest `plan_root`) and tests/tools/preview/test_plan_diff.py's end-to-end `python -m
tools diff` still run as fresh processes, the way users start them.

The server listens on a Unix socket in the session's shared folder (tests/background.py), started by the first
process that asks (under a lock), so the pytest-xdist workers share one preload (it was one per worker: a second
of CPU each) and are served at once, a handler forked per request. It ends when the session removes that folder.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLAN, DIFF = "tools.preview.plan", "tools.preview.plan_diff"
"""The modules requests run: the plan, and the plan diff, whose renders of git refs fork from a process with the
providers loaded (tools.preview.plan_diff.render_trees) as this one has them; or any module with a `main(args)`
(tests/swapped_image_render.py)."""
REQUEST_TIMEOUT_S = 900
"""Longest one request may take (a plan of many stacks on a loaded machine)."""

SERVER = r"""
import importlib, json, os, select, socket, sys, tempfile, time
sys.path.insert(0, os.getcwd())
from tools.preview import plan, render
render.preload()
path, folder, lifetime = sys.argv[1], sys.argv[2], float(sys.argv[3])

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

def serve(conn):
    with conn, conn.makefile("r") as reader, conn.makefile("w") as writer:
        request = json.loads(reader.readline())
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        pid = plan.fork_call(lambda: run(request["module"], request["args"], request["env"]), out.fileno(),
                             err.fileno())
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
        writer.write(json.dumps({"code": code, "out": out.read(), "err": err.read()}) + "\n")

listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path + ".binding")
listener.listen(64)
os.rename(path + ".binding", path)  # clients connect only once it listens
end = time.monotonic() + lifetime
while os.path.isdir(folder) and time.monotonic() < end:
    while True:  # reap the request handlers that are done
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    if not select.select([listener], [], [], 0.5)[0]:
        continue
    conn, _ = listener.accept()
    if os.fork() == 0:  # one handler per request: the session's workers are served at once
        listener.close()
        code = 1
        try:
            serve(conn)
            code = 0
        finally:
            os._exit(code)
    conn.close()
"""
SERVER_LIFETIME_S = 3600
"""Longest the server lives; it ends sooner, within a second of the session removing its shared folder."""
START_TIMEOUT_S = 300
"""Longest a client waits for the server to start listening (it imports the providers first)."""


def _folder() -> Path:
    """The session's shared folder (tests/background.py), or, outside a test session, one of this process's own."""
    from tests import background

    if not os.environ.get(background.SHARED_ENV):
        os.environ[background.SHARED_ENV] = tempfile.mkdtemp(prefix="kimi-plan-server-")
        atexit.register(shutil.rmtree, os.environ[background.SHARED_ENV], True)
    return Path(os.environ[background.SHARED_ENV])


def _server_socket() -> Path:
    """The session's one plan server (started by the first process that asks for it, under a lock), once it
    listens: one preload for the whole session instead of one per pytest-xdist worker."""
    folder = _folder()
    path = folder / "plan-server.sock"
    log = folder / "plan-server.err"
    with open(folder / "plan-server.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "plan-server.pid").exists():
            with open(log, "w") as err:
                proc = subprocess.Popen([sys.executable, "-c", SERVER, str(path), str(folder),
                                         str(SERVER_LIFETIME_S)], cwd=ROOT, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
            (folder / "plan-server.pid").write_text(str(proc.pid))
    pid = int((folder / "plan-server.pid").read_text())
    deadline = time.monotonic() + START_TIMEOUT_S
    while not path.exists():
        if not _alive(pid):
            raise RuntimeError(f"plan server exited before it listened: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"plan server did not listen within {START_TIMEOUT_S} s")
        time.sleep(0.02)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a server this process started and that exited is a zombie until reaped
        return os.waitpid(pid, os.WNOHANG)[0] == 0
    except ChildProcessError:
        return True


def run(args: list[str], env: dict[str, str], module: str = PLAN) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` (by default the plan) with `env`, as a child forked from the preloaded process."""
    request = json.dumps({"module": module, "args": args, "env": env, "timeout": REQUEST_TIMEOUT_S}) + "\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(REQUEST_TIMEOUT_S + 60)
        conn.connect(str(_server_socket()))
        conn.sendall(request.encode())
        with conn.makefile("r") as reader:
            line = reader.readline()
    if not line:
        raise RuntimeError("plan server closed the request without an answer")
    reply = json.loads(line)
    return subprocess.CompletedProcess(["python", "-m", module, *args], reply["code"], reply["out"], reply["err"])


if __name__ == "__main__":
    # `python -m tests.plan_server ARGS...`: `python -m tools plan ARGS...` run by the session's server, for a
    # background job (tests/background.py) that needs a plan without an interpreter importing the providers again.
    done = run(sys.argv[1:], dict(os.environ))
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    sys.exit(done.returncode)

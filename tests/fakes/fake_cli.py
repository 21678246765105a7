"""Stand-ins for the cloud CLIs the benchmark driver runs (`pulumi`, `kubectl`, `gcloud`,
`gke-gcloud-auth-plugin`), so the real driver can run end to end as users start it, default output sink,
default Automation API backend and default smoke subprocess included.

`install(folder, state)` writes one executable per CLI into `folder` (put it first on PATH). Every CLI appends
its argv to `state/calls.jsonl`. `pulumi` keeps a tiny stack (config, tags, resources, outputs) in
`state/stack.json` and answers the commands `pulumi.automation` issues (version, whoami (a `file://` backend in
`state/backend`, or FAKE_BACKEND_URL), stack select/init, config,
stack tag, stack export, stack output, stack history, up, destroy). `kubectl port-forward` prints the line the
driver waits for with the port in `FAKE_FORWARD_PORT` and stays up; other kubectl calls succeed quietly;
`gcloud` lists nothing. Only the cloud is fake: the driver, its Automation API calls and the smoke check are real.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

PULUMI_VERSION = "v3.272.0"

_PULUMI = r'''
import json, os, sys, time
from pathlib import Path

state_dir = Path(os.environ["FAKE_CLI_STATE"])
args = [a for a in sys.argv[1:] if a != "--non-interactive"]  # the Automation API puts it first
with open(state_dir / "calls.jsonl", "a") as log:
    log.write(json.dumps(["pulumi", *args]) + "\n")
stack_file = state_dir / "stack.json"
stack = json.loads(stack_file.read_text())


def save():
    stack_file.write_text(json.dumps(stack))


def opt(name):
    return args[args.index(name) + 1] if name in args else None


def out(value):
    sys.stdout.write(json.dumps(value) + "\n")


if args[:1] == ["version"]:
    print(VERSION)
elif args[:1] == ["whoami"]:
    out({"user": "tester", "url": os.environ.get("FAKE_BACKEND_URL", f"file://{state_dir / 'backend'}")})
elif args[:2] in (["stack", "select"], ["stack", "init"]):
    pass
elif args[:2] == ["config", "get"]:
    key = args[2]
    if key not in stack["config"]:
        sys.stderr.write(f"error: configuration key '{key}' not found for stack\n")
        sys.exit(255)
    out({"value": stack["config"][key], "secret": False})
elif args[:2] == ["config", "set"]:
    stack["config"][args[2]] = args[3] if len(args) > 3 and not args[3].startswith("--") else ""
    save()
elif args[:2] == ["config", "rm"]:
    stack["config"].pop(args[2], None)
    save()
elif args[:1] == ["config"]:
    out({k: {"value": v, "secret": False} for k, v in stack["config"].items()})
elif args[:3] == ["stack", "tag", "get"]:
    if args[3] not in stack["tags"]:
        sys.stderr.write(f"error: stack tag '{args[3]}' not found\n")
        sys.exit(255)
    print(stack["tags"][args[3]])
elif args[:3] == ["stack", "tag", "set"]:
    stack["tags"][args[3]] = args[4]
    save()
elif args[:3] == ["stack", "tag", "rm"]:
    stack["tags"].pop(args[3], None)
    save()
elif args[:3] == ["stack", "tag", "ls"]:
    out(stack["tags"])
elif args[:2] == ["stack", "export"]:
    out({"version": 3, "deployment": {"resources": stack["resources"]}})
elif args[:2] == ["stack", "output"]:
    out(stack["outputs"] if stack["resources"] else {})
elif args[:2] == ["stack", "history"]:
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    out([{"version": len(stack["history"]), "kind": stack["history"][-1], "startTime": now, "endTime": now,
          "message": "", "environment": {}, "config": {}, "result": "succeeded", "resourceChanges": {}}]
        if stack["history"] else [])
elif args[:1] in (["up"], ["destroy"]):
    command = args[0]
    print(f"{'Updating' if command == 'up' else 'Destroying'} ({opt('--stack')}):", flush=True)
    stack["resources"] = ([{"type": "pulumi:pulumi:Stack", "urn": "urn:stack"},
                           {"type": "gcp:container/cluster:Cluster", "urn": "urn:cluster"}]
                          if command == "up" else [])
    if command == "up" and os.environ.get("FAKE_UP_SECONDS"):  # a long update: the cluster exists meanwhile
        save()
        (state_dir / "up.pid").write_text(str(os.getpid()))
        print(" +  gcp:container:Cluster kimi-k3-1-gpu creating", flush=True)
        time.sleep(float(os.environ["FAKE_UP_SECONDS"]))
    stack["history"].append("update" if command == "up" else "destroy")
    save()
    print(f"Resources: {'1 created' if command == 'up' else '1 deleted'}", flush=True)
else:
    pass
'''

_KUBECTL = r'''
import json, os, sys, time
from pathlib import Path

args = sys.argv[1:]
with open(Path(os.environ["FAKE_CLI_STATE"]) / "calls.jsonl", "a") as log:
    log.write(json.dumps(["kubectl", *args]) + "\n")
if "port-forward" in args:
    print(f"Forwarding from 127.0.0.1:{os.environ['FAKE_FORWARD_PORT']} -> 80", flush=True)
    time.sleep(3600)
elif "get" in args and "-o" in args:
    print(json.dumps({"items": []}))
'''

_GCLOUD = r'''
import json, os, sys
from pathlib import Path

with open(Path(os.environ["FAKE_CLI_STATE"]) / "calls.jsonl", "a") as log:
    log.write(json.dumps([Path(sys.argv[0]).name, *sys.argv[1:]]) + "\n")
if sys.argv[1:3] == ["auth", "list"]:
    print("tester@example.com")
elif not any(a.startswith("--format=value") for a in sys.argv):  # lists nothing, in the format asked for
    print("[]")
'''


def _write(path: Path, body: str) -> None:
    # -S: the fakes need the standard library only; the virtualenv's site (its .pth files) was 4 ms of each start's
    # 28 ms CPU, over the ~70 calls tests/tools/live/test_bench_cli.py makes.
    path.write_text(f"#!{sys.executable} -S\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def install(folder: Path, state: Path, config: dict[str, str], outputs: dict[str, Any]) -> None:
    """The four CLIs in `folder`, sharing a stack kept in `state` with this config and these outputs."""
    folder.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    (state / "stack.json").write_text(json.dumps(
        {"config": config, "tags": {}, "resources": [], "outputs": {k: v for k, v in outputs.items()},
         "history": []}))
    (state / "calls.jsonl").write_text("")
    _write(folder / "pulumi", _PULUMI.replace("VERSION", repr(PULUMI_VERSION)))
    _write(folder / "kubectl", _KUBECTL)
    _write(folder / "gcloud", _GCLOUD)
    _write(folder / "gke-gcloud-auth-plugin", _GCLOUD)


def claims(state: Path) -> dict[str, Any]:
    """The benchmark claims in the fake's local backend, by stack."""
    folder = state / "backend" / ".pulumi" / "bench-claims" / "kimi-k3-1"
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))} if folder.exists() else {}


def calls(state: Path) -> list[list[str]]:
    return [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines() if line]


def stack(state: Path) -> dict[str, Any]:
    return json.loads((state / "stack.json").read_text())

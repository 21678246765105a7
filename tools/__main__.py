"""One command line for the project: `python -m tools <command> [options]`, or `kimi <command> [options]` with the
console script `make plan` installs into .venv (docs/architecture.md).

Each command is a module's `main(argv)`, imported only when it runs, so `--help` needs no cloud, network or
credentials.

Exit codes, the same for every command (README.md shows this table; tests/test_cli.py holds both):
  0    done (for `diff --exit-code`: the plans are the same)
  1    what was checked or run failed: a check, a stack (also one whose config the program rejects), a step
       (the message says which and what to do); `diff --exit-code`: the plans differ
  2    usage error (an option or argument), or an input or tool the command needs is missing (no plan yet,
       no checkov): nothing was started or changed
  3    the stack is locked or claimed by another run (`bench`): nothing was touched
  130  interrupted (Ctrl-C; `bench` also on SIGTERM or SIGHUP, after its teardown)"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import NamedTuple

from tools import program


class Command(NamedTuple):
    module: str
    help: str
    fast_exit: bool = False
    """Skip interpreter teardown after the command (the plan loads the large provider modules: about 1 s)."""
    maintainer: bool = False
    """A command for developing this repository (its docs, locks, releases), listed apart from a user's in --help."""


COMMANDS: dict[str, Command] = {
    # offline: the preview engine (tools.preview)
    "plan": Command("tools.preview.plan", "render stacks offline into build/plan/<stack>/", fast_exit=True),
    "diff": Command("tools.preview.plan_diff", "compare two plans (folders or git refs): replacements, changes"),
    "scan": Command("tools.preview.scan", "scan the rendered manifests with checkov", maintainer=True),
    "schema": Command("tools.preview.schema", "check (or --write) Pulumi.yaml's config block and README's table",
                      maintainer=True),
    "alignment": Command("tools.preview.alignment", "hold the generated pods against docs/upstream-alignment.md",
                         maintainer=True),
    "bench-plan": Command("tools.preview.bench_plan", "time the offline plan of each stack (median and max)",
                          maintainer=True),
    "doc-figures": Command("tools.preview.doc_figures", "rewrite the plan figures in README.md, docs/weights.md",
                           maintainer=True),
    "diagram": Command("tools.preview.diagram", "draw docs/architecture-<stack>.svg from the plan (or --check them)",
                       maintainer=True),
    "scaling": Command("tools.preview.scaling", "replay step and diurnal load through a stack's autoscaling"),
    "replay": Command("tools.preview.replay", "replay session shapes through the router and the engines' caches"),
    "charts": Command("tools.preview.helm_render", "fetch the pinned Helm charts or print a chart's digest",
                      maintainer=True),
    "lock-tpu-engine": Command("tools.preview.lock_tpu_engine", "write the TPU engine image's hash-pinned lock",
                               maintainer=True),
    "release-notes": Command("tools.preview.release_notes", "check a release tag and print its CHANGELOG notes",
                             maintainer=True),
    "lock": Command("tools.preview.lock", "regenerate every Python lock (requirements*.txt) from its intents",
                    maintainer=True),
    # against a live stack (tools.live)
    "preflight": Command("tools.live.preflight", "ask Google Cloud and the Hub, read-only, whether a stack can come up",
                         fast_exit=True),
    "stage": Command("tools.live.stage_weights", "copy a Hugging Face revision into Cloud Storage, verified"),
    "ask": Command("tools.live.ask", "send one prompt through a stack's router and stream the answer"),
    "smoke": Command("tools.live.smoke", "check a serving endpoint: answers, metrics, routing"),
    "bench": Command("tools.live.bench", "deploy, benchmark, report and tear down a stack"),
    "report": Command("tools.live.report", "turn inference-perf results into report.md and plots"),
    "leftovers": Command("tools.live.leftovers", "list billable resources a destroyed stack left behind"),
    "reap": Command("tools.live.reap", "destroy benchmark stacks whose driver died (claim past its deadline)"),
}

def usage() -> str:
    width = max(map(len, COMMANDS))
    prog = program()
    lines = [f"usage: {prog} <command> [options]   ({prog} <command> --help for a command's options)", "",
             "commands for running a stack:"]
    lines += [f"  {name:<{width}}  {command.help}" for name, command in COMMANDS.items() if not command.maintainer]
    lines += ["", "maintainer commands (developing this repository):"]
    lines += [f"  {name:<{width}}  {command.help}" for name, command in COMMANDS.items() if command.maintainer]
    codes = (__doc__ or "").split("\n\n", 2)[2]  # the exit codes, without the note on where they are held
    return "\n".join([*lines, "", re.sub(r" \(README\.md shows this table; [^)]*\):", ":", codes, count=1)])


def version() -> str:
    """This checkout's release, from pyproject.toml (the one place it is written; CHANGELOG.md describes it)."""
    import tomllib
    from pathlib import Path

    with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as project:
        return tomllib.load(project)["project"]["version"]


def main(argv: list[str] | None = None) -> int:
    """The CLI; with argv None (the process's own command line) a fast_exit command ends the process itself."""
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"{program()} {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    command = COMMANDS.get(name)
    if command is None:
        print(f"{program()}: error: unknown command {name!r} (one of: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    module = importlib.import_module(command.module)
    try:
        code = module.main(rest)
    except KeyboardInterrupt:
        print(f"{program()} {name}: interrupted", file=sys.stderr)
        code = 130
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
            code = 1
        else:
            code = stop.code or 0
    code = code or 0
    if command.fast_exit and own_process:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())

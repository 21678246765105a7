"""`python -m tools`: the CLI and every subcommand answer `--help` offline, with nothing but the project's
virtualenv (no pulumi, kubectl or gcloud on PATH), and each names itself the way users type it."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT
from tools.__main__ import COMMANDS

OFFLINE = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}


def run(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tools", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=OFFLINE)


def test_help_lists_every_command():
    proc = run("--help")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    for name in COMMANDS:
        assert f"\n  {name} " in out, name
    assert "Exit codes" in out


def test_every_subcommand_answers_help_offline():
    running = {name: run(name, "--help") for name in COMMANDS}  # all at once: each pays its own imports
    for name, proc in running.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (name, err[-800:])
        assert out.startswith(f"usage: python -m tools {name} "), (name, out[:200])


SHARED_OPTIONS = {
    # option -> the commands that take it, spelled the same in each (docs/architecture.md)
    "--stack": ("plan", "diff", "scan", "ask", "bench", "leftovers"),
    "--out": ("plan", "diff", "report", "bench"),
}


def test_shared_options_are_spelled_the_same_everywhere():
    running = {name: run(name, "--help") for name in {c for names in SHARED_OPTIONS.values() for c in names}}
    helps = {name: proc.communicate(timeout=120)[0] for name, proc in running.items()}
    for option, commands in SHARED_OPTIONS.items():
        for name in commands:
            assert f"{option} " in helps[name], (name, option)


def test_unknown_command_and_no_command_are_usage_errors():
    for argv in (["no-such-command"], []):
        proc = run(*argv)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, argv
        assert "usage" in err or "unknown command" in err, argv


def test_the_console_script_is_the_cli_and_make_plan_installs_it():
    """pyproject.toml's `kimi` script is this CLI's main, and `make plan` installs it (editable) into .venv."""
    import importlib
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    module, _, function = project["project"]["scripts"]["kimi"].partition(":")
    assert getattr(importlib.import_module(module), function) is importlib.import_module("tools.__main__").main
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^plan: .*\$\(CLI\)", makefile, re.M)
    assert re.search(r"^\$\(CLI\): .*\n\t\$\(PY\) -m pip install .*-e \.$", makefile, re.M)

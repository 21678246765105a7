"""`python -m tools`: the CLI and every subcommand answer `--help` offline, with nothing but the project's
virtualenv (no pulumi, kubectl or gcloud on PATH), and each names itself the way users type it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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


HELP_ALL = """
import contextlib, io, json, sys
from tools.__main__ import COMMANDS, main
answers = {}
for name in COMMANDS:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main([name, "--help"])
        except SystemExit as stop:
            code = stop.code
    answers[name] = {"code": code, "out": out.getvalue()}
print(json.dumps(answers))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, dict]:
    """Every subcommand's --help, through the CLI's main, in one fresh offline interpreter (one import of each
    command's module instead of one interpreter per command)."""
    proc = subprocess.run([sys.executable, "-c", HELP_ALL], cwd=ROOT, capture_output=True, text=True, env=OFFLINE,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_every_subcommand_answers_help_offline(helps):
    assert set(helps) == set(COMMANDS)
    for name, answer in helps.items():
        assert answer["code"] == 0, (name, answer)
        assert answer["out"].startswith(f"usage: python -m tools {name} "), (name, answer["out"][:200])


SHARED_OPTIONS = {
    # option -> the commands that take it, spelled the same in each (docs/architecture.md)
    "--stack": ("plan", "diff", "scan", "ask", "bench", "leftovers"),
    "--out": ("plan", "diff", "report", "bench"),
}


def test_shared_options_are_spelled_the_same_everywhere(helps):
    for option, commands in SHARED_OPTIONS.items():
        for name in commands:
            assert f"{option} " in helps[name]["out"], (name, option)


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

"""`python -m tools`: the CLI and every subcommand answer `--help` offline, with nothing but the project's
virtualenv (no pulumi, kubectl or gcloud on PATH), and each names itself the way users type it."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import tools
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
    users, maintainers = out.split("maintainer commands", 1)
    for name in ("schema", "alignment", "bench-plan", "doc-figures", "lock-tpu-engine", "lock", "release-notes"):
        assert f"\n  {name} " in maintainers and f"\n  {name} " not in users, name
    for name in ("plan", "preflight", "ask", "bench", "leftovers"):
        assert f"\n  {name} " in users, name
    assert "tests/" not in out and "main(argv)" not in out  # what a maintainer reads in the source, not in --help


HELP_ALL = """
import contextlib, io, json, sys
from tools.__main__ import COMMANDS, main

def answer(argv, redirect):
    text = io.StringIO()
    with redirect(text):
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code
    return code, text.getvalue()

answers = {}
for name in COMMANDS:
    code, out = answer([name, "--help"], contextlib.redirect_stdout)
    bad, bad_err = answer([name, "--no-such-option"], contextlib.redirect_stderr)
    answers[name] = {"code": code, "out": out, "bad": bad, "bad_err": bad_err}
print(json.dumps(answers))
"""


def help_all(*program: str) -> dict[str, dict]:
    proc = subprocess.run([sys.executable, *program], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=OFFLINE | {"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def helps() -> dict[str, dict]:
    """Every subcommand's --help, through the CLI's main, in one fresh offline interpreter (one import of each
    command's module instead of one interpreter per command)."""
    return help_all("-c", HELP_ALL)


def console_script(folder: Path, body: str = "") -> Path:
    """A `kimi` script the way pip writes a [project.scripts] entry (its launcher template), running this
    checkout: the shared virtualenv's own `kimi` may be an editable install of another one."""
    script = folder / tools.SCRIPT
    script.write_text(f"#!{sys.executable}\nimport re\nimport sys\n" + (body or (
        "from tools.__main__ import main\nif __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit(main())\n")))
    script.chmod(0o755)
    return script


def test_every_subcommand_answers_help_offline(helps):
    assert set(helps) == set(COMMANDS)
    for name, answer in helps.items():
        assert answer["code"] == 0, (name, answer)
        assert answer["out"].startswith(f"usage: python -m tools {name} "), (name, answer["out"][:200])


def test_run_as_the_console_script_every_usage_line_names_kimi(tmp_path):
    helps = help_all(str(console_script(tmp_path, HELP_ALL)))
    assert set(helps) == set(COMMANDS)
    for name, answer in helps.items():
        assert answer["code"] == 0, (name, answer)
        assert answer["out"].startswith(f"usage: kimi {name} "), (name, answer["out"][:200])


def test_the_console_script_names_itself_in_usage_and_errors(tmp_path):
    kimi = str(console_script(tmp_path))
    env = OFFLINE | {"PYTHONPATH": str(ROOT)}
    top = subprocess.run([kimi, "--help"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
    assert top.returncode == 0 and top.stdout.startswith("usage: kimi <command> "), top.stdout[:200] + top.stderr
    plan = subprocess.run([kimi, "plan", "--no-such-option"], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=60)
    assert plan.returncode == 2 and "usage: kimi plan " in plan.stderr, plan.stderr
    assert "kimi plan: error: unrecognized arguments: --no-such-option" in plan.stderr
    unknown = subprocess.run([kimi, "no-such-command"], cwd=tmp_path, capture_output=True, text=True, env=env,
                             timeout=60)
    assert unknown.returncode == 2 and unknown.stderr.startswith("kimi: error: unknown command"), unknown.stderr


SHARED_OPTIONS = {
    # option -> the commands that take it, spelled the same in each (docs/architecture.md)
    "--stack": ("plan", "diff", "scan", "ask", "bench", "leftovers", "bench-plan"),
    "--out": ("plan", "diff", "report", "bench"),
    "--json": ("leftovers", "smoke", "scan", "bench-plan"),
}


def test_json_is_where_the_architecture_doc_says(helps):
    doc = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    listed = doc.split("where a machine reads the result:", 1)[1].split(". Not on", 1)[0]
    assert set(re.findall(r"`([a-z-]+)`", listed)) == set(SHARED_OPTIONS["--json"])
    assert {name for name, answer in helps.items() if re.search(r"^  --json", answer["out"], re.M)} == set(
        SHARED_OPTIONS["--json"])


METAVARS = {"--stack": {"NAME"}, "--out": {"FOLDER", "FILE"}}


def test_shared_options_are_spelled_the_same_everywhere(helps):
    for option, commands in SHARED_OPTIONS.items():
        for name in commands:
            assert re.search(rf"^  {option}\b", helps[name]["out"], re.M), (name, option)
    for name, answer in helps.items():
        for option, metavar in re.findall(r"^  (--stack|--out)(?![\w-])(?: ([A-Z_]+))?", answer["out"], re.M):
            assert metavar in METAVARS[option], (name, option, metavar)


def test_every_duration_is_seconds_and_named_by_the_scheme(helps):
    """docs/architecture.md: a limit is `--<what>-timeout SECONDS`, any other duration `--<what>-seconds
    SECONDS`, in every command."""
    durations = 0
    for name, answer in helps.items():
        for option, metavar in re.findall(r"^  (--[a-z-]+)(?: ([A-Z_]+))?", answer["out"], re.M):
            timed = option.endswith(("-timeout", "-seconds"))
            assert timed == (metavar == "SECONDS"), (name, option, metavar)
            durations += timed
    assert durations >= 12


RENAMED = {
    # command -> older spelling -> option (docs/architecture.md): accepted for one release, hidden from --help
    "smoke": {"--deadline-seconds": "--step-timeout", "--total-seconds": "--total-timeout",
              "--metrics-wait-seconds": "--metrics-timeout"},
    "ask": {"--timeout": "--read-timeout"},
    "bench": {"--results": "--out", "--retry-wait": "--backoff-seconds"},
}
REQUIRED = {"smoke": ["--endpoint", "http://127.0.0.1:9", "--track", "gpu"], "ask": ["--endpoint", "x", "hi"],
            "bench": ["--stack", "gpu"]}


@pytest.mark.parametrize("name", RENAMED)
def test_older_spellings_set_the_same_option_and_say_what_to_type(name, helps, capsys):
    import importlib

    parser = importlib.import_module(COMMANDS[name].module).build_parser()
    for old, new in RENAMED[name].items():
        value = "/tmp/out" if new == "--out" else "7"
        assert parser.parse_args([*REQUIRED[name], old, value]) == parser.parse_args([*REQUIRED[name], new, value])
        assert f"{old} is now {new}; {old} goes away in the next release" in capsys.readouterr().err
        assert f"{old} " not in helps[name]["out"], "hidden from --help"
        assert f"was{old})" in re.sub(r"\s", "", helps[name]["out"]), "the new option's help names it"
    docs = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    assert all(f"| `{name}` | `{old}` | `{new}` |" in docs for old, new in RENAMED[name].items())


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
    assert list(project["project"]["scripts"]) == [tools.SCRIPT], "tools.program() knows the script by this name"
    module, _, function = project["project"]["scripts"][tools.SCRIPT].partition(":")
    assert getattr(importlib.import_module(module), function) is importlib.import_module("tools.__main__").main
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^plan: .*\$\(CLI\)", makefile, re.M)
    assert re.search(r"^\$\(CLI\): .*\n\t\$\(UV\) pip install .*--no-build-isolation -e \.$", makefile, re.M)


# --------------------------------------------------------------------------- exit codes (tools/__main__.py)
def test_the_readme_shows_the_exit_codes_the_cli_prints():
    import tools.__main__ as cli

    table = (cli.__doc__ or "").split("Exit codes", 1)[1].split("\n", 1)[1]
    readme = (ROOT / "README.md").read_text().split("Exit codes, the same for every command:\n", 1)[1]
    assert readme.startswith(table + "\n```"), "README.md's exit-code table is tools/__main__.py's"


def test_a_wrong_option_is_a_usage_error_in_every_command(helps):
    for name, answer in helps.items():
        assert answer["bad"] == 2, (name, answer["bad_err"][-300:])
        assert f"python -m tools {name}: error: " in answer["bad_err"], name


def _closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


COMMIT = "0" * 40
MISSING_INPUT = {
    # a command whose input is missing or malformed: 2, before anything starts
    "plan": ["--stack", "no-such-stack"],
    "bench-plan": ["--stack", "no-such-stack"],
    "scan": ["--plan", "{tmp}/no-plan"],
    "alignment": ["--plan", "{tmp}/no-plan"],
    "diff": ["{tmp}/no-plan", "{tmp}/no-plan"],
    "lock-tpu-engine": ["{tmp}/no-pylock.toml"],
    "charts": [],
    "stage": ["--repo-id", "a/b", "--revision", COMMIT, "--dest", "gs://b/f/", "--shards", "2", "--shard-index", "2"],
    "ask": ["--endpoint", "{closed}", "--max-tokens", "0", "hi"],
    "smoke": ["--endpoint", "{closed}", "--track", "gpu", "--engine", "sglang"],
    "report": ["{tmp}/no-run"],
    "bench": ["--stack", "gpu", "--up-timeout", "0"],
}
FAILING = {
    # a command that ran and found a failure: 1
    "ask": ["--endpoint", "{closed}", "--read-timeout", "5", "hi"],
    "smoke": ["--endpoint", "{closed}", "--track", "gpu", "--step-timeout", "0.2", "--request-timeout", "0.1",
              "--backoff-seconds", "0.01"],
    "report": ["{tmp}"],
}


def _run_in_process(argv: list[str], tmp: Path, capsys) -> tuple[int, str]:
    from tools.__main__ import main

    closed = _closed_url()
    argv = [a.format(tmp=tmp, closed=closed) for a in argv]
    try:
        code = main(argv)
    except SystemExit as stop:  # the CLI turns a command's own SystemExit into its code; this is argparse's
        code = stop.code
    return code, capsys.readouterr().err


def test_a_missing_tool_is_a_usage_error_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi, kubectl or checkov
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "manifests.yaml").write_text("")
    for argv in (["ask", "--stack", "gpu", "hi"], ["scan", "--plan", str(tmp_path), "--checkov", "checkov"]):
        code, err = _run_in_process(argv, tmp_path, capsys)
        assert code == 2 and "Traceback" not in err and err.strip(), (argv, err)


@pytest.mark.parametrize("name", MISSING_INPUT)
def test_a_missing_input_is_a_usage_error_with_one_line(name, tmp_path, capsys):
    code, err = _run_in_process([name, *MISSING_INPUT[name]], tmp_path, capsys)
    assert code == 2, (name, err)
    assert "Traceback" not in err and err.strip(), (name, err)


@pytest.mark.parametrize("name", FAILING)
def test_a_failure_exits_1_with_the_reason(name, tmp_path, capsys):
    code, err = _run_in_process([name, *FAILING[name]], tmp_path, capsys)
    assert code == 1, (name, err)
    assert "Traceback" not in err, (name, err)


class Silent:
    """A loopback server that accepts connections and never answers (a hung endpoint)."""

    def __enter__(self) -> str:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def _started(proc: subprocess.Popen[str], name: str) -> None:
    """Wait (bounded) until the command is inside its long wait: smoke has printed its first line (its first
    request hangs), bench-plan has a plan subprocess running."""
    import select
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if name == "smoke":
            if select.select([proc.stdout], [], [], 0.2)[0] and proc.stdout.readline().startswith("smoke check:"):
                return
        else:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
            if children.exists() and children.read_text().strip():
                return
            time.sleep(0.1)
    raise AssertionError(f"{name} did not start: {proc.poll()}")


@pytest.mark.parametrize("name", ["smoke", "bench-plan"])
def test_ctrl_c_exits_130_and_says_so(name):
    """The interrupted class: Ctrl-C while a live command waits on a hung endpoint, or while an offline command
    waits for its renders."""
    import signal

    with Silent() as url:
        argv = {"smoke": ["smoke", "--endpoint", url, "--track", "gpu", "--request-timeout", "60"],
                "bench-plan": ["bench-plan", "--runs", "3", "--stack", "gpu"]}[name]
        # As a terminal starts a command: SIGINT at its default, whatever this test process inherited (a suite
        # started with `nohup` or `make test &` has it ignored, and so would the child).
        proc = subprocess.Popen([sys.executable, "-m", "tools", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=OFFLINE, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            _started(proc, name)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, (out, err)
    assert f"python -m tools {name}: interrupted" in err and "Traceback" not in err, err


# --------------------------------------------------------------------------- what users read goes through the CLI
MODULE_ENTRY_POINTS = {"tools.live.stage_weights"}
"""Modules run as `python -m <module>` on purpose (docs/architecture.md): the staging Job has only its files."""


PYTHON = r"(?:python3?|\$\(PY\))"
"""How README, docs and workflows (python, .venv/bin/python) and the Makefile ($(PY)) start Python."""


def user_facing_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted((ROOT / ".github").rglob("*.yml"))]


def test_docs_workflows_and_make_run_tools_through_the_cli():
    modules: dict[str, set[str]] = {}
    commands: dict[str, set[str]] = {}
    for path in user_facing_files():
        text, where = path.read_text(), str(path.relative_to(ROOT))
        for module in re.findall(rf"{PYTHON}\s+-m\s+(tools\.[a-z_][\w.]*)|{PYTHON}\s+(tools/\S+\.py)", text):
            modules.setdefault(module[0] or module[1], set()).add(where)
        for command in re.findall(rf"(?:{PYTHON}\s+-m\s+tools|\bkimi)\s+([a-z][\w-]*)", text):
            commands.setdefault(command, set()).add(where)
    assert set(modules) <= MODULE_ENTRY_POINTS, {m: w for m, w in modules.items() if m not in MODULE_ENTRY_POINTS}
    assert set(commands) <= set(COMMANDS), {c: w for c, w in commands.items() if c not in COMMANDS}
    assert {"plan", "diff", "leftovers", "scan", "bench", "ask"} <= set(commands)


def test_the_check_above_finds_a_module_entry_point_and_an_unknown_command(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / ".github").mkdir()
    (tmp_path / "Makefile").write_text("plan:\n\t$(PY) -m tools plan\n")
    (tmp_path / "README.md").write_text("run `python -m tools.preview.plan`\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="tools.preview.plan"):
        test_docs_workflows_and_make_run_tools_through_the_cli()
    (tmp_path / "README.md").write_text("run `python -m tools diff`\n")
    (tmp_path / "Makefile").write_text("plan:\n\t$(PY) -m tools planx\n")
    with pytest.raises(AssertionError, match="planx"):
        test_docs_workflows_and_make_run_tools_through_the_cli()

"""The fuzz tier: generated inputs on every surface a user or the cloud feeds the tools, each ending in an answer or
one line (a refusal, a usage error, a failed check), never a traceback and never past its bound.

Hypothesis (requirements-dev.txt) with a fixed budget per surface, derandomized (the examples follow from each
test's name, so every machine runs the same inputs) and without its example database. Each test records what it
tried; tests/conftest.py prints the table at the end of the run (`fuzz tier: ...`), which `.ci/run` shows.

Surfaces: stack files (the reading `pulumi up` and the offline plan share, then the program's own validation, as
__main__.py runs it), every command's arguments, the environment variables the tools read, and the claims a
benchmark backend holds, and what a registry answers the image digest lookup. The fake-cloud answers of the
preflight are tests/checks/test_preflight_hostile.py's table and
the `preflight answers` surface below.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
HANG_CPU_S = 2.0
"""CPU seconds one input may take (a stack file reads in about 4 ms): more is a hang."""
MAX_LINE = 1000
"""Characters a refusal may print on its one line (values in it are shortened)."""


def budget(examples: int) -> settings:
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None, print_blob=False,
                    suppress_health_check=list(HealthCheck))


@dataclass
class Tally:
    """What one surface tried, for the run's fuzz table."""

    surface: str
    inputs: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    slowest: float = 0.0

    def run(self, attempt: Callable[[], str]) -> str:
        """One input: its outcome name; a traceback propagates (Hypothesis shrinks it), a hang fails. An input
        Hypothesis abandons while drawing it (its own overrun) is not counted."""
        start = time.thread_time()
        outcome = attempt()
        spent = time.thread_time() - start
        self.slowest = max(self.slowest, spent)
        assert spent <= HANG_CPU_S, f"{self.surface}: one input took {spent:.2f} CPU s (bound {HANG_CPU_S} s)"
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        self.inputs += 1
        return outcome

    def record(self, record_property: Callable[[str, Any], None]) -> None:
        record_property("fuzz", {"surface": self.surface, "inputs": self.inputs, "outcomes": self.outcomes,
                                 "tracebacks": 0, "hangs": 0, "slowest_cpu_s": round(self.slowest, 3)})


def one_line(message: str, limit: int | None = MAX_LINE) -> str:
    assert message and "\n" not in message.strip() and "Traceback" not in message, message[:2000]
    assert limit is None or len(message) <= limit, f"{len(message)} characters: {message[:300]}..."
    return message


# --------------------------------------------------------------------------- stack files
CHARS = st.sampled_from([chr(c) for c in range(0x20, 0x7f)] + ["é", "ß", "Ω", "中", "\U0001f600", "\u0301", "\ufffd",
                                                              "\xa0", "\t", "\n"])
"""An explicit alphabet (Hypothesis' own full-Unicode one builds a table per run, 8 s of the budget)."""
INVISIBLE = ["\u200b", "\u200d", "\u202e", "\ufeff", "\u00ad", "\u2028", "\u2029", "\x85"]
ODD = ["\x00", "\x1b", "\x7f", "\ud7ff", "\U0001f600", "é", "\t", "\r"]
YAML_TEXT = st.text(alphabet=st.sampled_from(list(":-[]{}&*!|>'\"%@`#,?~ \n0123456789abcxyzE._+/\\") + INVISIBLE + ODD),
                    max_size=30)
NOTABLE = ["040", "0o40", "0x1F", "08", "1_000", "-0", "1e999", ".nan", "-.inf", "~", "null", "yes", "on", "13:30",
           "2026-02-30", "2026-11-01T10:00:00Z", "!!binary aGk=", "!!binary ***", "!!int x", "!!bool yes", "!secret x",
           "!!float 1", "&a [1, 2]", "*a", "*undefined", "{secure: 1}", "{secure: v1:abc}", "{secure: [1]}",
           "[1, [2, [3]]]", "{a: {b: {c: d}}}", "''", '""', "|\n    block", ">-\n    folded", "- x", "? x", "@x",
           "%TAG", "---", "...", "9223372036854775808", "-9223372036854775809", "1e21", "0.0000001"]
JSONISH = st.recursive(st.none() | st.booleans() | st.integers(-2**64, 2**64) | st.floats(allow_nan=True)
                       | st.text(CHARS, max_size=12),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(CHARS, max_size=6), inner,
                                                                                   max_size=3), max_leaves=8)


@st.composite
def config_value(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["text", "notable", "json", "long", "number"]))
    if kind == "text":
        return draw(YAML_TEXT)
    if kind == "notable":
        return draw(st.sampled_from(NOTABLE))
    if kind == "json":
        return yaml.safe_dump(draw(JSONISH), default_flow_style=True, width=10**6).strip().removesuffix("\n...")
    if kind == "long":
        return draw(st.sampled_from("a0 é\u200b")) * draw(st.integers(200, 120_000))
    return str(draw(st.integers(-2**70, 2**70) | st.floats(allow_nan=True)))


@st.composite
def stack_file(draw: st.DrawFn) -> bytes:
    from tools.preview.render import project_file

    keys = sorted(project_file()["config"])
    base = (ROOT / draw(st.sampled_from(["Pulumi.gpu.yaml", "Pulumi.tpu.yaml"]))).read_text()
    kind = draw(st.sampled_from(["lines", "lines", "lines", "splice", "bytes", "encoding", "structure"]))
    if kind == "lines":
        lines = []
        for _ in range(draw(st.integers(1, 4))):
            key = draw(st.sampled_from(keys) | YAML_TEXT)
            prefix = draw(st.sampled_from(["kimi-k3-1:", "", "other:", "kimi-k3-1:kimi-k3-1:"]))
            value = draw(config_value())
            value = value.replace("\n", "\n    ") if not value.startswith(("|", ">")) else value
            lines.append(f"  {prefix}{key}: {value}")
        return (base + "\n".join(lines) + "\n").encode("utf-8", errors="surrogatepass")
    if kind == "splice":
        start = draw(st.integers(0, len(base)))
        end = draw(st.integers(start, min(len(base), start + 40)))
        return (base[:start] + draw(YAML_TEXT) + base[end:]).encode("utf-8", errors="surrogatepass")
    if kind == "bytes":
        return draw(st.binary(max_size=400))
    if kind == "encoding":
        codec = draw(st.sampled_from(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1", "cp1252",
                                      "utf-8-sig"]))
        text = base.replace("us-central1", draw(st.sampled_from(["us-central1", "us-cèntral1", "us-central1é"])))
        return text.encode(codec, errors="replace")
    shape = draw(st.sampled_from(["deep", "aliases", "documents", "toplevel"]))
    if shape == "deep":
        depth = draw(st.integers(1, 30_000))
        return (base + f"  kimi-k3-1:labels: {'[' * depth}{']' * depth}\n").encode()
    if shape == "aliases":
        width, levels = draw(st.integers(1, 12)), draw(st.integers(1, 12))
        text = "x0: &a0 [v]\n" + "".join(f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]\n"
                                         for i in range(1, levels))
        return (text + base + f"  kimi-k3-1:labels: *a{levels - 1}\n").encode()
    if shape == "documents":
        return (base + draw(st.sampled_from(["---\n", "---\n...\n", "---\nconfig: {}\n", "--- x\n", "...\n",
                                             "---\n---\n"]))).encode()
    top = draw(st.sampled_from(["environment: [my-env]\n", "environment: {imports: [a]}\n", "configs: {}\n",
                                "secretsprovider: passphrase\n", "encryptedkey: 1\n", "config: 5\n", "config: []\n",
                                "[]\n", "x\n", "~\n", ""]))
    return (top + base).encode() if not top.startswith(("[", "x", "~")) else top.encode()


def read_stack(path: Path) -> str:
    """The stack file as `pulumi up` hands it to __main__.py, validated as __main__.py validates it."""
    from components.config import PROJECT, ConfigError, parse_config
    from components.plan.capacity import serving_capacity
    from components.plan.engines import check_engine
    from components.plan.limits import check as check_limits
    from tools.preview.render import project_file, stack_config

    try:
        values, _ = stack_config(path, project_file())
        config = parse_config({k[len(PROJECT) + 1:]: v for k, v in values.items() if k.startswith(f"{PROJECT}:")})
        check_engine(config)
        serving_capacity(config)
        check_limits(config)
    except SystemExit as stop:
        assert isinstance(stop.code, str), stop.code
        one_line(stop.code)
        return "refused by the reading"
    except ConfigError as err:
        one_line(str(err))
        return "refused by the config"
    return "accepted"


def test_stack_files(tmp_path: Path, record_property):
    tally = Tally("stack files")
    path = tmp_path / "Pulumi.fuzz.yaml"

    @budget(150)
    @given(stack_file())
    def attempt(data: bytes) -> None:
        path.write_bytes(data)
        tally.run(lambda: read_stack(path))

    attempt()
    tally.record(record_property)
    assert tally.outcomes.get("accepted") and tally.outcomes.get("refused by the reading") \
        and tally.outcomes.get("refused by the config"), tally.outcomes


# --------------------------------------------------------------------------- command-line arguments
class Parsed(Exception):  # noqa: N818 - not an error: the parse succeeded
    """The command's parser accepted the arguments: the fuzz stops there (the command would now run)."""


def _parse_only(monkeypatch) -> None:
    real = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        raise Parsed(real(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)


def _options(module: Any) -> list[str]:
    """The option strings of a command's parser, learned by letting it parse --help."""
    seen: list[str] = []
    real = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        seen.extend(s for action in self._actions for s in action.option_strings if s not in ("-h", "--help"))
        raise Parsed

    argparse.ArgumentParser.parse_args = capture
    try:
        module.main([])
    except (Parsed, SystemExit):
        pass
    finally:
        argparse.ArgumentParser.parse_args = real
    return seen


ARG_VALUES = st.sampled_from(["0", "-1", "1e309", "nan", "inf", "-inf", "0x10", "", " ", "--", "-", "=", "gpu",
                              "../..", "/dev/null", "/nonexistent/x", "a" * 5000, "é\u200b", "\x1b[31m", "1.5", "3",
                              "99999999999999999999", "gs://", "file://", "oci://x", "HEAD~1"]) \
    | st.text(CHARS, max_size=12)


def test_command_line_arguments(monkeypatch, record_property):
    from tools.__main__ import COMMANDS

    modules = {name: importlib.import_module(command.module) for name, command in COMMANDS.items()}
    options = {name: _options(module) for name, module in modules.items()}
    _parse_only(monkeypatch)
    tally = Tally("command-line arguments")

    @st.composite
    def argv(draw: st.DrawFn) -> tuple[str, list[str]]:
        name = draw(st.sampled_from(sorted(COMMANDS)))
        words: list[str] = []
        for _ in range(draw(st.integers(0, 5))):
            option = draw(st.sampled_from(options[name] or ["--x"]) | st.sampled_from(["--help", "-x", "--", "-"]))
            words += [option] if draw(st.booleans()) else [option, draw(ARG_VALUES)]
        return name, words

    def run(name: str, words: list[str]) -> str:
        err, out = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                modules[name].main(words)
        except Parsed as parsed:
            # what a command goes on to use: no NaN, infinity or negative count slips through its parser
            values = vars(parsed.args[0]) if parsed.args else {}
            odd = {k: v for k, v in values.items() if isinstance(v, float) and not math.isfinite(v)
                   or isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0}
            assert not odd, f"{name} {words}: parsed {odd}"
            return "parsed"
        except SystemExit as stop:
            assert stop.code in (0, 2) or isinstance(stop.code, str), stop.code
            lines = [line for line in err.getvalue().splitlines() if "error:" in line]
            assert stop.code == 0 or len(lines) == 1, err.getvalue()
            one_line(lines[0] if lines else "help", limit=None)  # argparse echoes what was typed
            return "help" if stop.code == 0 else "usage error"
        return "returned before parsing"

    @budget(120)
    @given(argv())
    def attempt(case: tuple[str, list[str]]) -> None:
        tally.run(lambda: run(*case))

    attempt()
    tally.record(record_property)
    assert tally.outcomes.get("parsed") and tally.outcomes.get("usage error"), tally.outcomes


def test_numeric_options_refuse_what_no_command_can_use(monkeypatch, record_property):
    """Every option of every command that converts its value: NaN, infinity, a negative and a huge number each end
    in a usage error or a finite, non-negative value (what the command then sleeps, waits or counts with)."""
    from tools.__main__ import COMMANDS

    modules = {name: importlib.import_module(command.module) for name, command in COMMANDS.items()}
    typed: dict[str, list[str]] = {}
    real = argparse.ArgumentParser.parse_args
    command = {"name": ""}

    def capture(self, args=None, namespace=None):
        typed.setdefault(command["name"], [a.option_strings[-1] for a in self._actions
                                           if a.option_strings and a.nargs != 0 and a.type is not None])
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    for name, module in modules.items():
        command["name"] = name
        try:
            module.main([])
        except (Parsed, SystemExit):
            pass
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", real)
    _parse_only(monkeypatch)
    tally = Tally("numeric options")
    for name, options in sorted(typed.items()):
        for option in options:
            for value in ("nan", "inf", "-inf", "-1", "1e309", "99999999999999999999"):
                def attempt(name=name, option=option, value=value) -> str:
                    err = io.StringIO()
                    try:
                        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                            modules[name].main([option, value])
                    except Parsed as parsed:
                        got = getattr(parsed.args[0], option.lstrip("-").replace("-", "_"), None)
                        assert not (isinstance(got, float) and not math.isfinite(got)
                                    or isinstance(got, (int, float)) and not isinstance(got, bool) and got < 0), \
                            f"{name} {option} {value} -> {got!r}"
                        return "parsed"
                    except SystemExit as stop:
                        assert stop.code == 2, (name, option, value, stop.code)
                        return "usage error"
                    return "returned"

                tally.run(attempt)
    tally.record(record_property)
    assert tally.inputs > 30, typed


# --------------------------------------------------------------------------- environment
ENV_VALUES = st.sampled_from(["", " ", "0", "-1", "abc", "1e3", "nan", "{}", "[]", "null", "{\"a\": 1}", "{bad",
                              "/nonexistent", "relative/dir", "a" * 5000, "é\u200b", "http://127.0.0.1:9",
                              "ftp://x", "::", "~"]) | st.text(CHARS, max_size=20)


def _stage_args() -> str:
    from tools.live import stage_weights

    try:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            stage_weights.parse_args(["--repo-id", "a/b", "--revision", "0" * 40, "--dest", "gs://b/f/", "--shards",
                                      "4"])
    except SystemExit as stop:
        assert stop.code == 2
        one_line([line for line in err.getvalue().splitlines() if "error:" in line][0], limit=None)  # argparse's
        return "usage error"
    return "read"


def _program_config() -> str:
    from components.config import ConfigError, parse_config, raw_project_config

    try:
        parse_config(raw_project_config())
    except ConfigError as err:
        one_line(str(err))
        return "refused"
    return "read"


def _chart_roots(tmp: Path) -> str:
    from tools.preview import helm_render

    name, ref = next(iter(sorted(helm_render.pinned_charts().items())))
    source = helm_render.find_source.__wrapped__(ref.chart, ref.version)
    return "found" if source.folder else "not found"


def _cache_dir() -> str:
    from tools.preview import lazy_packages

    folder = lazy_packages.cache_dir()
    return "cache" if folder else "no cache"


ENVIRONMENT: dict[str, Callable[[], str]] = {
    "JOB_COMPLETION_INDEX": _stage_args,
    "PULUMI_CONFIG": _program_config,
    "KIMI_CHARTS_DIR": lambda: _chart_roots(Path()),
    "KIMI_SHARED_DIR": lambda: _chart_roots(Path()),
    "KIMI_PLAN_CACHE_DIR": _cache_dir,
}


def test_environment(monkeypatch, tmp_path: Path, record_property):
    from tools.preview import helm_render

    monkeypatch.setattr(helm_render, "FETCH_DIR", tmp_path / "charts")
    tally = Tally("environment variables")

    @budget(100)
    @given(st.sampled_from(sorted(ENVIRONMENT)), ENV_VALUES)
    def attempt(name: str, value: str) -> None:
        with monkeypatch.context() as env:
            env.setenv(name, value)
            tally.run(ENVIRONMENT[name])

    attempt()
    tally.record(record_property)


# --------------------------------------------------------------------------- a benchmark backend's claims
def test_claim_documents(tmp_path: Path, record_property):
    from datetime import UTC, datetime

    from tools.live import claims

    store = claims.store_for(f"file://{tmp_path}", "kimi-k3-1")
    store.folder.mkdir(parents=True)
    tally = Tally("benchmark claims")
    documents = st.one_of(
        st.binary(max_size=200),
        JSONISH.map(lambda value: json.dumps(value).encode()),
        st.fixed_dictionaries({"run": st.text(CHARS, max_size=8) | JSONISH, "deadline": st.sampled_from(
            ["2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00", "2026-13-01T00:00:00Z", "9999-12-31T23:59:59+14:00",
             "0001-01-01T00:00:00-12:00", "2026-01-01"]) | JSONISH},
            optional={"stack": JSONISH, "generation": st.integers(-2, 2**70) | JSONISH, "host": JSONISH}).map(
            lambda doc: json.dumps(doc).encode()))

    def read(data: bytes) -> str:
        Path(store.where("gpu")).write_bytes(data)
        claim = store.get("gpu")
        expired = claim.expired(datetime(2026, 6, 1, tzinfo=UTC))
        if claim.unreadable:
            assert not expired and store.take_over(claim, "reaper", "2027-01-01T00:00:00+00:00") is None
            one_line(claim.unreadable)
            return "unreadable, left alone"
        return "expired" if expired else "held"

    @budget(100)
    @given(documents)
    def attempt(data: bytes) -> None:
        tally.run(lambda: read(data))

    attempt()
    tally.record(record_property)


# --------------------------------------------------------------------------- the cloud's answers to the preflight
def _paths(value: Any, here: tuple = ()) -> list[tuple]:
    """Every place inside a JSON value: dict keys and list indexes, the value itself first."""
    found = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*here, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*here, index))
    return found


def _mutated(value: Any, where: tuple, new: Any, delete: bool) -> Any:
    if not where:
        return new
    head, rest = where[0], where[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if delete and not rest:
            copy.pop(head, None)
        else:
            copy[head] = _mutated(value[head], rest, new, delete)
        return copy
    copy = list(value)
    if delete and not rest:
        del copy[head]
    else:
        copy[head] = _mutated(value[head], rest, new, delete)
    return copy


def test_preflight_answers(record_property):
    """Every Google answer the preflight reads, each request answered by the fake's documented answer with one
    field replaced by any JSON value or removed, or by any JSON value, or by an error: the checks come back as one
    line each (tests/checks/test_preflight_hostile.py holds the named classes)."""
    from components.checks import preflight
    from tests.fakes import fakegoogle
    from tools.live import preflight as cli

    config = cli.load(ROOT / "tests" / "stacks" / "Pulumi.gpu3.yaml")
    fake = fakegoogle.FakeGoogle()
    fake.server.server_close()  # its answers are used in process: nothing listens
    tally = Tally("preflight answers")

    class Generated(preflight.Google):
        def __init__(self, data: st.DataObject):
            super().__init__(session=None, root="http://127.0.0.1:9", timeout=1.0, sleep=lambda s: None)
            self.data = data

        def get(self, host: str, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
            from urllib.parse import parse_qs, urlencode

            query = parse_qs(urlencode(params or {}, doseq=True))
            status, honest = fake.answer(f"/{host}/{path}", query)
            kind = self.data.draw(st.sampled_from(["honest", "field", "field", "field", "whole", "error"]))
            if kind == "error" or status >= 400:
                raise preflight.ApiError(status if status >= 400 else self.data.draw(st.sampled_from([403, 404, 429,
                                                                                                       500, 0])),
                                         self.data.draw(st.sampled_from(["SERVICE_DISABLED", "THROTTLED", "x", ""])),
                                         self.data.draw(st.text(CHARS, max_size=20)))
            if kind == "honest":
                return honest
            if kind == "whole":
                answer = self.data.draw(JSONISH)
            else:
                where = self.data.draw(st.sampled_from(_paths(honest)[1:] or [()]))
                answer = _mutated(honest, where, self.data.draw(JSONISH), self.data.draw(st.booleans()))
            if not isinstance(answer, dict):  # Google.get refuses anything but an object itself
                raise preflight.ApiError(200, "UNEXPECTED", f"the answer from {host} is not a JSON object")
            return answer

    def ask(data: st.DataObject) -> str:
        fake.reset()
        checks = preflight.check_google(Generated(data), config, "gpu3")
        assert checks
        for check in checks:
            one_line(check.line())
        return "all ok" if all(c.ok for c in checks) else "a check failed"

    @budget(100)
    @given(st.data())
    def attempt(data: st.DataObject) -> None:
        tally.run(lambda: ask(data))

    attempt()
    tally.record(record_property)


def test_retry_after_values(record_property):
    from components.checks import preflight

    tally = Tally("Retry-After headers")

    def wait(header: str | None) -> str:
        seconds = preflight.retry_after(header)
        assert 0 <= seconds <= preflight.RETRY_CAP_S, (header, seconds)
        return "waited"

    @budget(100)
    @given(st.none() | st.text(CHARS, max_size=30) | st.floats().map(repr) | st.integers().map(str))
    def attempt(header: str | None) -> None:
        tally.run(lambda: wait(header))

    attempt()
    tally.record(record_property)


class _Answer:
    """One registry answer as urllib hands it back (status, headers, body)."""

    def __init__(self, headers: dict[str, str], body: bytes):
        import email.message

        self.headers = email.message.Message()
        for key, value in headers.items():
            self.headers[key] = value
        self.body = body

    def read(self, limit: int = -1) -> bytes:
        return self.body[:limit] if limit >= 0 else self.body

    def __enter__(self) -> _Answer:
        return self

    def __exit__(self, *args: Any) -> None:
        pass


REGISTRY_HEADER = st.one_of(st.none(), st.text(CHARS, max_size=40), st.sampled_from([
    "sha256:" + "a" * 64, "sha256:" + "A" * 64, "sha512:" + "a" * 128, "sha256:", 'Bearer realm="http://x.invalid/t"',
    'Bearer realm="https://r.invalid/token",service="r",scope="repository:x:pull"', "Basic realm=x", "Bearer",
    'Bearer realm=""']))
REGISTRY_ANSWER = st.tuples(st.sampled_from([200, 200, 301, 401, 401, 403, 404, 429, 500, 503]), REGISTRY_HEADER,
                            REGISTRY_HEADER, st.binary(max_size=64) | st.sampled_from([b"", b"{}", b'{"token": ""}',
                                                                                      b'{"token": "t"}', b"[1]",
                                                                                      b'{"access_token": 5}']))


def test_registry_answers(monkeypatch, record_property):
    """Whatever a registry (or something in its place) answers, in whatever order, the digest lookup ends in a
    `sha256:<64 hex>` or one RegistryError line, never a traceback (components/checks/registry.py)."""
    import urllib.error

    from components.checks import registry

    tally = Tally("registry answers")

    def lookup(answers: list[tuple[int, str | None, str | None, bytes]]) -> str:
        queue = list(answers)

        class Opener:
            def open(self, request: Any, timeout: float = 0) -> _Answer:
                status, digest, challenge, body = queue.pop(0) if queue else (404, None, None, b"")
                headers = {k: v for k, v in (("Docker-Content-Digest", digest), ("WWW-Authenticate", challenge))
                           if v is not None}
                if status >= 300:
                    raise urllib.error.HTTPError(request.full_url, status, "answer", _Answer(headers, b"").headers,
                                                 io.BytesIO(body))
                return _Answer(headers, body)

        monkeypatch.setattr(registry, "_opener", Opener)
        try:
            digest = registry.registry_digest("ghcr.io/kedacore/keda:2.20.2")
        except registry.RegistryError as err:
            one_line(str(err))
            return "refused"
        assert registry.DIGEST.fullmatch(digest), digest
        return "a digest"

    @budget(100)
    @given(st.lists(REGISTRY_ANSWER, min_size=1, max_size=5))
    def attempt(answers: list[tuple[int, str | None, str | None, bytes]]) -> None:
        tally.run(lambda: lookup(answers))

    attempt()
    tally.record(record_property)


@pytest.fixture(autouse=True, scope="module")
def _hypothesis_home(tmp_path_factory):
    """Hypothesis keeps no example database here (database=None), and its other files (a Unicode table cache) go
    to a folder of the session's, not `.hypothesis/` of the checkout: nothing of one run feeds the next."""
    from hypothesis import configuration

    configuration.set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))

"""The plan reads a stack file as the Pulumi CLI does (tools/preview/stack_file.py), through the path users run.

Each case cites the CLI code it matches (github.com/pulumi/pulumi at 1b59498 and gopkg.in/yaml.v3, the YAML library
the CLI's marshaller uses: sdk/go/common/encoding/marshal.go imports gopkg.in/yaml.v3). PyYAML, which the plan used
before, reads YAML 1.1: the same files meant something else there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import LEAKY_TOKEN, run_plan, stack_document
from tools.preview.render import project_file, stack_config
from tools.preview.stack_file import StackFileError, config_text, load_stack, load_yaml, resolve_plain

NS = "kimi-k3-1:"


def stack_text(track: str, *lines: str) -> str:
    """A fixture stack file as text with extra `config:` lines (to write YAML the dumper would not)."""
    body = yaml.safe_dump(stack_document(track), sort_keys=False)
    return body + "".join(f"  {line}\n" for line in lines)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(text)
    return path


def accepted(path: Path) -> dict[str, str]:
    """The file's config as the program receives it, validated as `__main__.py` does before any resource."""
    from components.config import PROJECT, parse_config
    from components.plan.capacity import serving_capacity

    config, _ = stack_config(path, project_file())
    serving_capacity(parse_config({k[len(NS):]: v for k, v in config.items() if k.startswith(f"{PROJECT}:")}))
    return config


def plan_error(tmp_path: Path, path: Path) -> str:
    proc = run_plan(tmp_path / "out", "--stack-file", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# --------------------------------------------------------------------------- the three cases the issue names
def test_the_cli_verdicts_for_duplicate_key_hh_mm_and_invalid_timestamp(tmp_path: Path):
    # 1. Duplicate key: yaml.v3 decode.go `mapping` ("line %d: mapping key %#v already defined at line %d") when
    #    loaders.go LoadProjectStackBytes unmarshals the file: the CLI refuses the stack. PyYAML kept the last value.
    dup = write(tmp_path, "dup", stack_text("gpu", "kimi-k3-1:gpu.prefillGroups: 2", "kimi-k3-1:gpu.prefillGroups: 4"))
    line = plan_error(tmp_path, dup)
    assert line.startswith("plan dup: error: Pulumi.dup.yaml:"), line
    assert 'mapping key "kimi-k3-1:gpu.prefillGroups" already defined at line' in line

    # 2. Unquoted HH:MM: yaml.v3 resolve.go has no base-60 numbers ("Base 60 floats ... were dropped in YAML 1.2,
    #    and are purposefully unsupported here"), so 13:30 is the text "13:30" (PyYAML: the integer 810).
    assert resolve_plain("13:30") == "13:30"
    hhmm = write(tmp_path, "hhmm", stack_text("gpu", "kimi-k3-1:cluster.maintenanceWindowStart: 13:30"))
    assert accepted(hhmm)[f"{NS}cluster.maintenanceWindowStart"] == "13:30"

    # 3. Invalid timestamp: yaml.v3 parseTimestamp tries time.Parse, which fails on month 13, so the scalar stays
    #    text (PyYAML's timestamp constructor raised ValueError: a traceback). The CLI accepts the file (the key is
    #    a string); the program then refuses the value with one line.
    bad = write(tmp_path, "badtime",
                stack_text("gpu", "kimi-k3-1:cluster.maintenanceExclusionStart: 2026-13-45T00:00:00Z"))
    config, _ = stack_config(bad, project_file())
    assert config[f"{NS}cluster.maintenanceExclusionStart"] == "2026-13-45T00:00:00Z"
    assert plan_error(tmp_path, bad) == (
        "plan badtime: error: kimi-k3-1:cluster.maintenanceExclusionStart = '2026-13-45T00:00:00Z': expected an "
        "RFC 3339 date-time such as '2026-11-01T00:00:00Z' or '2026-11-01T09:00:00+09:00'")


def test_an_unquoted_valid_timestamp_reaches_the_program_as_go_text(tmp_path: Path):
    """yaml.v3 decodes it into time.Time; config/object.go unmarshalObject turns a time into `v.String()` (the
    CLI's own test TestUnmarshalTime in loaders_test.go loads such a file). The program says to quote it."""
    path = write(tmp_path, "time",
                 stack_text("gpu", "kimi-k3-1:cluster.maintenanceExclusionStart: 2026-11-01T00:00:00Z"))
    config, _ = stack_config(path, project_file())
    assert config[f"{NS}cluster.maintenanceExclusionStart"] == "2026-11-01 00:00:00 +0000 UTC"
    assert plan_error(tmp_path, path) == (
        "plan time: error: kimi-k3-1:cluster.maintenanceExclusionStart = '2026-11-01 00:00:00 +0000 UTC': an unquoted "
        "YAML timestamp reaches the program as this text; quote it in the stack file, e.g. '2026-11-01T00:00:00Z'")
    quoted = write(tmp_path, "quoted", stack_text("gpu", "kimi-k3-1:cluster.maintenanceExclusionStart: "
                                                         "'2026-11-01T09:00:00.5+09:00'"))
    assert accepted(quoted)[f"{NS}cluster.maintenanceExclusionStart"] == "2026-11-01T09:00:00.5+09:00"


# --------------------------------------------------------------------------- types Pulumi.yaml declares
@pytest.mark.parametrize("line,expected", [
    # ValidateConfigValue (sdk/go/common/workspace/project.go): a boolean is the text "true" or "false". yaml.v3
    # reads on/yes as text (resolve.go resolveMapList has only true/True/TRUE, false/False/FALSE).
    ("kimi-k3-1:gcp.allowUnlistedZone: 'on'",
     "kimi-k3-1:gcp.allowUnlistedZone = 'on': must be of type 'boolean' (the Pulumi CLI refuses it: "
     "pkg/workspace/config.go validateStackConfigValue); YAML 1.2 reads on as text, write true or false"),
    ("kimi-k3-1:storage.bucketExists: yes",
     "kimi-k3-1:storage.bucketExists = 'yes': must be of type 'boolean' (the Pulumi CLI refuses it: "
     "pkg/workspace/config.go validateStackConfigValue); YAML 1.2 reads yes as text, write true or false"),
    # An integer is text strconv.Atoi accepts.
    ("kimi-k3-1:benchmark.concurrency: 2.5",
     "kimi-k3-1:benchmark.concurrency = '2.5': must be of type 'integer' (the Pulumi CLI refuses it: "
     "pkg/workspace/config.go validateStackConfigValue); write a whole number such as 8"),
    ("kimi-k3-1:benchmark.concurrency: three",
     "kimi-k3-1:benchmark.concurrency = 'three': must be of type 'integer' (the Pulumi CLI refuses it: "
     "pkg/workspace/config.go validateStackConfigValue); write a whole number such as 8"),
    # An array must be a list of the item type (encoding/json reads a number item as float64, not a string).
    ("kimi-k3-1:cluster.authorizedNetworks: 203.0.113.7/32",
     "kimi-k3-1:cluster.authorizedNetworks = '203.0.113.7/32': must be of type 'array<string>' (the Pulumi CLI "
     "refuses it: pkg/workspace/config.go validateStackConfigValue)"),
    ("kimi-k3-1:monitoring.notificationChannels: [42]",
     "kimi-k3-1:monitoring.notificationChannels = [42]: must be of type 'array<string>' (the Pulumi CLI refuses "
     "it: pkg/workspace/config.go validateStackConfigValue)"),
    # A string key given a map.
    ("'kimi-k3-1:gpu.reservationBlock': {name: r}",
     "kimi-k3-1:gpu.reservationBlock = {\"name\":\"r\"}: must be of type 'string' (the Pulumi CLI refuses it: "
     "pkg/workspace/config.go validateStackConfigValue)"),
])
def test_declared_types_refused_like_the_cli(tmp_path: Path, line: str, expected: str):
    path = write(tmp_path, "typed", stack_text("gpu", line))
    with pytest.raises(StackFileError) as info:
        load_stack(path, "kimi-k3-1", {k: v for k, v in project_file()["config"].items()})
    assert str(info.value) == f"Pulumi.typed.yaml: {expected}"


@pytest.mark.parametrize("scalar,text", [
    # yaml.v3 resolve.go: booleans, YAML 1.2 ints (0x, 0o), legacy 0777 octal, underscores, 1e3 floats; values
    # reach the program as object.go MarshalString writes them (JSON text for bools and numbers).
    ("True", "true"), ("FALSE", "false"), ("0x10", "16"), ("0o17", "15"), ("017", "15"), ("1_000", "1000"),
    ("1e3", "1000"), ("08", "8"), ("+12", "12"), ("1.5", "1.5"), ("1e21", "1e+21"), ("0.0000001", "1e-7"),
    ("on", "on"), ("yes", "yes"), ("13:30", "13:30"), ("1e999", "1e999"), ("2026-02-30", "2026-02-30"),
    ("~", ""), ("null", ""), ("2026-11-01", "2026-11-01 00:00:00 +0000 UTC"),
])
def test_scalars_reach_the_program_as_the_cli_hands_them(scalar: str, text: str):
    assert config_text(resolve_plain(scalar))[0] == text


def test_integer_and_boolean_spellings_the_cli_accepts(tmp_path: Path):
    path = write(tmp_path, "ok", stack_text("gpu", "kimi-k3-1:benchmark.concurrency: 0x2",
                                            "kimi-k3-1:storage.stagingWorkers: 1e1",
                                            "kimi-k3-1:gcp.allowUnlistedZone: 'false'",
                                            "kimi-k3-1:monitoring.enabled: TRUE"))
    config = accepted(path)
    assert (config[f"{NS}benchmark.concurrency"], config[f"{NS}storage.stagingWorkers"]) == ("2", "10")
    assert (config[f"{NS}gcp.allowUnlistedZone"], config[f"{NS}monitoring.enabled"]) == ("false", "true")


def test_nan_stops_the_cli(tmp_path: Path):
    """object.go MarshalString encodes numbers with encoding/json, which refuses NaN and infinities."""
    path = write(tmp_path, "nan", stack_text("gpu", "kimi-k3-1:benchmark.conversations: .nan"))
    assert plan_error(tmp_path, path) == (
        "plan nan: error: Pulumi.nan.yaml: kimi-k3-1:benchmark.conversations: json: unsupported value: NaN (the Pulumi "
        "CLI cannot load the file: sdk/go/common/resource/config/object.go MarshalString)")


def test_a_plain_text_secret_is_refused_and_never_shown(tmp_path: Path):
    """validateStackConfigValue: a key Pulumi.yaml declares secret must be `secure:` ("must be encrypted as it's
    secret"). The token appears in no output."""
    path = write(tmp_path, "leak", stack_text("gpu", f"kimi-k3-1:hfToken: {LEAKY_TOKEN}"))
    proc = run_plan(tmp_path / "out", "--stack-file", str(path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        "plan leak: error: Pulumi.leak.yaml: kimi-k3-1:hfToken is declared secret in Pulumi.yaml but stored in plain "
        "text: the Pulumi CLI refuses it (\"must be encrypted as it's secret\", pkg/workspace/config.go); run "
        "`pulumi config set --secret hfToken <value>`")
    assert LEAKY_TOKEN not in proc.stdout + proc.stderr
    assert not (tmp_path / "out" / "leak").exists()


def test_a_misspelt_top_level_key_is_named(tmp_path: Path):
    """ProjectStack (sdk/go/common/workspace/project.go) has secretsprovider, encryptedkey, encryptionsalt, config
    and environment; the CLI ignores anything else, so `configs:` would drop every setting. The plan names it."""
    text = stack_text("gpu").replace("config:", "configs:", 1)
    line = plan_error(tmp_path, write(tmp_path, "typo", text))
    assert line == ("plan typo: error: Pulumi.typo.yaml: unknown top-level key 'configs': did you mean 'config'? the "
                    "Pulumi CLI ignores it, so none of its settings would reach the program (stack files hold "
                    "secretsprovider, encryptedkey, encryptionsalt, config, environment)")


def test_an_empty_value_is_an_empty_string_with_the_cli_warning(tmp_path: Path):
    """loaders.go checkForEmptyConfig: `key:` is treated as "" and warned about."""
    path = write(tmp_path, "empty", stack_text("gpu", "kimi-k3-1:storage.bucketName:"))
    from tools.preview.render import stack_file_warnings

    assert accepted(path)[f"{NS}storage.bucketName"] == ""
    assert stack_file_warnings(path, project_file()) == [
        "warning: Pulumi.empty.yaml: no value for kimi-k3-1:storage.bucketName: the Pulumi CLI treats it as \"\" "
        "(and warns)"]


def test_project_file_reads_the_same_way():
    """Pulumi.yaml's defaults reach the program through the same loader (project.go, mergeConfig)."""
    project = load_yaml(Path(__file__).resolve().parents[3] / "Pulumi.yaml")
    assert project["config"]["cluster.maintenanceWindowStart"]["default"] == "03:00"


# --------------------------------------------------------------------------- explicit tags, anchors, key spellings
@pytest.mark.parametrize(("line", "text"), [
    # yaml.v3 resolve.go resolve(): a resolvable explicit tag must hold such a value; decode.go scalar() hands an
    # interface{} the resolved value (a time.Time for !!timestamp, which object.go turns into Time.String()).
    ("kimi-k3-1:note: !!timestamp 2001-12-14", "2001-12-14 00:00:00 +0000 UTC"),
    # decode.go scalar(): !!binary is base64-decoded into a string.
    ("kimi-k3-1:note: !!binary aGVsbG8=", "hello"),
    # resolve(): "Any data is accepted as a !!str"; an unresolvable tag keeps the text (resolvableTag).
    ("kimi-k3-1:note: !!str 8", "8"),
    ("kimi-k3-1:note: !secret hunter2", "hunter2"),
    ("kimi-k3-1:note: !!float 1", "1"),
    ("kimi-k3-1:note: !!int '8'", "8"),
    ("kimi-k3-1:note: !custom {b: 1, a: 2}", '{"a":2,"b":1}'),
])
def test_explicit_tags_reach_the_program_as_the_cli_hands_them(tmp_path: Path, line: str, text: str):
    path = write(tmp_path, "tags", stack_text("gpu", line))
    config = load_stack(path, "kimi-k3-1", {})
    assert config.values["kimi-k3-1:note"] == text


@pytest.mark.parametrize(("line", "verdict"), [
    # resolve()'s deferred check: "cannot decode %s `%s` as a %s" stops the CLI's load of the file.
    ("kimi-k3-1:benchmark.enabled: !!bool yes", "cannot decode !!str `yes` as a !!bool"),
    ("kimi-k3-1:gpu.slices: !!int two", "cannot decode !!str `two` as a !!int"),
    ("kimi-k3-1:note: !!timestamp soon", "cannot decode !!str `soon` as a !!timestamp"),
    # decode.go scalar(): "!!binary value contains invalid base64 data".
    ("kimi-k3-1:note: !!binary '***'", "!!binary value contains invalid base64 data"),
])
def test_explicit_tags_the_cli_refuses_are_one_line(tmp_path: Path, line: str, verdict: str):
    path = write(tmp_path, "badtag", stack_text("gpu", line))
    message = plan_error(tmp_path, path)
    assert message.startswith("plan badtag: error: Pulumi.badtag.yaml:"), message
    assert verdict in message and "gopkg.in/yaml.v3" in message


def test_anchors_kept_under_a_key_the_cli_ignores_are_merged(tmp_path: Path):
    """ProjectStack has no field for `x-shared`, so the CLI ignores the key (sdk/go/common/workspace/project.go), but
    yaml.v3 resolves the alias and the merge key before that: the settings reach the program."""
    config = stack_document("gpu")["config"]
    body = ("x-shared: &shared\n  kimi-k3-1:monitoring.alertKvCachePercent: 90\nconfig:\n  <<: *shared\n"
            + "".join(f"  {key}: {yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}\n"
                      for key, value in config.items()))
    path = write(tmp_path, "anchored", body)
    assert accepted(path)[f"{NS}monitoring.alertKvCachePercent"] == "90"
    # A top-level key that no alias reaches is still a typo that would drop its settings.
    stray = write(tmp_path, "stray", body.replace("<<: *shared", "kimi-k3-1:monitoring.alertKvCachePercent: 80"))
    assert "unknown top-level key 'x-shared'" in plan_error(tmp_path, stray)


def test_a_key_with_and_without_the_project_prefix_is_refused(tmp_path: Path):
    """Map.UnmarshalYAML (sdk/go/common/resource/config/map.go) parses each spelling into the same config.Key while
    ranging over a Go map: which value wins differs from run to run. Refused, naming both spellings."""
    path = write(tmp_path, "twice", stack_text("gpu", "monitoring.alertKvCachePercent: 90",
                                                    "kimi-k3-1:monitoring.alertKvCachePercent: 80"))
    message = plan_error(tmp_path, path)
    assert ("'monitoring.alertKvCachePercent' and 'kimi-k3-1:monitoring.alertKvCachePercent' are the same key"
            in message), message
    assert "at random" in message


# --------------------------------------------------------------------------- hostile files: one line, the right line
def _refusal(path: Path) -> str:
    with pytest.raises(SystemExit) as info:
        stack_config(path, project_file())
    message = str(info.value.code)
    assert "\n" not in message and len(message) < 600, message[:300]
    return message


BASE = "config:\n  kimi-k3-1:track: gpu\n  kimi-k3-1:gcp.project: my-gcp-project\n"


def _bomb(levels: int, width: int) -> str:
    lines = ["x0: &a0 [v]"] + [f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n" + BASE + f"  kimi-k3-1:labels: *a{levels - 1}\n"


@pytest.mark.parametrize("name,data,expected", [
    ("latin-1", (BASE + "  # caf\xe9\n").encode("latin-1"), "Pulumi.latin-1.yaml:4:8: byte 0xe9 is not UTF-8"),
    ("depth", (BASE + "  kimi-k3-1:labels: " + "[" * 20_000 + "]" * 20_000 + "\n").encode(),
     "Pulumi.depth.yaml:4: nested more than 64 levels deep"),
    ("bomb", _bomb(9, 10).encode(), "Pulumi.bomb.yaml:6: its aliases expand to more than 100,000 values"),
    ("octal", (BASE + "  kimi-k3-1:gpu.hostOffloadPercent: 040\n").encode(),
     "Pulumi.octal.yaml:4: 040 is octal to the Pulumi CLI (gopkg.in/yaml.v3 resolve.go reads a leading 0 as octal: "
     "040 = 32); write 40 for the decimal number, 0o40 if octal is meant, or quote it"),
    ("zero-width", (BASE + "  # note\n  kimi-k3-1:gcp.region: us-central1\u200b\n").encode(),
     "Pulumi.zero-width.yaml:5:36: an invisible ZERO WIDTH SPACE (U+200B) inside a key or value"),
    ("bidi-key", (BASE + "  kimi-k3-1:gcp.\u202eregion: us-central1\n").encode(),
     "Pulumi.bidi-key.yaml:4:17: an invisible RIGHT-TO-LEFT OVERRIDE (U+202E)"),
    ("separator", ("# a\u2028b\u2028c\n" + BASE + "  kimi-k3-1:gpu.slices: x\n").encode(),
     "Pulumi.separator.yaml:1:4: an invisible LINE SEPARATOR (U+2028)"),
    ("second-document", (BASE + "---\nconfig:\n  kimi-k3-1:gpu.slices: 2\n").encode(),
     "Pulumi.second-document.yaml:5: a second YAML document (after `---`): the Pulumi CLI reads only the first"),
    ("esc", ("environment:\n  - team/prod\n" + BASE).encode(),
     'Pulumi.esc.yaml: imports the Pulumi ESC environment(s) "team/prod" (`environment:`)'),
    ("secret-number", (BASE + "  kimi-k3-1:gpu.slices:\n    secure: v1:AAAA\n").encode(),
     "Pulumi.secret-number.yaml: kimi-k3-1:gpu.slices is encrypted (`secure:`), and only kimi-k3-1:hfToken may be"),
    ("long-value", (BASE + "  kimi-k3-1:gpu.slices: " + "9" * 100_000 + "\n").encode(),
     "Pulumi.long-value.yaml: kimi-k3-1:gpu.slices = '9999999999999999999999999999999999999999...(100,000 "
     "characters)...99999999999999999999': must be of type 'integer'"),
    ("huge", b"# " + b"x" * (2 << 20), "Pulumi.huge.yaml: 2,097,154 bytes, more than a stack file's 1,048,576"),
])
def test_a_hostile_stack_file_is_one_line_naming_where(tmp_path: Path, name: str, data: bytes, expected: str):
    """Each is refused before anything is expanded or evaluated, with the line and column an editor shows."""
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_bytes(data)
    message = _refusal(path)
    assert message.startswith(f"error: {expected}"), message


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig"])
def test_the_encodings_the_cli_reads_read_the_same(tmp_path: Path, encoding: str):
    """yaml.v3's reader takes UTF-16 by its byte-order mark and skips a UTF-8 one (readerc.go
    yaml_parser_determine_encoding); a trailing empty document (`---`) is read by the CLI and ignored."""
    text = stack_text("gpu") + "---\n"
    plain, other = write(tmp_path, "plain", text), tmp_path / "Pulumi.other.yaml"
    other.write_bytes(text.encode(encoding) if encoding != "utf-16-be" else b"\xfe\xff" + text.encode("utf-16-be"))
    assert stack_config(other, project_file()) == stack_config(plain, project_file())


def test_a_bomb_is_refused_before_it_is_expanded(tmp_path: Path):
    """1.5 KB of nested aliases (10^9 values expanded) takes as long as any stack file."""
    import time

    path = tmp_path / "Pulumi.bomb.yaml"
    path.write_text(_bomb(10, 10))
    start = time.process_time()
    assert "aliases expand to more than" in _refusal(path)
    assert time.process_time() - start < 0.5

"""Harness for docs/engine-preconditions.md: every row of its tables is held by one check against the rendered pods,
and every check can be shown to fail, naming its row, when its precondition is taken out of the pods.

A check is a function of the plan's objects (a fresh copy of the program's manifests, the dicts `manifests.yaml`
holds) that raises AssertionError when the precondition does not hold; `breaks` takes the precondition out of such a
copy in place. Register both with the row id:

    @preconditions.row("GPU-NIXL-1", breaks=lambda objs: preconditions.drop_env(objs, "vllm", "X"))
    def _x(objs):
        ...

tests/serving/test_engine_preconditions.py holds the table to the registry (no row without a check, no check without a
row) and, for every row, runs the check on the rendered pods (must pass) and on the broken copy (must fail with an
error naming the row)."""

from __future__ import annotations

import importlib
import json
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests import engine_facts
from tests.conftest import ROOT, Plan

DOC = ROOT / "docs" / "engine-preconditions.md"
SECTIONS = {"GPU": "## GPU: vLLM 0.33.0 (vllm/vllm-openai:v0.33.0)", "TPU": "## TPU: vLLM-TorchTPU 0.29.0"}
COLUMNS = ("id", "feature", "precondition", "source (file:line at the pinned release)", "held by")
ROW_ID = re.compile(r"^(GPU|TPU)-[A-Z0-9]+(?:-[A-Z0-9]+)*-[0-9]+$")
SOURCE = re.compile(r"[\w./-]+\.\w+:[0-9]+")
"""At least one `path/file.ext:line` in the source column."""
CHECK_MODULES = ("tests.serving.test_engine_preconditions_gpu", "tests.serving.test_engine_preconditions_tpu")
"""Where the rows' checks live; a module not written yet holds no checks (its rows then fail as unchecked)."""

Objects = list[dict[str, Any]]
Check = Callable[[Objects], None]


class PreconditionBrokenError(AssertionError):
    """A row's precondition does not hold in the pods; the message starts with the row id."""


@dataclass(frozen=True)
class DocRow:
    id: str
    feature: str
    precondition: str
    source: str
    held_by: str
    section: str
    line: int


@dataclass(frozen=True)
class Precondition:
    id: str
    check: Check
    breaks: Callable[[Objects], None]
    plan: str
    """The session plan the row is checked against: a stack ("gpu", "tpu") or a variant name (tests/conftest.py)."""


REGISTRY: dict[str, Precondition] = {}


def row(row_id: str, *, breaks: Callable[[Objects], None], plan: str | None = None) -> Callable[[Check], Check]:
    """Register the decorated function as the check of `row_id`; `breaks` takes the precondition out of the pods."""
    if not ROW_ID.match(row_id):
        raise ValueError(f"{row_id}: row ids are GPU-<FEATURE>-<n> or TPU-<FEATURE>-<n>")

    def register(check: Check) -> Check:
        if row_id in REGISTRY and REGISTRY[row_id].check.__qualname__ != check.__qualname__:
            raise ValueError(f"{row_id}: registered twice")
        REGISTRY[row_id] = Precondition(row_id, check, breaks, plan or row_id.split("-", 1)[0].lower())
        return check

    return register


def registered() -> dict[str, Precondition]:
    """Every check, both track modules imported."""
    for module in CHECK_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name != module:
                raise
    return dict(REGISTRY)


def verify(precondition: Precondition, objects: Objects) -> None:
    """Run the row's check; a failure names the row."""
    try:
        precondition.check(objects)
    except AssertionError as error:
        raise PreconditionBrokenError(f"{precondition.id}: {error}") from None


def holds_test(track: str) -> Callable[..., None]:
    """The test a track's check module exports (`test_<track>_precondition_holds = holds_test("GPU")`): one case per
    registered row of that track, its check run on the plan the row names."""
    import pytest

    rows = sorted(r for r in registered() if r.startswith(track + "-"))

    @pytest.mark.parametrize("row_id", rows)
    def test(row_id: str, plans, variants) -> None:
        precondition = REGISTRY[row_id]
        plan = plans[precondition.plan] if precondition.plan in plans else variants[precondition.plan]
        verify(precondition, copy_objects(plan))

    return test


def doc_rows() -> list[DocRow]:
    """The rows of docs/engine-preconditions.md, each in the section its id's track names."""
    rows: list[DocRow] = []
    section = None
    for number, line in enumerate(DOC.read_text().splitlines(), 1):
        if line.startswith("## "):
            section = next((track for track, header in SECTIONS.items() if line.strip() == header), None)
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells or cells[0] in ("id", "") or set(cells[0]) <= {"-", " ", ":"}:
            continue
        if section is None:
            raise AssertionError(f"{DOC.name}:{number}: a row outside the GPU and TPU sections")
        rows.append(DocRow(*cells[:5], section=section, line=number) if len(cells) == 5
                    else DocRow(cells[0], "", "", "", "", section, number))
    return rows


def copy_objects(plan: Plan) -> Objects:
    """A fresh copy of the program's own objects (checks and breaks may change it)."""
    return json.loads(_serialized(plan))


_SERIALIZED: dict[str, str] = {}


def _serialized(plan: Plan) -> str:
    key = str(plan.folder)
    if key not in _SERIALIZED:
        _SERIALIZED[key] = json.dumps(plan.program_manifests)
    return _SERIALIZED[key]


# --------------------------------------------------------------------------- reading and breaking pods
def pod_specs(objects: Objects) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, pod spec) of every model-server pod template: DisaggregatedSet roles and LeaderWorkerSet
    leader/worker templates."""
    for obj in objects:
        name = obj["metadata"]["name"]
        if obj["kind"] == "DisaggregatedSet":
            for role in obj["spec"]["roles"]:
                template = role["spec"]["leaderWorkerTemplate"]
                yield f"{name}/{role['name']}", template["workerTemplate"]["spec"]
        elif obj["kind"] == "LeaderWorkerSet":
            template = obj["spec"]["leaderWorkerTemplate"]
            if "leaderTemplate" in template:
                yield f"{name}/leader", template["leaderTemplate"]["spec"]
            yield f"{name}/worker", template["workerTemplate"]["spec"]


def containers(objects: Objects, name: str) -> list[tuple[str, dict[str, Any]]]:
    """(where, container) of every model-server container called `name`; at least one, or the check fails."""
    found = [(f"{where}/{name}", c) for where, spec in pod_specs(objects) for c in spec.get("containers", [])
             if c["name"] == name]
    assert found, f"no model-server container {name!r} in the plan"
    return found


def env(container: dict[str, Any]) -> dict[str, Any]:
    """Name -> value (or the valueFrom source) of a container's environment."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def script(container: dict[str, Any]) -> str:
    return container["args"][0]


def argv(container: dict[str, Any]) -> list[str]:
    """The engine's argv: the `exec` line of its bash script."""
    return engine_facts.exec_argv(script(container))


def flags(container: dict[str, Any]) -> dict[str, str | None]:
    """Flag -> value of the engine's argv (the last one wins, as argparse does)."""
    return dict(engine_facts.split_flags(argv(container)))


def json_flag(container: dict[str, Any], flag: str) -> Any:
    value = flags(container).get(flag)
    assert value is not None, f"{flag} not passed"
    return json.loads(value)


def drop_env(objects: Objects, container: str, name: str) -> None:
    for _, c in containers(objects, container):
        c["env"] = [e for e in c.get("env", []) if e["name"] != name]


def set_env(objects: Objects, container: str, name: str, value: str) -> None:
    for _, c in containers(objects, container):
        c["env"] = [e for e in c.get("env", []) if e["name"] != name] + [{"name": name, "value": value}]


def edit_script(objects: Objects, container: str, edit: Callable[[str], str]) -> None:
    """Replace every `name` container's script by `edit(script)`; the edit must change it."""
    for where, c in containers(objects, container):
        new = edit(c["args"][0])
        if new == c["args"][0]:
            raise ValueError(f"{where}: the edit changed nothing")
        c["args"][0] = new


def drop_flag(objects: Objects, container: str, flag: str) -> None:
    """Take `flag` (and its value) out of the engine's exec line."""

    def edit(text: str) -> str:
        lines = text.splitlines(keepends=True)
        for i, line in enumerate(lines):
            if line.startswith("exec "):
                tokens = shlex.split(line)
                out, skip = [], False
                for j, token in enumerate(tokens):
                    if skip:
                        skip = False
                        continue
                    if token == flag or token.startswith(flag + "="):
                        skip = "=" not in token and j + 1 < len(tokens) and not tokens[j + 1].startswith("--")
                        continue
                    out.append(token)
                lines[i] = " ".join(_quote(token) for token in out) + "\n"
        return "".join(lines)

    edit_script(objects, container, edit)


def _quote(token: str) -> str:
    """Quote a token back for bash, keeping `${NAME}` expansions live (double quotes) as the generated script does."""
    if "$" in token:
        return '"' + token.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return shlex.quote(token)


def set_flag(objects: Objects, container: str, flag: str, value: str) -> None:
    """Give `flag` another value on the engine's exec line (appended: argparse keeps the last)."""
    edit_script(objects, container, lambda text: re.sub(r"^(exec .*?)$", lambda m: f"{m.group(1)} {flag} "
                                                        f"{shlex.quote(value)}", text, count=1, flags=re.M))


# --------------------------------------------------------------------------- what leaves the pods (both tracks)
USAGE_STATS_OFF = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
"""vLLM's two switches the engines set (vllm/envs.py `VLLM_NO_USAGE_STATS`, and `VLLM_DO_NOT_TRACK`, which falls back
to DO_NOT_TRACK; vllm/usage/usage_lib.py `is_usage_stats_enabled`)."""


def assert_usage_stats_off(where: str, container: dict[str, Any]) -> None:
    values = env(container)
    for name, value in USAGE_STATS_OFF.items():
        assert values.get(name) == value, f"{where}: {name} is {values.get(name)!r}, not {value!r}: usage stats on"


def assert_hub_off(where: str, container: dict[str, Any]) -> None:
    """No Hub token in an engine container (by name, from a Secret or a whole envFrom) and the Hub off."""
    values = env(container)
    assert "HF_TOKEN" not in values and "HUGGING_FACE_HUB_TOKEN" not in values, f"{where}: carries a Hub token"
    assert not container.get("envFrom"), f"{where}: envFrom {container['envFrom']} may carry a Hub token"
    assert values.get("HF_HUB_OFFLINE") == "1", f"{where}: HF_HUB_OFFLINE is {values.get('HF_HUB_OFFLINE')!r}"


def add_hub_token(objects: Objects, container: str) -> None:
    """The Hub token back on every `container`, from the stack's Secret."""
    for _, c in containers(objects, container):
        c.setdefault("env", []).append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": "llm-d-hf-token", "key": "HF_TOKEN"}}})

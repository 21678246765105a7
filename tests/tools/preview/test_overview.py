"""The plan's default view (overview.txt, components/plan/overview.py) is a reader's screen: under 40 lines per stack,
grouped, a unit on every figure, no names from the code; `--detail` prints the full summary instead.

Read from the session's plans (the fixture stacks and every variant: GPU8, TPU4, monitoring off, ...); no plan of
its own."""

from __future__ import annotations

import re

import pytest

from components.plan import overview
from tests.conftest import STACKS, VARIANTS
from tools.preview import plan as plan_cli

UNITS = {
    # sizes and rates
    "B", "KB", "MB", "GB", "TB", "GiB", "MiB", "TiB", "MiB/s", "GB/s", "%",
    # time
    "s", "min", "h", "node-hours",
    # things counted
    "nodes", "node", "hosts", "host", "GPUs", "chips", "slices", "slice", "racks", "rack", "replicas", "replica",
    "sessions", "session", "requests", "tokens", "resources", "objects", "charts", "pods", "caps", "cap", "ports",
    "addresses", "ranges", "Services", "attachments", "policies", "channels", "VMs",
}
"""What may name the unit of a figure: one of the (at most three) words after it, before any punctuation."""
FIGURE = re.compile(r"(?<![\w.\-/:$])(\d[\d,]*(?:\.\d+)?)(?![\w\-/]|\.\d)")
"""A number standing alone: not part of a name (`us-central1`, `n2-standard-8`, `2x2x4`), a date or a path."""
INTERNAL = re.compile(r"\b[A-Za-z]+_[A-Za-z_]+\b|components/|tools/|tests/|\.py\b|[a-z]\.[a-z_]+\(")
"""A function, constant or module of the program (`capacity.host_tier_tokens_per_engine`, `loading.HDML_...`)."""


def _unit_follows(text: str) -> bool:
    """A unit among the first three words of `text`, before a comma, semicolon, colon, bracket or sign."""
    after = re.split(r"[,;:()=+]", text, maxsplit=1)[0]
    return after.startswith("%") or any(word in UNITS for word in after.split()[:3])


def unitless(line: str) -> list[str]:
    """The figures of `line` with no unit: not money (`$`), not followed by a unit (_unit_follows), not the first
    of `N of M <unit>`."""
    bad = []
    for match in FIGURE.finditer(line):
        rest = line[match.end():]
        shared = re.match(r"\s+of\s+\d[\d,]*(?:\.\d+)?", rest)
        if (match.start() and line[match.start() - 1] == "$") or _unit_follows(rest) \
                or (shared and _unit_follows(rest[shared.end():])):
            continue
        bad.append(match.group(1))
    return bad


def test_the_unit_check_finds_a_bare_figure():
    assert unitless("per engine: at most 55 running; 2 of 3") == ["55", "2", "3"]
    assert unitless("$3.74 + 9.8 a4x-maxgpu-4g-metal node-hours; 16 of 18 nodes; 1,800 GiB at 38,400 MiB/s") == []
    assert unitless("cluster kimi-k3-1-gpu in us-central1, 2x2x4 slices of tpu7x, prices of 2026-11-29") == []


def _overviews(plans, variants) -> dict[str, str]:
    found = {stack: (plans[stack].folder / "overview.txt").read_text() for stack in STACKS}
    # The folders only: a Plan would parse each variant's manifests, which this test does not read.
    found.update({name: (variants.out / name / "overview.txt").read_text() for name in VARIANTS if name != "bad"})
    return found


@pytest.fixture(scope="module")
def overviews(plans, variants) -> dict[str, str]:
    return _overviews(plans, variants)


def test_each_stack_fits_a_screen(overviews):
    lengths = {name: len(text.splitlines()) for name, text in overviews.items()}
    assert max(lengths.values()) < overview.MAX_LINES, lengths


def test_every_figure_has_a_unit(overviews):
    bare = {f"{name}: {line.strip()}": unitless(line) for name, text in overviews.items()
            for line in text.splitlines()[1:] if unitless(line)}
    assert not bare, bare


def test_no_names_from_the_code(overviews):
    found = {f"{name}: {line.strip()}" for name, text in overviews.items() for line in text.splitlines()
             if INTERNAL.search(line)}
    assert not found, found


@pytest.mark.parametrize("stack", STACKS)
def test_grouped_in_the_reader_order(plans, stack):
    headings = [line.strip().rstrip(":") for line in (plans[stack].folder / "overview.txt").read_text().splitlines()
                if re.fullmatch(r"  \S.*:", line)]
    assert headings == [s for s in overview.SECTIONS if s in headings]
    assert set(headings) >= {overview.CREATED, overview.CAPACITY, overview.TIME, overview.COST, overview.LIMITS}


def test_detail_prints_the_full_summary(plans, monkeypatch, capsys):
    """The same rendered document, printed both ways (the render itself is the session's)."""
    summary = plans["gpu"].summary.splitlines()
    view = overview.Overview("a title")
    view.add(overview.TIME, "first up to serving: 1.0 min")
    document = {"resources": [], "manifests": [], "charts": [], "summary": summary, "overview": view.to_json()}
    monkeypatch.setattr(plan_cli, "render_all", lambda files: [("gpu", document, "")])
    monkeypatch.setattr(plan_cli, "write_plans", lambda out, results: None)
    assert plan_cli.main(["--stack", "gpu"]) == 0
    default = capsys.readouterr().out.splitlines()
    assert default[:3] == ["gpu: a title", "  time:", "    first up to serving: 1.0 min"]
    assert plan_cli.main(["--stack", "gpu", "--detail"]) == 0
    detail = capsys.readouterr().out.splitlines()
    assert detail[1:1 + len(summary)] == [f"  {line}" for line in summary]

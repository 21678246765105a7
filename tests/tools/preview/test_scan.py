"""The pinned checkov over the real plans (chart objects included) and their benchmark variants: nothing fails that
tools/preview/scan.py's exception list does not name, nothing on that list is stale, and docs/security.md shows
exactly this run's counts and this list. Where checkov is missing the test skips with the reason (a failure in CI,
which sets CI); without a chart copy the counts would not be the documented ones, so it skips as every chart test
does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import ROOT, SCAN_BENCHMARKS, rendered, required_tool

CHECKOV = Path(os.environ.get("CHECKOV", ROOT / ".venv-checkov" / "bin" / "checkov"))


@pytest.fixture(scope="module")
def checkov() -> str:
    required_tool(CHECKOV.exists(), f"{CHECKOV} is missing: run `make checkov` (pinned in requirements-checkov.txt)")
    return str(CHECKOV)


@pytest.fixture(scope="module")
def results(plans, variants, checkov, tmp_path_factory):
    from tools.preview import scan

    stacks = {name: rendered(plans[name]).folder for name in ("gpu", "tpu")}
    # The stacks as `scan --with-benchmark` renders them (scan.benchmark_stack), rendered with the variants.
    stacks |= {name: rendered(variants[name]).folder for name in SCAN_BENCHMARKS}
    return scan.scan(stacks, checkov, tmp_path_factory.mktemp("scan"))  # (results, the version in checkov's report)


def test_every_failed_check_is_listed_and_every_listed_one_is_needed(results):
    from tools.preview import scan

    found, _ = results
    assert set(found) == {"gpu", "tpu", "gpu-benchmark", "tpu-benchmark"}
    assert {name: r["unlisted"] for name, r in found.items()} == {name: [] for name in found}
    assert scan.unused(found) == []
    assert all(r["passed"] > 100 and r["failed"] > 0 for r in found.values())  # the scan really ran on each


def test_security_doc_shows_this_runs_counts_and_the_exception_list(results):
    from tools.preview import scan

    found, version = results
    assert version == "3.3.30", "requirements-checkov.txt pins the checkov whose results docs/security.md shows"
    counts, listed = scan.doc_tables(scan.DOC.read_text())
    assert (counts, listed) == (scan.counts_table(found, f"checkov {version}"), scan.exceptions_table()), (
        "docs/security.md's scan tables are out of step with the scan: run `python -m tools scan --write-doc`")


def test_requirements_pin_the_checkov_the_doc_names():
    pins = [line for line in (ROOT / "requirements-checkov.in").read_text().splitlines()
            if line and not line.startswith("#")]
    assert pins == ["checkov==3.3.30"]


def test_with_benchmark_renders_the_plans_the_suite_scans(variants, tmp_path):
    """`scan --with-benchmark`'s own render (scan.benchmark_plans: its stack file, then a plan process) gives the plan
    the session's variants hold for it, so scanning those is scanning what the command scans."""
    from tests.conftest import fixture_stack
    from tools.preview import scan

    plans = scan.benchmark_plans([fixture_stack("tpu")], tmp_path)
    assert list(plans) == ["tpu-benchmark"]
    for name in ("resources.json", "manifests.yaml", "outputs.json"):
        assert (plans["tpu-benchmark"] / name).read_text() == (variants["tpu-benchmark"].folder / name).read_text()

"""docs/engine-preconditions.md is held by the tests (tests/preconditions.py): every row has a check and every check
a row, each check passes on the rendered pods, and each fails, naming its row, once its precondition is taken out."""

from __future__ import annotations

import pytest

from tests import preconditions
from tests.conftest import Plan

DOC_ROWS = preconditions.doc_rows()
REGISTRY = preconditions.registered()


def plan_of(precondition: preconditions.Precondition, plans, variants) -> Plan:
    return plans[precondition.plan] if precondition.plan in plans else variants[precondition.plan]


def test_the_table_has_both_sections_and_its_columns():
    text = preconditions.DOC.read_text()
    header = "| " + " | ".join(preconditions.COLUMNS) + " |"
    for title in preconditions.SECTIONS.values():
        assert title in text.splitlines(), f"missing section {title!r}"
        assert header in text.split(title, 1)[1].split("\n## ", 1)[0], f"{title}: no table with columns {header}"


@pytest.mark.parametrize("doc_row", DOC_ROWS, ids=[r.id for r in DOC_ROWS])
def test_each_row_is_well_formed(doc_row):
    where = f"docs/engine-preconditions.md:{doc_row.line} {doc_row.id}"
    assert preconditions.ROW_ID.match(doc_row.id), f"{where}: ids are <TRACK>-<FEATURE>-<n>"
    assert doc_row.id.startswith(doc_row.section + "-"), f"{where}: a {doc_row.id.split('-')[0]} row in the " \
                                                         f"{doc_row.section} section"
    assert all((doc_row.feature, doc_row.precondition, doc_row.source, doc_row.held_by)), f"{where}: five cells"
    assert preconditions.SOURCE.search(doc_row.source), f"{where}: the source names no file:line"


def test_no_row_without_a_check_and_no_check_without_a_row():
    ids = [r.id for r in DOC_ROWS]
    assert len(ids) == len(set(ids)), "a row id appears twice"
    unchecked = sorted(set(ids) - set(REGISTRY))
    orphans = sorted(set(REGISTRY) - set(ids))
    assert not unchecked, f"rows without a check (tests/test_engine_preconditions_<track>.py): {unchecked}"
    assert not orphans, f"checks naming no row of docs/engine-preconditions.md: {orphans}"


def test_the_harness_catches_a_check_that_cannot_fail():
    """A check that passes on broken pods is a finding, not a pass: the mutation test below must say so."""
    never = preconditions.Precondition("GPU-NEVER-1", lambda objs: None, lambda objs: None, "gpu")
    with pytest.raises(AssertionError):
        _expect_broken(never, [])


def _expect_broken(precondition: preconditions.Precondition, objects: preconditions.Objects) -> None:
    try:
        preconditions.verify(precondition, objects)
    except preconditions.PreconditionBrokenError as error:
        assert str(error).startswith(precondition.id + ": "), str(error)
        return
    raise AssertionError(f"{precondition.id}: the check still passes with its precondition taken out")


@pytest.mark.parametrize("row_id", sorted(REGISTRY))
def test_each_check_holds_on_the_rendered_pods_and_fails_without_its_precondition(row_id, plans, variants):
    precondition = REGISTRY[row_id]
    plan = plan_of(precondition, plans, variants)
    preconditions.verify(precondition, preconditions.copy_objects(plan))
    broken = preconditions.copy_objects(plan)
    precondition.breaks(broken)
    _expect_broken(precondition, broken)

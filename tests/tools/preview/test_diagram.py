"""The architecture diagrams README.md shows (docs/architecture-<stack>.svg) are what `python -m tools diagram` draws
from the plan: regenerated from the session's plans of the fixture stacks (the committed ones but for user names,
tests/tools/preview/test_doc_figures.py), so a change to the program's parts or their order fails here until the
diagrams are redrawn."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.conftest import ROOT, STACKS, rendered
from tools.preview import diagram


@pytest.mark.parametrize("stack", STACKS)
def test_the_committed_diagram_is_the_plans(plans, stack):
    """Drawn from a plan with every chart rendered, as the committed diagrams are (a checkout without the charts
    skips, naming them)."""
    fresh = diagram.svg(stack, rendered(plans[stack]).resources)
    assert diagram.committed(stack).read_text() == fresh, (
        f"{diagram.committed(stack).relative_to(ROOT)} is stale: run `python -m tools plan && python -m tools diagram`")


SERVING = {"gpu": "vllm", "tpu": "tpu-engine"}


@pytest.mark.parametrize("stack", STACKS)
def test_every_part_is_drawn_and_the_serving_set_waits_for_what_it_reads(plans, stack):
    """Each top-level resource is one box; the serving set is below the cluster, the accelerator pools and the
    weights volume, and the ScaledObjects below it."""
    resources = plans[stack].resources
    parts, edges = diagram.parts_and_edges(resources)
    top = {r["name"] for r in resources if not r["parent"] and not r["type"].startswith("pulumi:providers:")}
    assert set(parts) == top
    titles = [t.text for t in ET.fromstring(diagram.svg(stack, resources)).iter("{http://www.w3.org/2000/svg}title")]
    assert sorted(t.split(":")[0] for t in titles) == sorted(top)
    above: dict[str, set[str]] = {}
    for a, b in sorted(edges):
        above.setdefault(b, set()).add(a)

    def ancestors(name: str) -> set[str]:
        found, todo = set(), [name]
        while todo:
            for a in above.get(todo.pop(), ()):
                if a not in found:
                    found.add(a)
                    todo.append(a)
        return found

    serving = SERVING[stack]
    assert {"cluster", "weights-volume", stack, "platform"} <= ancestors(serving)
    assert (serving, "scaling") in edges


def test_only_the_waits_no_longer_chain_implies_are_kept():
    assert diagram.reduce({("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("a", "d")}) == {
        ("a", "b"), ("b", "c"), ("c", "d")}


def test_the_readme_shows_both(plans):
    readme = (ROOT / "README.md").read_text()
    assert all(f"docs/architecture-{stack}.svg" in readme for stack in STACKS)

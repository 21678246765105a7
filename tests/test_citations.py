"""Docs, comments and messages cite what a user can open: upstream URLs or files in this repository.

The fact sheets the developers worked from (`gke.md §6`, `engines.md`, ...) and paths into the material
beside the checkout are not in the repository, so a citation of them is a dead end for a user."""

from __future__ import annotations

import re

from tests.conftest import ROOT

UNOPENABLE = re.compile(r"\b(?:gke|llm-d|engines|model|pulumi)\.md\b|§|shared/(?:reference|crds|engine-flags|charts|"
                        r"upstream)\b|seed-blog-post\.txt")
"""A fact-sheet name, a section sign, or a path into the shared material beside the checkout."""

SCANNED = ("components", "stacks", "tools", "policy", "docs", ".github")
SCANNED_FILES = ("README.md", "__main__.py", "Pulumi.yaml", "Makefile")


def scanned_files():
    for folder in SCANNED:
        yield from (p for p in sorted((ROOT / folder).rglob("*")) if p.is_file() and p.suffix != ".pyc")
    yield from (ROOT / name for name in SCANNED_FILES)


def test_pattern_catches_each_form():
    for cited in ("(gke.md §6)", "see engines.md", "llm-d.md §3.1", "shared/crds/x.yaml", "model.md analogs",
                  "../shared/reference/pulumi.md", "seed-blog-post.txt"):
        assert UNOPENABLE.search(cited), cited
    for fine in ("docs/weights.md", "https://llm-d.ai/docs", "README.md", "components/facts/catalog.py"):
        assert not UNOPENABLE.search(fine), fine


def test_no_fact_sheet_citations():
    hits = []
    for path in scanned_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if UNOPENABLE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not hits, "cite an upstream URL or a repository file instead:\n" + "\n".join(hits)

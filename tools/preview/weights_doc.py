"""Write the figures block of docs/weights.md from the offline plan's summaries, so the document shows the
numbers the program computes (tests/test_loading.py checks they agree).

    make plan && python -m tools weights-doc
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tools import prog

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "weights.md"
PLAN = ROOT / "build" / "plan"
STACKS = ["gpu", "tpu"]
STARTS = ("staging:", "weight load:", "time to serving")
"""Summary lines (with their indented continuation lines) that make up the block."""


def figures(summary: str) -> list[str]:
    lines, keep = [], False
    for line in summary.splitlines():
        if not line.startswith(" "):
            keep = line.startswith(STARTS)
        if keep:
            lines.append(line)
    return lines


def block(stacks: list[str]) -> str:
    body = []
    for stack in stacks:
        body.append(f"{stack}:")
        body += [f"  {line}" for line in figures((PLAN / stack / "summary.txt").read_text())]
    return "<!-- figures:begin -->\n```\n" + "\n".join(body) + "\n```\n<!-- figures:end -->"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("weights-doc"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    absent = [stack for stack in STACKS if not (PLAN / stack / "summary.txt").is_file()]
    if absent:
        parser.error(f"no plan of {', '.join(absent)} in {PLAN.relative_to(ROOT)}: run `{prog('plan')}` first")
    text = DOC.read_text()
    new = re.sub(r"<!-- figures:begin -->.*?<!-- figures:end -->", lambda _: block(STACKS), text,
                 flags=re.S)
    if new == text and "<!-- figures:begin -->" not in text:
        print("docs/weights.md has no figures block", file=sys.stderr)
        return 1
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

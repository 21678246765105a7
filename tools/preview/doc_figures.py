"""Write the generated figures blocks of README.md and docs/weights.md from the offline plan's summaries, so the
documents show what the program computes for the committed stacks (tests/tools/preview/test_doc_figures.py and
tests/plan/test_loading.py fail when a block differs from the plan).

    make plan && python -m tools doc-figures
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tools import prog

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "build" / "plan"
STACKS = ["gpu", "tpu"]


@dataclass(frozen=True)
class Block:
    """One generated block: the summary lines whose first word(s) are in `starts`, per stack."""

    doc: str
    marker: str
    starts: tuple[str, ...]
    continuation: bool
    """Keep the indented lines that follow a kept line (a figure's details)."""


BLOCKS = (
    Block("docs/weights.md", "figures", ("staging:", "weight load:", "time to serving"), continuation=True),
    # What a reader of the README sizes a project by: the hardware, the engine and its parallelism, memory and cache
    # per device, sessions, cost and time. Headlines only; docs/capacity.md and docs/weights.md have the details.
    Block("README.md", "plan-figures", ("accelerators:", "weight load:", "per device:", "KV per replica",
                                         "router cache:", "per slice", "total", "cost estimate", "time to serving",
                                         "until the first answer",
                                         "scheduling:"), continuation=False),
)

POOL = re.compile(r"^  (\S+) \((\d+) x (\S+)\):")
"""A scheduling line of the summary: `  <pool> (<count> x <machine type>): ...`."""


def pools(summary: str) -> str:
    """The node pools the stack creates, from the scheduling table: what quota the first `up` needs."""
    found = [f"{m.group(1)} {m.group(2)} x {m.group(3)}" for m in map(POOL.match, summary.splitlines()) if m]
    return "node pools: " + ", ".join(found)


def figures(summary: str, block: Block) -> list[str]:
    lines, keep = [], False
    for line in summary.splitlines():
        if not line.startswith(" "):
            keep = line.startswith(block.starts)
            if keep and line.startswith("scheduling:"):
                lines.append(pools(summary))
                keep = False
                continue
            if keep:
                lines.append(line)
        elif keep and block.continuation:
            lines.append(line)
    return lines


def render(block: Block, summaries: dict[str, str]) -> str:
    body = []
    for stack, summary in summaries.items():
        body.append(f"{stack}:")
        body += [f"  {line}" for line in figures(summary, block)]
    return f"<!-- {block.marker}:begin -->\n```\n" + "\n".join(body) + f"\n```\n<!-- {block.marker}:end -->"


def pattern(block: Block) -> re.Pattern[str]:
    return re.compile(rf"<!-- {block.marker}:begin -->.*?<!-- {block.marker}:end -->", flags=re.S)


def rewrite(text: str, block: Block, summaries: dict[str, str]) -> str | None:
    """The document with its block regenerated; None when it has no such block."""
    if not pattern(block).search(text):
        return None
    return pattern(block).sub(lambda _: render(block, summaries), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("doc-figures"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    absent = [stack for stack in STACKS if not (PLAN / stack / "summary.txt").is_file()]
    if absent:
        parser.error(f"no plan of {', '.join(absent)} in {PLAN.relative_to(ROOT)}: run `{prog('plan')}` first")
    summaries = {stack: (PLAN / stack / "summary.txt").read_text() for stack in STACKS}
    for block in BLOCKS:
        path = ROOT / block.doc
        new = rewrite(path.read_text(), block, summaries)
        if new is None:
            print(f"{block.doc} has no {block.marker} block", file=sys.stderr)
            return 1
        path.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

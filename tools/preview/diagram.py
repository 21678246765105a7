"""Architecture diagram of a stack, drawn from its offline plan: the program's parts and what each waits for.

    python -m tools diagram              # docs/architecture-<stack>.svg for every stack in build/plan/
    python -m tools diagram --check      # exit 1 when a committed diagram differs from the plan's

A part is a top-level resource of `resources.json` (a ComponentResource with everything under it, or a dynamic
resource); an arrow A -> B says B, or something under it, depends on A, or something under it, or runs on the
Kubernetes provider A creates (its `dependsOn` and `options.provider`). Arrows implied by a longer chain are left out,
so what remains is the order `pulumi up` creates things in. Layers are the longest chain of waits from the top; the
order within a layer follows the neighbours' (barycenter sweeps). Pure Python, the same bytes for the same plan:
tests/tools/preview/test_diagram.py fails when a committed diagram is stale.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from tools import prog

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "build" / "plan"
STACKS = ("gpu", "tpu")
"""The committed stacks whose diagrams the README shows."""


def committed(stack: str) -> Path:
    return ROOT / "docs" / f"architecture-{stack}.svg"


@dataclass
class Part:
    name: str
    type: str
    children: Counter
    kind: str
    """`cloud` (Google Cloud resources), `cluster` (Kubernetes objects) or `other` (resources the program defines)."""
    dummy: bool = False

    @property
    def title(self) -> str:
        short = self.type.rsplit(":", 1)[-1]
        return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", short)

    @property
    def detail(self) -> str:
        kinds = [f"{n} {k}" if n > 1 else k for k, n in self.children.most_common()]
        return f"{self.name}: " + ", ".join(kinds) if kinds else self.name


def _top(resources: list[dict[str, Any]]) -> dict[str, str]:
    """Resource name -> the top-level resource it belongs to."""
    parent = {r["name"]: r["parent"] for r in resources}
    owner = {}
    for name in parent:
        top = name
        while parent.get(top) in parent:
            top = parent[top]
        owner[name] = top
    return owner


def _kind(types: list[str]) -> str:
    counts = Counter("cloud" if t.startswith("gcp:") else "cluster" if t.startswith("kubernetes:") else "other"
                     for t in types)
    return counts.most_common(1)[0][0] if counts else "other"


CHART = "kubernetes:helm.sh/v4:Chart"
"""A Helm chart is shown as one child, by its name; the objects it renders are under it."""


def _label(resource: dict[str, Any], charts: dict[str, str]) -> str:
    if resource["name"] in charts:
        return f"{charts[resource['name']].rsplit('/', 1)[-1]} chart"
    return resource["type"].rsplit(":", 1)[-1]


def parts_and_edges(resources: list[dict[str, Any]]) -> tuple[dict[str, Part], set[tuple[str, str]]]:
    owner = _top(resources)
    skip = {r["name"] for r in resources if r["type"].startswith("pulumi:providers:") and not r["parent"]}
    charts = {r["name"]: r["inputs"].get("chart", "") for r in resources if r["type"] == CHART}
    parts: dict[str, Part] = {}
    for r in resources:
        if owner[r["name"]] == r["name"] and r["name"] not in skip:
            kids = [c for c in resources if owner[c["name"]] == r["name"] and c is not r
                    and not c["type"].startswith("pulumi:providers:")]
            counts = Counter(_label(c, charts) for c in kids
                             if not c["type"].startswith("kimi:") and c["parent"] not in charts)
            parts[r["name"]] = Part(r["name"], r["type"], counts, _kind([c["type"] for c in kids] or [r["type"]]))
    edges = set()
    for r in resources:
        target = owner[r["name"]]
        provider = (r.get("options") or {}).get("provider")
        for dep in [*r["dependsOn"], *([provider] if isinstance(provider, str) else [])]:
            source = owner.get(dep)
            if source in parts and target in parts and source != target:
                edges.add((source, target))
    return parts, reduce(edges)


def reduce(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The transitive reduction of an acyclic graph: an edge stays only if no longer path joins its ends."""
    succ: dict[str, set[str]] = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)

    def reach(start: str, skip: tuple[str, str]) -> bool:
        seen, todo = set(), [n for n in succ.get(start, ()) if (start, n) != skip]
        while todo:
            node = todo.pop()
            if node == skip[1]:
                return True
            if node not in seen:
                seen.add(node)
                todo += succ.get(node, ())
        return False

    return {e for e in edges if not reach(e[0], e)}


def layers(parts: dict[str, Part], edges: set[tuple[str, str]]) -> tuple[list[list[str]], list[tuple[str, str]]]:
    """(rows, links): longest-path layers, each edge that spans layers broken by dummy parts (added to `parts`) into
    links between neighbouring layers, each layer ordered by barycenter sweeps."""
    order = {name: i for i, name in enumerate(parts)}
    preds: dict[str, list[str]] = {n: [] for n in parts}
    for a, b in edges:
        preds[b].append(a)
    rank: dict[str, int] = {}

    def depth(n: str) -> int:
        if n not in rank:
            rank[n] = 1 + max((depth(p) for p in preds[n]), default=-1)
        return rank[n]

    for n in parts:
        depth(n)
    links: list[tuple[str, str]] = []
    for a, b in sorted(edges, key=lambda e: (order[e[0]], order[e[1]])):
        prev = a
        for level in range(rank[a] + 1, rank[b]):
            dummy = f"{a}>{b}@{level}"
            parts[dummy] = Part(dummy, "", Counter(), "dummy", dummy=True)
            rank[dummy] = level
            order[dummy] = len(order)
            links.append((prev, dummy))
            prev = dummy
        links.append((prev, b))
    rows = [sorted((n for n in parts if rank[n] == level), key=order.__getitem__)
            for level in range(max(rank.values()) + 1)]
    up: dict[str, list[str]] = {n: [] for n in parts}
    down: dict[str, list[str]] = {n: [] for n in parts}
    for a, b in links:
        down[a].append(b)
        up[b].append(a)
    for sweep in range(4):
        sequence = range(1, len(rows)) if sweep % 2 == 0 else range(len(rows) - 2, -1, -1)
        for level in sequence:
            ref = rows[level - 1] if sweep % 2 == 0 else rows[level + 1]
            where = {n: i for i, n in enumerate(ref)}
            near = up if sweep % 2 == 0 else down
            current = {n: i for i, n in enumerate(rows[level])}

            def key(n: str, where=where, near=near, current=current) -> tuple[float, int]:
                found = [where[m] for m in near[n] if m in where]
                return (sum(found) / len(found) if found else current[n], order[n])

            rows[level].sort(key=key)
    return rows, links


BOX_W, BOX_H, DUMMY_W, GAP_X, GAP_Y, MARGIN, HEAD = 240, 44, 16, 20, 46, 20, 64
FILL = {"cloud": "#e8f0fe", "cluster": "#e6f4ea", "other": "#fef7e0"}
STROKE = {"cloud": "#4285f4", "cluster": "#34a853", "other": "#f9ab00"}
LEGEND = (("cloud", "Google Cloud"), ("cluster", "in the cluster"), ("other", "run by pulumi up itself"))


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars - 1] + "\u2026"


def svg(stack: str, resources: list[dict[str, Any]]) -> str:
    parts, edges = parts_and_edges(resources)
    real = sum(1 for p in parts.values() if not p.dummy)
    rows, links = layers(parts, edges)

    def width(n: str) -> int:
        return DUMMY_W if parts[n].dummy else BOX_W

    row_w = [sum(width(n) for n in row) + GAP_X * (len(row) - 1) for row in rows]
    canvas_w = max(row_w) + 2 * MARGIN
    pos: dict[str, tuple[float, float]] = {}
    for level, row in enumerate(rows):
        x = MARGIN + (max(row_w) - row_w[level]) / 2
        y = HEAD + MARGIN + level * (BOX_H + GAP_Y)
        for n in row:
            pos[n] = (x + width(n) / 2, y)
            x += width(n) + GAP_X
    canvas_h = HEAD + 2 * MARGIN + len(rows) * (BOX_H + GAP_Y) - GAP_Y
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{canvas_w:.0f}" height="{canvas_h:.0f}" '
           f'viewBox="0 0 {canvas_w:.0f} {canvas_h:.0f}" font-family="Helvetica, Arial, sans-serif">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#5f6368"/></marker></defs>',
           '<rect width="100%" height="100%" fill="#ffffff"/>',
           f'<text x="{MARGIN}" y="{MARGIN + 14}" font-size="16" font-weight="bold">{escape(stack)} track: '
           f'{len(resources)} resources in {real} parts</text>',
           f'<text x="{MARGIN}" y="{MARGIN + 34}" font-size="12" fill="#3c4043">An arrow points from a part to '
           'one that waits for it (generated from the offline plan by python -m tools diagram)</text>']
    x = canvas_w - MARGIN
    for kind, label in reversed(LEGEND):
        x -= 20 + 6.8 * len(label) + 24
        out.append(f'<rect x="{x:.1f}" y="{MARGIN + 4}" width="14" height="14" fill="{FILL[kind]}" '
                   f'stroke="{STROKE[kind]}"/><text x="{x + 20:.1f}" y="{MARGIN + 16}" font-size="12">{label}</text>')
    for a, b in links:
        (x1, y1), (x2, y2) = pos[a], pos[b]
        y1 += BOX_H  # a dummy is a vertical run the height of a box
        end = "" if parts[b].dummy else ' marker-end="url(#arrow)"'
        y2e = y2 + (BOX_H if parts[b].dummy else 0)
        mid = (y1 + y2) / 2
        out.append(f'<path d="M {x1:.1f} {y1:.1f} C {x1:.1f} {mid:.1f} {x2:.1f} {mid:.1f} {x2:.1f} {y2:.1f}'
                   + (f' L {x2:.1f} {y2e:.1f}' if parts[b].dummy else '')
                   + f'" fill="none" stroke="#9aa0a6" stroke-width="1.2"{end}/>')
    for n, (cx, y) in pos.items():
        part = parts[n]
        if part.dummy:
            continue
        x = cx - BOX_W / 2
        out.append(f'<g><title>{escape(part.detail)}</title>'
                   f'<rect x="{x:.1f}" y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{FILL[part.kind]}" '
                   f'stroke="{STROKE[part.kind]}" stroke-width="1.5"/>'
                   f'<text x="{cx:.1f}" y="{y + 18:.1f}" font-size="13" font-weight="bold" text-anchor="middle">'
                   f'{escape(_clip(part.title, 30))}</text>'
                   f'<text x="{cx:.1f}" y="{y + 34:.1f}" font-size="10.5" fill="#3c4043" text-anchor="middle">'
                   f'{escape(_clip(part.detail, 42))}</text></g>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("diagram"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a diagram is stale")
    args = parser.parse_args(argv)
    absent = [stack for stack in STACKS if not (PLAN / stack / "resources.json").is_file()]
    if absent:
        parser.error(f"no plan of {', '.join(absent)} in {PLAN.relative_to(ROOT)}: run `{prog('plan')}` first")
    stale = []
    for stack in STACKS:
        fresh = svg(stack, json.loads((PLAN / stack / "resources.json").read_text()))
        path = committed(stack)
        if not path.is_file() or path.read_text() != fresh:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(fresh)
    if args.check and stale:
        print(f"stale: {', '.join(map(str, stale))}: run `{prog('diagram')}` after `{prog('plan')}`", file=sys.stderr)
        return 1
    for path in ([] if args.check else stale):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

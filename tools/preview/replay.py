"""Replay session shapes through a stack's router scoring and its engines' prefix caches (components/plan/replay.py)
and print, per shape, the share of turns 2..N routed to the engine holding the longest cached prefix, the hit tokens
against the ideal, how often the TTFT gate broke stickiness, and the TTFT p95 in the replay's clock. Offline.

The engines here are the replay's rule for the engines' hybrid prefix cache, which the engine-code tiers hold equal
to the released KVCacheManagers turn by turn (vLLM 0.33.0: tests/engine/test_vllm_replay.py; the vLLM 0.29.0 core
vLLM-TorchTPU ships: tests/engine_tpu/test_torchtpu_replay.py), with each engine's host-DRAM tier beside it (a rule:
components/plan/replay.py RuleEngine).

    python -m tools replay --stack gpu                          # every shape, the routing the stack renders
    python -m tools replay --stack gpu --choice former --shape benchmark     # before the replay chose
    python -m tools replay --stack-file tests/stacks/Pulumi.tpu.yaml --shapes my-shapes.yaml

A shape file is a YAML list of shapes with the fields of components.plan.sessions.Shape (name, sessions, concurrency,
turns, system_tokens, system_shared, first_input_tokens, input_tokens, output_tokens).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

import yaml

from components.config import ConfigError
from components.plan import replay
from tools import prog
from tools.preview.plan import stack_name
from tools.preview.scaling import chosen_stacks, load

BAR_SHAPES = ("benchmark", "agentic")
"""The shapes the bar applies to, at the benchmark's concurrency (docs/capacity.md "Prefix routing")."""


def read_shapes(path: Path) -> list[replay.Shape]:
    """A shape file, refused with one line naming the entry and the field."""
    known = {f.name for f in fields(replay.Shape)}
    document = yaml.safe_load(path.read_text())
    if not isinstance(document, list):
        raise ValueError(f"{path}: a YAML list of shapes is expected")
    shapes = []
    for i, entry in enumerate(document):
        unknown = set(entry or {}) - known if isinstance(entry, dict) else {"<not a mapping>"}
        if unknown:
            raise ValueError(f"{path}: shape {i}: unknown field(s) {', '.join(sorted(unknown))}; "
                             f"valid: {', '.join(sorted(known))}")
        if "first_input_spread" in entry:
            entry["first_input_spread"] = tuple(entry["first_input_spread"])
        try:
            shape = replay.Shape(**entry)
        except TypeError as err:
            raise ValueError(f"{path}: shape {i}: {err}") from None
        ints = [f.name for f in fields(replay.Shape) if f.type == "int"]
        bad = [n for n in ints if not isinstance(getattr(shape, n), int) or getattr(shape, n) < 0]
        if bad or shape.sessions < 1 or shape.concurrency < 1 or shape.turns < 1:
            raise ValueError(f"{path}: shape {i} ({shape.name}): sessions, concurrency and turns must be >= 1 and "
                             f"token counts whole numbers >= 0 ({', '.join(bad) or 'sessions/concurrency/turns'})")
        shapes.append(shape)
    return shapes


def below_bar(report: replay.Report, on_best: float, hits: float) -> list[str]:
    return [f"{name}: {share:.1%} on the best engine (bar {on_best:.0%}), {hit:.1%} of ideal hits (bar {hits:.0%})"
            for name, share, hit, *_ in report.rows
            if name in BAR_SHAPES and (share < on_best or hit < hits)]


def check(args: argparse.Namespace, name: str, cfg, report: replay.Report) -> int:
    """1 when --check and a bar shape is below the bar, on either track: the replay's rule engine is each engine's own
    manager turn by turn (tests/engine/test_vllm_replay.py, tests/engine_tpu/test_torchtpu_replay.py)."""
    short = below_bar(report, 0.95, 0.90)
    if not (args.check and short):
        return 0
    print(f"{name}: below the bar: " + "; ".join(short), file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("replay"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", action="append", default=[], metavar="NAME", help="stack (repeatable)")
    parser.add_argument("--stack-file", action="append", default=[], type=Path, help="stack file (repeatable)")
    parser.add_argument("--shapes", type=Path, metavar="FILE", help="a YAML list of shapes (default: the stack's)")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME", help="only this shape (repeatable)")
    parser.add_argument("--choice", choices=("rendered", "former"), default="rendered",
                        help="the routing the stack renders, or the one it rendered before the replay chose")
    parser.add_argument("--summary", action="store_true",
                        help="one line per stack: the benchmark shape's figures (what `make plan` prints)")
    parser.add_argument("--write-doc", type=Path, metavar="FILE",
                        help="rewrite the block between the replay markers of FILE (docs/capacity.md) with the tables")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the benchmark or agentic shape is below the bar (95 %% / 90 %%)")
    args = parser.parse_args(argv)
    stacks = chosen_stacks(parser, args)
    if stacks is None:
        return 2
    failed = 0
    blocks: list[str] = []
    for path in stacks:
        name = stack_name(path)
        try:
            cfg = load(path)
            shapes = read_shapes(args.shapes) if args.shapes else replay.stack_shapes(cfg)
        except (ConfigError, ValueError, OSError, yaml.YAMLError) as err:
            print(f"{name}: {err}", file=sys.stderr)
            failed = 2
            continue
        if args.summary:
            args.shape = args.shape or ["benchmark"]
        if args.shape:
            shapes = [s for s in shapes if s.name in args.shape]
        choice = getattr(replay, f"{args.choice}_choice")(cfg)
        report = replay.run(replay.deployment_for(cfg, choice), shapes)
        if args.summary:
            for shape, on_best, hits, *_ in report.rows:
                print(f"{name}: session replay ({shape}): {on_best:.1%} of turns 2..N on the engine holding the "
                      f"longest cached prefix, {hits:.1%} of ideal hit tokens ({choice.layout} endpoints, prefix "
                      f"unit {choice.hash_unit}; python -m tools replay --stack {name} for every shape)")
            failed = max(failed, check(args, name, cfg, report))
            continue
        print(f"{name} ({cfg.track}, {args.choice}: {choice.layout} endpoints, prefix unit {choice.hash_unit}, "
              f"router block {choice.router_block}, TTFT penalty {choice.penalty_ms:.0f} ms)")
        print(report.table())
        blocks += [f"{name} ({cfg.track}; {choice.layout} endpoints, prefix unit {choice.hash_unit}, router block "
                   f"{choice.router_block}, TTFT penalty {choice.penalty_ms:.0f} ms):", "", "```", report.table(),
                   "```", ""]
        failed = max(failed, check(args, name, cfg, report))
    if args.write_doc and not failed:
        write_doc(args.write_doc, blocks)
        write_doc(args.write_doc, capacity_blocks([load(path) for path in stacks], [stack_name(p) for p in stacks]),
                  CAPACITY_BEGIN, CAPACITY_END)
    return failed


BEGIN, END = "<!-- replay:begin (python -m tools replay --write-doc) -->", "<!-- replay:end -->"
CAPACITY_BEGIN, CAPACITY_END = ("<!-- prefix-capacity:begin (python -m tools replay --write-doc) -->",
                                "<!-- prefix-capacity:end -->")


def capacity_blocks(cfgs: list, names: list[str]) -> list[str]:
    """The per-shape prefix capacity tables (components/plan/prefixcache.py table), one per stack."""
    from components.plan import prefixcache

    lines: list[str] = []
    for name, cfg in zip(names, cfgs, strict=True):
        lines += [f"{name} ({cfg.track}; per engine, {prefixcache.host_chunks_per_engine(cfg):,} host chunks; router "
                  f"blocks of {prefixcache.engines.prefix_match_unit(cfg)} tokens):", "", "```",
                  prefixcache.table(cfg), "```", ""]
    return lines


def write_doc(path: Path, lines: list[str], begin: str = BEGIN, end: str = END) -> None:
    text = path.read_text()
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(head + begin + "\n" + "\n".join(lines) + end + tail)


if __name__ == "__main__":
    sys.exit(main())

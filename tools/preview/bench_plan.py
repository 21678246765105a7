"""Time `tools.preview.plan` for each stack over several runs; prints median and max (not a timed test)."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

from tools import prog
from tools.preview.plan import ROOT, discover_stacks, stack_name


def runs(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 100:
        raise argparse.ArgumentTypeError(f"{value!r}: a whole number of runs from 1 to 100")
    return int(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("bench-plan"), description=__doc__)
    parser.add_argument("--runs", type=runs, default=7, help="plans timed per stack (default %(default)s)")
    parser.add_argument("--stack", action="append", default=[], metavar="NAME",
                        help="stack to time (repeatable; default: all)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object instead of the lines: {"<stack>": {"median_s", "max_s", '
                             '"runs_s"}}')
    args = parser.parse_args(argv)
    stacks = [ROOT / f"Pulumi.{name}.yaml" for name in args.stack] or discover_stacks()
    missing = [str(p.relative_to(ROOT)) for p in stacks if not p.is_file()]
    if missing:
        print(f"{parser.prog}: error: no stack file {', '.join(missing)}", file=sys.stderr)
        return 2
    timings: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as out:
        for stack_file in stacks:
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "tools.preview.plan", "--quiet", "--stack-file",
                                       str(stack_file), "--out", out], cwd=ROOT)
                if proc.returncode:
                    print(f"{parser.prog}: the plan of {stack_name(stack_file)} failed (exit {proc.returncode}; "
                          "its error is above): nothing to time", file=sys.stderr)
                    return 1
                times.append(time.perf_counter() - start)
            median, worst = statistics.median(times), max(times)
            timings[stack_name(stack_file)] = {"median_s": round(median, 3), "max_s": round(worst, 3),
                                               "runs_s": [round(t, 3) for t in times]}
            if not args.json:
                print(f"{stack_name(stack_file)}: median {median:.2f} s, max {worst:.2f} s over {args.runs} runs")
    if args.json:
        print(json.dumps(timings, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

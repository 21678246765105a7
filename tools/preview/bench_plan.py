"""Time the offline plan of each stack over several runs, as users start it (`python -m tools plan --stack X`):
the median and max wall time, the median CPU time (user + system of the plan and every process it started) and the
load average before and after, since a wall time means little without the machine's load. Not a timed test."""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def children_cpu() -> float:
    """User + system seconds of every child this process has waited for (and of the children they waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def shown(load: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("bench-plan"), description=__doc__)
    parser.add_argument("--runs", type=runs, default=7, help="plans timed per stack (default %(default)s)")
    parser.add_argument("--stack", action="append", default=[], metavar="NAME",
                        help="stack to time (repeatable; default: all)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object instead of the lines: {"<stack>": {"median_s", "max_s", '
                             '"runs_s", "cpu_median_s", "cpu_s", "load_before", "load_after", "cores"}}')
    args = parser.parse_args(argv)
    stacks = [ROOT / f"Pulumi.{name}.yaml" for name in args.stack] or discover_stacks()
    missing = [str(p.relative_to(ROOT)) for p in stacks if not p.is_file()]
    if missing:
        print(f"{parser.prog}: error: no stack file {', '.join(missing)}", file=sys.stderr)
        return 2
    timings: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as out:
        for stack_file in stacks:
            times, cpu = [], []
            load_before = load_average()
            for _ in range(args.runs):
                start, cpu_start = time.perf_counter(), children_cpu()
                proc = subprocess.run([sys.executable, "-m", "tools", "plan", "--quiet", "--stack-file",
                                       str(stack_file), "--out", out], cwd=ROOT)
                if proc.returncode:
                    print(f"{parser.prog}: the plan of {stack_name(stack_file)} failed (exit {proc.returncode}; "
                          "its error is above): nothing to time", file=sys.stderr)
                    return 1
                times.append(time.perf_counter() - start)
                cpu.append(children_cpu() - cpu_start)
            median, worst, cpu_median = statistics.median(times), max(times), statistics.median(cpu)
            load_after = load_average()
            timings[stack_name(stack_file)] = {
                "median_s": round(median, 3), "max_s": round(worst, 3), "runs_s": [round(t, 3) for t in times],
                "cpu_median_s": round(cpu_median, 3), "cpu_s": [round(t, 3) for t in cpu],
                "load_before": load_before, "load_after": load_after, "cores": os.cpu_count()}
            if not args.json:
                print(f"{stack_name(stack_file)}: median {median:.2f} s, max {worst:.2f} s over {args.runs} runs; "
                      f"CPU median {cpu_median:.2f} s; load average {shown(load_before)} before, "
                      f"{shown(load_after)} after ({os.cpu_count()} cores)")
    if args.json:
        print(json.dumps(timings, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time `tools.preview.plan` for each stack over several runs; prints median and max (not a timed test)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from tools import prog
from tools.preview.plan import ROOT, discover_stacks, stack_name


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog("bench-plan"), description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as out:
        for stack_file in discover_stacks():
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "tools.preview.plan", "--quiet", "--stack-file", str(stack_file),
                                "--out", out], cwd=ROOT, check=True)
                times.append(time.perf_counter() - start)
            print(f"{stack_name(stack_file)}: median {statistics.median(times):.2f} s, max {max(times):.2f} s "
                  f"over {args.runs} runs")


if __name__ == "__main__":
    main()

"""The run's performance figures, printed by .ci/run after the tests (printed, never asserted: timings are noisy).

    python .ci/figures.py measure OUT.json -- COMMAND...   # run COMMAND; write its wall and CPU seconds to OUT.json
    python .ci/figures.py print [--junit FILE] [--pytest OUT.json]... [--bench-runs N]

`measure` counts the CPU time (user + system) of the whole process tree: it is the subreaper of everything COMMAND
starts (Linux prctl PR_SET_CHILD_SUBREAPER), so processes that outlive their parent (the test session's background
renders) are reaped here and counted too. `print` times the plan (`python -m tools bench-plan`), reads the pytest
figures and the slowest tests (JUnit XML), and prints them with the load average and the core count.
Standard library only."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PR_SET_CHILD_SUBREAPER = 36
REAP_TIMEOUT_S = 60
"""How long `measure` waits for processes COMMAND left running once COMMAND has ended."""


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(out: Path, argv: list[str]) -> int:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the orphans' CPU goes uncounted
    load_before, start = load_average(), time.monotonic()
    proc = subprocess.Popen(argv)
    code = proc.wait()
    wall = time.monotonic() - start
    deadline = time.monotonic() + REAP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.05)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures = {"argv": argv, "exit": code, "wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
               "user_s": round(usage.ru_utime, 2), "sys_s": round(usage.ru_stime, 2), "load_before": load_before,
               "load_after": load_average(), "cores": os.cpu_count()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    return code


def slowest(junit: Path, count: int = 10) -> list[tuple[float, str]]:
    """The `count` slowest tests of a JUnit XML report (setup + call + teardown of each)."""
    cases = ET.parse(junit).getroot().iter("testcase")
    timed = [(float(c.get("time") or 0), f"{c.get('classname', '').replace('.', '/')}.py::{c.get('name')}")
             for c in cases]
    return sorted(timed, reverse=True)[:count]


def print_figures(junit: Path | None, pytest_runs: list[Path], bench_runs: int) -> int:
    print(f"== figures (printed, not asserted): {os.cpu_count()} cores, load average {load_average()} (1, 5, 15 min)")
    for path in pytest_runs:
        if not path.is_file():
            print(f"pytest {path.name}: no figures (the run did not get that far)")
            continue
        f = json.loads(path.read_text())
        print(f"pytest ({path.stem}): wall {f['wall_s']:.1f} s, CPU {f['cpu_s']:.1f} s (user {f['user_s']:.1f} + "
              f"system {f['sys_s']:.1f}, every process of the run), exit {f['exit']}; load average "
              f"{f['load_before']} before, {f['load_after']} after")
    if junit is not None and junit.is_file():
        print("ten slowest tests (setup + call + teardown, s):")
        for seconds, test in slowest(junit):
            print(f"  {seconds:7.2f}  {test}")
    bench = subprocess.run([sys.executable, "-m", "tools", "bench-plan", "--runs", str(bench_runs), "--json"],
                           cwd=ROOT, capture_output=True, text=True)
    if bench.returncode:
        print(f"bench-plan failed (exit {bench.returncode}):\n{bench.stderr}")
        return bench.returncode
    for stack, t in json.loads(bench.stdout).items():
        print(f"plan {stack} (bench-plan, {len(t['runs_s'])} runs): median {t['median_s']:.2f} s, max "
              f"{t['max_s']:.2f} s, CPU median {t['cpu_median_s']:.2f} s; load average "
              f"{' '.join(f'{x:.2f}' for x in t['load_before'])} before, "
              f"{' '.join(f'{x:.2f}' for x in t['load_after'])} after")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["measure"]:
        if len(argv) < 4 or argv[2] != "--":
            print("usage: figures.py measure OUT.json -- COMMAND...", file=sys.stderr)
            return 2
        return measure(Path(argv[1]), argv[3:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["print"])
    parser.add_argument("--junit", type=Path)
    parser.add_argument("--pytest", type=Path, action="append", default=[], metavar="OUT.json")
    parser.add_argument("--bench-runs", type=int, default=5)
    args = parser.parse_args(argv)
    return print_figures(args.junit, args.pytest, args.bench_runs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

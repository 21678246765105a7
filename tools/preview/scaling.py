"""Replay a step and a diurnal load trace through a stack's autoscaling (components/plan/autoscaling.py: the HPA
algorithm KEDA drives, each role's time to add a step, drain before scale-down) and write report.md with a table per
trace and scaling.png (replicas, queue and cost over time), in the benchmark report's layout. Offline; no cloud.

    python -m tools scaling --stack tpu                      # Pulumi.tpu.yaml
    python -m tools scaling --stack-file tests/stacks/Pulumi.tpu4.yaml --out build/scaling
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from components.config import ConfigError, StackConfig, parse_config
from components.plan import autoscaling
from tools import prog
from tools.preview.plan import ROOT, stack_name
from tools.preview.render import project_file, stack_config

NS = "kimi-k3-1:"


def load(path: Path) -> StackConfig:
    config, _ = stack_config(path, project_file())
    return parse_config({k[len(NS):]: v for k, v in config.items() if k.startswith(NS)}, stack_name(path))


def report(cfg: StackConfig, title: str) -> tuple[list[str], list[autoscaling.TrackResult]]:
    """report.md's lines and the replays behind them."""
    results = [autoscaling.simulate_track(cfg, trace) for trace in autoscaling.standard_traces(cfg)]
    lines = [f"# Autoscaling replay: {title}", "", *autoscaling.envelope_lines(cfg), "",
             f"Session length {autoscaling.SESSION_S // 60} min (assumed); HPA sync {autoscaling.HPA_SYNC_S} s, "
             f"tolerance {autoscaling.HPA_TOLERANCE:g}; drain grace {autoscaling.drain_grace_s() // 60} min.", ""]
    for result in results:
        lines += [f"## {result.trace.name}", "", autoscaling.summary_line(result), "", *autoscaling.table(result), ""]
    return lines, results


def plot(results: list[autoscaling.TrackResult], out: Path) -> str:
    """Replicas set and ready per role, sessions queued, and accelerator VMs in use, one column per trace."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, len(results), figsize=(7 * len(results), 9), squeeze=False)
    for col, result in enumerate(results):
        hours = [row.t / 3600 for row in result.roles[0].rows]
        top, mid, low = axes[0][col], axes[1][col], axes[2][col]
        for role in result.roles:
            top.step(hours, [r.replicas for r in role.rows], where="post", label=f"{role.role.name} set")
            top.step(hours, [r.ready for r in role.rows], where="post", linestyle="--",
                     label=f"{role.role.name} ready")
        top.set_title(result.trace.name)
        top.set_ylabel("replicas")
        top.legend(fontsize=8)
        serving = next(r for r in result.roles if r.role.name != "prefill")
        mid.plot(hours, [r.demand for r in serving.rows], label="sessions wanted")
        mid.plot(hours, [r.running for r in serving.rows], label="running")
        mid.plot(hours, [r.queued for r in serving.rows], label="queued (flow control)")
        mid.set_ylabel("sessions")
        mid.legend(fontsize=8)
        vms = [sum(role.rows[i].in_use * role.role.nodes_per_replica for role in result.roles)
               for i in range(len(hours))]
        low.step(hours, vms, where="post", label="autoscaled")
        low.axhline(sum(r.role.max * r.role.nodes_per_replica for r in result.roles), color="grey",
                    linestyle=":", label="fixed at the maximum")
        low.set_ylabel("accelerator VMs in use" + ("" if result.accelerator_hour_usd is None else
                                                   f" (x ${result.accelerator_hour_usd:,.2f}/h)"))
        low.set_xlabel("hours")
        low.legend(fontsize=8)
        for ax in (top, mid, low):
            ax.grid(alpha=0.3)
    fig.tight_layout()
    name = "scaling.png"
    fig.savefig(out / name, dpi=80)
    plt.close(fig)
    return name


def chosen_stacks(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[Path] | None:
    """The stack files `--stack` and `--stack-file` name (a usage error when none is named), or None after one line
    naming the files that do not exist. Shared with the replay command."""
    stacks = [ROOT / f"Pulumi.{name}.yaml" for name in args.stack] + [p.resolve() for p in args.stack_file]
    if not stacks:
        parser.error("name a stack (--stack or --stack-file)")
    missing = [str(p) for p in stacks if not p.is_file()]
    if missing:
        print(f"{parser.prog}: error: no stack file {', '.join(missing)}", file=sys.stderr)
        return None
    return stacks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("scaling"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", action="append", default=[], metavar="NAME", help="stack (repeatable)")
    parser.add_argument("--stack-file", action="append", default=[], type=Path, help="stack file (repeatable)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "scaling", metavar="FOLDER",
                        help="output folder; one subfolder per stack (default: build/scaling)")
    parser.add_argument("--no-plot", action="store_true", help="write report.md only")
    args = parser.parse_args(argv)
    stacks = chosen_stacks(parser, args)
    if stacks is None:
        return 2
    failed = 0
    for path in stacks:
        name = stack_name(path)
        try:
            cfg = load(path)
            lines, results = report(cfg, name)
        except ConfigError as err:
            print(f"{name}: {err}", file=sys.stderr)
            failed = 1
            continue
        folder = args.out / name
        folder.mkdir(parents=True, exist_ok=True)
        if not args.no_plot:
            lines += [f"![replicas, queue and accelerators over time]({plot(results, folder)})", ""]
        (folder / "report.md").write_text("\n".join(lines))
        print(f"{name}: {folder / 'report.md'}")
        for result in results:
            print(f"  {autoscaling.summary_line(result)}")
    return failed

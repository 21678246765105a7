"""Know before you spend: ask Google Cloud and the Hugging Face Hub, read-only, whether this stack can come up,
then print what it costs per hour, how long it takes to serve, and what a failed `pulumi up` would have cost at
the step it would have failed. One line per check (components/checks/preflight.py has the checks and their endpoints).

Credentials: GOOGLE_OAUTH_ACCESS_TOKEN, else Application Default Credentials (`gcloud auth application-default
login`); the Hub token from HF_TOKEN (e.g. `export HF_TOKEN=$(pulumi config get hfToken -s gpu)`).
Exit 0: every check passed; 1: a check failed (its line says what to change); 2: no stack file, no plan or no
Google credentials.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from components.checks import preflight
from components.config import PROJECT, ConfigError, StackConfig, parse_config
from components.facts import prices
from components.plan import cost, timeline
from tools import prog
from tools.live.core import EXIT_FAILED, EXIT_OK, EXIT_USAGE, bounded_number

ROOT = Path(__file__).resolve().parents[2]


def load(stack_file: Path) -> StackConfig:
    """The stack's config as `pulumi up` hands it to the program (tools/preview/render.py's reading)."""
    from tools.preview import render

    values, _ = render.stack_config(stack_file, render.project_file())
    prefix = f"{PROJECT}:"
    return parse_config({k[len(prefix):]: v for k, v in values.items() if k.startswith(prefix)},
                        stack_file.name[len("Pulumi."):-len(".yaml")])


def plan_resources(stack_file: Path, plan: Optional[Path]) -> list[dict[str, Any]]:
    """resources.json of a plan folder, or the stack rendered now (the offline plan: no cloud)."""
    if plan is not None:
        return json.loads((plan / "resources.json").read_text())
    from tools.preview import render

    return render.render(stack_file.resolve())["resources"]


def failed_up_cost(cfg: StackConfig, resources: list[dict[str, Any]], step: str,
                   mine: preflight.Held = preflight.NOTHING_HELD) -> Optional[str]:
    """Where `pulumi up` would have stopped for a failed check, and what it had spent by then: every node pool and
    the cluster that finished before that resource's step ends, billed from their finish (components/plan/timeline.py
    durations). What it leaves billing counts every pool it created, priced or not, and on a later `up` the nodes the
    cluster already holds (`mine`, preflight.held), which bill whatever this `up` does."""
    def duration(r: dict[str, Any], start: float, finish: dict[str, float]) -> float:
        return timeline.step(cfg, r).seconds

    finish, _ = timeline.finish_times(resources, duration)
    hit = [r for r in resources if r["name"] == step] or [r for r in resources if r["name"].startswith(f"{step}-")]
    if not hit:
        return None
    # The failure surfaces when the resource's own step ends (a pool that cannot get its hosts is reported once
    # GKE gives up on it, while the other pools come up beside it).
    ends = {r["name"]: finish[r["name"]] for r in hit}
    at_name = min(ends, key=ends.get)
    at = ends[at_name]
    spent, rate, unpriced = cost.spend_until(cfg, resources, at, finish, skip=at_name)
    left_out = f" + {cost.unpriced_nodes(resources, unpriced)} unpriced" if unpriced else ""
    hint = f" (set kimi-k3-1:cost.{cfg.track}{'Node' if cfg.track == 'gpu' else 'Chip'}HourUsd to price them)" \
        if unpriced else ""
    line = (f"`pulumi up` would fail at {at_name} about {at / 60:.1f} min in, having spent ${spent:,.2f}{left_out}; "
            f"what it created bills ${rate:,.2f}/h{left_out} until `pulumi destroy`{hint}")
    if mine.any:
        # A later up: the pools the cluster holds bill already and are not created again. Per machine type, what
        # bills after the failure is the larger of what it holds and what the plan's pools up to then hold.
        created: dict[str, int] = {}
        for r in resources:
            if r["type"] == cost.BILLED_TYPES[1] and r["name"] != at_name and finish[r["name"]] <= at:
                nodes, machine = cost.pool_nodes(r)
                created[machine] = created.get(machine, 0) + nodes
        after = {m: max(created.get(m, 0), mine.nodes.get(m, 0)) for m in {**created, **mine.nodes}}
        after_rate, after_unpriced = cost.held_rate(cfg, after)
        holds = " + ".join(f"{n} {m}" for m, n in mine.nodes.items())
        unpriced_after = " + ".join(f"{n} {m} nodes" for m, n in after_unpriced.items())
        line += (f"; this cluster already holds {holds} nodes, so after the failure the stack bills "
                 f"${after_rate + prices.GKE_CLUSTER_HOUR.usd:,.2f}/h"
                 + (f" + {unpriced_after} unpriced" if unpriced_after else "") + " in all")
    return line


def main(argv: Sequence[str] | None = None, google: Optional[preflight.Google] = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("preflight"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", metavar="NAME", help="the stack (Pulumi.<NAME>.yaml)")
    parser.add_argument("--stack-file", type=Path, help="a stack file instead of --stack")
    parser.add_argument("--plan", type=Path, metavar="FOLDER",
                        help="a plan folder of this stack (build/plan/<stack>); default: render it now")
    parser.add_argument("--request-timeout", type=bounded_number(float, 0, 600, above_low=True),
                        default=preflight.REQUEST_TIMEOUT_S, metavar="SECONDS",
                        help=f"limit on each Google or Hub request (default {preflight.REQUEST_TIMEOUT_S:g})")
    args = parser.parse_args(argv)
    if bool(args.stack) == bool(args.stack_file):
        parser.error("give --stack NAME or --stack-file PATH")
    stack_file = args.stack_file or ROOT / f"Pulumi.{args.stack}.yaml"
    stack = args.stack or stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml")
    if not stack_file.is_file():
        print(f"error: no stack file {stack_file}", file=sys.stderr)
        return EXIT_USAGE
    if args.plan is not None and not (args.plan / "resources.json").is_file():
        print(f"error: no plan in {args.plan} (run: python -m tools plan --stack {stack})", file=sys.stderr)
        return EXIT_USAGE
    try:
        cfg = load(stack_file)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    if google is None:
        try:
            google = preflight.Google.from_environment(cfg.gcp.project, args.request_timeout)
        except Exception as err:  # google.auth.exceptions.DefaultCredentialsError and the like
            print(f"error: no Google credentials ({str(err).splitlines()[0][:160]}): run `gcloud auth "
                  f"application-default login` or set {preflight.TOKEN_ENV}", file=sys.stderr)
            return EXIT_USAGE
    checks = preflight.check_local(cfg) + preflight.check_google(google, cfg, stack)
    checks += preflight.check_hub(cfg, os.environ.get("HF_TOKEN"), os.environ.get("HF_ENDPOINT"),
                                  args.request_timeout)
    for check in checks:
        print(check.line())
    resources = plan_resources(stack_file, args.plan)
    path = timeline.critical_path(cfg, resources)
    print(f"cost: {cost.headline(cost.hourly_costs(cfg))} while it runs (list prices of {prices.TABLE_DATE})")
    print(f"time to serving: {path.serving_s / 60:.1f} min after `pulumi up` starts (first up, bucket empty)")
    failed = [c for c in checks if not c.ok]
    mine = preflight.NOTHING_HELD
    if failed:
        with contextlib.suppress(preflight.ApiError):
            mine = preflight.held(google, cfg)
    for step in dict.fromkeys(c.step for c in failed if c.step):
        line = failed_up_cost(cfg, resources, step, mine)
        if line:
            print(line)
    if failed:
        print(f"preflight: {len(failed)} check(s) failed; fix them before `pulumi up`")
        return EXIT_FAILED
    print(f"preflight: all {len(checks)} checks passed")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

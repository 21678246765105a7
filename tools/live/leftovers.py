"""What a stack left behind: everything still labelled `pulumi-stack=<stack>`, plus the unlabelled NEGs
and Cloud NAT routers of its VPC. Run by `tools.live.bench` after its destroy and by the teardown workflow.

    python -m tools leftovers --stack gpu [--project P] [--network N]

Exit 0 when nothing billable is left (the checkpoint bucket a destroy keeps by design does not count),
1 when something is left or a listing failed. --project and --network default to the stack's config
(`gcp.project`, `cluster.name` or kimi-k3-1-<track>), read with `pulumi config get`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from components import catalog
from components.naming import label_value
from tools import prog
from tools.live.core import EXIT_FAILED, EXIT_OK, EXIT_USAGE, StepError, run_command, tail

PROJECT = catalog.GUIDE_NAME
LISTING_TIMEOUT_SECONDS = 120.0
"""Each gcloud listing gets this long; a hung call fails the check instead of stalling the teardown."""


class LeftoverCheckError(Exception):
    """Some leftover listings failed: `found` holds what the others found."""

    def __init__(self, message: str, found: Sequence[str]):
        super().__init__(message)
        self.found = list(found)


def leftover_commands(stack_label: str, project: str | None = None,
                      network: str | None = None) -> list[tuple[str, list[str]]]:
    """Every gcloud listing of the leftover check: (what, argv). The one place these commands live."""
    by_label = f"labels.pulumi-stack={stack_label}"
    proj = [f"--project={project}"] if project else []
    compute = [
        ("VM instance", "instances", "value(name,zone.basename(),status)"),
        ("disk", "disks", "value(name,zone.basename(),sizeGb,type.basename())"),
        ("forwarding rule", "forwarding-rules", "value(name,region.basename(),IPAddress)"),
        ("IP address", "addresses", "value(name,region.basename(),address)"),
    ]
    commands = [(what, ["gcloud", "compute", group, "list", f"--filter={by_label}", f"--format={fmt}", *proj])
                for what, group, fmt in compute]
    commands += [
        ("GKE cluster", ["gcloud", "container", "clusters", "list",
                         f"--filter=resourceLabels.pulumi-stack={stack_label}", "--format=value(name,location,status)",
                         *proj]),
        ("bucket", ["gcloud", "storage", "buckets", "list", f"--filter={by_label}", "--format=value(name)", *proj]),
    ]
    if network:  # NEGs and Cloud Routers (NAT) carry no labels: matched by the stack's VPC (named like the cluster)
        in_vpc = f"--filter=network~/networks/{network}$"
        commands += [
            ("NEG", ["gcloud", "compute", "network-endpoint-groups", "list", in_vpc,
                     "--format=value(name,zone.basename(),size)", *proj]),
            ("Cloud Router (NAT)", ["gcloud", "compute", "routers", "list", in_vpc,
                                    "--format=value(name,region.basename())", *proj]),
        ]
    return commands


Runner = Callable[[Sequence[str], float], str]


class GcloudBilling:
    """The leftover listings through gcloud, each bounded in time."""

    def __init__(self, run: Runner = lambda argv, timeout: run_command(argv, timeout)):
        self._run = run

    def leftovers(self, stack_label: str, project: str | None = None, network: str | None = None) -> list[str]:
        found, failed = [], []
        for what, argv in leftover_commands(stack_label, project, network):
            try:
                out = self._run(argv, LISTING_TIMEOUT_SECONDS)
            except StepError as err:
                failed.append(f"{what}: {tail(str(err), 2)}")
                continue
            found += [f"{what}: {' '.join(line.split())}" for line in out.splitlines() if line.strip()]
        if failed:
            raise LeftoverCheckError("; ".join(failed), found)
        return found


def split_kept_bucket(lines: Sequence[str], bucket: str | None) -> tuple[list[str], list[str]]:
    """(left, kept): the checkpoint bucket a destroy keeps by design is not a leftover."""
    names = {bucket, f"gs://{bucket}", f"gs://{bucket}/"} if bucket else set()
    kept = [line for line in lines if line.split(": ", 1)[-1].strip() in names]
    return [line for line in lines if line not in kept], kept


def _config(stack: str, key: str) -> str | None:
    try:
        return run_command(["pulumi", "config", "get", f"{PROJECT}:{key}", "--stack", stack], 60).strip() or None
    except StepError:
        return None


def main(argv: Sequence[str] | None = None, billing: GcloudBilling | None = None,
         config: Callable[[str, str], str | None] = _config) -> int:
    parser = argparse.ArgumentParser(prog=prog("leftovers"), description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", required=True, metavar="NAME", help="the destroyed stack (Pulumi.<NAME>.yaml)")
    parser.add_argument("--project", help="default: the stack's gcp.project")
    parser.add_argument("--network", help="the stack's VPC (default: cluster.name or kimi-k3-1-<track>)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the lines: stack, label, project, leftovers, kept, "
                             "complete (false when a listing failed), problem")
    args = parser.parse_args(argv)
    project = args.project or config(args.stack, "gcp.project")
    if not project:
        print(f"no --project and no {PROJECT}:gcp.project in stack {args.stack}", file=sys.stderr)
        return EXIT_USAGE
    network = args.network or config(args.stack, "cluster.name") or \
        f"{PROJECT}-{config(args.stack, 'track') or args.stack}"
    keeps = (config(args.stack, "storage.deleteCheckpointOnDestroy") or "false").lower() != "true"
    bucket = (config(args.stack, "storage.bucketName") or f"{project}-{PROJECT}-weights") if keeps else None
    label = label_value(args.stack)
    problem = None
    try:
        found = (billing or GcloudBilling()).leftovers(label, project, network)
    except LeftoverCheckError as err:
        found, problem = err.found, str(err)
    left, kept = split_kept_bucket(found, bucket)
    code = EXIT_FAILED if left or problem else EXIT_OK
    if args.json:
        print(json.dumps({"stack": args.stack, "label": label, "project": project, "leftovers": left, "kept": kept,
                          "complete": problem is None, "problem": problem}, indent=2))
        return code
    if problem:
        print(f"could not check everything: {problem}")
    for line in kept:
        print(f"    {line}  (kept by design: the checkpoint copy; storage.deleteCheckpointOnDestroy=false)")
    for line in left:
        print(f"    {line}")
    if left:
        print(f"{len(left)} resource(s) still billable under pulumi-stack={label}")
    elif not problem:
        print(f"nothing billable left under pulumi-stack={label}")
    return code

if __name__ == "__main__":
    sys.exit(main())

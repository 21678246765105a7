"""What a stack left behind: everything still labelled `pulumi-stack=<stack>`, plus the unlabelled NEGs
and Cloud NAT routers of its VPC. Run by `tools.live.bench` after its destroy and by the teardown workflow.

    python -m tools leftovers --stack gpu [--project P] [--network N]

Exit 0 when nothing billable is left (the checkpoint bucket a destroy keeps by design does not count),
1 when something is left or a listing failed, 2 when gcloud is missing or has no login (one line, in seconds).
--project and --network default to the stack's config (`gcp.project`, `cluster.name` or kimi-k3-1-<stack>), read
from `Pulumi.<stack>.yaml` as the Pulumi CLI reads it, or with `pulumi config get` where there is no such file.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from components.config import default_cluster_name
from components.facts import catalog
from components.plan.naming import label_value
from tools import prog
from tools.live.core import EXIT_FAILED, EXIT_OK, EXIT_USAGE, StepError, run_command, tail

PROJECT = catalog.GUIDE_NAME
LISTING_TIMEOUT_SECONDS = 120.0
"""Each gcloud listing gets this long; a hung call fails the check instead of stalling the teardown. The listings
run side by side, so the whole check takes about as long as the slowest one."""
LOGIN_TIMEOUT_SECONDS = 10.0
"""`gcloud auth list` reads local files only: asked first, so a missing login is one line in seconds instead of
the same hint from every listing."""
ROOT = Path(__file__).resolve().parents[2]
CREDENTIAL_OVERRIDES = ("CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE", "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE",
                        "CLOUDSDK_AUTH_ACCESS_TOKEN")
"""gcloud's properties (auth/credential_file_override, auth/access_token_file) set by variable: gcloud uses them
without an active account (https://cloud.google.com/sdk/gcloud/reference/topic/configurations)."""


class LeftoverCheckError(Exception):
    """Some leftover listings failed: `found` holds what the others found."""

    def __init__(self, message: str, found: Sequence[str]):
        super().__init__(message)
        self.found = list(found)


class GcloudUnavailableError(LeftoverCheckError):
    """gcloud cannot list anything here (not installed, no login): nothing was listed."""

    def __init__(self, message: str):
        super().__init__(message, [])


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
        # The TPU engine image's repository (components/serving/engineimage.py), in any location
        # (https://cloud.google.com/sdk/gcloud/reference/artifacts/repositories/list: --location=all).
        ("Artifact Registry repository", ["gcloud", "artifacts", "repositories", "list", "--location=all",
                                          f"--filter={by_label}", "--format=value(name)", *proj]),
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

    def logged_in(self) -> None:
        """GcloudUnavailableError unless gcloud runs and has an active account. Credentials handed to gcloud by
        variable (what google-github-actions/auth sets in CI) are not listed as an account, so they skip the ask."""
        import os

        if any(os.environ.get(name) for name in CREDENTIAL_OVERRIDES):
            return
        try:
            accounts = self._run(["gcloud", "auth", "list", "--filter=status:ACTIVE", "--format=value(account)"],
                                 LOGIN_TIMEOUT_SECONDS)
        except StepError as err:
            if "No such file" in str(err) or "not found" in str(err):
                raise GcloudUnavailableError("gcloud is not on PATH: install the Google Cloud CLI "
                                        "(https://cloud.google.com/sdk/docs/install)") from None
            raise GcloudUnavailableError(f"gcloud does not answer: {tail(str(err), 1)}") from None
        if not accounts.strip():
            raise GcloudUnavailableError("gcloud has no active account: run `gcloud auth login` (the listings use "
                                    "gcloud's own login, not application-default credentials)")

    def leftovers(self, stack_label: str, project: str | None = None, network: str | None = None) -> list[str]:
        self.logged_in()
        commands = leftover_commands(stack_label, project, network)

        def listing(command: tuple[str, list[str]]) -> tuple[list[str], str | None]:
            what, argv = command
            try:
                out = self._run(argv, LISTING_TIMEOUT_SECONDS)
            except StepError as err:
                return [], tail(str(err).removeprefix(f"{' '.join(argv[:3])}: "), 2)
            return [f"{what}: {' '.join(line.split())}" for line in out.splitlines() if line.strip()], None

        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            results = list(pool.map(listing, commands))
        found = [line for lines, _ in results for line in lines]
        failed: dict[str, list[str]] = {}  # the same error from several listings is said once
        for (what, _), (_, problem) in zip(commands, results, strict=True):
            if problem:
                failed.setdefault(problem, []).append(what)
        if failed:
            raise LeftoverCheckError("; ".join(f"{', '.join(whats)}: {problem}" for problem, whats in failed.items()),
                                     found)
        return found


def item_lines(left: Sequence[str], kept: Sequence[str]) -> list[str]:
    """The report's lines for what a destroy left, the bucket it keeps by design first (leftovers and reap)."""
    return ([f"    {line}  (kept by design: the checkpoint copy; storage.deleteCheckpointOnDestroy=false)"
             for line in kept] + [f"    {line}" for line in left])


def split_kept_bucket(lines: Sequence[str], bucket: str | None) -> tuple[list[str], list[str]]:
    """(left, kept): the checkpoint bucket a destroy keeps by design is not a leftover."""
    names = {bucket, f"gs://{bucket}", f"gs://{bucket}/"} if bucket else set()
    kept = [line for line in lines if line.split(": ", 1)[-1].strip() in names]
    return [line for line in lines if line not in kept], kept


class ConfigUnavailableError(Exception):
    """The stack's config cannot be read here: one line saying why and what to give instead."""


def _config(stack: str, key: str) -> str | None:
    """A key of the stack's config: from Pulumi.<stack>.yaml as the CLI reads it (defaults merged in), else from the
    Pulumi CLI (a stack whose file lives elsewhere); ConfigUnavailableError when neither can answer."""
    from tools.preview import stack_file

    path = ROOT / f"Pulumi.{stack}.yaml"
    if path.is_file():
        try:
            project, schema = stack_file.project_config(ROOT / "Pulumi.yaml")
            return stack_file.load_stack(path, project, schema).values.get(f"{PROJECT}:{key}") or None
        except stack_file.StackFileError as err:
            raise ConfigUnavailableError(f"{err}") from None
    if shutil.which("pulumi") is None:
        raise ConfigUnavailableError(f"no {path.name} here and the pulumi CLI is not on PATH, so the stack's config "
                                f"cannot be read: give --project (and --network)")
    try:
        return run_command(["pulumi", "config", "get", f"{PROJECT}:{key}", "--stack", stack], 60).strip() or None
    except StepError:
        return None


def main(argv: Sequence[str] | None = None, billing: GcloudBilling | None = None,
         config: Callable[[str, str], str | None] = _config) -> int:
    parser = argparse.ArgumentParser(prog=prog("leftovers"), description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", required=True, metavar="NAME", help="the destroyed stack (Pulumi.<NAME>.yaml)")
    parser.add_argument("--project", help="default: the stack's gcp.project")
    parser.add_argument("--network", help="the stack's VPC (default: cluster.name or kimi-k3-1-<stack>)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the lines: stack, label, project, leftovers, kept, "
                             "complete (false when a listing failed), problem")
    args = parser.parse_args(argv)
    try:
        project = args.project or config(args.stack, "gcp.project")
        if not project:
            print(f"no --project and no {PROJECT}:gcp.project in stack {args.stack}", file=sys.stderr)
            return EXIT_USAGE
        network = args.network or config(args.stack, "cluster.name") or default_cluster_name(args.stack)
        keeps = (config(args.stack, "storage.deleteCheckpointOnDestroy") or "false").lower() != "true"
        bucket = (config(args.stack, "storage.bucketName") or f"{project}-{PROJECT}-weights") if keeps else None
    except ConfigUnavailableError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    label = label_value(args.stack)
    problem = None
    try:
        found = (billing or GcloudBilling()).leftovers(label, project, network)
    except GcloudUnavailableError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
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
    for line in item_lines(left, kept):
        print(line)
    if left:
        print(f"{len(left)} resource(s) still billable under pulumi-stack={label}")
    elif not problem:
        print(f"nothing billable left under pulumi-stack={label}")
    return code

if __name__ == "__main__":
    sys.exit(main())

"""Destroy every benchmark stack whose claim is past its deadline: the driver that claimed it stopped renewing
(killed, its runner lost), so nobody else will. Runs from the teardown workflow every 15 minutes, needs no list
of stacks (the claims say which), and reports what is left through `leftovers`, as the driver does.

    python -m tools reap [--work-dir .] [--dry-run] [--destroy-timeout 5400]

The claims live beside the state (tools/live/claims.py). Before destroying, the reaper takes the claim over
under a run id of its own with the same compare-and-set (a driver that renewed meanwhile keeps its stack; a
driver that wakes up later can neither renew nor remove the reaper's claim), and it removes the claim only
after the destroy finished and the leftover listing was complete; otherwise the claim stays, expires after
--destroy-timeout, and the next pass tries again. A claim it cannot read is never taken for expired: it is named
and left alone. Exit: 0 nothing expired or every expired stack destroyed with nothing left; 1 otherwise (an
unreadable claim included); 2 the claims could not be listed (no Pulumi CLI, no backend).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from components.config import default_cluster_name
from components.plan.naming import label_value
from tools import prog
from tools.live.claims import Claim, ClaimStore, TagClaims, deadline, store_for
from tools.live.core import bounded_number, tail
from tools.live.leftovers import GcloudBilling, LeftoverCheckError, item_lines, split_kept_bucket
from tools.live.pulumi_stack import (
    CLUSTER_NAME_KEY,
    DELETE_CHECKPOINT_KEY,
    GCP_PROJECT_KEY,
    PROJECT,
    UNREACHABLE_ENV,
    AutomationBackend,
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog("reap"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, default=Path("."), help="the Pulumi project folder (default .)")
    parser.add_argument("--dry-run", action="store_true", help="list the expired claims, destroy nothing")
    parser.add_argument("--destroy-timeout", type=bounded_number(float, 1, 86400), default=5400.0,
                        metavar="SECONDS", help="how long the reaper holds a claim while it destroys (default "
                                                "%(default)s)")
    return parser.parse_args(argv)


def _store(work_dir: Path) -> tuple[ClaimStore | None, Any]:
    from pulumi import automation as auto  # noqa: PLC0415 - only when reaping

    workspace = auto.LocalWorkspace(work_dir=str(work_dir.resolve()))
    return store_for(workspace.who_am_i().url, PROJECT), workspace


def all_claims(work_dir: Path) -> list[tuple[ClaimStore, Claim]]:
    store, workspace = _store(work_dir)
    if store is not None:
        return [(store, claim) for claim in store.all()]
    found: list[tuple[ClaimStore, Claim]] = []
    for summary in workspace.list_stacks():  # Pulumi Cloud: the claim is each stack's tags
        backend = AutomationBackend(work_dir)
        backend.select_or_create(summary.name)
        tags = TagClaims(backend.get_tag, backend.set_tag, summary.name, PROJECT, str(work_dir.resolve()))
        found += [(tags, claim) for claim in tags.all()]
    return found


def expired_claims(work_dir: Path, now: datetime) -> list[tuple[ClaimStore, Claim]]:
    return [(store, claim) for store, claim in all_claims(work_dir) if claim.expired(now)]


def reap(work_dir: Path, out: Callable[[str], None] = print, dry_run: bool = False,
         destroy_timeout: float = 5400.0, billing: Any = None, now: Callable[[], datetime] = lambda: datetime.now(UTC),
         claims: Callable[[Path], list[tuple[ClaimStore, Claim]]] = all_claims) -> int:
    try:
        found = claims(work_dir)
    except Exception as err:  # noqa: BLE001 - no Pulumi CLI, no backend, no access: one line
        out(f"reap: FAILED to list the benchmark claims of {work_dir}: {_reason(err)}")
        return 2
    unreadable = [(store, claim) for store, claim in found if claim.unreadable]
    for store, claim in unreadable:
        out(f"==> stack {claim.stack}: its claim cannot be read ({claim.unreadable}; {store.where(claim.stack)}): "
            "not reaped, since it may be a live run's. If no run holds the stack, remove it with "
            f"`{store.release_command(claim.stack)}`; the next pass then leaves the stack alone too")
    expired = [(store, claim) for store, claim in found if claim.expired(now())]
    if not expired:
        out("reap: no benchmark stack is past its claim's deadline")
        return 1 if unreadable else 0
    failed = len(unreadable)
    reaper = f"reaper-{uuid.uuid4().hex[:12]}"
    for store, claim in expired:
        where = store.where(claim.stack)
        out(f"==> stack {claim.stack}: claim of run {claim.run} expired at {claim.deadline} ({where})")
        if dry_run:
            continue
        try:  # take it over under the reaper's own run id, or leave a renewed one alone
            held = store.take_over(claim, reaper, deadline(now(), destroy_timeout))
        except Exception as err:  # noqa: BLE001 - one line; the next pass tries again
            out(f"    could not take the claim over: {_reason(err)}; left alone")
            failed += 1
            continue
        if held is None:
            out("    the claim changed meanwhile (its driver renewed it, or another reaper took it): left alone")
            continue
        if not _destroy_and_list(work_dir, claim.stack, out, billing or GcloudBilling()):
            failed += 1
            out(f"    the claim stays ({where}); the next pass tries again")
            continue
        try:
            released = store.remove(held)
        except Exception as err:  # noqa: BLE001 - the stack is gone; the claim expires and the next pass finds nothing
            released, why = False, _reason(err)
        else:
            why = "it changed meanwhile"
        out("    destroyed, nothing billable left; " + (f"released the claim of run {claim.run}" if released else
            f"could not release the claim ({why}): remove it with `{store.release_command(claim.stack)}`"))
    return 1 if failed else 0


def _reason(err: BaseException) -> str:
    """One line for an error of the Pulumi CLI, the Automation API or a store."""
    if isinstance(err, OSError) and err.filename:
        return f"{err.strerror or type(err).__name__}: {err.filename}"
    return tail(" ".join(str(err).split()) or type(err).__name__, 1)[:300]


def _destroy_and_list(work_dir: Path, stack: str, out: Callable[[str], None], billing: Any) -> bool:
    backend = AutomationBackend(work_dir)
    try:
        backend.select_or_create(stack)
        project = backend.get_config(GCP_PROJECT_KEY)
        network = backend.get_config(CLUSTER_NAME_KEY) or default_cluster_name(stack)
        keep = (backend.get_config(DELETE_CHECKPOINT_KEY) or "false").lower() != "true"
        kept = (backend.outputs().get("bucketUri") or "").removeprefix("gs://") or None if keep else None
        out(f"--> pulumi destroy --stack {stack} --refresh")
        try:
            backend.destroy(lambda line: out(f"    {line}"), {})
        except Exception as err:  # noqa: BLE001 - an abandoned run's cluster may be half gone: once more
            out(f"    destroy failed ({tail(str(err), 1)}); once more with PULUMI_K8S_DELETE_UNREACHABLE=true")
            backend.destroy(lambda line: out(f"    {line}"), UNREACHABLE_ENV)
    except Exception as err:  # noqa: BLE001 - one line, the claim stays for the next pass
        out(f"    FAILED destroy of {stack}: {tail(str(err), 3)}")
        return False
    out(f"==> leftovers (pulumi-stack={label_value(stack)})")
    try:
        left, by_design = split_kept_bucket(list(billing.leftovers(label_value(stack), project, network)), kept)
    except LeftoverCheckError as err:
        out(f"    could not check everything: {err}")
        return False
    except Exception as err:  # noqa: BLE001 - gcloud missing or not logged in: one line, the claim stays
        out(f"    could not list leftovers: {tail(str(err), 1)}")
        return False
    for line in item_lines(left, by_design):
        out(line)
    if left:
        out(f"    {len(left)} resource(s) still billable under pulumi-stack={label_value(stack)}")
    return not left


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("pulumi") is None:
        print("reap: FAILED: the Pulumi CLI is not on PATH; the claims and stacks are read through it "
              "(install it: https://www.pulumi.com/docs/iac/download-install/)")
        return 2
    return reap(args.work_dir, dry_run=args.dry_run, destroy_timeout=args.destroy_timeout)


if __name__ == "__main__":
    sys.exit(main())

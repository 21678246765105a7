"""Stacks as independent units: every stack of the project, of either track, planned side by side in one Google
Cloud project and one region, holds no cloud name and no IAM binding another stack holds, but the checkpoint bucket
every stack shares on purpose (issue 48)."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest

from components.config import default_cluster_name
from components.plan.naming import label_value
from tests.conftest import Plan
from tools.live.leftovers import leftover_commands

NAME_KEYS = ("name", "accountId", "repositoryId", "displayName")
"""Inputs that name a Google Cloud object within its project (or, for display names, to a reader of the console)."""
NAMED_IN_PARENT = ("gcp:container/nodePool:NodePool", "gcp:compute/routerNat:RouterNat")
"""Named within their cluster or Cloud Router, so their names need no stack part (a NAT of stack `gpu-staging`
may share the name of stack `gpu`'s staging NAT: they live in different routers)."""
BUCKET = "gcp:storage/bucket:Bucket"


def cloud_objects(plan: Plan) -> dict[str, str]:
    """What a stack holds in the project, each as one key -> the resource it comes from. An IAM binding is its role,
    member and condition title: IAM removes a binding by that identity, so two stacks holding the same one would
    take each other's access away on destroy."""
    held: dict[str, str] = {}
    for resource in plan.resources:
        kind, inputs = resource["type"], resource["inputs"]
        if not kind.startswith("gcp:") or kind in NAMED_IN_PARENT:
            continue
        for key in NAME_KEYS:
            if isinstance(inputs.get(key), str):
                held[f"{kind} {key}={inputs[key]}"] = resource["name"]
        if kind == "gcp:monitoring/dashboard:Dashboard":
            held[f"{kind} displayName={json.loads(inputs['dashboardJson'])['displayName']}"] = resource["name"]
        if "member" in inputs:
            # the resource the binding is on: a bucket, a repository, a service account (its IAM policy), the project
            target = (inputs.get("bucket") or inputs.get("repository") or inputs.get("serviceAccountId")
                      or inputs.get("project"))
            title = (inputs.get("condition") or {}).get("title")
            held[f"{kind} {target} {inputs['role']} {inputs['member']} if {title}"] = resource["name"]
    return held


SIDE_BY_SIDE = ("gpu", "gpu-staging", "gpu3", "tpu", "tpu4")
"""Three GPU stacks and two TPU stacks (the fixture stacks and variants of them), all in one project and region."""


@pytest.fixture(scope="module")
def side_by_side(plans, variants) -> dict[str, Plan]:
    return {name: plans[name] if name in plans else variants[name] for name in SIDE_BY_SIDE}


def test_one_project_and_region(side_by_side):
    places = {(c["project"], c["location"]) for c in
              (p.one("gcp:container/cluster:Cluster")["inputs"] for p in side_by_side.values())}
    assert len(places) == 1, places


def test_stacks_share_only_the_checkpoint_bucket(side_by_side):
    held = {name: cloud_objects(plan) for name, plan in side_by_side.items()}
    bucket = side_by_side["gpu"].one(BUCKET, "weights-bucket")["inputs"]["name"]
    for (a, mine), (b, theirs) in itertools.combinations(held.items(), 2):
        shared = sorted(set(mine) & set(theirs))
        assert shared == [f"{BUCKET} name={bucket}"], (a, b, shared)


def test_every_cloud_name_starts_with_the_stack(side_by_side):
    """The names a stack creates start with its cluster name, derived from the stack's own name."""
    for name, plan in side_by_side.items():
        cluster = plan.one("gcp:container/cluster:Cluster")["inputs"]["name"]
        assert cluster == f"kimi-k3-1-{name}"
        for key in cloud_objects(plan):
            kind, _, rest = key.partition(" ")
            if rest.startswith(("name=", "accountId=", "repositoryId=")) and kind != BUCKET:
                assert rest.split("=", 1)[1].startswith(cluster), (name, key)


def _names(plan: Plan) -> Any:
    return plan.one("gcp:container/cluster:Cluster")["inputs"]["name"]


def test_an_explicit_cluster_name_still_wins(variants):
    """Existing stacks that set cluster.name keep their names (tests/conftest.py VARIANTS)."""
    assert _names(variants["named"]) == "my-cluster"
    assert variants["named"].one("gcp:compute/network:Network")["inputs"]["name"] == "my-cluster"


def test_leftovers_tell_the_stacks_apart(side_by_side):
    """`leftovers --stack X` lists by X's label and X's VPC (tools/live/leftovers.py): run against every stack's
    objects, each stack's filters match its own and no other stack's."""
    for name in side_by_side:
        commands = leftover_commands(label_value(name), "kimi-test-project", default_cluster_name(name))
        filters = {arg.removeprefix("--filter=") for _, argv in commands for arg in argv
                   if arg.startswith("--filter=")}
        vpc = re.compile(next(f for f in filters if f.startswith("network~")).removeprefix("network~"))
        for other, theirs in side_by_side.items():
            network = theirs.one("gcp:compute/network:Network")["inputs"]["name"]
            router = theirs.one("gcp:compute/router:Router")["inputs"]["network"]
            labels = theirs.one("gcp:container/cluster:Cluster")["inputs"]["resourceLabels"]
            assert bool(vpc.search(f"projects/kimi-test-project/global/networks/{network}")) == (other == name)
            assert vpc.search(router) if other == name else not vpc.search(router)
            assert (f"labels.pulumi-stack={labels['pulumi-stack']}" in filters) == (other == name), (name, other)

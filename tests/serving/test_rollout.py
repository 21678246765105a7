"""A DisaggregatedSet rollout cannot wedge under hard rack placement with `maxSurge: 0`, and `pulumi up`'s wait reads
a status the pinned LWS controller writes (docs/scaling.md "Rolling out a new revision").

The controller rolls every role under one revision, one step at a time: it scales the new revision's LWS up and
the old one down within each role's maxSurge/maxUnavailable, then waits until every role of the new revision is
ready (kubernetes-sigs/lws pkg/controllers/disaggregatedset/executor.go ReconcileRollingUpdate). With required rack
affinity and no gang scheduling a step whose new pods find no room stays Pending for ever (KEP-848 "Behavior
Without Gang Scheduling"). These tests hold the invariants under which every step's new pods fit the nodes the
same step frees in the same rack."""

from __future__ import annotations

import pytest

from components.facts import catalog
from components.facts.versions import LWS_CHART, LWS_MIN_VERSION
from tests import engine_facts as facts
from tests.conftest import Plan

PLANS = ("gpu", "gpu2", "gpu3")


@pytest.fixture(scope="module")
def gpu_plans(plans, variants) -> dict[str, Plan]:
    return {name: plans[name] if name in plans else variants[name] for name in PLANS}


def _dset(plan: Plan) -> dict:
    """The set with each autoscaled role at its ScaledObject's maximum, the most a rollout step can meet."""
    from tools.preview.scheduling import at_maximum

    [found] = [m for m in at_maximum(plan.manifests) if m["kind"] == "DisaggregatedSet"]
    return found


def slice_nodes(dset: dict) -> int:
    return sum(r["spec"]["replicas"] * r["spec"]["leaderWorkerTemplate"]["size"] for r in dset["spec"]["roles"])


@pytest.mark.parametrize("name", PLANS)
def test_each_step_frees_what_it_asks_for(gpu_plans, name):
    plan = gpu_plans[name]
    dset = _dset(plan)
    machine = next(m for m in catalog.GPU_MACHINES.values()
                   if m.accelerator == dset["spec"]["roles"][0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]
                   ["spec"]["nodeSelector"]["cloud.google.com/gke-accelerator"])
    for role in dset["spec"]["roles"]:
        update = role["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]
        # No surge: a step never asks for more groups than it removes; at least one unavailable, or no step runs.
        assert update["maxSurge"] == 0 and int(update["maxUnavailable"]) >= 1, role["name"]
        # A pod takes all of its node's GPUs: any node a step frees fits any new pod, of either role.
        for container in role["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]:
            for key in ("requests", "limits"):
                assert container["resources"][key]["nvidia.com/gpu"] == str(machine.gpus_per_node), role["name"]
    # Each rack's pool is exactly one slice, and ExclusiveTopology keeps every other slice out of it.
    assert dset["spec"]["placementPolicy"]["type"] == "ExclusiveTopology"
    pools = [r for r in plan.of_type("gcp:container/nodePool:NodePool") if r["parent"] == "gpu"]
    assert len(pools) == dset["spec"]["slices"]
    for pool in pools:
        assert pool["inputs"]["nodeCount"] == slice_nodes(dset), pool["name"]
        assert "autoscaling" not in pool["inputs"], pool["name"]
    # Nothing else in the stack claims a GPU on those nodes.
    claimants = [m["metadata"]["name"] for m in plan.manifests if m["kind"] != "DisaggregatedSet"
                 for _, c in facts.containers(m) if "nvidia.com/gpu" in str(c.get("resources", {}))]
    assert not claimants, claimants


def test_the_wait_reads_a_status_the_pinned_controller_writes(gpu):
    """`status.roleStatuses` is written from kubernetes-sigs/lws #933 (fb80447, after v0.10.0; v0.10.0's controller
    never sets it): the pinned release must be newer than the 0.10 line, and the wait must not need the
    `Available` condition, which only #980 (060ab4d) added."""
    assert tuple(int(p) for p in LWS_MIN_VERSION.split(".")) >= (0, 11, 0)
    assert tuple(int(p) for p in LWS_CHART.version.split(".")) >= tuple(int(p) for p in LWS_MIN_VERSION.split("."))
    wait = _dset(gpu)["metadata"]["annotations"]["pulumi.com/waitFor"]
    assert ".status.roleStatuses" in wait and "condition=" not in wait

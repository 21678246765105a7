"""The cost estimate says whose prices it uses and what it leaves out (components/plan/cost.py)."""

from __future__ import annotations

import pytest

from components.config import parse_config
from components.facts import catalog, prices
from components.plan import cost

TPU = {"track": "tpu", "gcp.project": "my-gcp-project", "gcp.zone": "us-central1-c", "tpu.reservation": "res"}


def test_a_stack_outside_the_tables_region_is_told_whose_prices_it_sees():
    here = cost.summary_lines(parse_config(TPU))[0]
    assert here.startswith(f"cost estimate (list prices of {prices.TABLE_DATE}): ")
    region = "europe-west4"
    elsewhere = parse_config({**TPU, "gcp.region": region, "gcp.zone": catalog.COMPUTE_ZONES[region][0],
                              "gcp.allowUnlistedZone": "true"})
    line = cost.summary_lines(elsewhere)[0]
    assert f"({prices.TABLE_REGION} list prices of {prices.TABLE_DATE}, not {region}'s: set kimi-k3-1:cost.*" in line


def test_every_estimate_names_what_it_never_includes():
    lines = cost.summary_lines(parse_config(TPU))
    assert lines[-1] == "  not in the estimate (usage-billed): " + "; ".join(
        prices.NOT_PRICED + prices.ENGINE_IMAGE_NOT_PRICED)  # a vLLM-TorchTPU stack builds its engine image
    gpu = cost.summary_lines(parse_config({"track": "gpu", "gcp.project": "my-gcp-project",
                                           "gcp.zone": "us-central1-b", "gpu.reservation": "r"}))
    assert gpu[-1] == "  not in the estimate (usage-billed): " + "; ".join(prices.NOT_PRICED)


def test_until_the_first_answer_bills_each_pool_from_its_finish_to_serving():
    """Two pools and a cluster on a made-up timeline: the spend is each one's rate x (serving - its finish)."""
    cfg = parse_config({**TPU, "cost.tpuChipHourUsd": "5", "cost.cpuNodeHourUsd": "1"})
    resources = [
        {"name": "c", "type": "gcp:container/cluster:Cluster", "inputs": {}},
        {"name": "cpu", "type": "gcp:container/nodePool:NodePool",
         "inputs": {"nodeCount": 2, "nodeConfig": {"machineType": "n2-standard-8"}}},
        {"name": "tpu", "type": "gcp:container/nodePool:NodePool",
         "inputs": {"nodeCount": 4, "nodeConfig": {"machineType": "tpu7x-standard-4t"}}},
        {"name": "late", "type": "gcp:container/nodePool:NodePool",
         "inputs": {"nodeCount": 1, "nodeConfig": {"machineType": "n2-standard-8"}}},
    ]
    finish = {"c": 0.0, "cpu": 1800.0, "tpu": 3600.0, "late": 9000.0}
    spent, rate, unpriced = cost.spend_until(cfg, resources, 7200.0, finish)
    assert unpriced == []
    assert rate == prices.GKE_CLUSTER_HOUR.usd + 2 * 1 + 4 * 4 * 5
    assert spent == pytest.approx(prices.GKE_CLUSTER_HOUR.usd * 2 + 2 * 1.5 + 80 * 1)


def test_the_plans_first_answer_line_names_the_unpriced_accelerator_hours(plans):
    line = next(line for line in plans["gpu"].summary.splitlines() if line.startswith("until the first answer"))
    assert line.endswith("a4x-maxgpu-4g-metal node-hours (gpu-0) unpriced, each from the minute it exists "
                         "(cost.first_answer_lines)"), line

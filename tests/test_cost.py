"""The cost estimate says whose prices it uses and what it leaves out (components/cost.py)."""

from __future__ import annotations

from components import catalog, cost, prices
from components.config import parse_config

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
    assert lines[-1] == "  not in the estimate (usage-billed): " + "; ".join(prices.NOT_PRICED)

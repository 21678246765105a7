"""The Cloud Monitoring dashboard and alert policies: present in both plans, valid against the API's published
types, PromQL that a real parser accepts, and only metric names from the checked list."""

from __future__ import annotations

import copy
import json
import re

import promql_parser
import pytest

from components.config import ConfigError
from components.facts import metrics
from components.observe import observability
from tests.config.test_config import parse
from tests.conftest import ROOT, STACKS
from tests.discovery import validate

DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
ALERT = "gcp:monitoring/alertPolicy:AlertPolicy"
ALERTS = {"no-ready-endpoints", "error-ratio", "kv-cache-full", "router-down"}
SCALING_ALERTS = {"scaling-behind", "scaling-capped", "scaling-inactive", "scaling-flapping"}
"""Where autoscaling is on (both fixture stacks)."""


def board_of(plan) -> dict:
    return json.loads(plan.one(DASHBOARD)["inputs"]["dashboardJson"])


def alerts_of(plan) -> dict[str, dict]:
    return {r["name"].removeprefix("observability-"): r["inputs"] for r in plan.of_type(ALERT)}


def alert_queries(plan) -> list[str]:
    return [c["conditionPrometheusQueryLanguage"]["query"] for a in alerts_of(plan).values() for c in a["conditions"]]


def selector_names(promql: str) -> set[str]:
    names: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(promql), visit)
    return names


def unlisted(names: set[str]) -> set[str]:
    """Names that are neither a listed metric nor a listed histogram's _bucket/_sum/_count series."""
    listed = {m.name: m for m in metrics.METRICS}

    def known(name: str) -> bool:
        if name in listed:
            return True
        base, _, suffix = name.rpartition("_")
        return suffix in ("bucket", "sum", "count") and listed.get(base, None) is not None \
            and listed[base].kind == "histogram"

    return {n for n in names if not known(n)}


def observability_metric_names() -> set[str]:
    """Listed names the dashboards and alert policies of both tracks read (histogram series folded)."""
    listed = {m.name for m in metrics.METRICS}
    names: set[str] = set()
    scopes = [observability.Scope.of(track, "c", "ns", hpas=("keda-hpa-x",), add_s=60.0) for track in STACKS]
    scopes.append(observability.Scope.of("tpu", "c", "ns", "sglang-torchtpu"))
    for scope in scopes:
        queries = observability.promql_of(observability.dashboard(scope, "d"))
        queries += [rule.query for rule in observability.alert_rules(scope, 0.05, 0.95)]
        for query in queries:
            for name in selector_names(query):
                base = name.rpartition("_")[0]
                names.add(name if name in listed else base)
    return names


# ------------------------------------------------------------------------------------------ both plans
@pytest.mark.parametrize("stack", STACKS)
def test_plan_has_the_dashboard_and_the_alert_policies(plans, stack):
    plan = plans[stack]
    board = board_of(plan)
    assert board["displayName"] in plan.summary
    assert set(alerts_of(plan)) == ALERTS | SCALING_ALERTS
    url = plan.outputs["monitoringDashboardUrl"]
    assert url.startswith("https://console.cloud.google.com/monitoring/dashboards/builder/")
    titles = [t["widget"]["title"] for t in board["mosaicLayout"]["tiles"] if "collapsibleGroup" in t["widget"]]
    expected = ["Serving", "Speed", "KV cache", *(["Prefill/decode"] if stack == "gpu" else []), "Router",
                "Scaling", "Accelerators"]
    assert [t.split(":")[0] for t in titles] == expected
    for alert in alerts_of(plan).values():
        assert alert["notificationChannels"] == []  # optional, off by default
        assert alert["userLabels"]["pulumi-stack"] == stack


@pytest.mark.parametrize("stack", STACKS)
def test_the_scaling_alerts_watch_the_scaledobjects_hpas_on_the_plans_clock(plans, stack):
    """The HPAs the queries select are the ones the ScaledObjects name; a role short of its desired replicas alerts
    after 1.5 x the plan's time to add one (the summary's figure), and the cluster writes the HPA metrics."""
    plan = plans[stack]
    hpas = {m["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["name"] for m in plan.manifests
            if m.get("kind") == "ScaledObject"}
    alerts = {name: a["conditions"][0]["conditionPrometheusQueryLanguage"] for name, a in alerts_of(plan).items()}
    for name in SCALING_ALERTS:
        selected = set(re.findall(r'horizontalpodautoscaler=~"([^"]+)"', alerts[name]["query"])[0].split("|"))
        assert selected == hpas, name
    add_min = float(re.search(r"time to add one step: ([\d.]+) min", plan.summary).group(1))
    assert 1.5 * add_min * 60 <= int(alerts["scaling-behind"]["duration"].rstrip("s")) <= 1.5 * add_min * 60 + 120
    capped = alerts["scaling-capped"]["query"]
    assert "kube_horizontalpodautoscaler_spec_min_replicas" in capped  # a fixed role (min = max) never alerts
    cluster = plan.one("gcp:container/cluster:Cluster")["inputs"]["monitoringConfig"]
    assert "HPA" in cluster["enableComponents"]


def test_no_scaling_group_or_alerts_where_autoscaling_is_off(variants):
    fixed = variants["gpu3"]  # three slices: per-role scaling is off (docs/scaling.md)
    assert set(alerts_of(fixed)) == ALERTS
    titles = [t["widget"]["title"] for t in board_of(fixed)["mosaicLayout"]["tiles"]
              if "collapsibleGroup" in t["widget"]]
    assert not any(t.startswith("Scaling") for t in titles)
    cluster = fixed.one("gcp:container/cluster:Cluster")["inputs"]["monitoringConfig"]
    assert "HPA" not in cluster["enableComponents"]


def test_monitoring_off_means_no_dashboard_or_alerts(variants):
    quiet = variants["quiet"]
    assert not quiet.of_type(DASHBOARD) and not quiet.of_type(ALERT)
    assert "monitoringDashboardUrl" not in quiet.outputs


# ------------------------------------------------------------------------------------------ API types
@pytest.mark.parametrize("stack", STACKS)
def test_dashboard_fits_the_monitoring_v1_schema(plans, stack):
    assert validate(board_of(plans[stack]), "Dashboard", "monitoring.v1") == []


@pytest.mark.parametrize("stack", STACKS)
def test_alert_policies_fit_the_monitoring_v3_schema(plans, stack):
    for name, inputs in alerts_of(plans[stack]).items():
        policy = {k: v for k, v in inputs.items() if k != "project"}  # the provider's, not the API's
        assert validate(policy, "AlertPolicy", "monitoring.v3") == [], name


def test_schema_check_rejects_what_the_api_would(gpu):
    board = board_of(gpu)
    assert validate(board, "Dashboard", "monitoring.v1") == []
    chart = next(t for t in board["mosaicLayout"]["tiles"] if "xyChart" in t["widget"])
    for mutate, expected in (
        (lambda b, c: c["widget"]["xyChart"]["dataSets"][0].update(plotType="CURVE"), "is not one of"),
        (lambda b, c: c["widget"]["xyChart"].update(dataset=[]), "unknown field"),
        (lambda b, c: c.update(width="24"), "expected integer"),
        (lambda b, c: c["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"].update(promql="up"), "unknown field"),
        (lambda b, c: b["mosaicLayout"].update(tiles={}), "expected a list"),
    ):
        broken = copy.deepcopy(board)
        target = next(t for t in broken["mosaicLayout"]["tiles"] if t == chart)
        mutate(broken, target)
        problems = validate(broken, "Dashboard", "monitoring.v1")
        assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("stack", STACKS)
def test_tiles_fit_the_grid_and_groups_hold_their_charts(plans, stack):
    tiles = board_of(plans[stack])["mosaicLayout"]["tiles"]
    groups = [t for t in tiles if "collapsibleGroup" in t["widget"]]
    members = [t for t in tiles if "collapsibleGroup" not in t["widget"]]
    cells: set[tuple[int, int]] = set()
    for tile in members:
        assert tile["xPos"] + tile["width"] <= observability.COLUMNS
        area = {(x, y) for x in range(tile["xPos"], tile["xPos"] + tile["width"])
                for y in range(tile["yPos"], tile["yPos"] + tile["height"])}
        assert not area & cells, f"{tile['widget'].get('title')} overlaps another tile"
        cells |= area
        # Each chart lies inside exactly one group's span (that is what makes it a member).
        holders = [g for g in groups if g["yPos"] <= tile["yPos"] and
                   tile["yPos"] + tile["height"] <= g["yPos"] + g["height"]]
        assert len(holders) == 1
    spans = sorted((g["yPos"], g["yPos"] + g["height"]) for g in groups)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False))


# ------------------------------------------------------------------------------------------ PromQL
@pytest.mark.parametrize("stack", STACKS)
def test_every_query_parses_and_names_only_checked_metrics(plans, stack):
    queries = observability.promql_of(board_of(plans[stack])) + alert_queries(plans[stack])
    assert len(queries) > 20
    for query in queries:
        names = selector_names(query)  # raises on anything the parser rejects
        assert names, query
        assert not unlisted(names), f"{query}: {unlisted(names)} not in the checked metric list"


@pytest.mark.parametrize("stack", STACKS)
def test_queries_stay_in_the_stacks_cluster_and_namespace(plans, stack):
    plan = plans[stack]
    cluster = plan.one("gcp:container/cluster:Cluster")["inputs"]["name"]
    for query in observability.promql_of(board_of(plan)) + alert_queries(plan):
        for selector in re.findall(r"\{[^}]*\}", query):
            assert f'cluster="{cluster}"' in selector or f'cluster_name="{cluster}"' in selector, query


def test_the_parser_and_the_name_check_can_fail():
    with pytest.raises(ValueError):
        selector_names('sum(rate(vllm:prompt_tokens_total{job="x"}[5m])')
    names = selector_names("histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))"
                           " + rate(vllm:gpu_prefix_cache_hits_total[5m]) + vllm:kv_cache_usage_perc_count")
    assert unlisted(names) == {"vllm:gpu_prefix_cache_hits_total", "vllm:kv_cache_usage_perc_count"}


def test_an_unlisted_metric_cannot_be_queried():
    with pytest.raises(KeyError, match="not in components/facts/metrics.py"):
        observability.rate("vllm:gpu_prefix_cache_hits_total", "vllm", 'job="x"')
    with pytest.raises(KeyError):
        observability.gauge("llm_d_epp_ready_endpoints", "vllm", 'job="x"')  # right name, wrong exporter


# ------------------------------------------------------------------------------------------ alert config
def test_notification_channels_and_thresholds_reach_the_policies(variants):
    alerts = alerts_of(variants["gpu2"])
    assert all(a["notificationChannels"] == ["projects/my-gcp-project/notificationChannels/42"]
               for a in alerts.values())
    kv = alerts["kv-cache-full"]["conditions"][0]["conditionPrometheusQueryLanguage"]["query"]
    assert kv.endswith("> 0.9")
    assert "1 notification channel(s)" in variants["gpu2"].summary


def test_notification_channels_and_thresholds_come_from_config():
    channel = "projects/my-gcp-project/notificationChannels/1234567890"
    cfg = parse("tpu", monitoring__notificationChannels=[channel], monitoring__alertErrorPercent=20)
    assert cfg.monitoring.notificationChannels == [channel]
    scope = observability.Scope.of("tpu", cfg.cluster_name, cfg.kubernetes.namespace)
    rules = {r.name: r for r in observability.alert_rules(scope, 0.2, 0.95)}
    assert rules["error-ratio"].query.endswith("> 0.2")


@pytest.mark.parametrize("value", ["oncall@example.com", "projects/p/notificationChannels/", "123"])
def test_a_notification_channel_must_be_a_channel_resource_name(value):
    with pytest.raises(ConfigError) as err:
        parse("gpu", monitoring__notificationChannels=[value])
    assert "monitoring.notificationChannels" in str(err.value) and "\n" not in str(err.value)


def test_the_scaling_doc_states_the_plans_alert_delays(plans):
    """docs/scaling.md's table gives the `replicas short of desired` delay of both tracks as the plans set it."""
    minutes = {stack: int(alerts_of(plans[stack])["scaling-behind"]["conditions"][0]
                          ["conditionPrometheusQueryLanguage"]["duration"].rstrip("s")) // 60 for stack in STACKS}
    doc = (ROOT / "docs" / "scaling.md").read_text()
    assert f"(GPU {minutes['gpu']} min, TPU {minutes['tpu']} min)" in doc, minutes

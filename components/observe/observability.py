"""Cloud Monitoring dashboard and alert policies over what Managed Prometheus scrapes (engines, router) and
what GKE collects (DCGM on GPU nodes, accelerator system metrics on TPU nodes).

Every query is PromQL; every metric name in it comes from the checked metric list (`metrics.require`), so a
name the pinned engine, router or collector does not export cannot be written here. Series are scoped by the
target labels Managed Prometheus sets (`cluster`, `namespace`, and `job` = the PodMonitoring's name, see
components/observe/monitoring.py); GKE system metrics carry `cluster_name` instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

import pulumi
import pulumi_gcp as gcp

from ..cloud.base import Args, Component
from ..facts import catalog, metrics
from .monitoring import router_target, serving_targets

WINDOW = "5m"
"""Rate window: ten scrapes at the PodMonitorings' 30 s interval."""
QUANTILES = (0.5, 0.9, 0.99)
COLUMNS = 48
"""Mosaic grid width (the API allows 1-48 columns)."""
PANEL_WIDTH, PANEL_HEIGHT, NOTE_HEIGHT = 24, 16, 4
CONSOLE_DASHBOARD_URL = "https://console.cloud.google.com/monitoring/dashboards/builder/{id}?project={project}"


# ---------------------------------------------------------------------------------------------- scope
@dataclass(frozen=True)
class Scope:
    """Which series belong to this stack: its cluster, its namespace and the scrape jobs of each role."""

    track: str
    cluster: str
    namespace: str
    engine_jobs: dict[str, str]
    """Role (prefill, decode, model-server) -> PodMonitoring name of the engines serving it."""
    router_job: str
    tpu_engine: str = "vllm-torchtpu"
    """tpu.engine: vLLM-TorchTPU exports vLLM's metrics; an unreleased SGLang build is read through the router only."""
    hpas: tuple[str, ...] = ()
    """The HPAs of the scaled roles (KEDA's, components/plan/autoscaling.py hpa_name); empty: no scaling group."""
    add_s: float = 0.0
    """The plan's time to add one replica (autoscaling.time_to_add_s): how long a shortfall may last."""

    @classmethod
    def of(cls, track: str, cluster: str, namespace: str, tpu_engine: str = "vllm-torchtpu",
           hpas: tuple[str, ...] = (), add_s: float = 0.0) -> Scope:
        jobs = {t.name: f"{catalog.GUIDE_NAME}-{t.name}" for t in serving_targets(track)}
        return cls(track, cluster, namespace, jobs, f"{catalog.GUIDE_NAME}-{router_target().name}", tpu_engine,
                   tuple(hpas), add_s)

    @property
    def hpa(self) -> str:
        return self.matchers(f'horizontalpodautoscaler=~"{"|".join(self.hpas)}"')

    @property
    def exporter(self) -> Optional[metrics.Exporter]:
        """The engines' metric family on this track, None where no engine source is checked."""
        if self.track == "gpu":
            return "vllm"
        return "vllm-torchtpu" if self.tpu_engine == "vllm-torchtpu" else None

    def matchers(self, *extra: str) -> str:
        return ",".join((f'cluster="{self.cluster}"', f'namespace="{self.namespace}"', *extra))

    def job(self, role: str) -> str:
        return f'job="{self.engine_jobs[role]}"'

    @property
    def engines(self) -> str:
        return f'job=~"{"|".join(self.engine_jobs.values())}"'


def _selector(name: str, exporter: metrics.Exporter, matchers: str, suffix: str = "") -> str:
    return f"{metrics.require(name, exporter)}{suffix}{{{matchers}}}"


def rate(name: str, exporter: metrics.Exporter, matchers: str, by: str = "", suffix: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({_selector(name, exporter, matchers, suffix)}[{WINDOW}]))"


def quantile(q: float, name: str, exporter: metrics.Exporter, matchers: str) -> str:
    return (f"histogram_quantile({q}, sum by (le) (rate({_selector(name, exporter, matchers, '_bucket')}"
            f"[{WINDOW}])))")


def gauge(name: str, exporter: metrics.Exporter, matchers: str, agg: str = "max", by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"{agg}{grouping} ({_selector(name, exporter, matchers)})"


# ---------------------------------------------------------------------------------------------- panels
@dataclass(frozen=True)
class Query:
    promql: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    """Cloud Monitoring unit (MetricDescriptor.unit syntax): s, 1, By/s, {token}/s, ..."""
    queries: tuple[Query, ...]


@dataclass(frozen=True)
class Group:
    title: str
    question: str
    """What the group answers; shown as the group's first line and in the README."""
    panels: tuple[Panel, ...]
    note: str = ""


def _quantiles(name: str, exporter: metrics.Exporter, matchers: str, label: str) -> tuple[Query, ...]:
    return tuple(Query(quantile(q, name, exporter, matchers), f"{label} p{round(q * 100)}") for q in QUANTILES)


def serving_group(s: Scope) -> Group:
    router = s.matchers(f'job="{s.router_job}"')
    requests = rate("llm_d_epp_request_total", "epp", router)
    errors = rate("llm_d_epp_request_error_total", "epp", router)
    rps = [Query(requests, "router")]
    if s.exporter:
        rps.append(Query(rate("vllm:request_success_total", s.exporter, s.matchers(s.engines), by="job"), "${job}"))
    if s.track == "gpu":
        # Per serving unit (docs/scaling.md): every request finishes on a decode pod of one slice.
        rps.append(Query(rate("vllm:request_success_total", "vllm", s.matchers(s.job("decode")), by="slice"),
                         "slice ${slice}"))
    return Group("Serving", "Is it serving?", (
        Panel("Requests per second", "1/s", tuple(rps)),
        Panel("Errors: share of router requests, and per second by code", "1", (
            Query(f"{errors} / {requests}", "error ratio"),
            Query(rate("llm_d_epp_request_error_total", "epp", router, by="error_code"), "${error_code}/s"),
        )),
        Panel("Ready endpoints per role", "1", (
            Query(f"sum by (job) ({_selector('up', 'gmp', s.matchers(s.engines))})", "${job} scrape targets up"),
            Query(gauge("llm_d_epp_ready_endpoints", "epp", router), "router: ready endpoints in the pool"),
        )),
    ))


def speed_group(s: Scope) -> Group:
    router = s.matchers(f'job="{s.router_job}"')
    ttft = list(_quantiles("llm_d_epp_request_ttft_seconds", "epp", router, "router"))
    itl = list(_quantiles("llm_d_epp_request_streaming_itl_seconds", "epp", router, "router"))
    e2e = list(_quantiles("llm_d_epp_request_duration_seconds", "epp", router, "router"))
    if s.track == "gpu":
        decode = s.matchers(s.job("decode"))
        ttft += _quantiles("vllm:time_to_first_token_seconds", "vllm", decode, "decode engine")
        itl += _quantiles("vllm:inter_token_latency_seconds", "vllm", decode, "decode engine")
        e2e += _quantiles("vllm:e2e_request_latency_seconds", "vllm", decode, "decode engine")
    elif s.exporter:
        engine = s.matchers(s.engines)
        ttft += _quantiles("vllm:time_to_first_token_seconds", s.exporter, engine, "engine")
        itl += _quantiles("vllm:inter_token_latency_seconds", s.exporter, engine, "engine")
        e2e += _quantiles("vllm:e2e_request_latency_seconds", s.exporter, engine, "engine")
    return Group("Speed", "How fast is it?", (
        Panel("Time to first token", "s", tuple(ttft)),
        Panel("Inter-token latency", "s", tuple(itl)),
        Panel("End-to-end request latency", "s", tuple(e2e)),
        Panel("Tokens per second in and out", "{token}/s", (
            Query(rate("llm_d_epp_request_input_tokens", "epp", router, suffix="_sum"), "input (prompt)"),
            Query(rate("llm_d_epp_request_output_tokens", "epp", router, suffix="_sum"), "output (generated)"),
        )),
    ))


def kv_cache_group(s: Scope) -> Group:
    router = s.matchers(f'job="{s.router_job}"')
    client_hits = (f"{rate('llm_d_epp_request_cached_tokens', 'epp', router, suffix='_sum')} / "
                   f"{rate('llm_d_epp_request_input_tokens', 'epp', router, suffix='_sum')}")
    if s.track != "gpu" and s.exporter:
        engine, x = s.matchers(s.engines), s.exporter
        queries = rate("vllm:prefix_cache_queries_total", x, engine)
        return Group("KV cache", "Is the KV cache working?", (
            Panel("HBM KV-cache usage per slice", "1", (
                Query(gauge("vllm:kv_cache_usage_perc", x, engine), "max over slices"),
                Query(gauge("vllm:kv_cache_usage_perc", x, engine, agg="avg"), "mean over slices"),
            )),
            Panel("Prefix-cache hit rate by tier", "1", (
                Query(f"{rate('vllm:prefix_cache_hits_total', x, engine)} / {queries}", "HBM"),
                Query(f"{rate('vllm:external_prefix_cache_hits_total', x, engine)} / {queries}",
                      "host DRAM (Raiden connector)"),
                Query(client_hits, "all tiers, from response usage"),
            )),
            Panel("KV offload traffic, HBM <-> host DRAM", "By/s", (
                Query(rate("vllm:kv_offload_store_bytes_total", x, engine), "stored to DRAM"),
                Query(rate("vllm:kv_offload_load_bytes_total", x, engine), "loaded from DRAM"),
            )),
        ))
    if s.track != "gpu":
        return Group("KV cache", "Is the KV cache working?", (
            Panel("KV-cache usage (router's view of the engines)", "1", (
                Query(gauge("llm_d_epp_average_kv_cache_utilization", "epp", router), "pool average"),
            )),
            Panel("Prefix-cache hit rate (all tiers, from response usage)", "1", (
                Query(client_hits, "cached share of prompt tokens"),
            )),
        ), note=("An unreleased SGLang-TorchTPU build (tpu.engine=sglang-torchtpu) has no checked metric list, so "
                 # The deployed dashboards' text, kept as it is (the module is components/facts/metrics.py now).
                 "this group reads the router only. See components/metrics.py."))
    prefill = s.matchers(s.job("prefill"))
    queries = rate("vllm:prefix_cache_queries_total", "vllm", prefill)
    by_tier = rate("vllm:prompt_tokens_cached_by_source_total", "vllm",
                   s.matchers(s.job("prefill"), 'source=~"device|host"'), by="source")
    return Group("KV cache", "Is the KV cache working?", (
        Panel("HBM KV-cache usage per role", "1", (
            Query(gauge("vllm:kv_cache_usage_perc", "vllm", s.matchers(s.engines), by="job"), "${job} max"),
            Query(gauge("vllm:kv_cache_usage_perc", "vllm", s.matchers(s.engines), agg="avg", by="job"),
                  "${job} mean"),
        )),
        Panel("Prefix-cache hit rate by tier (prefill engines)", "1", (
            Query(f"{by_tier} / ignoring(source) group_left {queries}", "${source}"),
            Query(client_hits, "all tiers, from response usage"),
        )),
        Panel("KV offload traffic, HBM <-> host DRAM", "By/s", (
            Query(rate("vllm:kv_offload_store_bytes_total", "vllm", s.matchers(s.engines)), "stored to DRAM"),
            Query(rate("vllm:kv_offload_load_bytes_total", "vllm", s.matchers(s.engines)), "loaded from DRAM"),
        )),
    ))


def pd_group(s: Scope) -> Group:
    engines = s.matchers(s.engines)
    router = s.matchers(f'job="{s.router_job}"')
    return Group("Prefill/decode", "Is P/D healthy?", (
        Panel("Prefill vs decode load", "1", (
            Query(gauge("vllm:num_requests_running", "vllm", engines, agg="sum", by="job"), "${job} running"),
            Query(gauge("vllm:num_requests_waiting", "vllm", engines, agg="sum", by="job"), "${job} waiting"),
        )),
        Panel("Routing decisions", "1/s", (
            Query(rate("llm_d_epp_disagg_decision_total", "epp", router, by="decision_type"), "${decision_type}"),
        )),
        Panel("KV transfer volume (NIXL)", "By/s", (
            Query(rate("vllm:nixl_bytes_transferred", "vllm", engines, suffix="_sum"), "bytes transferred"),
        )),
        Panel("KV transfer latency (NIXL)", "s", _quantiles("vllm:nixl_xfer_time_seconds", "vllm", engines, "")),
    ))


def router_group(s: Scope) -> Group:
    router = s.matchers(f'job="{s.router_job}"')
    return Group("Router", "Is the router deciding well?", (
        Panel("Scheduling latency", "s", _quantiles("llm_d_epp_scheduler_e2e_duration_seconds", "epp", router,
                                                    "scheduler")),
        Panel("Picks per endpoint", "1/s", (
            Query(rate("llm_d_epp_scheduler_attempts_total", "epp", s.matchers(f'job="{s.router_job}"',
                                                                               'status="success"'),
                       by="endpoint_name"), "${endpoint_name}"),
        )),
        Panel("Queue depth", "1", (
            Query(gauge("llm_d_epp_flow_control_queue_size", "epp", router, agg="sum"), "router flow-control queue"),
            Query(gauge("llm_d_epp_average_queue_size", "epp", router), "engines' queue (pool average)"),
        )),
        Panel("Pool saturation (1 = flow control gates dispatch)", "1", (
            Query(gauge("llm_d_epp_flow_control_pool_saturation", "epp", router), "saturation"),
        )),
    ), note="Flow-control series appear only when the router's flow control is on.")


def accelerator_group(s: Scope) -> Group:
    if s.track == "gpu":
        nodes = f'cluster="{s.cluster}"'
        used = _selector("DCGM_FI_DEV_FB_USED", "dcgm", nodes)
        free = _selector("DCGM_FI_DEV_FB_FREE", "dcgm", nodes)
        return Group("Accelerators", "Are the GPUs busy, and how full is HBM?", (
            Panel("GPU utilization per node", "%", (
                Query(gauge("DCGM_FI_DEV_GPU_UTIL", "dcgm", nodes, agg="avg", by="instance"), "${instance}"),
            )),
            Panel("HBM used per node", "1", (
                Query(f"sum by (instance) ({used}) / (sum by (instance) ({used}) + sum by (instance) ({free}))",
                      "${instance}"),
            )),
        ), note="From GKE's managed DCGM metrics (monitoring components include DCGM on the GPU track).")
    nodes = f'monitored_resource="k8s_node",cluster_name="{s.cluster}"'
    used = gauge("kubernetes_io:node_accelerator_memory_used", "gke", nodes, agg="sum", by="node_name")
    total = gauge("kubernetes_io:node_accelerator_memory_total", "gke", nodes, agg="sum", by="node_name")
    return Group("Accelerators", "Are the TPUs busy, and how full is HBM?", (
        Panel("TensorCore utilization per node", "%", (
            Query(gauge("kubernetes_io:node_accelerator_tensorcore_utilization", "gke", nodes, agg="avg",
                        by="node_name"), "${node_name}"),
        )),
        Panel("Duty cycle per node", "%", (
            Query(gauge("kubernetes_io:node_accelerator_duty_cycle", "gke", nodes, agg="avg", by="node_name"),
                  "${node_name}"),
        )),
        Panel("HBM used per node", "1", (Query(f"{used} / {total}", "${node_name}"),)),
    ), note="From the GKE system metrics kubernetes.io/node/accelerator/* (one series per chip).")


FLAP_WINDOW = "1h"
FLAP_CHANGES = 4
"""More changes of a role's desired replicas in an hour than a rise and a fall each way: the scale-down window is at
least the time to add a replica (about half an hour, docs/scaling.md), so a load that moves once an hour changes it
at most twice; four means the signal or the windows are wrong."""


def _hpa(name: str, s: Scope, agg: str = "max") -> str:
    return gauge(f"kube_horizontalpodautoscaler_{name}", "ksm", s.hpa, agg=agg, by="horizontalpodautoscaler")


HPA_CONDITIONS = "https://github.com/kubernetes/api/blob/v0.34.0/autoscaling/v2/types.go"
"""HorizontalPodAutoscalerConditionType: ScalingActive is false when the HPA cannot compute a scale (it cannot read
its metric: for KEDA's HPAs, KEDA's external metrics API failing to read the trigger)."""


def _inactive(s: Scope) -> str:
    return gauge("kube_horizontalpodautoscaler_status_condition", "ksm",
                 f'{s.hpa},condition="ScalingActive",status="false"', by="horizontalpodautoscaler")


def scaling_group(s: Scope) -> Group:
    """What the autoscaler asked for and got, per role: the HPAs KEDA makes of the ScaledObjects (kube state
    metrics), beside the router's queue the triggers read."""
    desired, current, top = _hpa("status_desired_replicas", s), _hpa("status_current_replicas", s), \
        _hpa("spec_max_replicas", s)
    router = s.matchers(f'job="{s.router_job}"')
    return Group("Scaling", "Is the autoscaler keeping up, and is it capped?", (
        Panel("Replicas per role: desired, current and the maximum", "1", (
            Query(desired, "${horizontalpodautoscaler} desired"),
            Query(current, "${horizontalpodautoscaler} current"),
            Query(top, "${horizontalpodautoscaler} maximum (the reservation's share)"),
        )),
        Panel("Capped: desired at the maximum (1 = wants more than the reservation holds)", "1", (
            Query(f"{desired} >= bool {top}", "${horizontalpodautoscaler}"),
        )),
        Panel(f"Changes of the desired replicas per {FLAP_WINDOW} (flapping above {FLAP_CHANGES})", "1", (
            Query(f"max by (horizontalpodautoscaler) (changes("
                  f"{metrics.require('kube_horizontalpodautoscaler_status_desired_replicas', 'ksm')}{{{s.hpa}}}"
                  f"[{FLAP_WINDOW}]))", "${horizontalpodautoscaler}"),
        )),
        Panel("Trigger unreadable: the HPA's ScalingActive condition is false (1 = no scaling)", "1", (
            Query(_inactive(s), "${horizontalpodautoscaler}"),
        )),
        Panel("What the triggers read: requests held and running at the router", "1", (
            Query(gauge("llm_d_epp_flow_control_queue_size", "epp", router, agg="sum"), "held by flow control"),
            Query(gauge("llm_d_epp_request_running", "epp", router, agg="sum"), "running"),
        )),
    ), note="From GKE's kube state metrics of the HorizontalPodAutoscalers KEDA makes of the ScaledObjects "
            "(keda-hpa-<role>); the maximum is the role's share of the reservation, so desired at the maximum "
            "means the load wants capacity the stack does not hold.")


def groups(s: Scope) -> list[Group]:
    found = [serving_group(s), speed_group(s), kv_cache_group(s)]
    if s.track == "gpu":
        found.append(pd_group(s))
    return [*found, router_group(s), *([scaling_group(s)] if s.hpas else []), accelerator_group(s)]


# ---------------------------------------------------------------------------------------------- dashboard
def _chart(panel: Panel) -> dict[str, Any]:
    return {"title": panel.title, "xyChart": {
        "dataSets": [{"plotType": "LINE", "targetAxis": "Y1", "minAlignmentPeriod": "60s",
                      **({"legendTemplate": q.legend} if q.legend else {}),
                      "timeSeriesQuery": {"prometheusQuery": q.promql, "unitOverride": panel.unit}}
                     for q in panel.queries],
        "yAxis": {"scale": "LINEAR"},
        "chartOptions": {"mode": "COLOR"},
    }}


def dashboard(s: Scope, display_name: str, labels: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """The Dashboard resource (monitoring v1) as JSON: one collapsible group per question, two charts a row."""
    tiles: list[dict[str, Any]] = []
    y = 0
    for group in groups(s):
        top = NOTE_HEIGHT if group.note else 0
        height = top + (len(group.panels) + 1) // 2 * PANEL_HEIGHT
        title = f"{group.title}: {group.question}"
        tiles.append({"xPos": 0, "yPos": y, "width": COLUMNS, "height": height,
                      "widget": {"title": title, "collapsibleGroup": {"collapsed": False}}})
        if group.note:
            tiles.append({"xPos": 0, "yPos": y, "width": COLUMNS, "height": NOTE_HEIGHT,
                          "widget": {"text": {"content": group.note, "format": "MARKDOWN"}}})
        for i, panel in enumerate(group.panels):
            tiles.append({"xPos": (i % 2) * PANEL_WIDTH, "yPos": y + top + (i // 2) * PANEL_HEIGHT,
                          "width": PANEL_WIDTH, "height": PANEL_HEIGHT, "widget": _chart(panel)})
        y += height
    return {"displayName": display_name, "mosaicLayout": {"columns": COLUMNS, "tiles": tiles},
            "labels": dict(labels or {})}


def promql_of(board: dict[str, Any]) -> list[str]:
    """Every PromQL query of a dashboard JSON (for validation)."""
    return [d["timeSeriesQuery"]["prometheusQuery"] for t in board["mosaicLayout"]["tiles"]
            for d in t["widget"].get("xyChart", {}).get("dataSets", [])]


# ---------------------------------------------------------------------------------------------- alerts
@dataclass(frozen=True)
class AlertRule:
    name: str
    display_name: str
    query: str
    duration: str
    severity: str
    documentation: str


def alert_rules(s: Scope, error_ratio: float, kv_full: float) -> list[AlertRule]:
    """The few conditions that need a person. Thresholds and hold times follow llm-d's EPP alerting rules where
    they have one (error ratio 5% for 10 min, no ready endpoints for 2 min, router series absent for 5 min):
    https://github.com/llm-d/llm-d/blob/main/guides/recipes/observability/alerts/epp-alerting-rules.yaml"""
    router = s.matchers(f'job="{s.router_job}"')
    requests = rate("llm_d_epp_request_total", "epp", router)
    errors = rate("llm_d_epp_request_error_total", "epp", router)
    if s.exporter:
        kv = gauge("vllm:kv_cache_usage_perc", s.exporter, s.matchers(s.engines), by="job")
        kv_what = "an engine role's HBM KV cache (vllm:kv_cache_usage_perc, max over engines)"
    else:
        kv = gauge("llm_d_epp_average_kv_cache_utilization", "epp", router)
        kv_what = "the pool's average KV-cache utilization as the router reads it"
    return [
        AlertRule("no-ready-endpoints", "No ready model-server endpoint",
                  f"{gauge('llm_d_epp_ready_endpoints', 'epp', router)} == 0", "120s", "CRITICAL",
                  "The router sees no ready model-server endpoint: every request fails. Check the serving pods "
                  f"(`kubectl get pods -n {s.namespace} -l llm-d.ai/inference-serving=true`) and their events."),
        AlertRule("error-ratio", f"Router error ratio above {error_ratio:.0%}",
                  f"{errors} / {requests} > {error_ratio:g}", "600s", "WARNING",
                  f"More than {error_ratio:.0%} of requests through the router failed over 5 minutes, for 10 "
                  "minutes. The Serving group of the dashboard splits errors by code."),
        AlertRule("kv-cache-full", f"KV cache pinned above {kv_full:.0%}",
                  f"{kv} > {kv_full:g}", "900s", "WARNING",
                  f"For 15 minutes {kv_what} stayed above {kv_full:.0%}: requests queue or get preempted. Lower "
                  "concurrency or add replicas."),
        AlertRule("router-down", "Router down",
                  f"absent({_selector('up', 'gmp', router)} == 1)", "300s", "CRITICAL",
                  "No router (EPP) target has answered a scrape for 5 minutes: the router is down or unscraped. "
                  f"Check `kubectl get pods -n {s.namespace}` and the router's PodMonitoring."),
        *scaling_rules(s),
    ]


def scaling_rules(s: Scope) -> list[AlertRule]:
    """Where autoscaling is on: a role that stays short of what it asked for past the modelled time to add a replica,
    one that wants more than the reservation holds, and one whose desired replicas flap."""
    if not s.hpas:
        return []
    desired, current, top = _hpa("status_desired_replicas", s), _hpa("status_current_replicas", s), \
        _hpa("spec_max_replicas", s)
    behind = int(-(-1.5 * s.add_s // 60)) * 60
    changes = (f"max by (horizontalpodautoscaler) (changes("
               f"{metrics.require('kube_horizontalpodautoscaler_status_desired_replicas', 'ksm')}{{{s.hpa}}}"
               f"[{FLAP_WINDOW}]))")
    get = f"`kubectl describe hpa -n {s.namespace}`"
    return [
        AlertRule("scaling-behind", "Autoscaling: replicas short of desired", f"{desired} > {current}",
                  f"{behind}s", "WARNING",
                  f"A role has had fewer replicas than its autoscaler asked for over {behind // 60} minutes, 1.5 x the "
                  f"plan's time to add one ({s.add_s / 60:.1f} min): a new replica is not starting (no node free in "
                  f"its pool, an image or volume that does not attach, an engine that fails its probe). {get} and "
                  "the new pods' events say which."),
        AlertRule("scaling-capped", "Autoscaling: capped at the reservation",
                  f"({desired} >= {top}) and ({top} > {_hpa('spec_min_replicas', s)})", "1800s",
                  "WARNING",
                  "For 30 minutes a role's autoscaler (one with room between its minimum and maximum) has wanted at "
                  "least its maximum, which is the role's share of "
                  "the node pools the reservation holds: the load wants capacity the stack does not have, and "
                  "requests wait in the router's flow-control queue. Raise autoscaling.<role>Max within the "
                  "reservation, move capacity between prefill and decode, or grow the reservation (docs/scaling.md)."),
        AlertRule("scaling-inactive", "Autoscaling: trigger unreadable", f"{_inactive(s)} == 1", "600s", "WARNING",
                  "For 10 minutes a role's HPA could not compute a scale (ScalingActive false): KEDA cannot read the "
                  "router's metric from Managed Prometheus, so the role stays at its current size whatever the load. "
                  f"{get} names the error; `kubectl logs -n {catalog.KEDA_NAMESPACE} deploy/keda-operator` shows the "
                  "scaler's."),
        AlertRule("scaling-flapping", "Autoscaling: desired replicas flapping", f"{changes} > {FLAP_CHANGES}",
                  "0s", "WARNING",
                  f"A role's desired replicas changed more than {FLAP_CHANGES} times in an hour: each change starts "
                  f"or drains a replica that takes {s.add_s / 60:.1f} min to serve. Check the trigger's signal on "
                  f"the Scaling group of the dashboard and the ScaledObject's windows ({get})."),
    ]


# ---------------------------------------------------------------------------------------------- component
class ObservabilityArgs(Args):
    project: str
    track: str
    cluster: str
    namespace: str
    display_name: str
    tpu_engine: str = "vllm-torchtpu"
    hpas: tuple[str, ...] = ()
    add_s: float = 0.0
    notification_channels: tuple[str, ...] = ()
    error_ratio: float
    kv_full: float
    labels: dict[str, str] = {}


class Observability(Component):
    """The stack's Cloud Monitoring dashboard and alert policies; `url` opens the dashboard in the console."""

    def __init__(self, name: str, args: ObservabilityArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("observability", "Observability", name, opts)
        scope = Scope.of(args.track, args.cluster, args.namespace, args.tpu_engine, args.hpas, args.add_s)
        self.dashboard = gcp.monitoring.Dashboard(
            f"{name}-dashboard", project=args.project,
            dashboard_json=json.dumps(dashboard(scope, args.display_name, args.labels), sort_keys=True),
            opts=self.child())
        self.alerts = [gcp.monitoring.AlertPolicy(
            f"{name}-{rule.name}",
            project=args.project,
            display_name=f"{args.display_name}: {rule.display_name}",
            combiner="OR",
            severity=rule.severity,
            conditions=[gcp.monitoring.AlertPolicyConditionArgs(
                display_name=rule.display_name,
                condition_prometheus_query_language=gcp.monitoring.AlertPolicyConditionConditionPrometheusQueryLanguageArgs(
                    query=rule.query, duration=rule.duration, evaluation_interval="60s",
                    rule_group=catalog.GUIDE_NAME, alert_rule=rule.name,
                    # Created with the stack, before any engine has written a sample.
                    disable_metric_validation=True),
            )],
            documentation=gcp.monitoring.AlertPolicyDocumentationArgs(content=rule.documentation,
                                                                      mime_type="text/markdown"),
            notification_channels=list(args.notification_channels),
            user_labels=args.labels,
            opts=self.child()) for rule in alert_rules(scope, args.error_ratio, args.kv_full)]
        dashboard_id = self.dashboard.id.apply(lambda i: i.rsplit("/", 1)[-1])
        self.url = dashboard_id.apply(lambda i: CONSOLE_DASHBOARD_URL.format(id=i, project=args.project))
        self.finish(dashboard=self.dashboard.id, url=self.url, alerts=[a.name for a in self.alerts])

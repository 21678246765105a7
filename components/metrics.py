"""The one checked list of Prometheus metric names the program relies on, each with the pinned release that
exports it and the file that defines it there, so a renamed or dropped metric is a one-line diff here.

Users: `tools.smoke` builds every metric check from `require()` (an unlisted name fails at import), and
dashboards/alerts add their names to the same table. The PodMonitorings of `components.monitoring` scrape
whole `/metrics` endpoints and name no metric; the router calibration Job measures TTFT on the client and
cost per token reads inference-perf's report, so neither reads a Prometheus metric.

Names are as scraped: prometheus_client and client_golang expose a counter `x` as `x_total`.
Where an exporter has no metric for a fact the program wants, `GAPS` says so and the smoke check reports
SKIP with the reason instead of failing forever (see `gap()`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .versions import ROUTER_VERSION, SGLANG_DAY0_FLAGS_VERSION, SGLANG_JAX, VLLM

Exporter = Literal["vllm", "sglang", "sglang-jax", "epp"]
Kind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class Release:
    """An exporter at the version the program pins (components/versions.py)."""

    exporter: Exporter
    version: str
    checked_in: str
    """Where the names were read: a released artifact or a repository at a tag/commit."""


VLLM_SRC = f"https://github.com/vllm-project/vllm/blob/v{VLLM.version}"
SGLANG_SRC = f"https://github.com/sgl-project/sglang/blob/v{SGLANG_DAY0_FLAGS_VERSION}"
SGLANG_JAX_SRC = f"https://github.com/sgl-project/sglang-jax/blob/{SGLANG_JAX.commit}"
ROUTER_SRC = f"https://github.com/llm-d/llm-d-router/blob/{ROUTER_VERSION}"

RELEASES: dict[Exporter, Release] = {
    "vllm": Release("vllm", VLLM.version, f"the vllm=={VLLM.version} wheel on PyPI (commit 4ba787ec9), the release "
                                          "the GPU image tag carries"),
    "sglang": Release("sglang", SGLANG_DAY0_FLAGS_VERSION,
                      f"the sglang=={SGLANG_DAY0_FLAGS_VERSION} wheel on PyPI. ASSUMPTION: the day-0 SGLang TPU "
                      "build (tpu.engineProfile=day0) exports the names of the release its flags are checked "
                      "against"),
    "sglang-jax": Release("sglang-jax", SGLANG_JAX.commit,
                          f"github.com/sgl-project/sglang-jax at {SGLANG_JAX.commit} (tpu.engineProfile=release)"),
    "epp": Release("epp", ROUTER_VERSION, f"github.com/llm-d/llm-d-router at tag {ROUTER_VERSION} "
                                          "(commit 71f4f09), the EPP image tag"),
}


@dataclass(frozen=True)
class Metric:
    name: str
    exporter: Exporter
    kind: Kind
    source: str
    """The file that defines the metric in the pinned release (URL at tag or commit)."""
    labels: tuple[str, ...] = ()
    """Labels the program filters on (others may exist)."""
    note: str = ""


_VLLM_LOGGERS = f"{VLLM_SRC}/vllm/v1/metrics/loggers.py"
_VLLM_OFFLOAD = f"{VLLM_SRC}/vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py"
_SGLANG_COLLECTOR = f"{SGLANG_SRC}/python/sglang/srt/observability/metrics_collector.py"
_EPP_DISAGG = f"{ROUTER_SRC}/pkg/epp/framework/plugins/scheduling/profilehandler/disagg/metrics.go"

METRICS: tuple[Metric, ...] = (
    # vLLM (GPU prefill port 8000, decode port 8200)
    Metric("vllm:request_success_total", "vllm", "counter", _VLLM_LOGGERS, ("finished_reason",),
           "requests the engine finished"),
    Metric("vllm:prefix_cache_hits_total", "vllm", "counter", _VLLM_LOGGERS, (),
           "tokens served from the local (HBM) prefix cache; the older `vllm:gpu_prefix_cache_hits` spelling is "
           "gone in 0.33.0"),
    Metric("vllm:external_prefix_cache_hits_total", "vllm", "counter", _VLLM_LOGGERS, (),
           "tokens a KV connector supplied: NIXL from prefill on decode pods, the CPU tier on prefill pods"),
    Metric("vllm:kv_offload_load_bytes_total", "vllm", "counter", _VLLM_OFFLOAD, (),
           "bytes the OffloadingConnector loaded from host DRAM back to the GPU (through MultiConnector)"),
    # SGLang (day-0 TPU build)
    Metric("sglang:num_requests_total", "sglang", "counter", _SGLANG_COLLECTOR, (), "requests finished"),
    Metric("sglang:cached_tokens_total", "sglang", "counter", _SGLANG_COLLECTOR, ("cache_source",),
           "prefix-cache hit tokens by cache_source=device|host|storage, or cache_source=total when the "
           "scheduler sent no breakdown"),
    Metric("sglang:load_back_tokens_total", "sglang", "counter", _SGLANG_COLLECTOR, (),
           "tokens HiCache loaded back from host DRAM to the device"),
    # llm-d router (EPP metrics port 9090)
    Metric("llm_d_epp_disagg_decision_total", "epp", "counter", _EPP_DISAGG, ("decision_type",),
           "routing decisions of disagg-profile-handler; decision_type=prefill-decode for P/D"),
)


@dataclass(frozen=True)
class Gap:
    """A fact the program wants that an exporter has no metric for, with the evidence."""

    fact: str
    """A smoke check name (tools.smoke METRIC_CHECKS) or another consumer's key."""
    exporter: Exporter
    reason: str


_SGLANG_JAX_EXPORTS = (f"sglang-jax@{SGLANG_JAX.commit} registers only the P/D transfer metrics (pd_* in "
                       f"{SGLANG_JAX_SRC}/python/sgl_jax/srt/disaggregation/common/metrics.py) behind "
                       "--enable-metrics; its scheduler (python/sgl_jax/srt/managers/scheduler_metrics_mixin.py) "
                       "only logs")
GAPS: tuple[Gap, ...] = (
    Gap("engine-requests", "sglang-jax", f"no request counter: {_SGLANG_JAX_EXPORTS}"),
    Gap("hbm-prefix-hits", "sglang-jax", f"no prefix-cache hit counter: {_SGLANG_JAX_EXPORTS}"),
    Gap("host-dram-prefix-hits", "sglang-jax", f"no host-tier hit or load-back counter: {_SGLANG_JAX_EXPORTS}"),
)

_BY_NAME = {metric.name: metric for metric in METRICS}


def require(name: str, exporter: Exporter) -> str:
    """`name` if the checked list has it for `exporter`; anything else is a programming error."""
    metric = _BY_NAME.get(name)
    if metric is None or metric.exporter != exporter:
        raise KeyError(f"metric {name!r} of {exporter} is not in components/metrics.py METRICS: verify it in the "
                       f"pinned {exporter} release and add it with its source")
    return name


def gap(fact: str, exporter: Exporter) -> Gap | None:
    return next((g for g in GAPS if g.fact == fact and g.exporter == exporter), None)

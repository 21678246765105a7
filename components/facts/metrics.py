"""The one checked list of Prometheus metric names the program relies on, each with the pinned release that
exports it and the file that defines it there, so a renamed or dropped metric is a one-line diff here.

Users: `tools.live.smoke` builds every metric check from `require()` (an unlisted name fails at import), and
dashboards/alerts add their names to the same table. The PodMonitorings of `components.observe.monitoring` scrape
whole `/metrics` endpoints and name no metric; the router calibration Job measures TTFT on the client and
cost per token reads inference-perf's report, so neither reads a Prometheus metric.

Names are as scraped: prometheus_client and client_golang expose a counter `x` as `x_total`.
Where an exporter has no metric for a fact the program wants, `GAPS` says so and the smoke check reports
SKIP with the reason instead of failing forever (see `gap()`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .versions import ROUTER_VERSION, SGLANG_TORCHTPU_FLAGS_VERSION, VLLM, VLLM_TORCHTPU

Exporter = Literal["vllm", "vllm-torchtpu", "sglang", "epp", "gmp", "dcgm", "gke", "ksm"]
"""Engines and the router (scraped by this stack's PodMonitorings), and what GKE collects by itself: the Managed
Prometheus collectors' own `up`, DCGM on GPU nodes, accelerator system metrics on TPU nodes, and the kube state
metrics of HorizontalPodAutoscalers (KEDA's, where autoscaling is on)."""
Kind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class Release:
    """An exporter at the version the program pins (components/facts/versions.py)."""

    exporter: Exporter
    version: str
    checked_in: str
    """Where the names were read: a released artifact or a repository at a tag/commit."""


VLLM_SRC = f"https://github.com/vllm-project/vllm/blob/v{VLLM.version}"
TPU_VLLM_SRC = f"https://github.com/vllm-project/vllm/blob/v{VLLM_TORCHTPU.version}"
"""vLLM-TorchTPU's combined wheel carries vLLM 0.29.0's code (engine-flags/README.md compares the RECORDs)."""
SGLANG_SRC = f"https://github.com/sgl-project/sglang/blob/v{SGLANG_TORCHTPU_FLAGS_VERSION}"
ROUTER_SRC = f"https://github.com/llm-d/llm-d-router/blob/{ROUTER_VERSION}"
GMP_COMMIT = "2ffde4ec7b7e4ca1da4e32f36b692945b78a60e4"
GMP_SRC = f"https://github.com/GoogleCloudPlatform/prometheus-engine/blob/{GMP_COMMIT}"
DCGM_EXPORTER_COMMIT = "00d6d344ea4a39112b211b9ff5af3d97e0bb51c2"
DCGM_SRC = f"https://github.com/NVIDIA/dcgm-exporter/blob/{DCGM_EXPORTER_COMMIT}"
GKE_SYSTEM_METRICS = "https://cloud.google.com/monitoring/api/metrics_kubernetes"
"""GKE system metrics are not versioned; Cloud Monitoring's PromQL spells kubernetes.io/node/accelerator/duty_cycle
as kubernetes_io:node_accelerator_duty_cycle, with the k8s_node resource labels (cluster_name, node_name)."""

KSM_COMMIT = "bdcb1e852acd3969420b03aae1bd673100aea9b5"
KSM_HPA = (f"https://github.com/kubernetes/kube-state-metrics/blob/{KSM_COMMIT}/docs/metrics/workload/"
           "horizontalpodautoscaler-metrics.md")
GKE_KSM = "https://cloud.google.com/kubernetes-engine/docs/how-to/kube-state-metrics"
"""GKE's managed kube state metrics: the cluster's `HPA` monitoring component (MonitoringComponentConfig.Component
HPA, "Horizontal Pod Autoscaling"; components/cloud/cluster.py) writes the HorizontalPodAutoscaler series to Managed
Prometheus under kube-state-metrics' own names."""

RELEASES: dict[Exporter, Release] = {
    "vllm": Release("vllm", VLLM.version, f"the vllm=={VLLM.version} wheel on PyPI (commit 4ba787ec9), the release "
                                          "the GPU image tag carries"),
    "vllm-torchtpu": Release("vllm-torchtpu", VLLM_TORCHTPU.version,
                             f"the vllm-torchtpu=={VLLM_TORCHTPU.version} wheel on PyPI "
                             f"(vLLM {VLLM_TORCHTPU.version}'s "
                             "metrics code), the TPU track's default engine"),
    "sglang": Release("sglang", SGLANG_TORCHTPU_FLAGS_VERSION,
                      f"the sglang=={SGLANG_TORCHTPU_FLAGS_VERSION} wheel on PyPI. ASSUMPTION: an SGLang-TorchTPU "
                      "build (tpu.engine=sglang-torchtpu, unreleased) exports the names of the release its flags are "
                      "checked against"),
    "epp": Release("epp", ROUTER_VERSION, f"github.com/llm-d/llm-d-router at tag {ROUTER_VERSION} "
                                          "(commit 71f4f09), the EPP image tag"),
    "gmp": Release("gmp", GMP_COMMIT[:7], "github.com/GoogleCloudPlatform/prometheus-engine at main "
                                          f"{GMP_COMMIT[:7]} (2026-07-02), the source of the PodMonitoring CRD the "
                                          "tests validate against; GKE runs the managed collector"),
    "dcgm": Release("dcgm", DCGM_EXPORTER_COMMIT[:7],
                    f"github.com/NVIDIA/dcgm-exporter at {DCGM_EXPORTER_COMMIT[:7]}: the field names of its default "
                    "counters. GKE's managed DCGM package (cloud.google.com/kubernetes-engine/docs/how-to/"
                    "dcgm-metrics), turned on by the cluster's DCGM monitoring component on the GPU track, runs "
                    "DCGM-Exporter. ASSUMPTION: its curated set keeps these three basic fields"),
    "ksm": Release("ksm", KSM_COMMIT[:7], f"kube-state-metrics' HorizontalPodAutoscaler metric reference at "
                                          f"{KSM_COMMIT[:7]} (STABLE names), written by GKE's managed package "
                                          f"({GKE_KSM}). ASSUMPTION: the package's series carry the HPA's own "
                                          "`namespace`, as kube-state-metrics labels them"),
    "gke": Release("gke", "system metrics", f"{GKE_SYSTEM_METRICS} (kubernetes.io/node/accelerator/*, BETA; GKE "
                                            "writes them for TPU nodes without any scrape config)"),
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
_TPU_LOGGERS = f"{TPU_VLLM_SRC}/vllm/v1/metrics/loggers.py"
_TPU_OFFLOAD = f"{TPU_VLLM_SRC}/vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py"
_SGLANG_COLLECTOR = f"{SGLANG_SRC}/python/sglang/srt/observability/metrics_collector.py"
_EPP_DISAGG = f"{ROUTER_SRC}/pkg/epp/framework/plugins/scheduling/profilehandler/disagg/metrics.go"
_VLLM_NIXL = f"{VLLM_SRC}/vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py"
_EPP = f"{ROUTER_SRC}/pkg/epp/metrics/llm_d_router_metrics.go"
_DCGM_COUNTERS = f"{DCGM_SRC}/etc/default-counters.csv"

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
    # vLLM-TorchTPU (TPU leaders, port 8000): vLLM 0.29.0's names; TPURaidenOffloadingConnector subclasses the
    # OffloadingConnector and keeps its Prometheus metrics (vllm_torchtpu/offload/raiden_connector.py).
    *(Metric(name, "vllm-torchtpu", kind, source, (), what) for name, kind, source, what in (
        ("vllm:request_success_total", "counter", _TPU_LOGGERS, "requests the engine finished"),
        ("vllm:prefix_cache_hits_total", "counter", _TPU_LOGGERS, "tokens served from the HBM prefix cache"),
        ("vllm:prefix_cache_queries_total", "counter", _TPU_LOGGERS, "prompt tokens looked up in the HBM cache"),
        ("vllm:external_prefix_cache_hits_total", "counter", _TPU_LOGGERS,
         "tokens the KV connector (the host-DRAM tier) supplied"),
        ("vllm:kv_offload_load_bytes_total", "counter", _TPU_OFFLOAD, "bytes loaded from host DRAM back to HBM"),
        ("vllm:kv_offload_store_bytes_total", "counter", _TPU_OFFLOAD, "bytes stored from HBM to host DRAM"),
        ("vllm:kv_cache_usage_perc", "gauge", _TPU_LOGGERS, "HBM KV-cache usage, 1 = full"),
        ("vllm:num_requests_running", "gauge", _TPU_LOGGERS, "requests in execution batches"),
        ("vllm:num_requests_waiting", "gauge", _TPU_LOGGERS, "requests queued in the engine"),
        ("vllm:time_to_first_token_seconds", "histogram", _TPU_LOGGERS, "engine-side TTFT"),
        ("vllm:inter_token_latency_seconds", "histogram", _TPU_LOGGERS, "engine-side ITL"),
        ("vllm:e2e_request_latency_seconds", "histogram", _TPU_LOGGERS, "engine-side end-to-end request latency"),
    )),
    # SGLang (an unreleased SGLang-TorchTPU build)
    Metric("sglang:num_requests_total", "sglang", "counter", _SGLANG_COLLECTOR, (), "requests finished"),
    Metric("sglang:cached_tokens_total", "sglang", "counter", _SGLANG_COLLECTOR, ("cache_source",),
           "prefix-cache hit tokens by cache_source=device|host|storage, or cache_source=total when the "
           "scheduler sent no breakdown"),
    Metric("sglang:load_back_tokens_total", "sglang", "counter", _SGLANG_COLLECTOR, (),
           "tokens HiCache loaded back from host DRAM to the device"),
    # llm-d router (EPP metrics port 9090)
    Metric("llm_d_epp_disagg_decision_total", "epp", "counter", _EPP_DISAGG, ("decision_type",),
           "routing decisions of disagg-profile-handler; decision_type=prefill-decode for P/D"),
    # ---- read by the dashboard and alert policies (components/observe/observability.py) ----
    Metric("vllm:prefix_cache_queries_total", "vllm", "counter", _VLLM_LOGGERS, (),
           "prompt tokens looked up in the local (HBM) prefix cache: the hit-rate denominator"),
    Metric("vllm:prompt_tokens_cached_by_source_total", "vllm", "counter", _VLLM_LOGGERS, ("source",),
           "prefix-cache hit tokens by the tier that supplied them: source=device (HBM), host (DRAM offload), "
           "p2p, disk, external_unspecified"),
    Metric("vllm:kv_cache_usage_perc", "vllm", "gauge", _VLLM_LOGGERS, (), "HBM KV-cache usage, 1 = full"),
    Metric("vllm:num_requests_running", "vllm", "gauge", _VLLM_LOGGERS, (), "requests in execution batches"),
    Metric("vllm:num_requests_waiting", "vllm", "gauge", _VLLM_LOGGERS, (), "requests queued in the engine"),
    Metric("vllm:time_to_first_token_seconds", "vllm", "histogram", _VLLM_LOGGERS, (), "engine-side TTFT"),
    Metric("vllm:inter_token_latency_seconds", "vllm", "histogram", _VLLM_LOGGERS, (), "engine-side ITL"),
    Metric("vllm:e2e_request_latency_seconds", "vllm", "histogram", _VLLM_LOGGERS, (),
           "engine-side end-to-end request latency"),
    Metric("vllm:kv_offload_store_bytes_total", "vllm", "counter", _VLLM_OFFLOAD, (),
           "bytes the OffloadingConnector stored from the GPU to host DRAM"),
    Metric("vllm:nixl_bytes_transferred", "vllm", "histogram", _VLLM_NIXL, (), "bytes per NIXL KV transfer"),
    Metric("vllm:nixl_xfer_time_seconds", "vllm", "histogram", _VLLM_NIXL, (), "duration of NIXL KV transfers"),
    Metric("llm_d_epp_request_total", "epp", "counter", _EPP, (), "requests the router processed"),
    Metric("llm_d_epp_request_error_total", "epp", "counter", _EPP, ("error_code",), "requests that failed"),
    Metric("llm_d_epp_request_duration_seconds", "epp", "histogram", _EPP, (), "end-to-end latency at the router"),
    Metric("llm_d_epp_request_ttft_seconds", "epp", "histogram", _EPP, (),
           "time to first response byte at the router (whole duration for non-streaming requests)"),
    Metric("llm_d_epp_request_streaming_itl_seconds", "epp", "histogram", _EPP, (),
           "time between response chunks of streaming requests"),
    Metric("llm_d_epp_request_input_tokens", "epp", "histogram", _EPP, (), "prompt tokens per request"),
    Metric("llm_d_epp_request_output_tokens", "epp", "histogram", _EPP, (), "generated tokens per request"),
    Metric("llm_d_epp_request_cached_tokens", "epp", "histogram", _EPP, (),
           "prompt tokens the model server reported as cached in its response usage (any tier)"),
    Metric("llm_d_epp_ready_endpoints", "epp", "gauge", _EPP, ("name",), "ready endpoints in the pool"),
    Metric("llm_d_epp_average_kv_cache_utilization", "epp", "gauge", _EPP, (),
           "pool-average KV usage as the router reads it from the engines' metrics"),
    Metric("llm_d_epp_average_queue_size", "epp", "gauge", _EPP, (), "pool-average engine queue"),
    Metric("llm_d_epp_scheduler_e2e_duration_seconds", "epp", "histogram", _EPP, (), "scheduling latency"),
    Metric("llm_d_epp_scheduler_attempts_total", "epp", "counter", _EPP, ("status", "endpoint_name"),
           "scheduling attempts per picked endpoint"),
    Metric("llm_d_epp_request_running", "epp", "gauge", _EPP, ("model_name",),
           "requests the router has dispatched and not yet finished (pkg/epp/handlers/server.go IncRunningRequests, "
           "once the request body went to the proxy: flow control's queue is not in it)"),
    Metric("llm_d_epp_flow_control_queue_size", "epp", "gauge", _EPP, (), "requests held by flow control"),
    Metric("llm_d_epp_flow_control_pool_saturation", "epp", "gauge", _EPP, (),
           "saturation gating flow-control dispatch; 1.0 is the set point"),
    Metric("up", "gmp", "gauge", f"{GMP_SRC}/doc/api.md", ("job",),
           "target health the collector records for every scrape (doc/api.md counts it among the built-in "
           "metrics); job = the PodMonitoring's name (pkg/operator/apis/monitoring/v1/pod_config.go)"),
    Metric("DCGM_FI_DEV_GPU_UTIL", "dcgm", "gauge", _DCGM_COUNTERS, (), "GPU utilization, percent"),
    Metric("DCGM_FI_DEV_FB_USED", "dcgm", "gauge", _DCGM_COUNTERS, (), "framebuffer (HBM) used, MiB"),
    Metric("DCGM_FI_DEV_FB_FREE", "dcgm", "gauge", _DCGM_COUNTERS, (), "framebuffer (HBM) free, MiB"),
    # ---- the scaling group and alerts: the HPAs KEDA makes of the ScaledObjects (horizontalpodautoscaler = the
    # ScaledObject's advanced.horizontalPodAutoscalerConfig.name, components/plan/autoscaling.py scaled_object)
    *(Metric(f"kube_horizontalpodautoscaler_{name}", "ksm", "gauge", KSM_HPA, ("horizontalpodautoscaler", *labels),
             what) for name, labels, what in (
        ("spec_min_replicas", (), "the HPA's minReplicas (the ScaledObject's minReplicaCount)"),
        ("spec_max_replicas", (), "the HPA's maxReplicas (the ScaledObject's maxReplicaCount: the reservation's "
                                  "share of the role)"),
        ("status_current_replicas", (), "replicas the HPA last saw on its target's /scale"),
        ("status_desired_replicas", (), "replicas the HPA last asked for"),
        ("status_condition", ("condition", "status"), "the HPA's conditions (AbleToScale, ScalingActive, "
                                                      "ScalingLimited), one series per status, 1 for the current"),
    )),
    Metric("kubernetes_io:node_accelerator_tensorcore_utilization", "gke", "gauge", GKE_SYSTEM_METRICS,
           ("cluster_name",), "kubernetes.io/node/accelerator/tensorcore_utilization, percent"),
    Metric("kubernetes_io:node_accelerator_duty_cycle", "gke", "gauge", GKE_SYSTEM_METRICS, ("cluster_name",),
           "kubernetes.io/node/accelerator/duty_cycle, percent of time the chip was busy"),
    Metric("kubernetes_io:node_accelerator_memory_used", "gke", "gauge", GKE_SYSTEM_METRICS, ("cluster_name",),
           "kubernetes.io/node/accelerator/memory_used, bytes"),
    Metric("kubernetes_io:node_accelerator_memory_total", "gke", "gauge", GKE_SYSTEM_METRICS, ("cluster_name",),
           "kubernetes.io/node/accelerator/memory_total, bytes"),
)


@dataclass(frozen=True)
class Gap:
    """A fact the program wants that an exporter has no metric for, with the evidence."""

    fact: str
    """A smoke check name (tools.live.smoke METRIC_CHECKS) or another consumer's key."""
    exporter: Exporter
    reason: str


GAPS: tuple[Gap, ...] = ()

_BY_NAME = {(metric.name, metric.exporter): metric for metric in METRICS}


def require(name: str, exporter: Exporter) -> str:
    """`name` if the checked list has it for `exporter`; anything else is a programming error."""
    metric = _BY_NAME.get((name, exporter))
    if metric is None:
        raise KeyError(f"metric {name!r} of {exporter} is not in components/facts/metrics.py METRICS: verify it in the "
                       f"pinned {exporter} release and add it with its source")
    return name


def gap(fact: str, exporter: Exporter) -> Gap | None:
    return next((g for g in GAPS if g.fact == fact and g.exporter == exporter), None)

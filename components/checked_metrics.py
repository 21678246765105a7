"""TEMPORARY: the dashboard's and alerts' metric names with their sources, to be folded into the one checked
list (components/metrics.py) once it lands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .versions import ROUTER_VERSION, VLLM

Exporter = Literal["vllm", "sglang", "sglang-jax", "epp", "gmp", "dcgm", "gke"]
Kind = Literal["counter", "gauge", "histogram"]

VLLM_SRC = f"https://github.com/vllm-project/vllm/blob/v{VLLM.version}"
ROUTER_SRC = f"https://github.com/llm-d/llm-d-router/blob/{ROUTER_VERSION}"
GMP_SRC = "https://github.com/GoogleCloudPlatform/prometheus-engine/blob/2ffde4ec7b7e4ca1da4e32f36b692945b78a60e4"
DCGM_COUNTERS = ("https://github.com/NVIDIA/dcgm-exporter/blob/00d6d344ea4a39112b211b9ff5af3d97e0bb51c2/etc/"
                 "default-counters.csv")
GKE_SYSTEM_METRICS = "https://cloud.google.com/monitoring/api/metrics_kubernetes"


@dataclass(frozen=True)
class Metric:
    name: str
    exporter: Exporter
    kind: Kind
    source: str
    labels: tuple[str, ...] = ()
    note: str = ""


_VLLM_LOGGERS = f"{VLLM_SRC}/vllm/v1/metrics/loggers.py"
_VLLM_OFFLOAD = f"{VLLM_SRC}/vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py"
_VLLM_NIXL = f"{VLLM_SRC}/vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py"
_EPP = f"{ROUTER_SRC}/pkg/epp/metrics/llm_d_router_metrics.go"
_EPP_DISAGG = f"{ROUTER_SRC}/pkg/epp/framework/plugins/scheduling/profilehandler/disagg/metrics.go"

METRICS: tuple[Metric, ...] = (
    Metric("vllm:request_success_total", "vllm", "counter", _VLLM_LOGGERS, ("finished_reason",)),
    Metric("vllm:prefix_cache_queries_total", "vllm", "counter", _VLLM_LOGGERS, (),
           "prompt tokens looked up in the local (HBM) prefix cache"),
    Metric("vllm:prefix_cache_hits_total", "vllm", "counter", _VLLM_LOGGERS),
    Metric("vllm:prompt_tokens_cached_by_source_total", "vllm", "counter", _VLLM_LOGGERS, ("source",),
           "prefix-cache hit tokens by tier: source=device (HBM), host (DRAM offload), p2p, disk"),
    Metric("vllm:kv_cache_usage_perc", "vllm", "gauge", _VLLM_LOGGERS, (), "HBM KV-cache usage, 1 = full"),
    Metric("vllm:num_requests_running", "vllm", "gauge", _VLLM_LOGGERS),
    Metric("vllm:num_requests_waiting", "vllm", "gauge", _VLLM_LOGGERS),
    Metric("vllm:time_to_first_token_seconds", "vllm", "histogram", _VLLM_LOGGERS),
    Metric("vllm:inter_token_latency_seconds", "vllm", "histogram", _VLLM_LOGGERS),
    Metric("vllm:e2e_request_latency_seconds", "vllm", "histogram", _VLLM_LOGGERS),
    Metric("vllm:kv_offload_store_bytes_total", "vllm", "counter", _VLLM_OFFLOAD, (),
           "bytes the OffloadingConnector stored from HBM to host DRAM"),
    Metric("vllm:kv_offload_load_bytes_total", "vllm", "counter", _VLLM_OFFLOAD, (),
           "bytes the OffloadingConnector loaded from host DRAM back to HBM"),
    Metric("vllm:nixl_bytes_transferred", "vllm", "histogram", _VLLM_NIXL, (), "bytes per NIXL KV transfer"),
    Metric("vllm:nixl_xfer_time_seconds", "vllm", "histogram", _VLLM_NIXL, (), "duration of NIXL KV transfers"),
    Metric("llm_d_epp_request_total", "epp", "counter", _EPP),
    Metric("llm_d_epp_request_error_total", "epp", "counter", _EPP, ("error_code",)),
    Metric("llm_d_epp_request_duration_seconds", "epp", "histogram", _EPP),
    Metric("llm_d_epp_request_ttft_seconds", "epp", "histogram", _EPP),
    Metric("llm_d_epp_request_streaming_itl_seconds", "epp", "histogram", _EPP),
    Metric("llm_d_epp_request_input_tokens", "epp", "histogram", _EPP),
    Metric("llm_d_epp_request_output_tokens", "epp", "histogram", _EPP),
    Metric("llm_d_epp_request_cached_tokens", "epp", "histogram", _EPP, (),
           "prompt tokens the model server reported as cached in its response usage"),
    Metric("llm_d_epp_ready_endpoints", "epp", "gauge", _EPP, ("name",)),
    Metric("llm_d_epp_average_kv_cache_utilization", "epp", "gauge", _EPP),
    Metric("llm_d_epp_average_queue_size", "epp", "gauge", _EPP),
    Metric("llm_d_epp_scheduler_e2e_duration_seconds", "epp", "histogram", _EPP),
    Metric("llm_d_epp_scheduler_attempts_total", "epp", "counter", _EPP, ("status", "endpoint_name")),
    Metric("llm_d_epp_flow_control_queue_size", "epp", "gauge", _EPP),
    Metric("llm_d_epp_flow_control_pool_saturation", "epp", "gauge", _EPP, ("inference_pool",)),
    Metric("llm_d_epp_disagg_decision_total", "epp", "counter", _EPP_DISAGG, ("decision_type",)),
    Metric("up", "gmp", "gauge", f"{GMP_SRC}/doc/api.md", ("job",),
           "target health the collector writes for every scrape target; job = the PodMonitoring's name "
           f"({GMP_SRC}/pkg/operator/apis/monitoring/v1/pod_config.go)"),
    Metric("DCGM_FI_DEV_GPU_UTIL", "dcgm", "gauge", DCGM_COUNTERS, (),
           "GKE's managed DCGM package (cloud.google.com/kubernetes-engine/docs/how-to/dcgm-metrics) runs "
           "DCGM-Exporter; field names as in its default counters"),
    Metric("DCGM_FI_DEV_FB_USED", "dcgm", "gauge", DCGM_COUNTERS, (), "framebuffer (HBM) used, MiB"),
    Metric("DCGM_FI_DEV_FB_FREE", "dcgm", "gauge", DCGM_COUNTERS, (), "framebuffer (HBM) free, MiB"),
    Metric("kubernetes_io:node_accelerator_tensorcore_utilization", "gke", "gauge", GKE_SYSTEM_METRICS,
           ("cluster_name",), "kubernetes.io/node/accelerator/tensorcore_utilization in PromQL spelling"),
    Metric("kubernetes_io:node_accelerator_duty_cycle", "gke", "gauge", GKE_SYSTEM_METRICS, ("cluster_name",)),
    Metric("kubernetes_io:node_accelerator_memory_used", "gke", "gauge", GKE_SYSTEM_METRICS, ("cluster_name",)),
    Metric("kubernetes_io:node_accelerator_memory_total", "gke", "gauge", GKE_SYSTEM_METRICS, ("cluster_name",)),
)

_BY_NAME = {metric.name: metric for metric in METRICS}


def require(name: str, exporter: Exporter) -> str:
    metric = _BY_NAME.get(name)
    if metric is None or metric.exporter != exporter:
        raise KeyError(f"metric {name!r} of {exporter} is not in the checked list")
    return name

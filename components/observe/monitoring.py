"""Managed Prometheus scraping of the model servers and the router (PodMonitoring, monitoring.googleapis.com/v1)."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from ..cloud.base import Args, Component, StrInput
from ..facts import contract

SCRAPE_INTERVAL = "30s"


SLICE_TARGET_LABEL = "slice"
"""Prometheus label of a serving pod's slice (docs/scaling.md): copied from the pod label that numbers the slices,
so dashboards and queries can split load per slice."""


class ScrapeTarget(Args):
    name: str
    match_labels: dict[str, str] = {}
    match_expressions: tuple[dict[str, object], ...] = ()
    port: int | str
    more_ports: tuple[int, ...] = ()
    """Further ports of the same pods (a GPU pod's other engines)."""
    from_pod: dict[str, str] = {}
    """Pod label -> target label (PodMonitoring spec.targetLabels.fromPod)."""


def serving_targets(track: str, engines_per_pod: int = 1) -> list[ScrapeTarget]:
    """Where each serving pod exposes engine metrics: on GPU every engine serves its own /metrics on its own port
    (vLLM's multi-port data parallelism), and decode pods run vLLM behind the routing sidecar, so prefill and decode
    are scraped on different ports
    (https://github.com/llm-d/llm-d/blob/39507f3/guides/wide-ep/modelserver/gpu/vllm-deepseek-r1-0528/base/disaggregatedset.yaml)."""
    gpu_slice = {contract.DISAGGREGATED_SLICE_LABEL: SLICE_TARGET_LABEL}
    if track == "gpu":
        prefill = contract.engine_ports(contract.MODEL_SERVER_PORT, engines_per_pod)
        decode = contract.engine_ports(contract.DECODE_ENGINE_PORT, engines_per_pod)
        return [
            ScrapeTarget(name="prefill", match_labels={**contract.SERVING_LABELS, contract.ROLE_LABEL: "prefill"},
                         port=prefill[0], more_ports=tuple(prefill[1:]), from_pod=gpu_slice),
            ScrapeTarget(name="decode", match_labels={**contract.SERVING_LABELS, contract.ROLE_LABEL: "decode"},
                         port=decode[0], more_ports=tuple(decode[1:]), from_pod=gpu_slice),
        ]
    return [ScrapeTarget(name="model-server", match_labels=dict(contract.SERVING_LABELS),
                         port=contract.MODEL_SERVER_PORT,
                         from_pod={contract.LWS_GROUP_INDEX_LABEL: SLICE_TARGET_LABEL})]


def router_target() -> ScrapeTarget:
    return ScrapeTarget(name="router", match_expressions=({"key": contract.ROUTER_MODE_LABEL, "operator": "Exists"},),
                        port=contract.ROUTER_METRICS_PORT)


class MonitoringArgs(Args):
    namespace: StrInput
    prefix: str
    targets: tuple[ScrapeTarget, ...]


class Monitoring(Component):
    def __init__(self, name: str, args: MonitoringArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("monitoring", "Monitoring", name, opts)
        self.pod_monitorings = []
        for target in args.targets:
            selector: dict[str, object] = {}
            if target.match_labels:
                selector["matchLabels"] = target.match_labels
            if target.match_expressions:
                selector["matchExpressions"] = list(target.match_expressions)
            self.pod_monitorings.append(k8s.apiextensions.CustomResource(
                f"{name}-{target.name}",
                api_version="monitoring.googleapis.com/v1",
                kind="PodMonitoring",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{args.prefix}-{target.name}", namespace=args.namespace),
                spec={
                    "selector": selector,
                    "endpoints": [{"port": port, "path": contract.METRICS_PATH, "interval": SCRAPE_INTERVAL}
                                  for port in (target.port, *target.more_ports)],
                    **({"targetLabels": {"fromPod": [{"from": k, "to": v} for k, v in target.from_pod.items()]}}
                       if target.from_pod else {}),
                },
                opts=self.child(),
            ))
        self.finish(names=[t.name for t in args.targets])

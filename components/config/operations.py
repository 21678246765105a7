"""Running it: `kubernetes.*` (namespace), `monitoring.*` (dashboard and alerts), `benchmark.*`, `lifecycle.*`
and `cost.*`."""

from __future__ import annotations

import math
import re
from typing import ClassVar, Optional

from pydantic import Field, model_validator

from ..facts import catalog
from .base import _NAME, Section, _fail, for_track


class KubernetesConfig(Section):
    prefix: ClassVar[str] = "kubernetes"
    namespace: str = Field(
        catalog.GUIDE_NAME, description="Namespace of the guide's workloads (router, model servers, weights).")

    @model_validator(mode="after")
    def _check(self) -> KubernetesConfig:
        if len(self.namespace) > 63 or not _NAME.match(self.namespace):
            _fail(self.key("namespace"), self.namespace, "a namespace is 1-63 characters of a-z, 0-9 and '-' "
                  "(https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-label-names)")
        owner = catalog.RESERVED_NAMESPACES.get(self.namespace) or catalog.CHART_NAMESPACES.get(self.namespace) or next(
            (why for prefix, why in catalog.RESERVED_NAMESPACE_PREFIXES.items() if self.namespace.startswith(prefix)),
            None)
        if owner:
            _fail(self.key("namespace"), self.namespace,
                  f"belongs to {owner}; the stack gives its namespace a default-deny NetworkPolicy and a quota, so "
                  f"pick a namespace of its own, e.g. '{catalog.GUIDE_NAME}'")
        return self


_CHANNEL = re.compile(r"^projects/[^/\s]+/notificationChannels/[^/\s]+$")


class MonitoringConfig(Section):
    prefix: ClassVar[str] = "monitoring"
    enabled: bool = Field(True, description="Create PodMonitoring objects so Managed Prometheus scrapes the "
                                            "model servers and the router, and the Cloud Monitoring dashboard "
                                            "and alert policies that read them.")
    notificationChannels: list[str] = Field(
        [], description="Existing notification channels the alert policies notify "
                        "(projects/<project>/notificationChannels/<id>); empty: alerts show in the console only.")
    alertErrorPercent: int = Field(5, ge=1, le=100, description="Alert when more than this percent of router "
                                                                "requests fail for 10 minutes.")
    alertKvCachePercent: int = Field(95, ge=50, le=100, description="Alert when KV-cache usage stays above this "
                                                                    "percent for 15 minutes.")

    @model_validator(mode="after")
    def _check(self) -> MonitoringConfig:
        for channel in self.notificationChannels:
            if not _CHANNEL.match(channel):
                _fail(self.key("notificationChannels"), channel,
                      "expected a channel resource name such as 'projects/my-project/notificationChannels/123' "
                      "(create the channel in Cloud Monitoring first)")
        return self


class BenchmarkConfig(Section):
    prefix: ClassVar[str] = "benchmark"
    enabled: bool = Field(False, description="Create the inference-perf Job (the driver turns it on for one run).")
    conversations: int = Field(
        64, ge=1, description="Multi-turn sessions replayed in all; `concurrency` run at once and each slot starts "
                              "its next session as one ends (inference-perf conversation replay).")
    turnsPerConversation: int = Field(8, ge=1, description="Turns per session.")
    systemPromptTokens: int = Field(
        32768, ge=0, description="Shared system prompt per session: the long prefix the router keeps warm.")
    inputTokensPerTurn: int = Field(2048, ge=1, description="New user tokens per turn.")
    outputTokensPerTurn: int = Field(512, ge=1, description="Generated tokens per turn.")
    concurrency: int = Field(32, ge=1, description="Sessions in flight at once (conversation slots).")
    runId: Optional[str] = Field(
        None, description="Folder name of this run's reports under benchmarks/<stack>/ (the driver sets it).")

    @model_validator(mode="after")
    def _check(self) -> BenchmarkConfig:
        # The run id is a folder name in the bucket and a label value (components/plan/naming.py): refused, not
        # rewritten.
        if self.runId is not None and not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,62}", self.runId):
            _fail(self.key("runId"), self.runId, "1-63 characters of a-z, 0-9, '-' and '_', starting with a letter or "
                                                 "digit (a folder name and a label value, kept as written)")
        if self.concurrency > self.conversations:
            # inference-perf's conversation replay runs at most one session per slot: slots beyond the sessions
            # stay idle, and the run measures less load than the key says.
            field = self.blame("concurrency", "conversations")
            _fail(self.key(field), getattr(self, field),
                  f"benchmark.concurrency ({self.concurrency}) exceeds benchmark.conversations "
                  f"({self.conversations}): at most {self.conversations} sessions can be in flight; raise "
                  f"conversations or lower concurrency")
        return self


class LifecycleConfig(Section):
    prefix: ClassVar[str] = "lifecycle"
    maxLifetimeHours: int = Field(
        24, ge=1, description="Label `max-lifetime-hours` on billable resources, so a forgotten stack shows.")
    preflight: bool = Field(
        True, description="First step of `pulumi up`: the read-only Google checks of `python -m tools preflight` "
                          "(project, billing, APIs, org policies, quotas, reservation, bucket); a failed check stops "
                          "`up` before any resource exists. false skips it.")


class CostConfig(Section):
    """Prices the public table lacks (accelerators) or that you negotiated; decimal USD as strings."""

    prefix: ClassVar[str] = "cost"
    gpuNodeHourUsd: Optional[str] = Field(None, description="Price of one GPU node-hour (A4X Max has no list price).",
                                          json_schema_extra=for_track("gpu", warn=True))
    tpuChipHourUsd: Optional[str] = Field(None, description="Price of one Ironwood chip-hour.",
                                          json_schema_extra=for_track("tpu", warn=True))
    cpuNodeHourUsd: Optional[str] = Field(None, description="Price of one CPU node-hour (system and transfer pools).")

    @model_validator(mode="after")
    def _check(self) -> CostConfig:
        for field in type(self).model_fields:
            value = getattr(self, field)
            if value is None:
                continue
            try:
                ok = math.isfinite(float(value)) and float(value) >= 0
            except ValueError:
                ok = False
            if not ok:
                _fail(self.key(field), value, "expected a finite, non-negative decimal such as '42.50' (USD)")
        return self

    def price(self, field: str) -> Optional[float]:
        value = getattr(self, field)
        return None if value is None else float(value)

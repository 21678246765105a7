"""`autoscaling.*`: whether KEDA scales the serving roles on the router's signals, and each role's minimum, maximum
and step (the plan's envelope and the ScaledObjects come from components/plan/autoscaling.py)."""

from __future__ import annotations

from typing import ClassVar, Optional

from pydantic import Field

from .base import Section, for_track


def _limit(role: str, what: str, track: str, default: str) -> object:
    return Field(None, ge=1, le=100, description=f"{what} of the {role} (default {default}).",
                 json_schema_extra=for_track(track))


class AutoscalingConfig(Section):
    prefix: ClassVar[str] = "autoscaling"
    enabled: bool = Field(
        True, description="Install KEDA and scale each serving role on the router's metrics within the node pools the "
                          "stack holds (GPU: prefill and decode groups; TPU: engines), wherever it applies: with "
                          "monitoring.enabled (the triggers read Managed Prometheus) and, on GPU, gpu.slices = 1 (the "
                          "lws webhook allows per-role scaling of one slice only); elsewhere the plan summary says "
                          "why it is off.")
    prefillMin: Optional[int] = _limit("prefill groups", "Fewest replicas", "gpu", "1")
    prefillMax: Optional[int] = _limit("prefill groups", "Most replicas", "gpu", "gpu.prefillGroups")
    prefillStep: Optional[int] = _limit("prefill groups", "Replicas removed per scale-down period", "gpu", "1")
    decodeMin: Optional[int] = _limit("decode groups", "Fewest replicas", "gpu", "1")
    decodeMax: Optional[int] = _limit("decode groups", "Most replicas", "gpu", "gpu.decodeGroups")
    decodeStep: Optional[int] = _limit("decode groups", "Replicas removed per scale-down period", "gpu", "1")
    enginesMin: Optional[int] = _limit("TPU engines (slices)", "Fewest replicas", "tpu", "1")
    enginesMax: Optional[int] = _limit("TPU engines (slices)", "Most replicas", "tpu", "tpu.slices")
    enginesStep: Optional[int] = _limit("TPU engines (slices)", "Replicas removed per scale-down period", "tpu", "1")

    def limits(self, role: str) -> tuple[Optional[int], Optional[int], Optional[int]]:
        return getattr(self, f"{role}Min"), getattr(self, f"{role}Max"), getattr(self, f"{role}Step")

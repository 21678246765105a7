"""Everything the cluster pulls (charts, images), pinned once here with the reason for each pin."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChartRef:
    chart: str
    version: str
    repo: str | None = None
    """Classic Helm repository URL; None for an `oci://` chart reference."""
    why: str = ""


LWS_CHART = ChartRef(
    chart="oci://registry.k8s.io/lws/charts/lws",
    version="0.11.1",
    why="llm-d guides require LWS v0.11.1 or newer with enableDisaggregatedSet=true (llm-d.md §3.1, §5)",
)
LWS_MIN_VERSION = "0.11.1"

NVIDIA_DRA_DRIVER_CHART = ChartRef(
    chart="nvidia-dra-driver-gpu",
    version="25.8.0",
    repo="https://helm.ngc.nvidia.com/nvidia",
    why="Cluster Toolkit pins v25.8.0 for A4X Max ComputeDomains; the llm-d GKE guide installs 25.8.0 (gke.md §2.6, "
        "llm-d.md §5)",
)

ASAPD_LITE_IMAGE = "us-docker.pkg.dev/gce-ai-infra/asapd-lite/asapd-lite:v0.0.8"
"""Initializes the MRDMA NICs on A4X Max nodes; the tag Cluster Toolkit ships (gke.md §2.3)."""

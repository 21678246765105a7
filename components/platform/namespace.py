"""Cluster platform shared by both tracks: the guide namespace, the Hugging Face token Secret and the
LeaderWorkerSet controller (with DisaggregatedSet on the GPU track).

Gateway API and Inference Extension CRDs are not applied here: GKE installs them from the cluster's
Gateway API channel, and the Inference Extension CRDs from 1.34.0-gke.1626000, below the pinned
minimum (https://llm-d.ai/docs/resources/gateway/gke); applying an upstream copy as well would fight GKE's.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from ..cloud.base import Args, Component
from ..config import ImagesConfig
from ..facts import catalog, contract
from ..facts.versions import LWS_CHART
from ..plan import images

LWS_NAMESPACE = catalog.LWS_NAMESPACE


class PlatformArgs(Args):
    namespace: str
    """Namespace of the guide's workloads."""
    disaggregated_set: bool
    """Install the DisaggregatedSet webhook and RBAC (GPU P/D track)."""
    hf_token: pulumi.Output
    """Secret Output holding the Hugging Face token."""
    images: ImagesConfig = ImagesConfig()
    """Optional digest of the LWS controller image."""


def lws_values(disaggregated_set: bool, pinned: Optional[ImagesConfig] = None) -> dict[str, Any]:
    # The chart always installs the DisaggregatedSet CRD and controller; the switch adds its webhook
    # and RBAC (https://github.com/kubernetes-sigs/lws/blob/060ab4d/charts/lws/values.yaml). Left out entirely on the
    # TPU track.
    values: dict[str, Any] = {"enableDisaggregatedSet": True} if disaggregated_set else {}
    if pinned and images.digest(pinned, "lws"):  # the chart renders `repository:tag`; the tag carries the digest
        values["image"] = {"manager": {"tag": images.tag(pinned, "lws")}}
    return values


class Platform(Component):
    """`lws` is what every LeaderWorkerSet/DisaggregatedSet must depend on: Chart v4 waits for each
    rendered object (the controller Deployment, its webhook) to be ready. Chart v4 applies the chart's
    `crds/` as ordinary objects with server-side apply, so a chart upgrade also upgrades the CRDs,
    which `helm upgrade` would not
    (https://github.com/kubernetes-sigs/lws/blob/060ab4d/site/content/en/docs/installation/_index.md)."""

    def __init__(self, name: str, args: PlatformArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("platform", "Platform", name, opts)
        guide_labels = {"llm-d.ai/guide": catalog.GUIDE_NAME}
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-guide-ns",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=args.namespace, labels=guide_labels),
            opts=self.child(),
        )
        self.hf_token = k8s.core.v1.Secret(
            f"{name}-hf-token",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=contract.HF_TOKEN_SECRET, namespace=self.namespace.metadata.name),
            type="Opaque",
            string_data={contract.HF_TOKEN_KEY: args.hf_token},
            opts=self.child(),
        )
        lws_namespace = k8s.core.v1.Namespace(
            f"{name}-lws-ns", metadata=k8s.meta.v1.ObjectMetaArgs(name=LWS_NAMESPACE), opts=self.child())
        self.lws = k8s.helm.v4.Chart(
            f"{name}-lws",
            chart=LWS_CHART.chart,
            version=LWS_CHART.version,
            namespace=lws_namespace.metadata.name,
            values=lws_values(args.disaggregated_set, args.images),
            opts=self.child(),
        )
        self.finish(namespace=self.namespace.metadata.name, lws_version=LWS_CHART.version)

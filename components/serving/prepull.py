"""Engine image pre-pull: a DaemonSet on the accelerator nodes that only holds the engine image, so each node
pulls it as soon as it joins, while the checkpoint is still being staged and hydrated. Without it the pull
starts only when the serving set is created, after the volume is bound, and lies on the critical path
(components/plan/timeline.py)."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from ..cloud.base import Args, Component, StrInput
from ..facts import catalog
from ..platform import hardening

LABELS = {"app.kubernetes.io/name": "engine-image-prepull"}
"""Matches no router, monitoring or NetworkPolicy selector: the pods serve nothing."""
NAME = f"{catalog.GUIDE_NAME}-engine-image-prepull"
MEMORY = "16Mi"


def _alive() -> k8s.core.v1.ProbeArgs:
    return k8s.core.v1.ProbeArgs(exec_=k8s.core.v1.ExecActionArgs(command=["true"]), period_seconds=300)


class ImagePrepullArgs(Args):
    namespace: StrInput
    image: StrInput
    """The engine image exactly as the serving pods reference it (tag and digest), so the kubelet's cache hits."""
    by_digest: bool = False
    """The reference is `repo@sha256:...` (the TPU engine's build): its content cannot change, so the kubelet pulls
    it only when the node lacks it."""
    node_selector: dict[str, str]
    tolerations: list[k8s.core.v1.TolerationArgs]


class ImagePrepull(Component):
    """One idle container per accelerator node: `sleep` from the engine image itself (no other image to pin),
    non-root, read-only, a few MiB."""

    def __init__(self, name: str, args: ImagePrepullArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("prepull", "ImagePrepull", name, opts)
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-ds",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=NAME, namespace=args.namespace, labels=LABELS,
                # Nothing waits for it: its pods follow the accelerator nodes, and `pulumi up` need not wait for
                # every node's pull (https://www.pulumi.com/registry/packages/kubernetes/how-to-guides/managing-resources-with-server-side-apply/
                # documents the annotation; its await logic is in pulumi-kubernetes provider/pkg/await).
                annotations={"pulumi.com/skipAwait": "true"}),
            spec=k8s.apps.v1.DaemonSetSpecArgs(
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=LABELS),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=LABELS),
                    spec=k8s.core.v1.PodSpecArgs(
                        containers=[k8s.core.v1.ContainerArgs(
                            name="hold", image=args.image, command=["sleep", "infinity"],
                            # Re-resolving a tag costs one registry round trip; the layers stay cached.
                            image_pull_policy="IfNotPresent" if args.by_digest else "Always",
                            security_context=hardening.container_context(),
                            resources=k8s.core.v1.ResourceRequirementsArgs(
                                requests={"cpu": "10m", "memory": MEMORY}, limits={"cpu": "10m", "memory": MEMORY}),
                            liveness_probe=_alive(), readiness_probe=_alive(),
                        )],
                        node_selector=args.node_selector,
                        tolerations=args.tolerations,
                        security_context=hardening.pod_context(),
                        automount_service_account_token=False,
                        termination_grace_period_seconds=5,
                    ),
                ),
            ),
            opts=self.child(),
        )
        self.finish(name=NAME)

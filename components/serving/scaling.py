"""The serving roles' ScaledObjects (one per role, components/plan/autoscaling.py) and the TriggerAuthentication they
read Managed Prometheus with, in the model namespace beside the sets they scale."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from ..cloud.base import Args, Component, StrInput
from ..config import StackConfig
from ..plan import autoscaling


class ScalingArgs(Args):
    namespace: StrInput
    set_name: str
    """The DisaggregatedSet (GPU) or LeaderWorkerSet (TPU) the roles belong to."""
    config: StackConfig


def _custom(name: str, obj: dict, namespace: StrInput,
            opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    meta = obj["metadata"]
    return k8s.apiextensions.CustomResource(
        name, api_version=obj["apiVersion"], kind=obj["kind"],
        metadata=k8s.meta.v1.ObjectMetaArgs(name=meta["name"], namespace=namespace, labels=meta.get("labels")),
        spec=obj["spec"], opts=opts)


class Scaling(Component):
    """Created after the set it scales (a ScaledObject's target must exist) and KEDA's release (its CRDs and
    admission webhook)."""

    def __init__(self, name: str, args: ScalingArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("autoscaling", "Scaling", name, opts)
        cfg = args.config
        auth = _custom(f"{name}-auth", autoscaling.trigger_authentication(cfg), args.namespace, self.child())
        self.scaled = {
            role.name: _custom(f"{name}-{role.name}", autoscaling.scaled_object(cfg, role, args.set_name),
                               args.namespace, self.child(depends_on=[auth]))
            for role in autoscaling.roles(cfg)}
        self.finish(roles=sorted(self.scaled))

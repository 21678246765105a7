"""KEDA, the autoscaler the ScaledObjects of components/serving/scaling.py run on: the pinned chart in its own
namespace, the operator's read access to Managed Prometheus under Workload Identity (no key), and the namespace's
NetworkPolicies (the chart's own are off: components/plan/autoscaling.py keda_values)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from ..cloud.base import Args, Component, StrInput
from ..config import StackConfig
from ..facts.versions import KEDA_CHART
from ..plan import autoscaling

MONITORING_READER = "roles/monitoring.viewer"
"""Read on Cloud Monitoring, the Prometheus query API included (monitoring.timeSeries.list; the scaler asks for the
monitoring.read scope, kedacore/keda v2.20.2 pkg/scalers/gcp/gcp_common.go GcpScopeMonitoringRead)."""
OPERATOR = {"app": "keda-operator"}
METRICS_API = {"app": "keda-operator-metrics-apiserver"}
WEBHOOKS = {"app": "keda-admission-webhooks"}
"""Pod labels of the chart's three Deployments (templates/*/deployment.yaml `app:`)."""
METADATA = ("169.254.169.254/32", 80), ("169.254.169.252/32", 988)
"""Workload Identity tokens from the GKE metadata server (components/platform/netpol.py)."""
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")


class AutoscalerArgs(Args):
    config: StackConfig
    project_number: StrInput
    workload_pool: StrInput
    api_server: tuple[StrInput, ...]
    """The control plane's addresses (/32 each): the operator's and webhooks' API calls, and the kube-apiserver's
    calls into the metrics API and the admission webhook."""


def _peer(labels: Optional[dict[str, str]] = None, cidr: StrInput = "", excluded: Sequence[str] = (),
          namespace: Optional[str] = None) -> k8s.networking.v1.NetworkPolicyPeerArgs:
    if cidr:
        return k8s.networking.v1.NetworkPolicyPeerArgs(ip_block=k8s.networking.v1.IPBlockArgs(
            cidr=cidr, except_=list(excluded) or None))
    return k8s.networking.v1.NetworkPolicyPeerArgs(
        pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
        namespace_selector=k8s.meta.v1.LabelSelectorArgs(match_labels={"kubernetes.io/metadata.name": namespace})
        if namespace else None)


def _ports(*numbers: int, protocol: str = "TCP") -> list[k8s.networking.v1.NetworkPolicyPortArgs]:
    return [k8s.networking.v1.NetworkPolicyPortArgs(port=n, protocol=protocol) for n in numbers]


class Autoscaler(Component):
    """`release` is what the ScaledObjects depend on (its CRDs and the admission webhook)."""

    def __init__(self, name: str, args: AutoscalerArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("autoscaler", "Autoscaler", name, opts)
        cfg = args.config
        ns = autoscaling.KEDA_NAMESPACE
        namespace = k8s.core.v1.Namespace(f"{name}-ns", metadata=k8s.meta.v1.ObjectMetaArgs(name=ns),
                                          opts=self.child())
        # A Google service account of the stack's own, which the operator's Kubernetes account impersonates: a grant
        # to the Workload Identity principal itself would name the same member in every stack of the project, and
        # destroying one stack would take it from the others.
        self.account = gcp.serviceaccount.Account(
            f"{name}-sa", account_id=f"{cfg.cluster_name}-keda", project=cfg.gcp.project,
            display_name=f"KEDA operator of {cfg.cluster_name}: reads Managed Prometheus", opts=self.child())
        self.grant = gcp.projects.IAMMember(
            f"{name}-reads-monitoring", project=cfg.gcp.project, role=MONITORING_READER,
            member=self.account.member, opts=self.child())
        email = f"{cfg.cluster_name}-keda@{cfg.gcp.project}.iam.gserviceaccount.com"
        self.impersonation = gcp.serviceaccount.IAMMember(
            f"{name}-workload-identity", service_account_id=f"projects/{cfg.gcp.project}/serviceAccounts/{email}",
            role="roles/iam.workloadIdentityUser",
            member=pulumi.Output.concat("serviceAccount:", args.workload_pool,
                                        f"[{ns}/{autoscaling.KEDA_OPERATOR_SA}]"),
            opts=self.child(depends_on=[self.account]))
        dns = k8s.networking.v1.NetworkPolicyEgressRuleArgs(
            to=[_peer({"k8s-app": "kube-dns"}, namespace="kube-system")],
            ports=_ports(53, protocol="UDP") + _ports(53))
        api = k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=[_peer(cidr=c) for c in args.api_server],
                                                            ports=_ports(443))
        from_api = [_peer(cidr=c) for c in args.api_server]
        policies = {
            "default-deny": k8s.networking.v1.NetworkPolicySpecArgs(
                pod_selector=k8s.meta.v1.LabelSelectorArgs(), policy_types=["Ingress"]),
            "operator": k8s.networking.v1.NetworkPolicySpecArgs(
                pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=OPERATOR),
                policy_types=["Ingress", "Egress"],
                ingress=[k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                    from_=[_peer(METRICS_API)], ports=_ports(autoscaling.KEDA_GRPC_PORT))],
                egress=[dns, api,
                        *[k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=[_peer(cidr=c)], ports=_ports(p))
                          for c, p in METADATA],
                        # Managed Prometheus' query API (monitoring.googleapis.com, through Private Google Access)
                        k8s.networking.v1.NetworkPolicyEgressRuleArgs(
                            to=[_peer(cidr="0.0.0.0/0", excluded=PRIVATE_RANGES)], ports=_ports(443))]),
            "metrics-apiserver": k8s.networking.v1.NetworkPolicySpecArgs(
                pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=METRICS_API),
                policy_types=["Ingress", "Egress"],
                ingress=[k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                    from_=from_api, ports=_ports(autoscaling.KEDA_METRICS_API_PORT))],
                egress=[dns, api, k8s.networking.v1.NetworkPolicyEgressRuleArgs(
                    to=[_peer(OPERATOR)], ports=_ports(autoscaling.KEDA_GRPC_PORT))]),
            "webhooks": k8s.networking.v1.NetworkPolicySpecArgs(
                pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=WEBHOOKS),
                policy_types=["Ingress", "Egress"],
                ingress=[k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                    from_=from_api, ports=_ports(autoscaling.KEDA_WEBHOOK_PORT))],
                egress=[dns, api]),
        }
        self.policies = [k8s.networking.v1.NetworkPolicy(
            f"{name}-netpol-{key}", metadata=k8s.meta.v1.ObjectMetaArgs(name=f"keda-{key}", namespace=ns),
            spec=spec, opts=self.child(depends_on=[namespace])) for key, spec in policies.items()]
        self.release = k8s.helm.v4.Chart(
            f"{name}-keda",
            chart=KEDA_CHART.chart,
            version=KEDA_CHART.version,
            repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=KEDA_CHART.repo),
            namespace=namespace.metadata.name,
            values={**autoscaling.keda_values(cfg),
                    # the chart annotates the operator's account with the Google account it acts as
                    # (values.yaml podIdentity.gcp, templates/manager/serviceaccount.yaml)
                    "podIdentity": {"gcp": {"enabled": True, "gcpIAMServiceAccount": self.account.email}}},
            opts=self.child(depends_on=[self.grant, self.impersonation, *self.policies]),
        )
        self.finish(namespace=ns, keda_version=KEDA_CHART.version)

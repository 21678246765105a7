"""Least-privilege identities: the node service account and Workload Identity principals."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_gcp as gcp

from .base import Args, Component, StrInput

NODE_ROLES = ("roles/container.defaultNodeServiceAccount",)
"""The single role GKE documents as the minimum for a custom node service account (logs, metrics).
Source: https://docs.cloud.google.com/kubernetes-engine/security/configure-node-service-accounts .
Managed Prometheus collectors write metrics as the node service account, which this role covers
(GoogleCloudPlatform/prometheus-engine issue #443), so no extra metrics principal is needed."""


def workload_pool(project: str) -> str:
    return f"{project}.svc.id.goog"


def workload_principal(project_number: StrInput, pool: StrInput, namespace: str, ksa: str) -> pulumi.Output[str]:
    """IAM member for a Kubernetes service account under Workload Identity Federation
    (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/about-volume-populator).

    Pass the pool as the cluster's output: the pool exists only once a cluster with Workload Identity
    does, and a grant naming it earlier fails with "Identity Pool does not exist"."""
    return pulumi.Output.concat(
        "principal://iam.googleapis.com/projects/", project_number,
        "/locations/global/workloadIdentityPools/", pool, f"/subject/ns/{namespace}/sa/{ksa}",
    )


class NodeIdentityArgs(Args):
    project: str
    account_id: str
    """6-30 characters; the service account's email local part."""


class NodeIdentity(Component):
    """Service account every node pool runs as, instead of the Compute Engine default (Editor)."""

    def __init__(self, name: str, args: NodeIdentityArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("identity", "NodeIdentity", name, opts)
        self.account = gcp.serviceaccount.Account(
            f"{name}-sa",
            account_id=args.account_id,
            display_name=f"GKE nodes of the kimi-k3-1 llm-d guide ({args.account_id})",  # one per stack
            project=args.project,
            opts=self.child(),
        )
        self.grants = [
            gcp.projects.IAMMember(
                f"{name}-{role.split('/')[-1]}",
                project=args.project,
                role=role,
                member=self.account.member,
                opts=self.child(),
            )
            for role in NODE_ROLES
        ]
        self.email = self.account.email
        self.finish(email=self.email)

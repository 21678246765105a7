"""CrossGuard rules for the Kimi K3.1 Pro / llm-d on GKE stacks.

Each rule is a pure function ``check_<x>(resource_type, props) -> list[str]`` over a resource's inputs
(camelCase, as ``args.props`` and the offline plan's ``resources.json`` carry them) returning one message
per violation. The pure functions need no Pulumi engine, so tests call them on hand-built dicts and on
every resource of the offline plan. ``POLICIES`` wraps them as ``ResourceValidationPolicy`` objects for
``policy/__main__.py``.

Values unknown during ``pulumi preview`` (for example a node pool's ``serviceAccount`` taken from a service
account that does not exist yet) are skipped instead of failing the whole policy; ``pulumi up`` runs the
policies again with the resolved inputs just before each resource is created or updated.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the project root, for components.facts.catalog

from pulumi_policy import (
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import (
    UnknownValueError,
)

from policy.buckets import check_bucket_not_public, check_bucket_uniform_access  # noqa: E402
from policy.common import (  # noqa: E402
    HF_SECRET_NAME,
    Check,
    StackCheck,
    _is_list,
)
from policy.exposure import (  # noqa: E402
    check_cluster_enforces_network_policy,
    check_gateway_internal,
    check_network_policy_not_bypassed,
    check_no_exposed_services,
)
from policy.gke import (  # noqa: E402
    check_control_plane_not_public,
    check_firewall_ingress,
    check_no_default_service_account,
    check_no_legacy_auth,
    check_no_primitive_roles,
    check_private_nodes,
    check_reservation_affinity,
    check_shielded_nodes,
    check_workload_identity,
)
from policy.grants import check_bucket_writes_prefixed, check_no_cluster_admin, check_no_escalation_grants  # noqa: E402
from policy.inventory import (  # noqa: E402
    check_declared_artifacts,
    check_declared_commands,
    check_declared_config_maps,
    check_declared_grants,
    check_declared_images,
    check_declared_network,
    check_declared_network_policies,
    check_declared_nodes,
    check_declared_rbac,
    check_declared_storage,
    check_declared_types,
    check_declared_workloads,
)
from policy.pods import (  # noqa: E402
    check_hf_token_via_secret,
    check_no_token_in_model_servers,
    check_pinned_images,
    check_secrets_not_plain_env,
)
from policy.stack import (  # noqa: E402
    check_stack_default_deny,
    check_stack_engine_repository,
    check_stack_shielded_cluster,
    check_stack_user_images,
)


# --------------------------------------------------------------------------- Pulumi policy wrappers
def to_plain(value: Any) -> Any:
    """Copy the engine's props (read-only proxies that raise on unknown values) into plain dicts and lists,
    keeping each unknown value as its sentinel string so the checks can skip it explicitly."""
    if isinstance(value, Mapping):
        plain: dict[Any, Any] = {}
        for key in value:
            try:
                plain[key] = to_plain(value[key])
            except UnknownValueError as err:
                plain[key] = err.unknown_type_sentinel
        return plain
    if _is_list(value):
        items: list[Any] = []
        for index in range(len(value)):
            try:
                items.append(to_plain(value[index]))
            except UnknownValueError as err:
                items.append(err.unknown_type_sentinel)
        return items
    return value


def _validator(check: Check) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        for message in check(args.resource_type, to_plain(args.props)):
            report_violation(message, None)

    return validate


CHECKS: dict[str, tuple[Check, str]] = {
    "bucket-not-public": (
        check_bucket_not_public,
        'Cloud Storage buckets set publicAccessPrevention "enforced" and no bucket IAM grant names '
        "allUsers or allAuthenticatedUsers."),
    "bucket-uniform-access": (
        check_bucket_uniform_access, "Cloud Storage buckets use uniform bucket-level access."),
    "gke-private-nodes": (
        check_private_nodes, "GKE nodes are private (privateClusterConfig.enablePrivateNodes)."),
    "gke-workload-identity": (
        check_workload_identity,
        'GKE clusters set a Workload Identity pool and every node pool uses workloadMetadataConfig "GKE_METADATA".'),
    "gke-no-default-service-account": (
        check_no_default_service_account,
        "GKE nodes never run as the Compute Engine default service account."),
    "gke-shielded-nodes": (
        check_shielded_nodes, "Every GKE node pool enables secure boot and integrity monitoring."),
    "gke-control-plane-not-public": (
        check_control_plane_not_public,
        "No control-plane authorized network reaches the internet (public ranges up to a /24)."),
    "gke-no-legacy-auth": (check_no_legacy_auth, "No legacy ABAC, client certificates or basic auth."),
    "iam-no-primitive-roles": (
        check_no_primitive_roles, "No IAM grant uses a basic role (roles/owner, roles/editor, roles/viewer)."),
    "firewall-no-internet-ingress": (
        check_firewall_ingress, "No ingress firewall rule allows traffic from the internet."),
    "k8s-no-token-in-model-servers": (
        check_no_token_in_model_servers,
        "Model-server pods (serving or engine-type labels, engine images) mount no service-account token."),
    "k8s-secrets-not-plain-env": (
        check_secrets_not_plain_env,
        "Credentials reach containers from Secrets, never as literal env values or inline private keys."),
    "gke-network-policy-enforced": (
        check_cluster_enforces_network_policy,
        "Clusters enforce NetworkPolicy (Dataplane V2, or Calico on the legacy datapath)."),
    "k8s-network-policy-not-bypassed": (
        check_network_policy_not_bypassed,
        "No NetworkPolicy rule allows every source or destination, every namespace, or ingress from the internet."),
    "k8s-no-exposed-services": (
        check_no_exposed_services, "No LoadBalancer or NodePort Service and no externalIPs."),
    "k8s-gateway-internal": (
        check_gateway_internal, "Gateways use an internal GatewayClass."),
    "iam-no-escalation-grants": (
        check_no_escalation_grants,
        "No IAM-admin, token-creator or key-admin grants, no grant to the public or a domain, no SA keys."),
    "bucket-writes-prefixed": (
        check_bucket_writes_prefixed,
        "Bucket grants that write objects are limited to one folder by an IAM condition."),
    "k8s-no-cluster-admin": (
        check_no_cluster_admin,
        "No RBAC binding to cluster-admin/admin/edit or to broad groups, no all-wildcard role."),
    "k8s-pinned-images": (
        check_pinned_images,
        'Container images (pods, custom resources, Helm values) pin a tag or digest, never "latest".'),
    "hf-token-via-secret": (
        check_hf_token_via_secret,
        f'The Hugging Face token reaches pods only through the "{HF_SECRET_NAME}" Secret (secretKeyRef).'),
    "accelerator-reservation": (
        check_reservation_affinity,
        "Node pools of reservation-bound accelerator machines (A4X Max, A4X) consume a SPECIFIC_RESERVATION."),
    "declared-types": (check_declared_types, "Only resource types the program declares "
                                             "(components/checks/declared.py)."),
    "declared-workloads": (
        check_declared_workloads,
        "Every pod and container is a declared workload/container: privileges, host access, volumes and modes, "
        "secrets, claims, host ports, service account, API token, start commands and installs as declared."),
    "declared-images": (
        check_declared_images,
        "Every image of every pod, init and ephemeral container, Job and build step by digest "
        "(registry/path@sha256:<64 hex>) from a declared registry/repository."),
    "declared-config-maps": (
        check_declared_config_maps, "Every ConfigMap is declared; code-carrying ones hold exactly the declared files."),
    "declared-grants": (check_declared_grants, "Every IAM grant is a declared (type, role, member)."),
    "declared-rbac": (
        check_declared_rbac, "Sensitive RBAC permissions only where declared; bindings bind service accounts only."),
    "declared-network-policies": (
        check_declared_network_policies, "NetworkPolicy address peers only as declared for each policy."),
    "declared-storage": (
        check_declared_storage, "Volume claims, storage classes and device claim templates as declared."),
    "declared-network": (
        check_declared_network,
        "Cloud NAT, subnets, external addresses and control-plane access as declared."),
    "declared-nodes": (
        check_declared_nodes, "Node pools: declared service account and scopes, no metadata or tags of their own."),
    "declared-commands": (
        check_declared_commands, "Local commands `pulumi up` runs are the declared ones exactly (the engine build)."),
    "declared-artifacts": (
        check_declared_artifacts, "The checkpoint bucket without lifecycle rules, the engine repository's tags "
                                  "immutable, the engine build's base and identity as declared."),
}
"""Policy name -> (pure check, description). `POLICIES` below and the tests are built from this."""

STACK_CHECKS: dict[str, tuple[StackCheck, str]] = {
    "gke-shielded-cluster": (
        check_stack_shielded_cluster,
        "Clusters keep Shielded GKE Nodes on unless a node pool's machine requires it off (bare-metal A4X Max)."),
    "k8s-namespace-default-deny": (
        check_stack_default_deny,
        "Every namespace but the platform's is the labelled model namespace with a default-deny ingress policy."),
    "declared-engine-repository": (
        check_stack_engine_repository,
        "The stack's engine build runs from the Artifact Registry repository the stack creates, no other."),
    "declared-user-images": (
        check_stack_user_images, "A container that pre-pulls a user-named image runs that image, no other."),
}
"""Checks that need the whole stack: policy name -> (pure check, description)."""


def _stack_validator(check: StackCheck) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = [(r.resource_type, to_plain(r.props)) for r in args.resources]
        for message in check(resources):
            report_violation(message, None)

    return validate


POLICIES: list[ResourceValidationPolicy | StackValidationPolicy] = [
    *(ResourceValidationPolicy(name=name, description=description, validate=_validator(check))
      for name, (check, description) in CHECKS.items()),
    *(StackValidationPolicy(name=name, description=description, validate=_stack_validator(check))
      for name, (check, description) in STACK_CHECKS.items()),
]

"""GKE and the cloud side: private nodes, Workload Identity, no default service account, Shielded Nodes, a
control plane that is not public, no legacy auth, no primitive roles, no open firewall ingress, reservation
affinity on reservation-only machines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.facts import cidrs

from .common import (
    CLUSTER,
    DEFAULT_COMPUTE_SA_SUFFIX,
    FIREWALL,
    GKE_METADATA,
    IAM_GRANT,
    PRIMITIVE_ROLES,
    RESERVATION_ONLY_MACHINE_TYPES,
    SPECIFIC_RESERVATION,
    _get,
    _is_list,
    _node_configs,
    _pools,
    _show,
    is_unknown,
)
from .grants import _policy_bindings


def check_private_nodes(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Cluster nodes have only internal IPs; no node pool opts out."""
    violations: list[str] = []
    if resource_type == CLUSTER:
        private = _get(props, "privateClusterConfig", "enablePrivateNodes")
        if private is not True and not is_unknown(private):
            violations.append(f"privateClusterConfig.enablePrivateNodes is {_show(private)}, must be true")
    for prefix, pool in _pools(resource_type, props):
        if _get(pool, "networkConfig", "enablePrivateNodes") is False:
            violations.append(f"{prefix}networkConfig.enablePrivateNodes is false: "
                              "node pools must not opt out of private nodes")
    return violations


def check_workload_identity(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The cluster has a workload pool and every node pool serves the GKE metadata server."""
    violations: list[str] = []
    if resource_type == CLUSTER:
        pool_name = _get(props, "workloadIdentityConfig", "workloadPool")
        if not pool_name and not is_unknown(pool_name):
            violations.append(
                f'workloadIdentityConfig.workloadPool is {_show(pool_name)}, must be "<project>.svc.id.goog"')
    for prefix, pool in _pools(resource_type, props):
        mode = _get(pool, "nodeConfig", "workloadMetadataConfig", "mode")
        if mode != GKE_METADATA and not is_unknown(mode):
            violations.append(
                f'{prefix}nodeConfig.workloadMetadataConfig.mode is {_show(mode)}, must be "{GKE_METADATA}"')
    return violations


def check_no_default_service_account(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Nodes run as a dedicated service account, never the Compute Engine default one."""
    violations: list[str] = []
    for path, node_config in _node_configs(resource_type, props):
        account = _get(node_config, "serviceAccount")
        if is_unknown(account) or is_unknown(node_config):
            continue
        if not account:
            violations.append(f"{path}.serviceAccount is not set, so nodes run as the Compute Engine default "
                              "service account; set a dedicated node service account")
        elif account == "default" or str(account).endswith(DEFAULT_COMPUTE_SA_SUFFIX):
            violations.append(f"{path}.serviceAccount is {_show(account)}, the Compute Engine default "
                              "service account; set a dedicated node service account")
    return violations


def check_shielded_nodes(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every node pool (a NodePool, a Cluster's inline or default pool) turns on secure boot and integrity
    monitoring. Cluster Toolkit sets both on every pool, bare-metal A4X Max and tpu7x included
    (components/cloud/nodepools.py); whether the cluster may turn Shielded GKE Nodes off is
    `check_stack_shielded_cluster`."""
    violations: list[str] = []
    for path, node_config in _node_configs(resource_type, props):
        if is_unknown(node_config):
            continue
        for option in ("enableSecureBoot", "enableIntegrityMonitoring"):
            value = _get(node_config, "shieldedInstanceConfig", option)
            if value is not True and not is_unknown(value):
                violations.append(f"{path}.shieldedInstanceConfig.{option} is {_show(value)}, must be true")
    return violations


def check_control_plane_not_public(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """No authorized network of the control plane's IP endpoint reaches the internet: no public range wider
    than a /24 (0.0.0.0/0, or its two /1 halves), and not every Google Cloud public address."""
    if resource_type != CLUSTER:
        return []
    config = props.get("masterAuthorizedNetworksConfig")
    violations = []
    blocks = _get(config, "cidrBlocks")
    for index, block in enumerate(blocks if _is_list(blocks) else []):
        cidr = _get(block, "cidrBlock")
        if isinstance(cidr, str) and not is_unknown(cidr) and cidrs.reaches_internet(cidr):
            violations.append(f"masterAuthorizedNetworksConfig.cidrBlocks[{index}].cidrBlock {_show(cidr)} opens the "
                              f"control plane to the internet (public ranges up to a /{cidrs.WIDEST_PUBLIC_PREFIX})")
    if _get(config, "gcpPublicCidrsAccessEnabled") is True:
        violations.append("masterAuthorizedNetworksConfig.gcpPublicCidrsAccessEnabled is true: every Google Cloud "
                          "public address may reach the control plane")
    return violations


def check_no_legacy_auth(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """No legacy ABAC, client certificates or basic auth on the cluster: RBAC and IAM only."""
    if resource_type != CLUSTER:
        return []
    violations = []
    if props.get("enableLegacyAbac") is True:
        violations.append("enableLegacyAbac is true: legacy ABAC bypasses RBAC; leave it off")
    if _get(props, "masterAuth", "clientCertificateConfig", "issueClientCertificate") is True:
        violations.append("masterAuth.clientCertificateConfig.issueClientCertificate is true: use IAM, not a "
                          "client certificate")
    for key in ("username", "password"):
        if _get(props, "masterAuth", key):
            violations.append(f"masterAuth.{key} is set: basic authentication is legacy; use IAM")
    return violations


def check_no_primitive_roles(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """No IAM grant the stack makes uses a basic role (owner, editor, viewer), on any resource or identity."""
    if not IAM_GRANT.match(resource_type):
        return []
    roles: list[tuple[str, Any]] = [("role", props.get("role"))]
    roles += [(f"policyData.bindings[{i}].role", _get(b, "role")) for i, b in enumerate(_policy_bindings(props))]
    member = props.get("member") or props.get("members")
    to = f" to {_show(member)}" if member and not is_unknown(member) else ""
    return [f"{path} is {_show(role)}{to}: basic roles are project-wide; grant a predefined role"
            for path, role in roles if isinstance(role, str) and role in PRIMITIVE_ROLES]


def check_firewall_ingress(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """No ingress firewall rule that allows traffic from the internet (0.0.0.0/0 or any public range wider than
    a /24 other than Google's health-check and IAP ranges)."""
    if resource_type != FIREWALL:
        return []
    direction = props.get("direction") or "INGRESS"
    if direction != "INGRESS" or not props.get("allows") or props.get("disabled") is True:
        return []
    ranges = props.get("sourceRanges")
    return [f"sourceRanges[{i}] {_show(cidr)} lets the internet in; allow only the addresses that need it"
            for i, cidr in enumerate(ranges if _is_list(ranges) else [])
            if isinstance(cidr, str) and not is_unknown(cidr) and cidrs.reaches_internet(cidr)]


def check_reservation_affinity(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Node pools of reservation-bound machine types consume a specific, named reservation."""
    violations: list[str] = []
    for path, node_config in _node_configs(resource_type, props):
        machine = _get(node_config, "machineType")
        if not isinstance(machine, str) or machine not in RESERVATION_ONLY_MACHINE_TYPES:
            continue
        affinity = f"{path}.reservationAffinity"
        kind = _get(node_config, "reservationAffinity", "consumeReservationType")
        values = _get(node_config, "reservationAffinity", "values")
        if kind != SPECIFIC_RESERVATION and not is_unknown(kind):
            violations.append(f'machine type "{machine}" is reservation-bound: {affinity}.consumeReservationType '
                              f'is {_show(kind)}, must be "{SPECIFIC_RESERVATION}"')
        if is_unknown(values):
            continue
        named = [v for v in values if v] if _is_list(values) else []
        if not named:
            violations.append(f'machine type "{machine}" is reservation-bound: {affinity}.values is empty, '
                              "must name the reservation")
    return violations



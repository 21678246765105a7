"""Network exposure: the cluster enforces NetworkPolicy, no policy bypasses the namespace's default deny, no
exposed Services, internal Gateways only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.facts import cidrs

from .common import (
    ADVANCED_DATAPATH,
    CLUSTER,
    EXPOSED_SERVICE_TYPES,
    INTERNAL_GATEWAY_CLASSES,
    K8S_GATEWAY,
    K8S_NETWORK_POLICY,
    K8S_SERVICE,
    _get,
    _is_list,
    _show,
    is_unknown,
)


def check_cluster_enforces_network_policy(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The cluster enforces NetworkPolicy: GKE Dataplane V2 (`datapathProvider: ADVANCED_DATAPATH`, enforcement
    built in), or the legacy datapath with network policy enforcement (Calico) on. On the legacy datapath without
    it every NetworkPolicy of the stack is inert
    (https://cloud.google.com/kubernetes-engine/docs/how-to/network-policy)."""
    if resource_type != CLUSTER:
        return []
    provider = props.get("datapathProvider")
    if provider == ADVANCED_DATAPATH or is_unknown(provider):
        return []
    enabled = _get(props, "networkPolicy", "enabled")
    addon_off = _get(props, "addonsConfig", "networkPolicyConfig", "disabled")
    if enabled is True and addon_off is False:
        return []
    return [f"datapathProvider is {_show(provider)} and network policy enforcement is off "
            f"(networkPolicy.enabled {_show(enabled)}, addonsConfig.networkPolicyConfig.disabled {_show(addon_off)}): "
            f'the stack\'s NetworkPolicies would not be enforced; use "{ADVANCED_DATAPATH}"']


def _peers(rule: Any, key: str) -> Any:
    return _get(rule, key) if isinstance(rule, Mapping) else None


def check_network_policy_not_bypassed(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """No NetworkPolicy opens what the default deny closes: no ingress rule without sources (`from` missing or
    empty matches every source), no ingress from internet ranges, no egress rule without destinations, and no
    peer with an empty `namespaceSelector` (every namespace, whose pods anyone with a namespace can label)
    (https://kubernetes.io/docs/concepts/services-networking/network-policies/)."""
    if resource_type != K8S_NETWORK_POLICY:
        return []
    violations = []
    for direction, key in (("ingress", "from"), ("egress", "to")):
        rules_ = _get(props, "spec", direction)
        for i, rule in enumerate(rules_ if _is_list(rules_) else []):
            where = f"spec.{direction}[{i}]"
            peers = _peers(rule, key)
            if is_unknown(peers):
                continue
            if not _is_list(peers) or not peers:
                every = "source" if key == "from" else "destination"
                violations.append(f"{where} has no `{key}`: it allows every {every}")
                continue
            for j, peer in enumerate(peers):
                selector = _get(peer, "namespaceSelector")
                if isinstance(selector, Mapping) and not selector.get("matchLabels") \
                        and not selector.get("matchExpressions"):
                    violations.append(f"{where}.{key}[{j}].namespaceSelector is empty: it selects every namespace")
                cidr = _get(peer, "ipBlock", "cidr")
                if direction == "ingress" and isinstance(cidr, str) and not is_unknown(cidr) \
                        and cidrs.reaches_internet(cidr):
                    violations.append(f"{where}.{key}[{j}].ipBlock.cidr {_show(cidr)} lets the internet in")
    return violations


def check_no_exposed_services(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """No Service opens a port outside the cluster: not `LoadBalancer`, not `NodePort`, no `externalIPs`. The
    router is reached through a port-forward or the internal Gateway (router.mode=gateway)."""
    if resource_type != K8S_SERVICE:
        return []
    violations = []
    kind = _get(props, "spec", "type")
    if kind in EXPOSED_SERVICE_TYPES:
        violations.append(f"spec.type is {_show(kind)}: it exposes {_show(_get(props, 'metadata', 'name'))} outside "
                          "the cluster; use ClusterIP (the router: port-forward or router.mode=gateway)")
    if _get(props, "spec", "externalIPs"):
        violations.append("spec.externalIPs is set: it exposes the Service on node addresses")
    return violations


def check_gateway_internal(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A Gateway uses an internal GatewayClass (a regional internal Application Load Balancer), never one with an
    internet-facing address (https://cloud.google.com/kubernetes-engine/docs/concepts/gateway-api#gatewayclass)."""
    if resource_type != K8S_GATEWAY:
        return []
    name = _get(props, "spec", "gatewayClassName")
    if name in INTERNAL_GATEWAY_CLASSES or is_unknown(name):
        return []
    return [f"spec.gatewayClassName is {_show(name)}: only the internal classes "
            f"{sorted(INTERNAL_GATEWAY_CLASSES)} keep the router off the internet"]



"""Whole-stack checks: Shielded Nodes on the cluster, a default-deny ingress policy in the model namespace, user
images only where the stack takes them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from components.checks import declared
from components.platform import hardening

from .common import (
    CLUSTER,
    K8S_NAMESPACE,
    K8S_NETWORK_POLICY,
    MODEL_NAMESPACE_LABEL,
    NODE_POOL,
    SHIELDED_NODES_UNSUPPORTED,
    _get,
    _is_kubernetes,
    _is_list,
    _show,
    is_unknown,
)
from .inventory import _allowed_for, _object_name
from .pods import _containers, _image, _kind, _pod_specs


def _inputs_of(resources: Sequence[tuple[str, Mapping[str, Any]]], resource_type: str) -> list[Mapping[str, Any]]:
    return [props for kind, props in resources if kind == resource_type and isinstance(props, Mapping)]


def check_stack_shielded_cluster(resources: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Clusters keep Shielded GKE Nodes on, unless the stack has a node pool whose machine cannot join such a
    cluster (SHIELDED_NODES_UNSUPPORTED: bare-metal A4X Max)."""
    machines = {_get(p, "nodeConfig", "machineType") for p in _inputs_of(resources, NODE_POOL)}
    needs_off = sorted(m for m in machines if isinstance(m, str) and m in SHIELDED_NODES_UNSUPPORTED)
    violations = []
    for props in _inputs_of(resources, CLUSTER):
        shielded = props.get("enableShieldedNodes")
        if shielded is True or is_unknown(shielded) or needs_off:
            continue
        violations.append(f"cluster {_show(props.get('name'))}: enableShieldedNodes is {_show(shielded)}, must be "
                          "true (no node pool of the stack uses a machine that requires it off)")
    return violations


def _is_default_deny_ingress(props: Mapping[str, Any]) -> bool:
    selector = _get(props, "spec", "podSelector")
    empty = isinstance(selector, Mapping) and not selector.get("matchLabels") and not selector.get("matchExpressions")
    types = _get(props, "spec", "policyTypes")
    return empty and _is_list(types) and "Ingress" in types and not _get(props, "spec", "ingress")


def check_stack_default_deny(resources: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Every namespace the program creates other than the platform's (declared.SYSTEM_NAMESPACES) is the model
    namespace: it carries the guide label (`llm-d.ai/guide`) and has a NetworkPolicy that selects every pod and
    allows no ingress, so only the allow policies' flows reach its pods (components/platform/netpol.py). Removing
    the label
    does not remove the duty."""
    guarded = {_get(p, "metadata", "namespace") for p in _inputs_of(resources, K8S_NETWORK_POLICY)
               if _is_default_deny_ingress(p)}
    violations = []
    for props in _inputs_of(resources, K8S_NAMESPACE):
        name = _get(props, "metadata", "name")
        labels = _get(props, "metadata", "labels")
        if is_unknown(name):
            continue
        if name in declared.GUARDED_SYSTEM_NAMESPACES and name not in guarded:
            violations.append(f"namespace {_show(name)} has no default-deny ingress NetworkPolicy (podSelector {{}}, "
                              "policyTypes [Ingress], no ingress rules): its allow policies "
                              "(declared.NETWORK_POLICIES) are all that may reach its pods")
        if name in declared.SYSTEM_NAMESPACES:
            continue
        if not isinstance(labels, Mapping) or MODEL_NAMESPACE_LABEL not in labels:
            violations.append(f"namespace {_show(name)} lacks the label {MODEL_NAMESPACE_LABEL}: every namespace but "
                              f"the platform's {sorted(declared.SYSTEM_NAMESPACES)} is the model namespace")
        if name not in guarded:
            violations.append(f"namespace {_show(name)} has no default-deny ingress NetworkPolicy (podSelector {{}}, "
                              "policyTypes [Ingress], no ingress rules)")
    return violations


def check_stack_user_images(resources: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """A container declared to take another container's image (`image_from`: the pre-pull of a user-named SGLang
    image) runs an image that container runs in this stack, not any image."""
    sourced = {w.kind for w in declared.WORKLOADS if any(c.image_from for c in w.containers)}
    wanted: list[tuple[str, str, str]] = []
    for resource_type, props in resources:
        kind = _kind(resource_type, props) if _is_kubernetes(resource_type) else ""
        if kind not in sourced:
            continue
        name, namespace = _object_name(props)
        for _, spec in _pod_specs(props):
            for container in _containers(spec):
                for workload in declared.workloads(kind, name, namespace):
                    allowed = _allowed_for(workload, container)
                    if allowed is not None and allowed.image_from and hardening.repository(
                            _image(container) or "x") not in {i for c in workload.containers for i in c.images}:
                        wanted.append((f"{kind} {name!r} container {container.get('name')!r}", _image(container),
                                       allowed.image_from))
    images: dict[str, set[str]] = {}
    for resource_type, props in resources if wanted else []:
        if _is_kubernetes(resource_type) and not resource_type.startswith("kubernetes:helm.sh/"):
            for _, spec in _pod_specs(props):
                for container in _containers(spec):
                    images.setdefault(str(container.get("name")), set()).add(_image(container))
    return [f"{who} runs {image!r}, which no {source!r} container of the stack runs (it may only pre-pull that image)"
            for who, image, source in wanted if image not in images.get(source, set())]




REPOSITORY = "gcp:artifactregistry/repository:Repository"


def check_stack_engine_repository(resources: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """An image of the stack's own engine build comes from the Artifact Registry repository this stack creates
    (`<location>-docker.pkg.dev/<project>/<repositoryId>`), not from a repository of the same shape elsewhere."""
    own = set()
    for props in _inputs_of(resources, REPOSITORY):
        parts = [props.get(k) for k in ("location", "project", "repositoryId")]
        if any(is_unknown(p) for p in parts):
            return []
        own.add("{}-docker.pkg.dev/{}/{}".format(*parts))
    found = []
    for resource_type, props in resources:
        if resource_type == "command:local:Command":
            continue
        if not _is_kubernetes(resource_type) or resource_type.startswith("kubernetes:helm.sh/"):
            continue
        for _, spec in _pod_specs(props):
            for container in _containers(spec):
                image = _image(container)
                repository = hardening.repository(image) if image and not is_unknown(image) else ""
                if re.fullmatch(declared.BUILT_ENGINE_REPOSITORY, repository) and \
                        repository.rsplit("/", 1)[0] not in own:
                    name, _ = _object_name(props)
                    found.append(f"{_kind(resource_type, props)} {name!r} container {container.get('name')!r} runs "
                                 f"{image!r}: an engine build from a repository this stack does not create "
                                 f"({sorted(own) or 'none'})")
    return found

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

import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the project root, for components.catalog

from pulumi_policy import ReportViolation, ResourceValidationArgs, ResourceValidationPolicy
from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
)

from components import catalog  # noqa: E402

Check = Callable[[str, Mapping[str, Any]], list[str]]

# --------------------------------------------------------------------------- resource types
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
BUCKET_IAM_BINDING = "gcp:storage/bucketIAMBinding:BucketIAMBinding"
BUCKET_IAM_POLICY = "gcp:storage/bucketIAMPolicy:BucketIAMPolicy"
CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
K8S_SECRET = "kubernetes:core/v1:Secret"

# --------------------------------------------------------------------------- facts the rules enforce
PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})
GKE_METADATA = "GKE_METADATA"
DEFAULT_COMPUTE_SA_SUFFIX = "-compute@developer.gserviceaccount.com"

# Machine types that can only be provisioned against a reservation, from the project's hardware catalog
# ("reservation-bound only":
# https://docs.cloud.google.com/ai-hypercomputer/docs/create/create-a4xmax-instances-in-bulk); reservation affinity
# shape from
# https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/modules/compute/gke-node-pool/reservation_definitions.tf.
RESERVATION_ONLY_MACHINE_TYPES = frozenset(
    machine.machine_type for machine in catalog.GPU_MACHINES.values() if machine.reservation_only)
SPECIFIC_RESERVATION = "SPECIFIC_RESERVATION"

HF_SECRET_NAME = "llm-d-hf-token"
HF_TOKEN_ENV_NAMES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
# Helm value / data keys that would carry the token itself, compared after lowercasing and dropping "_-.".
HF_TOKEN_KEYS = frozenset({"hftoken", "hfhubtoken", "huggingfacetoken", "huggingfacehubtoken"})
HF_TOKEN_PATTERN = re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}")

IMAGE_KEY = re.compile(r"^(?:image|[a-z][A-Za-z0-9]*Image)$")
"""`image`, or a camelCase key ending in `Image` (Helm values such as `initImage`); not label keys."""

UNKNOWN_SENTINELS = frozenset({
    UNKNOWN_ARCHIVE_VALUE, UNKNOWN_ARRAY_VALUE, UNKNOWN_ASSET_VALUE, UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE, UNKNOWN_OBJECT_VALUE, UNKNOWN_STRING_VALUE,
})


# --------------------------------------------------------------------------- helpers
def is_unknown(value: Any) -> bool:
    """True for the engine's placeholder of a value not known until the update."""
    return isinstance(value, str) and value in UNKNOWN_SENTINELS


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _get(props: Any, *keys: str) -> Any:
    """Nested lookup; None when a level is missing or not an object (an unknown level stays unknown)."""
    current = props
    for key in keys:
        if is_unknown(current):
            return current
        if not isinstance(current, Mapping):
            return None
        current = current.get(key)
    return current


def _show(value: Any) -> str:
    return "not set" if value is None else json.dumps(value)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _mappings(value: Any, path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every object inside `value` (itself included), with its path such as `spec.containers[0]`."""
    if isinstance(value, Mapping):
        yield path, value
        for key, item in value.items():
            yield from _mappings(item, _join(path, key))
    elif _is_list(value):
        for index, item in enumerate(value):
            yield from _mappings(item, f"{path}[{index}]")


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, _join(path, key))
    elif _is_list(value):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")
    elif isinstance(value, str) and not is_unknown(value):
        yield path, value


def _node_configs(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(path, nodeConfig) of every node pool a resource declares: a NodePool, or a Cluster's default pool
    (only when it declares no inline `nodePools`, which replace the default pool) and inline pools."""
    if resource_type == NODE_POOL:
        return [("nodeConfig", props.get("nodeConfig"))]
    if resource_type != CLUSTER:
        return []
    pools = props.get("nodePools")
    if not _is_list(pools) or not pools:
        return [("nodeConfig", props.get("nodeConfig"))]
    return [(f"nodePools[{i}].nodeConfig", _get(pool, "nodeConfig")) for i, pool in enumerate(pools)]


def _pools(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(path prefix, pool object) of every explicit node pool: a NodePool, or a Cluster's inline pools."""
    if resource_type == NODE_POOL:
        return [("", props)]
    pools = props.get("nodePools") if resource_type == CLUSTER else None
    if not _is_list(pools):
        return []
    return [(f"nodePools[{i}].", pool) for i, pool in enumerate(pools)]


def _is_kubernetes(resource_type: str) -> bool:
    """Kubernetes objects, custom resources (`kubernetes:<group>/<version>:<Kind>`) and Helm/YAML
    components; not the provider (`pulumi:providers:kubernetes`)."""
    return resource_type.startswith("kubernetes:")


# --------------------------------------------------------------------------- buckets
def check_bucket_not_public(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Buckets enforce public access prevention; no bucket IAM grant names allUsers/allAuthenticatedUsers."""
    if resource_type == BUCKET:
        prevention = props.get("publicAccessPrevention")
        if is_unknown(prevention) or prevention == "enforced":
            return []
        return [f'publicAccessPrevention is {_show(prevention)}, must be "enforced"']

    members: list[Any] = []
    if resource_type == BUCKET_IAM_MEMBER:
        members = [props.get("member")]
    elif resource_type == BUCKET_IAM_BINDING:
        listed = props.get("members")
        members = list(listed) if _is_list(listed) else []
    elif resource_type == BUCKET_IAM_POLICY:
        members = _policy_members(props.get("policyData"))
    else:
        return []
    role = props.get("role")
    grant = f" role {_show(role)}" if isinstance(role, str) and not is_unknown(role) else ""
    return [f"grants{grant} to {member} on bucket {_show(props.get('bucket'))}: buckets must not be public"
            for member in members if isinstance(member, str) and member in PUBLIC_MEMBERS]


def _policy_members(policy_data: Any) -> list[Any]:
    if not isinstance(policy_data, str) or is_unknown(policy_data):
        return []
    try:
        document = json.loads(policy_data)
    except ValueError:
        return []
    bindings = _get(document, "bindings")
    found: list[Any] = []
    for binding in bindings if _is_list(bindings) else []:
        listed = _get(binding, "members")
        found.extend(listed if _is_list(listed) else [])
    return found


def check_bucket_uniform_access(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Buckets use uniform bucket-level access (IAM only, no object ACLs)."""
    if resource_type != BUCKET:
        return []
    uniform = props.get("uniformBucketLevelAccess")
    if uniform is True or is_unknown(uniform):
        return []
    return [f"uniformBucketLevelAccess is {_show(uniform)}, must be true"]


# --------------------------------------------------------------------------- GKE
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
    """The cluster enables Shielded GKE Nodes."""
    if resource_type != CLUSTER:
        return []
    shielded = props.get("enableShieldedNodes")
    if shielded is True or is_unknown(shielded):
        return []
    return [f"enableShieldedNodes is {_show(shielded)}, must be true"]


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


# --------------------------------------------------------------------------- Kubernetes
def image_references(props: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(path, reference) for every container image in a Kubernetes resource's inputs: string values of
    `image`/`*Image` keys anywhere (pod specs, custom resources' spec, Helm values) and Helm-style image
    objects {registry, repository, tag, digest} under such keys, composed into one reference. Unknown values
    are skipped. An object without repository (e.g. only `tag`) yields its tag as `:tag`."""
    for path, mapping in _mappings(props):
        for key, value in mapping.items():
            if not isinstance(key, str) or not IMAGE_KEY.match(key):
                continue
            where = _join(path, key)
            if isinstance(value, str):
                if not is_unknown(value):
                    yield where, value
            elif isinstance(value, Mapping) and any(k in value for k in ("repository", "tag", "digest")):
                parts = [value.get(k) for k in ("registry", "repository", "tag", "digest")]
                if any(is_unknown(p) for p in parts):
                    continue
                registry, repository, tag, digest = (str(p) if p not in (None, "") else "" for p in parts)
                reference = "/".join(p for p in (registry, repository) if p)
                reference += f":{tag}" if tag else ""
                reference += f"@{digest}" if digest else ""
                yield where, reference


def split_image(reference: str) -> tuple[str | None, str | None]:
    """(tag, digest) of an image reference; a registry port (`host:5000/repo`) is not a tag."""
    name, _, digest = reference.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else None
    return tag or None, digest or None


def check_pinned_images(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every container image carries an explicit tag or digest, and the tag is not `latest`."""
    if not _is_kubernetes(resource_type):
        return []
    violations: list[str] = []
    for path, reference in image_references(props):
        tag, digest = split_image(reference)
        if tag is None and digest is None:
            violations.append(f'{path}: image "{reference}" has no tag or digest; pin a version tag or digest')
        elif tag is not None and tag.lower() == "latest":
            violations.append(f'{path}: image "{reference}" uses the "latest" tag; pin a version tag or digest')
    return violations


def _normalize_key(key: str) -> str:
    return re.sub(r"[_.\-]", "", key.lower())


def check_hf_token_via_secret(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The Hugging Face token reaches pods only from the `llm-d-hf-token` Secret: token env vars use
    valueFrom.secretKeyRef to it, and no other Kubernetes input (Helm values, manifests, other Secrets)
    carries a token literal."""
    if not _is_kubernetes(resource_type):
        return []
    if resource_type == K8S_SECRET:
        name = _get(props, "metadata", "name")
        if name == HF_SECRET_NAME or is_unknown(name):
            return []  # the one place the token lives (or a Secret whose name is not known yet)
    violations: list[str] = []
    for path, mapping in _mappings(props):
        env_name = mapping.get("name")
        if (isinstance(env_name, str) and env_name in HF_TOKEN_ENV_NAMES
                and ("value" in mapping or "valueFrom" in mapping)):
            violations.extend(_env_violations(path, env_name, mapping))
        for key, value in mapping.items():
            if (isinstance(key, str) and _normalize_key(key) in HF_TOKEN_KEYS
                    and isinstance(value, str) and value and value != HF_SECRET_NAME and not is_unknown(value)):
                violations.append(f'{_join(path, key)} holds a Hugging Face token literal; reference the '
                                  f'"{HF_SECRET_NAME}" Secret instead')
    for path, text in _strings(props):
        if HF_TOKEN_PATTERN.search(text):
            violations.append(f'{path} contains a Hugging Face token literal; keep it only in the '
                              f'"{HF_SECRET_NAME}" Secret')
    return violations


def _env_violations(path: str, env_name: str, entry: Mapping[str, Any]) -> list[str]:
    if "value" in entry:
        return [f'{path}: env {env_name} sets a literal value; use valueFrom.secretKeyRef '
                f'{{name: "{HF_SECRET_NAME}"}} instead']
    secret = _get(entry, "valueFrom", "secretKeyRef", "name")
    if secret == HF_SECRET_NAME or is_unknown(secret):
        return []
    return [f'{path}: env {env_name} comes from {_show(secret) if secret else "no secretKeyRef"}; '
            f'use valueFrom.secretKeyRef {{name: "{HF_SECRET_NAME}"}}']


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
    "gke-shielded-nodes": (check_shielded_nodes, "GKE clusters enable Shielded GKE Nodes."),
    "k8s-pinned-images": (
        check_pinned_images,
        'Container images (pods, custom resources, Helm values) pin a tag or digest, never "latest".'),
    "hf-token-via-secret": (
        check_hf_token_via_secret,
        f'The Hugging Face token reaches pods only through the "{HF_SECRET_NAME}" Secret (secretKeyRef).'),
    "accelerator-reservation": (
        check_reservation_affinity,
        "Node pools of reservation-bound accelerator machines (A4X Max, A4X) consume a SPECIFIC_RESERVATION."),
}
"""Policy name -> (pure check, description). `POLICIES` below and the tests are built from this."""

POLICIES: list[ResourceValidationPolicy] = [
    ResourceValidationPolicy(name=name, description=description, validate=_validator(check))
    for name, (check, description) in CHECKS.items()
]

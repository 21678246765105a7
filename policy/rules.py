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

import functools
import hashlib
import ipaddress
import json
import posixpath
import re
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
)

from components.checks import declared  # noqa: E402
from components.facts import catalog, cidrs, versions  # noqa: E402
from components.platform import hardening  # noqa: E402

Check = Callable[[str, Mapping[str, Any]], list[str]]
StackCheck = Callable[[Sequence[tuple[str, Mapping[str, Any]]]], list[str]]
"""A check over the whole stack: (resource type, inputs) of every resource."""

# --------------------------------------------------------------------------- resource types
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
BUCKET_IAM_BINDING = "gcp:storage/bucketIAMBinding:BucketIAMBinding"
BUCKET_IAM_POLICY = "gcp:storage/bucketIAMPolicy:BucketIAMPolicy"
CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
K8S_SECRET = "kubernetes:core/v1:Secret"
K8S_NAMESPACE = "kubernetes:core/v1:Namespace"
K8S_NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
FIREWALL = "gcp:compute/firewall:Firewall"
K8S_SERVICE = "kubernetes:core/v1:Service"
K8S_GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"
K8S_CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
K8S_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
K8S_CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
K8S_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
SERVICE_ACCOUNT_KEY = "gcp:serviceaccount/key:Key"
IAM_GRANT = re.compile(r"^gcp:[^:]+/i[aA][mM](Member|Binding|Policy):")
ANY_IAM_GRANT = re.compile(r"^gcp:[^:]+/[a-zA-Z]*I[aA][mM](Member|Binding|Policy):|^gcp:[^:]+/i[aA][mM]")
"""Every IAM grant, the per-resource ones (`bucketIAMMember`, `serviceAccount/iAMMember`, ...) included."""
"""Every pulumi_gcp IAM grant resource (project, folder, organization, bucket, service account, ...)."""

# --------------------------------------------------------------------------- facts the rules enforce
PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})
DOMAIN_MEMBER_PREFIX = "domain:"
"""A grant to `domain:<name>` gives every account of a Google Workspace domain access."""
PRIMITIVE_ROLES = frozenset({"roles/owner", "roles/editor", "roles/viewer"})
"""Basic roles (https://cloud.google.com/iam/docs/roles-overview#basic): project-wide, far beyond any one need."""
MODEL_NAMESPACE_LABEL = "llm-d.ai/guide"
"""Label of the model namespace (components/platform/namespace.py), which must carry a default-deny ingress policy."""
SHIELDED_NODES_UNSUPPORTED = frozenset(
    machine.machine_type for machine in catalog.GPU_MACHINES.values() if not machine.shielded_gke_nodes)
"""Machine types a Shielded GKE Nodes cluster cannot hold (catalog.GpuMachine.shielded_gke_nodes)."""
POD_FIELDS = ("hostNetwork", "hostPID", "hostIPC")
MODEL_SERVER_LABEL_KEYS = frozenset({"llm-d.ai/engine-type", "llm-d.ai/inference-serving"})
"""Pod labels that make a pod a model server: the engine type (components/serving/modelservers.py), or the serving label
the router selects (contract.SERVING_LABELS)."""
ENGINE_REPOSITORIES = frozenset({hardening.repository(versions.VLLM.image)})
"""Image repositories of the engines (components/facts/versions.py): a pod running one is a model server too. The TPU
engine runs in a plain Python image the Jobs share, so its pods are known by their labels alone."""
CREDENTIAL_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD", "PASSPHRASE", "CREDENTIAL",
                              "CREDENTIALS", "APIKEY", "KEY", "HMAC", "PRIVATE"})
CREDENTIAL_PAIRS = frozenset({"API_KEY", "ACCESS_KEY", "PRIVATE_KEY", "SECRET_KEY", "AUTH_KEY"})
"""Words (between `_`, `-` or `.`) of an env var name that holds a credential (`CHUNK_TOKENS` is not one)."""
PRIVATE_KEY_PATTERN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
"""The PEM label of a private key (RFC 7468, https://www.rfc-editor.org/rfc/rfc7468#section-10 and 11)."""
ADVANCED_DATAPATH = "ADVANCED_DATAPATH"
"""GKE Dataplane V2, which enforces NetworkPolicy itself
(https://cloud.google.com/kubernetes-engine/docs/concepts/dataplane-v2)."""
EXPOSED_SERVICE_TYPES = frozenset({"LoadBalancer", "NodePort"})
INTERNAL_GATEWAY_CLASSES = frozenset({"gke-l7-rilb", "gke-l7-rilb-mc"})
"""GKE's internal GatewayClasses (regional internal Application Load Balancer, single- and multi-cluster)."""
ESCALATION_ROLES = {
    "roles/resourcemanager.projectIamAdmin": "may grant any role on the project, itself included",
    "roles/resourcemanager.folderIamAdmin": "may grant any role on the folder",
    "roles/resourcemanager.organizationAdmin": "may grant any role in the organization",
    "roles/iam.securityAdmin": "may grant any role on the resource",
    "roles/iam.serviceAccountTokenCreator": "mints tokens of service accounts (impersonation)",
    "roles/iam.serviceAccountKeyAdmin": "creates long-lived service-account keys",
    "roles/iam.serviceAccountAdmin": "may change who can act as a service account",
    "roles/iam.workloadIdentityPoolAdmin": "may let outside identities act as service accounts",
}
"""Predefined roles that hand out more access than they name (Google Cloud's IAM roles reference,
https://cloud.google.com/iam/docs/roles-permissions, and CIS Google Cloud Foundations 1.6 on token creator)."""
OBJECT_WRITE_ROLES = frozenset({
    "roles/storage.objectCreator", "roles/storage.objectUser", "roles/storage.objectAdmin", "roles/storage.admin",
    "roles/storage.legacyBucketWriter", "roles/storage.legacyBucketOwner", "roles/storage.legacyObjectOwner",
})
"""Cloud Storage roles that create, overwrite or delete objects (https://cloud.google.com/storage/docs/access-control/iam-roles)."""
PREFIX_CONDITION = re.compile(r'\(*\s*resource\.name\.startsWith\(\s*"(?P<name>[^"]+)"\s*\)\s*\)*')
OBJECT_CONDITION = re.compile(r'\(*\s*resource\.name\s*==\s*"(?P<name>[^"]+)"\s*\)*')
"""The two IAM condition terms that limit a writer: a folder (`startsWith`, ending in `/`) or one object (`==`)."""
ADMIN_CLUSTER_ROLES = frozenset({"cluster-admin", "admin", "edit"})
"""Kubernetes' user-facing roles that grant write access to (nearly) everything they reach."""
BROAD_GROUPS = frozenset({"system:masters", "system:authenticated", "system:unauthenticated"})
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
    if isinstance(value, list):  # the common case first: plain JSON (the ABC check below is slow)
        return True
    if isinstance(value, str | bytes | dict | int | float | bool) or value is None:
        return False
    return isinstance(value, Sequence)


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


_SCALARS = str | int | float | bool | type(None)


def _mappings(value: Any, path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every object inside `value` (itself included), with its path such as `spec.containers[0]`: depth first,
    each object before what it holds, in key order (a stack of pending children rather than nested generators,
    which passed every object up through each level above it)."""
    pending = [(path, value)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, dict) or (not isinstance(value, list | str) and isinstance(value, Mapping)):
            yield path, value
            children = [(_join(path, key), item) for key, item in value.items()
                        if isinstance(item, dict | list) or not isinstance(item, _SCALARS)]
        elif _is_list(value):
            children = [(f"{path}[{index}]", item) for index, item in enumerate(value)
                        if not isinstance(item, _SCALARS)]
        else:
            continue
        pending.extend(reversed(children))


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every known string inside `value`, with its path, in the same order as `_mappings`."""
    pending = [(path, value)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, str):
            if not is_unknown(value):
                yield path, value
            continue
        if isinstance(value, Mapping):
            children = [(_join(path, key), item) for key, item in value.items()]
        elif _is_list(value):
            children = [(f"{path}[{index}]", item) for index, item in enumerate(value)]
        else:
            continue
        pending.extend(reversed(children))


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
    bucket = _show(props.get("bucket"))
    return [f"grants{grant} to {member} on bucket {bucket}: buckets must not be public"
            for member in members if isinstance(member, str) and member in PUBLIC_MEMBERS] + [
            f"grants{grant} to {member} on bucket {bucket}: buckets must not be open to a whole domain"
            for member in members if isinstance(member, str) and member.startswith(DOMAIN_MEMBER_PREFIX)]


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


def _kind(resource_type: str, props: Mapping[str, Any]) -> str:
    kind = props.get("kind")
    return kind if isinstance(kind, str) else resource_type.rsplit(":", 1)[-1]


TEMPLATE_KINDS = {"Deployment": "spec.template.spec", "DaemonSet": "spec.template.spec", "Job": "spec.template.spec",
                  "StatefulSet": "spec.template.spec", "ReplicaSet": "spec.template.spec",
                  "CronJob": "spec.jobTemplate.spec.template.spec", "Pod": "spec"}
"""Built-in kinds and the one place their schema holds a pod spec (custom resources are searched whole)."""


def _pod_specs(props: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every pod spec inside an object: a mapping with a `containers` list (pods, templates, custom resources)."""
    path = TEMPLATE_KINDS.get(props.get("kind")) if isinstance(props.get("kind"), str) else None
    if path is not None:
        spec = _get(props, *path.split("."))
        if isinstance(spec, Mapping) and _is_list(spec.get("containers")):
            yield path, spec
        return
    for path, mapping in _mappings(props):
        if _is_list(mapping.get("containers")):
            yield path, mapping


def _pod_templates(props: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """(path of the spec, template labels, pod spec) of every pod template: a mapping whose `spec` holds
    `containers` (a Pod, a workload's template, a custom resource's leader/worker templates)."""
    for path, mapping in _mappings(props):
        spec = mapping.get("spec")
        if isinstance(spec, Mapping) and _is_list(spec.get("containers")):
            labels = _get(mapping, "metadata", "labels")
            yield _join(path, "spec"), labels if isinstance(labels, Mapping) else {}, spec


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for key in ("initContainers", "containers", "ephemeralContainers")
            for c in (spec.get(key) if _is_list(spec.get(key)) else []) if isinstance(c, Mapping)]


def _image(container: Mapping[str, Any]) -> str:
    image = container.get("image")
    return image if isinstance(image, str) else ""


def _is_restricted(context: Any) -> bool:
    """The restricted profile's core (hardening.container_context): non-root, no escalation, every capability
    dropped, not privileged."""
    dropped = _get(context, "capabilities", "drop")
    return (isinstance(context, Mapping) and context.get("runAsNonRoot") is True
            and context.get("allowPrivilegeEscalation") is False and context.get("privileged") is not True
            and _is_list(dropped) and "ALL" in dropped and not _get(context, "capabilities", "add"))


def _host_paths(spec: Mapping[str, Any]) -> dict[str, str]:
    """Volume name -> normalized host path of every hostPath volume of a pod spec."""
    volumes = spec.get("volumes")
    found = {}
    for volume in volumes if _is_list(volumes) else []:
        path = _get(volume, "hostPath", "path")
        if isinstance(volume, Mapping) and volume.get("hostPath") is not None:
            found[str(volume.get("name"))] = posixpath.normpath(path) if isinstance(path, str) and path else "/"
    return found


def _is_model_server(labels: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """A pod the router can send traffic to or that runs an engine: the serving or engine-type labels, or an
    engine image (whatever its containers are called)."""
    if any(key in labels for key in MODEL_SERVER_LABEL_KEYS):
        return True
    return any(hardening.repository(_image(c)) in ENGINE_REPOSITORIES for c in _containers(spec) if _image(c))


def check_no_token_in_model_servers(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Model-server pods get no Kubernetes API credential: `automountServiceAccountToken: false` and no projected
    service-account token (they run third-party engine code next to the network; none calls the API)."""
    if not _is_kubernetes(resource_type) or resource_type.startswith("kubernetes:helm.sh/"):
        return []
    violations = []
    for path, labels, spec in _pod_templates(props):
        if not _is_model_server(labels, spec):
            continue
        automount = spec.get("automountServiceAccountToken")
        if automount is not False and not is_unknown(automount):
            violations.append(f"{path}.automountServiceAccountToken is {_show(automount)} on a model server: "
                              "must be false (no Kubernetes API token in engine pods)")
        volumes = spec.get("volumes")
        for volume in volumes if _is_list(volumes) else []:
            sources = _get(volume, "projected", "sources")
            if _is_list(sources) and any(isinstance(s, Mapping) and "serviceAccountToken" in s for s in sources):
                violations.append(f"{path}: volume {_show(_get(volume, 'name'))} projects a service-account token "
                                  "into a model server")
    return violations


def _is_credential_name(name: str) -> bool:
    words = [w for w in re.split(r"[^A-Za-z0-9]+", name.upper()) if w]
    pairs = {f"{a}_{b}" for a, b in zip(words, words[1:], strict=False)}
    return bool(set(words) & CREDENTIAL_WORDS or pairs & CREDENTIAL_PAIRS)


def check_secrets_not_plain_env(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Credentials reach containers from Secrets (valueFrom.secretKeyRef), never as literal env values: an env
    var named like a credential (TOKEN, SECRET, PASSWORD, API_KEY, ...) with a `value`, or a private key
    anywhere in a Kubernetes input outside a Secret. The Hugging Face token has its own rule."""
    if not _is_kubernetes(resource_type):
        return []
    violations = []
    for path, mapping in _mappings(props):
        name, value = mapping.get("name"), mapping.get("value")
        in_env = path.rsplit(".", 1)[-1].startswith("env[")
        if (in_env and isinstance(name, str) and name not in HF_TOKEN_ENV_NAMES and _is_credential_name(name)
                and isinstance(value, str) and value and not is_unknown(value)):
            violations.append(f"{path}: env {name} sets a literal credential; use valueFrom.secretKeyRef to a Secret")
    if resource_type != K8S_SECRET:
        violations += [f"{path} contains a private key; keep it in a Secret" for path, text in _strings(props)
                       if PRIVATE_KEY_PATTERN.search(text)]
    return violations


# --------------------------------------------------------------------------- network exposure
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


# --------------------------------------------------------------------------- privilege grants
def _grant_members(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(path, role, member) of every member an IAM grant names (member, members, policyData bindings)."""
    role = props.get("role")
    found: list[tuple[str, Any, Any]] = []
    if "member" in props:
        found.append(("member", role, props.get("member")))
    listed = props.get("members")
    for i, member in enumerate(listed if _is_list(listed) else []):
        found.append((f"members[{i}]", role, member))
    for i, binding in enumerate(_policy_bindings(props)):
        members = _get(binding, "members")
        for j, member in enumerate(members if _is_list(members) else []):
            found.append((f"policyData.bindings[{i}].members[{j}]", _get(binding, "role"), member))
    return found


def _policy_bindings(props: Mapping[str, Any]) -> list[Any]:
    """The bindings of an IAMPolicy resource's `policyData` document (none when unknown or not JSON)."""
    document = props.get("policyData")
    if not isinstance(document, str) or is_unknown(document):
        return []
    try:
        bindings = _get(json.loads(document), "bindings")
    except ValueError:
        return []
    return list(bindings) if _is_list(bindings) else []


def check_no_escalation_grants(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """No IAM grant of a role that hands out more access (IAM policy admin, service-account tokens or keys), no
    grant of any role to the public or a whole domain, and no service-account keys (long-lived credentials that
    would sit in the state)."""
    if resource_type == SERVICE_ACCOUNT_KEY:
        return ["a service-account key is a long-lived credential stored in the state: use Workload Identity or "
                "impersonation instead"]
    if not IAM_GRANT.match(resource_type):
        return []
    roles = [props.get("role"), *(role for _, role, _ in _grant_members(resource_type, props))]
    violations = [f"role {_show(role)}: {ESCALATION_ROLES[role]}"
                  for role in dict.fromkeys(r for r in roles if isinstance(r, str) and r in ESCALATION_ROLES)]
    for path, role, member in _grant_members(resource_type, props):
        if isinstance(member, str) and (member in PUBLIC_MEMBERS or member.startswith(DOMAIN_MEMBER_PREFIX)):
            violations.append(f"{path} {_show(member)} gets role {_show(role)}: no grant to the public or a "
                              "whole domain")
    return violations


def _limits_writes(alternative: str, prefix: str) -> bool:
    """True if one `||` alternative of a condition holds a term that limits it to a folder or an object under
    `prefix` (terms joined by `&&`; parentheses around a term do not matter)."""
    for term in (t.strip() for t in alternative.split("&&")):
        match = PREFIX_CONDITION.fullmatch(term) or OBJECT_CONDITION.fullmatch(term)
        folder = match is not None and match.re is PREFIX_CONDITION
        name = match["name"] if match else ""
        if name.startswith(prefix) and len(name) > len(prefix) + 1 and (name.endswith("/") or not folder):
            return True
    return False


def check_bucket_writes_prefixed(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A bucket grant of a role that creates, overwrites or deletes objects carries an IAM condition that limits it
    to one folder, `resource.name.startsWith("projects/_/buckets/<bucket>/objects/<prefix>/")`, or one object
    (`resource.name == "..."`); with `||`, every alternative is so limited (the staging writer, the benchmark
    results writer)."""
    if resource_type not in (BUCKET_IAM_MEMBER, BUCKET_IAM_BINDING):
        return []
    role = props.get("role")
    if not isinstance(role, str) or role not in OBJECT_WRITE_ROLES:
        return []
    expression = _get(props, "condition", "expression")
    bucket = props.get("bucket")
    if is_unknown(expression) or is_unknown(bucket):
        return []
    if isinstance(expression, str) and isinstance(bucket, str) and "?" not in expression:
        prefix = f"projects/_/buckets/{bucket.removeprefix('b/')}/objects/"
        if all(_limits_writes(alternative, prefix) for alternative in expression.split("||")):
            return []
    return [f"role {_show(role)} on bucket {_show(bucket)} without a folder condition "
            f"(condition.expression {_show(expression)}): writers must be limited with "
            '`resource.name.startsWith("projects/_/buckets/<bucket>/objects/<folder>/")`']


def check_no_cluster_admin(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """No RBAC binding to `cluster-admin` or to the `system:masters`, `system:authenticated` or
    `system:unauthenticated` groups, and no role that grants every verb on every resource
    (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#user-facing-roles)."""
    violations = []
    if resource_type in (K8S_CLUSTER_ROLE_BINDING, K8S_ROLE_BINDING):
        ref = _get(props, "roleRef", "name")
        if ref in ADMIN_CLUSTER_ROLES:
            violations.append(f"roleRef {_show(ref)}: binds cluster-wide admin rights")
        subjects = props.get("subjects")
        for i, subject in enumerate(subjects if _is_list(subjects) else []):
            name = _get(subject, "name")
            if _get(subject, "kind") == "Group" and name in BROAD_GROUPS:
                violations.append(f"subjects[{i}] is group {_show(name)}: binds every (or any) caller")
    elif resource_type in (K8S_CLUSTER_ROLE, K8S_ROLE):
        rules_ = props.get("rules")
        for i, rule in enumerate(rules_ if _is_list(rules_) else []):
            if all("*" in (_get(rule, key) or []) for key in ("apiGroups", "resources", "verbs")):
                violations.append(f"rules[{i}] grants every verb on every resource (cluster-admin by another name)")
    return violations


# --------------------------------------------------------------------------- deny by default: what is declared
# components/checks/declared.py is the program's contract; each check below refuses what it does not declare.
SHELL_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "{", "}", "`", "!", "((", "))", ";;", "|&"})
SHELL_COMMAND_KEYWORDS = frozenset({"then", "do", "else", "elif", "if", "while", "until", "time"})
SHELL_CLOSERS = frozenset({"fi", "done", "esac"})
REDIRECTIONS = re.compile(r"^[0-9]*(>>?|<<?|>&|<&|&>)$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTHONS = re.compile(r"^(?:.*/)?python(?:3(?:\.[0-9]+)?)?$")
CREDENTIAL_FLAGS = frozenset({"--api-key", "--token", "--password", "--hf-token", "--secret", "--access-token",
                              "--auth-token", "--client-secret"})
"""Command-line flags that take a credential: a literal one would sit in the state and the pod spec."""


def _tokens(script: str) -> list[str]:
    lexer = shlex.shlex(script.replace("\n", " ; "), posix=True, punctuation_chars=";&|()<>`")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: nothing can be said about it, so nothing is allowed
        return [UNPARSABLE]


UNPARSABLE = "<unparsable script>"
"""The program a script that cannot be read runs: never declared, so such a script is refused (fail closed)."""


@functools.lru_cache(maxsize=256)
def shell_commands(script: str) -> list[tuple[dict[str, Any], list[str]]]:
    """The simple commands a shell script runs, as (wrapper facts, argv): `VAR=x`, `exec` and `env [-u VAR]...`
    stripped (wrapper facts: the variables `env -u` removes); `$(( ))` arithmetic and `for` word lists are no
    commands; the bodies of `$( )` and backquotes, quoted or not, are (each read as a script of its own). A script
    this reader cannot follow (unbalanced quotes or parentheses) runs `UNPARSABLE`."""
    bodies: list[str] = []
    flat = _substitutions(script, bodies)
    commands: list[list[str]] = []
    if flat is None:
        commands.append([UNPARSABLE])
    else:
        _parse(_tokens(flat), commands)
    found = [_unwrap(words) for words in commands]
    for body in bodies:
        found += shell_commands(body)
    return found  # cached per script: callers only read it


def _substitutions(script: str, bodies: list[str]) -> str | None:
    """The script with every `$(( ))` replaced by `0` and every `$( )` or backquoted command by a placeholder word,
    their bodies collected; None when a quote or a substitution does not close."""
    out: list[str] = []
    i, quote = 0, ""
    while i < len(script):
        char = script[i]
        if quote == "'":
            quote = "" if char == "'" else quote
            out.append(char)
            i += 1
            continue
        if char == "\\":
            out.append(script[i:i + 2])
            i += 2
            continue
        if script.startswith("$(", i) or char == "`":
            arithmetic = script.startswith("$((", i)
            start = i + (3 if arithmetic else 1 if char == "`" else 2)
            end = script.find("`", start) if char == "`" else _matching(script, start, 2 if arithmetic else 1)
            if end < 0:
                return None
            if arithmetic:
                out.append("0")
            elif char != "`" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", script[start:end]):
                out.append("__variable__")  # `$(VAR)`: Kubernetes expands it in command and args, no command
            else:
                bodies.append(script[start:end])
                out.append("__substitution__")
            i = end + 1
            continue
        if char == "'" and not quote:
            quote = "'"
        elif char == '"':
            quote = "" if quote == '"' else '"'
        out.append(char)
        i += 1
    return None if quote else "".join(out)


def _matching(script: str, start: int, depth: int) -> int:
    """Index of the `)` that brings `depth` open parentheses to zero; -1 if none."""
    quote = ""
    for i in range(start, len(script)):
        char = script[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _parse(tokens: list[str], commands: list[list[str]]) -> None:
    current: list[str] = []
    word_list = False  # inside `for NAME in WORDS`: words, not commands
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token.startswith("#") and not current:  # a comment, to the end of its line
            while i < len(tokens) and tokens[i] != ";":
                i += 1
            continue
        if REDIRECTIONS.match(token):
            current += [token, tokens[i]] if i < len(tokens) else [token]
            i += 1
            continue
        if token in SHELL_SEPARATORS:
            if current and not word_list:
                commands.append(current)
            current = []
            continue
        if word_list:
            word_list = token != "do"
            continue
        if not current and token in SHELL_COMMAND_KEYWORDS | SHELL_CLOSERS:
            continue
        if not current and token in ("for", "select", "case"):
            word_list = True
            continue
        current.append(token)
    if current and not word_list:
        commands.append(current)


def _unwrap(words: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Strip assignments, `exec` and `env [-u VAR | -i | VAR=x]...` in front of a command; redirections go."""
    facts: dict[str, Any] = {"unset": set(), "clean": False}
    argv = [w for j, w in enumerate(words) if not REDIRECTIONS.match(w)
            and not (j > 0 and REDIRECTIONS.match(words[j - 1]))]
    while argv:
        if ASSIGNMENT.match(argv[0]) or argv[0] == "exec":
            argv = argv[1:]
        elif argv[0] in ("env", "/usr/bin/env"):
            argv = argv[1:]
            while argv and (argv[0].startswith("-") or ASSIGNMENT.match(argv[0])):
                if argv[0] in ("-u", "--unset") and len(argv) > 1:
                    facts["unset"].add(argv[1])
                    argv = argv[2:]
                    continue
                if argv[0] in ("-i", "--ignore-environment", "-"):
                    facts["clean"] = True
                argv = argv[1:]
        else:
            break
    return facts, argv


def _installer_args(argv: list[str]) -> tuple[str, list[str]] | None:
    """(installer, arguments after its `install`) of a command that installs code: pip (also `python -m pip`),
    uv, apt-get, curl...; None for other commands."""
    if not argv:
        return None
    program = posixpath.basename(argv[0])
    if PYTHONS.match(argv[0]) and len(argv) > 2 and argv[1] == "-m":
        module = argv[2].split(".")[0]
        if module in ("pip", "ensurepip", "uv", "pipx"):
            rest = argv[3:]
            return module, rest[1:] if rest[:1] == ["install"] else rest
        return None
    if program in declared.INSTALLERS:
        rest = argv[1:]
        if program in ("pip", "pip3", "uv") and rest[:2] == ["pip", "install"]:
            rest = rest[1:]
        return program, rest[1:] if rest[:1] == ["install"] else rest
    return None


def _start_commands(container: Mapping[str, Any], allowed: declared.Container) -> tuple[list[str], list[tuple[
        dict[str, Any], list[str]]]]:
    """(violations, commands) of what a container runs at start: its command (or the image's entrypoint) and the
    commands of a `shell -c` script."""
    command = container.get("command")
    args = container.get("args")
    argv = [str(w) for w in (command if _is_list(command) else [])] + [
        str(w) for w in (args if _is_list(args) else [])]
    if not _is_list(command) or not command:
        return [], []  # the image's own entrypoint, with arguments
    program = argv[0]
    if program in allowed.shells or posixpath.basename(program) in ("sh", "bash", "dash", "ash", "zsh"):
        if program not in allowed.shells:
            return [f"starts the shell {program!r}, which it does not declare"], []
        if "-c" not in argv[1:3]:  # `bash FILE`: the file is the program
            return [], [({"unset": set(), "clean": False}, argv[1:])]
        index = argv.index("-c")
        script = argv[index + 1] if index + 1 < len(argv) else ""
        return [], shell_commands(script)
    return [], [({"unset": set(), "clean": False}, argv)]


def _check_start(container: Mapping[str, Any], allowed: declared.Container, secret_env: set[str]) -> list[str]:
    found, commands = _start_commands(container, allowed)
    for facts, argv in commands:
        if not argv:
            continue
        program = argv[0]
        installer = _installer_args(argv)
        if installer is not None:
            name, install = installer
            if tuple(install) not in allowed.installs:
                found.append(f"runs the installer {name!r} with {shlex.join(install)!r}: not a declared install "
                             f"(declared: {[shlex.join(i) for i in allowed.installs] or 'none'})")
            visible = sorted(secret_env - facts["unset"]) if not facts["clean"] else []
            if visible:
                found.append(f"runs the installer {name!r} with the secret variables {visible} in its "
                             "environment (unset them with `env -u`)")
            continue
        if not _declared_program(argv, allowed.programs) and program not in declared.SHELL_BUILTINS:
            found.append(f"runs {program!r} at start, which it does not declare (declared: "
                         f"{sorted(allowed.programs)})")
    words = [str(w) for key in ("command", "args") for w in (container.get(key) or []) if _is_list(
        container.get(key))]
    for word in (w for text in words for w in text.replace("=", " ").split()):
        if word in CREDENTIAL_FLAGS:
            found.append(f"passes a credential on its command line ({word}): use a Secret")
    return found


def _declared_program(argv: list[str], programs: frozenset[str]) -> bool:
    """The command is a declared program: its executable, or the declared words it starts with."""
    return any(argv[:len(entry.split())] == entry.split() for entry in programs)


def _mounts(container: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    mounts = container.get("volumeMounts")
    return [m for m in mounts if isinstance(m, Mapping)] if _is_list(mounts) else []


def _volume_kinds(spec: Mapping[str, Any]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Volume name -> (source kind, volume) of a pod spec."""
    volumes = spec.get("volumes")
    found = {}
    for volume in volumes if _is_list(volumes) else []:
        if isinstance(volume, Mapping):
            kinds = [k for k in volume if k != "name"]
            found[str(volume.get("name"))] = (kinds[0] if len(kinds) == 1 else "+".join(sorted(kinds)), volume)
    return found


UNSAFE_SECCOMP = frozenset({"Unconfined", "Localhost"})


def _context_violations(context: Any, allowed: declared.Container, level: str) -> list[str]:
    found = []
    if not isinstance(context, Mapping):
        return ["no securityContext, but it is declared restricted"] if allowed.restricted and level else []
    privileged = allowed.privileged
    if context.get("privileged") is True and not privileged:
        found.append("privileged, which it does not declare")
    if context.get("allowPrivilegeEscalation") is True and not privileged:
        found.append("allowPrivilegeEscalation true")
    added = _get(context, "capabilities", "add")
    extra = sorted(str(c) for c in added if c not in allowed.capabilities) if _is_list(added) else []
    if extra and not privileged:
        found.append(f"adds capabilities {extra}")
    if (context.get("runAsUser") == 0 or context.get("runAsGroup") == 0
            or context.get("runAsNonRoot") is False) and not allowed.root:
        found.append("runs as root (UID/GID 0 or runAsNonRoot false), which it does not declare")
    if _get(context, "seccompProfile", "type") in UNSAFE_SECCOMP and not privileged:
        found.append(f"seccompProfile {_get(context, 'seccompProfile', 'type')}")
    if _get(context, "appArmorProfile", "type") == "Unconfined" and not privileged:
        found.append("appArmorProfile Unconfined")
    if context.get("procMount") == "Unmasked":
        found.append("procMount Unmasked")
    if _get(context, "seLinuxOptions", "type") in ("spc_t", "unconfined_t") and not privileged:
        found.append("an unconfined SELinux type")
    if context.get("readOnlyRootFilesystem") is False and not allowed.writable_root:
        found.append("a writable root filesystem, which it does not declare")
    if level and allowed.restricted and not _is_restricted(context):
        found.append("not the restricted profile (components/platform/hardening.py container_context), which it "
                     "declares")
    if level and allowed.restricted and context.get("readOnlyRootFilesystem") is not True:
        found.append("no read-only root filesystem, though declared restricted")
    return found


def _pod_violations(kind: str, name: str, namespace: str, spec: Mapping[str, Any]) -> list[str]:
    candidates = declared.workloads(kind, name, namespace)
    if not candidates:
        return [f"{kind} {name!r} in namespace {namespace!r} is not a declared workload "
                f"(components/checks/declared.py)"]
    best: list[str] | None = None
    for workload in candidates:  # an object may fit one of several declarations (the engine choice of a profile)
        found = _workload_violations(workload, spec)
        if not found:
            return []
        best = found if best is None or len(found) < len(best) else best
    return best or []


def _workload_violations(workload: declared.Workload, spec: Mapping[str, Any]) -> list[str]:
    found = []
    for host in sorted(declared.HOST_FIELDS):
        if spec.get(host) is True and host not in workload.host:
            found.append(f"the pod sets {host}, which the workload does not declare")
    if spec.get("hostUsers") is True and not workload.host:
        found.append("the pod sets hostUsers true")
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if workload.service_account is None:
        if account not in (None, "default") and not is_unknown(account):
            found.append(f"runs as service account {account!r}; the workload declares none")
    elif not (isinstance(account, str) and (is_unknown(account) or declared.matches(workload.service_account,
                                                                                     account))):
        found.append(f"runs as service account {_show(account)}, not the declared {workload.service_account!r}")
    token = spec.get("automountServiceAccountToken")
    if not workload.api_token and token is not False:
        found.append(f"automountServiceAccountToken is {_show(token)}: the workload declares no API access, so "
                     "it must be false")
    context = spec.get("securityContext")
    containers = _containers(spec)
    if isinstance(context, Mapping):
        if context.get("runAsUser") == 0 or context.get("runAsNonRoot") is False or context.get("runAsGroup") == 0:
            found.append("the pod runs as root (securityContext), which the workload does not declare") if not all(
                (_allowed_for(workload, c) or declared.Container("", frozenset())).root for c in containers) else None
        if _get(context, "seccompProfile", "type") in UNSAFE_SECCOMP:
            found.append(f"the pod's seccompProfile is {_get(context, 'seccompProfile', 'type')}")
        if context.get("sysctls"):
            found.append("the pod sets sysctls, which the workload does not declare")
    claims = spec.get("resourceClaims")
    for claim in claims if _is_list(claims) else []:
        template = _get(claim, "resourceClaimTemplateName")
        if not (isinstance(template, str) and template in workload.claim_templates):
            found.append(f"the pod claims {_show(_get(claim, 'name'))} from {_show(template)}: not a declared claim "
                         "template of the workload")
    volumes = _volume_kinds(spec)
    for volume_name, (source, volume) in volumes.items():
        declared_kind = workload.volumes.get(volume_name)
        if declared_kind != source:
            found.append(f"volume {volume_name!r} ({source}) is not declared for the workload")
        if source == "projected" and "serviceAccountToken" in json.dumps(volume) and not workload.api_token:
            found.append(f"volume {volume_name!r} projects a service-account token")
    host_paths = _host_paths(spec)
    for container in containers:
        cname = container.get("name")
        allowed = _allowed_for(workload, container)
        if allowed is None:
            known = [c.name for c in workload.containers]
            found.append(f"container {cname!r} (image {_image(container)!r}) is not declared for the workload "
                         f"(declared: {known})")
            continue
        where = f"container {cname!r}"
        found += [f"{where}: {v}" for v in _context_violations(container.get("securityContext"), allowed, where)]
        ports = container.get("ports")
        for port in ports if _is_list(ports) else []:
            if _get(port, "hostPort") not in (None, 0) or _get(port, "hostIP"):
                found.append(f"{where}: hostPort {_show(_get(port, 'hostPort'))} (port "
                             f"{_show(_get(port, 'containerPort'))}) opens the port on the node, outside every "
                             "NetworkPolicy")
        for mount in _mounts(container):
            vname = str(mount.get("name"))
            source = volumes.get(vname, ("missing", {}))[0]
            if source == "hostPath" and host_paths.get(vname) not in allowed.host_paths:
                found.append(f"{where}: mounts host path {host_paths.get(vname)} (volume {vname!r}), not declared")
            writable = mount.get("readOnly") is not True and source not in ("emptyDir", "configMap", "secret",
                                                                             "projected", "downwardAPI")
            if writable and vname not in allowed.writable_volumes:
                found.append(f"{where}: mounts volume {vname!r} ({source}) read-write, declared read-only")
            if source == "persistentVolumeClaim" and vname not in allowed.writable_volumes and _get(
                    volumes[vname][1], "persistentVolumeClaim", "readOnly") is False:
                found.append(f"{where}: volume {vname!r} claims its PVC read-write")
            if mount.get("mountPropagation") in ("Bidirectional", "HostToContainer") and not allowed.privileged:
                found.append(f"{where}: mountPropagation {mount.get('mountPropagation')}")
        secret_env: set[str] = set()
        env = container.get("env")
        for entry in env if _is_list(env) else []:
            ref = _get(entry, "valueFrom", "secretKeyRef")
            if isinstance(ref, Mapping):
                secret_env.add(str(_get(entry, "name")))
                pair = (ref.get("name"), ref.get("key"))
                if pair not in allowed.secrets:
                    found.append(f"{where}: reads secret {pair[0]!r} key {pair[1]!r} ({_get(entry, 'name')}), "
                                 "which it does not declare")
        env_from = container.get("envFrom")
        for entry in env_from if _is_list(env_from) else []:
            if _get(entry, "secretRef") is not None:
                found.append(f"{where}: imports a whole Secret (envFrom), which it does not declare")
        claims_used = _get(container, "resources", "claims")
        for claim in claims_used if _is_list(claims_used) else []:
            if _get(claim, "name") not in allowed.claims:
                found.append(f"{where}: uses resource claim {_show(_get(claim, 'name'))}, which it does not declare")
        found += [f"{where}: {v}" for v in _check_start(container, allowed, secret_env)]
        found += [f"{where}: {v}" for v in _digest_violations(container, allowed)]
        for hook in ("postStart", "preStop"):
            command = _get(container, "lifecycle", hook, "exec", "command")
            if _is_list(command) and command:
                shadow = {"command": command}
                found += [f"{where} ({hook} hook): {v}" for v in _check_start(shadow, allowed, secret_env)]
    return found


def _allowed_for(workload: declared.Workload, container: Mapping[str, Any]) -> declared.Container | None:
    """The container's declaration: same name, and its image one of the declared repositories (an entry without
    images takes a user-named image)."""
    repo = hardening.repository(_image(container)) if _image(container) else ""
    named = [c for c in workload.containers if c.name == container.get("name")]
    return next((c for c in named if repo in c.images), None) \
        or next((c for c in named if c.image_pattern and re.fullmatch(c.image_pattern, repo)), None) \
        or next((c for c in named if not c.images and not c.image_pattern), None)


DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _digest_violations(container: Mapping[str, Any], allowed: declared.Container) -> list[str]:
    """A container declared `digest_required` runs its image by digest, never by a tag alone."""
    image = _image(container)
    if not allowed.digest_required or is_unknown(image):
        return []
    _, digest = split_image(image)
    if digest is None or not DIGEST.fullmatch(digest):
        return [f"runs image {image!r} without a sha256 digest: the workload declares its image pinned by digest "
                "(the stack's own build, components/serving/engineimage.py)"]
    return []


def _object_name(props: Mapping[str, Any]) -> tuple[str, str]:
    name = _get(props, "metadata", "name")
    namespace = _get(props, "metadata", "namespace")
    return (name if isinstance(name, str) else "", namespace if isinstance(namespace, str) else "")


def check_declared_workloads(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every pod belongs to a declared workload (kind, name, namespace) and each of its containers to that
    workload's declaration (name and image): privileges, host namespaces and paths, root, volumes and their
    modes, secrets, resource claims, host ports, service account and API token, and what it runs at start (its
    shell, programs and exact installs), all as components/checks/declared.py declares them; anything else is refused.
    An exemption is the container's own, never shared by image."""
    if not _is_kubernetes(resource_type) or resource_type.startswith("kubernetes:helm.sh/"):
        return []
    specs = list(_pod_specs(props))
    if not specs:
        return []
    kind = _kind(resource_type, props)
    name, namespace = _object_name(props)
    if is_unknown(name):
        return []
    found: list[str] = []
    for path, spec in specs:
        found += [f"{path}: {v}" if path else v for v in _pod_violations(kind, name, namespace, spec)]
    return list(dict.fromkeys(found))


def check_declared_types(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Only the resource types the program declares (components/checks/declared.py TYPES) and its own components."""
    if resource_type in declared.TYPES or resource_type.startswith(declared.COMPONENT_PREFIX):
        return []
    return [f"resource type {resource_type} is not one the program declares (components/checks/declared.py TYPES)"]


def check_declared_config_maps(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every ConfigMap is declared; one that carries code or a lock holds exactly the declared files' bytes."""
    if resource_type != "kubernetes:core/v1:ConfigMap":
        return []
    name, _ = _object_name(props)
    decl = next((d for d in declared.CONFIGMAPS if declared.matches(d.name, name)), None)
    if decl is None:
        return [f"ConfigMap {name!r} is not declared (components/checks/declared.py CONFIGMAPS)"]
    if decl.code is None:
        return []
    data = props.get("data")
    if is_unknown(data):
        return []
    data = data if isinstance(data, Mapping) else {}
    expected = _expected_code(decl.name)
    found = []
    if props.get("binaryData"):
        found.append(f"ConfigMap {name!r} carries binaryData; it is declared to hold only {sorted(expected)}")
    for key in sorted(set(data) | set(expected)):
        if key not in expected:
            found.append(f"ConfigMap {name!r} key {key!r} is not a declared file")
        elif key not in data:
            found.append(f"ConfigMap {name!r} lacks the declared file {key!r}")
        elif is_unknown(data[key]):
            continue
        elif hashlib.sha256(str(data[key]).encode()).hexdigest() != expected[key]:
            found.append(f"ConfigMap {name!r} key {key!r} is not the declared file (sha256 differs from "
                         f"{decl.code[key]})")
    return found


@functools.cache
def _expected_code(name: str) -> dict[str, str]:
    """sha256 of each declared file of a code-carrying ConfigMap (read once per process)."""
    decl = next(d for d in declared.CONFIGMAPS if d.name == name)
    return {key: hashlib.sha256(text.encode()).hexdigest() for key, text in decl.expected().items()}


def check_declared_grants(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every IAM grant is a declared (type, role, member): no other role, no other identity (not the namespace's
    `default` account, not the nodes with a wider role)."""
    if not ANY_IAM_GRANT.match(resource_type):
        return []
    found = []
    for path, role, member in _grant_members(resource_type, props):
        if is_unknown(role) or is_unknown(member):
            continue
        matching = [g for g in declared.GRANTS if g.type == resource_type and g.role == role
                    and isinstance(member, str) and re.fullmatch(g.member, member)]
        if not matching:
            found.append(f"{path}: role {_show(role)} to {_show(member)} is not a declared grant "
                         "(components/checks/declared.py GRANTS)")
        elif all(g.folder and not _within_folder(props, g.folder) for g in matching):
            found.append(f"{path}: role {_show(role)} to {_show(member)} is declared only within the folder "
                         f"{matching[0].folder!r} of its bucket, and its condition "
                         f"{_show(_get(props, 'condition', 'expression'))} does not limit it so")
        elif all(g.per_stack and not _has_title(props) for g in matching):
            found.append(f"{path}: role {_show(role)} to {_show(member)} has no IAM condition of its own stack: the "
                         "same Workload Identity principal in another stack's cluster would share the binding, and "
                         "either stack's destroy would remove it")
    if not _grant_members(resource_type, props):
        found.append(f"{resource_type}: a grant with no single member is not declared")
    return found


def _has_title(props: Mapping[str, Any]) -> bool:
    """The grant carries a condition with a title (unknown: allowed, checked at `pulumi up`)."""
    title = _get(props, "condition", "title")
    return is_unknown(title) or (isinstance(title, str) and bool(title.strip()))


def _within_folder(props: Mapping[str, Any], folder: str) -> bool:
    """The grant's condition limits every alternative to objects under `folder` of its bucket (unknown: allowed,
    checked at `pulumi up`)."""
    expression, bucket = _get(props, "condition", "expression"), props.get("bucket")
    if is_unknown(expression) or is_unknown(bucket):
        return True
    if not (isinstance(expression, str) and isinstance(bucket, str)) or "?" in expression:
        return False
    prefix = f"projects/_/buckets/{bucket.removeprefix('b/')}/objects/"
    return all(_limits_writes(a, prefix) and f'"{prefix}{folder}' in a for a in expression.split("||"))


COMMAND = "command:local:Command"


def check_declared_artifacts(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The checkpoint bucket keeps its objects (no lifecycle rule: the program declares none, and a Delete rule
    would drop the staged 1.56 TB); the engine's Artifact Registry repository keeps immutable tags (a moved tag
    would no longer be the lock it names)."""
    if resource_type == "gcp:storage/bucket:Bucket":
        rules_ = props.get("lifecycleRules")
        if _is_list(rules_) and rules_:
            actions = [_show(_get(rule, "action", "type")) for rule in rules_]
            return [f"bucket {_show(props.get('name'))}: lifecycle rules ({', '.join(actions)}) are not declared; the "
                    "checkpoint is staged once and kept"]
    elif resource_type == "gcp:artifactregistry/repository:Repository":
        tags = _get(props, "dockerConfig", "immutableTags")
        if tags is not True and not is_unknown(tags):
            return [f"repository {_show(props.get('repositoryId'))}: tags must be immutable (dockerConfig."
                    "immutableTags true): the engine image's tag names its lock"]
    elif resource_type == COMMAND:
        env = props.get("environment")
        env = env if isinstance(env, Mapping) else {}
        base, builder, repository, project = (env.get(k) for k in ("BASE", "BUILDER", "REPOSITORY", "PROJECT"))
        found = []
        if isinstance(base, str) and not is_unknown(base) and base != declared.ENGINE_BASE and \
                not re.fullmatch(re.escape(declared.ENGINE_BASE) + r"@sha256:[0-9a-f]{64}", base):
            found.append(f"the engine image's base is {_show(base)}, declared {declared.ENGINE_BASE} (optionally "
                         "@sha256:...)")
        if all(isinstance(v, str) and not is_unknown(v) for v in (builder, repository, project)):
            cluster = repository.rsplit("/", 1)[-1].removesuffix("-engine")
            if builder != f"{cluster}-build@{project}.iam.gserviceaccount.com":
                found.append(f"the engine image is built as {_show(builder)}, not the stack's builder "
                             f"{cluster}-build@{project}.iam.gserviceaccount.com")
        return found
    return []


def check_declared_commands(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A local command `pulumi up` runs is a declared one exactly: its script, interpreter, directory and environment
    names (components/checks/declared.py `commands`), and no delete or update command of its own."""
    if resource_type != COMMAND:
        return []
    create, interpreter, where = props.get("create"), props.get("interpreter"), props.get("dir")
    environment = props.get("environment") or {}
    if any(is_unknown(v) for v in (create, interpreter, where)):
        return []
    for decl in declared.commands():
        if create == decl.script and list(interpreter or []) == list(decl.interpreter) and where == decl.dir:
            found = [f"runs a {key} command ({_show(props[key])}), which the declaration has none of"
                     for key in ("delete", "update") if props.get(key)]
            extra = sorted(set(environment) - decl.environment) if isinstance(environment, Mapping) else ["?"]
            if extra:
                found.append(f"sets environment {extra}, which the declaration does not name")
            return found
    first = str(create).splitlines()[0] if create else ""
    return [f"a local command that is not declared (components/checks/declared.py commands): interpreter "
            f"{_show(interpreter)}, dir {_show(where)}, script starting {first[:60]!r}"]


K8S_MUTATING_WEBHOOKS = "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration"
K8S_VALIDATING_WEBHOOKS = "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration"


def check_declared_rbac(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Roles hold a permission that reads credentials, runs code in pods or grants more (declared.SENSITIVE_*) only
    where declared; bindings bind service accounts only."""
    found = []
    name, _ = _object_name(props)
    if resource_type in (K8S_CLUSTER_ROLE, K8S_ROLE):
        allowed = next((r.permissions for r in declared.ROLES if declared.matches(r.name, name)), frozenset())
        rules_ = props.get("rules")
        for i, rule in enumerate(rules_ if _is_list(rules_) else []):
            resources = _get(rule, "resources") or []
            verbs = _get(rule, "verbs") or []
            for resource in resources if _is_list(resources) else []:
                for verb in verbs if _is_list(verbs) else []:
                    sensitive = resource in declared.SENSITIVE_RESOURCES or verb in declared.SENSITIVE_VERBS
                    if sensitive and (resource, verb) not in allowed:
                        found.append(f"{name}: rules[{i}] grants {verb!r} on {resource!r}, not declared for this "
                                     "role (components/checks/declared.py ROLES)")
            if _get(rule, "nonResourceURLs") and "*" in (_get(rule, "nonResourceURLs") or []):
                found.append(f"{name}: rules[{i}] grants every non-resource URL")
        if props.get("aggregationRule"):
            found.append(f"{name}: an aggregated role takes whatever other roles grant; not declared")
    elif resource_type == "kubernetes:core/v1:ServiceAccount":
        annotations = _get(props, "metadata", "annotations")
        for key in annotations if isinstance(annotations, Mapping) else {}:
            if key.startswith("iam.gke.io/"):
                found.append(f"service account {name!r} annotation {key}: acting as a Google service account is "
                             "not declared (Workload Identity principals are granted directly)")
    elif resource_type in (K8S_CLUSTER_ROLE_BINDING, K8S_ROLE_BINDING):
        subjects = props.get("subjects")
        namespace = _get(props, "metadata", "namespace")
        namespace = namespace if isinstance(namespace, str) else ""
        decl = next((b for b in declared.BINDINGS if declared.matches(b.name, name, namespace)), None)
        if decl is None:
            found.append(f"binding {name!r} is not declared (components/checks/declared.py BINDINGS)")
        for i, subject in enumerate(subjects if _is_list(subjects) else []):
            kind = _get(subject, "kind")
            if kind not in declared.ALLOWED_SUBJECT_KINDS:
                found.append(f"{name}: subjects[{i}] is a {kind} ({_show(_get(subject, 'name'))}); bindings bind "
                             "service accounts only")
                continue
            if _get(subject, "name") == "default":
                found.append(f"{name}: subjects[{i}] binds a namespace's default service account")
            where = _get(subject, "namespace") or (namespace if resource_type == K8S_ROLE_BINDING else "")
            who = _get(subject, "name")
            if decl is not None and not any(
                    isinstance(where, str) and isinstance(who, str) and declared.matches(ns, where, namespace)
                    and declared.matches(account, who, where) for ns, account in decl.subjects):
                found.append(f"{name}: subjects[{i}] binds {_show(where)}/{_show(who)}, which the binding does not "
                             "declare (components/checks/declared.py BINDINGS)")
    elif resource_type in (K8S_MUTATING_WEBHOOKS, K8S_VALIDATING_WEBHOOKS):
        webhooks = props.get("webhooks")
        for i, webhook in enumerate(webhooks if _is_list(webhooks) else []):
            config = _get(webhook, "clientConfig")
            if not isinstance(config, Mapping):
                continue
            if config.get("url") is not None:
                found.append(f"{name}: webhooks[{i}] calls the URL {_show(config.get('url'))}; a webhook calls only "
                             "a declared in-cluster Service (components/checks/declared.py WEBHOOK_SERVICES)")
            service = config.get("service")
            if isinstance(service, Mapping) and (service.get("namespace"), service.get("name")) not in \
                    declared.WEBHOOK_SERVICES and not is_unknown(service.get("name")):
                found.append(f"{name}: webhooks[{i}] calls Service {_show(service.get('namespace'))}/"
                             f"{_show(service.get('name'))}, not a declared one")
    return found


def _cidr_ok(cidr: Any, excepts: Any, ports: set[Any], peers: Sequence[declared.AddressPeer]) -> bool:
    if not isinstance(cidr, str):
        return False
    for peer in peers:
        if not ports or not ports <= set(peer.ports):
            continue
        if peer.cidr is None:
            if cidr.endswith("/32") and not excepts:
                return True
        elif peer.cidr == declared.PRIVATE:
            if _private(cidr) and not excepts and _prefix(cidr) >= declared.PRIVATE_MIN_PREFIX:
                return True
        elif cidr == peer.cidr and tuple(excepts or ()) == peer.excluded:
            return True
    return False


def check_declared_network_policies(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """NetworkPolicy address peers (ipBlock) only as declared for the policy (declared.EGRESS: the metadata server,
    the internet minus private ranges on 443, one API-server address), with declared ports; no ingress from
    addresses unless declared."""
    if resource_type != K8S_NETWORK_POLICY:
        return []
    name, _ = _object_name(props)
    types = next((v for k, v in declared.NETWORK_POLICIES.items() if declared.matches(k, name)), None)
    found = []
    if types is None:
        found.append(f"NetworkPolicy {name!r} is not declared (components/checks/declared.py NETWORK_POLICIES)")
    else:
        policy_types = _get(props, "spec", "policyTypes")
        if not is_unknown(policy_types) and tuple(policy_types or ()) != types:
            found.append(f"{name}: policyTypes {_show(policy_types)}, declared {list(types)}")
    for direction, key, table in (("egress", "to", declared.EGRESS), ("ingress", "from", declared.INGRESS_ADDRESSES)):
        peers_allowed = next((v for k, v in table.items() if declared.matches(k, name)), ())
        rules_ = _get(props, "spec", direction)
        for i, rule in enumerate(rules_ if _is_list(rules_) else []):
            ports = {_get(p, "port") for p in (_get(rule, "ports") or [])} if _is_list(_get(rule, "ports")) else set()
            if any(_get(p, "endPort") for p in (_get(rule, "ports") or []) if _is_list(_get(rule, "ports"))):
                ports.add("range")
            for j, peer in enumerate(_get(rule, key) or [] if _is_list(_get(rule, key)) else []):
                block = _get(peer, "ipBlock")
                if block is None or is_unknown(_get(block, "cidr")):
                    continue
                if not _cidr_ok(_get(block, "cidr"), _get(block, "except"), ports, peers_allowed):
                    found.append(f"{name}: {direction}[{i}].{key}[{j}] ipBlock {_show(_get(block, 'cidr'))} "
                                 f"(except {_show(_get(block, 'except'))}, ports {sorted(map(str, ports)) or 'all'}) "
                                 "is not a declared address peer of this policy (components/checks/declared.py)")
    return found


def check_declared_storage(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Claims, storage and volume attributes classes and device claim templates as declared: the checkpoint claim
    ReadOnlyMany, the Hyperdisk ML class and its throughput classes, RDMA templates of their one device class and
    never adminAccess."""
    name, _ = _object_name(props)
    if resource_type == "kubernetes:core/v1:PersistentVolumeClaim":
        decl = next((c for c in declared.CLAIMS if declared.matches(c.name, name)), None)
        if decl is None:
            return [f"PersistentVolumeClaim {name!r} is not declared"]
        modes = _get(props, "spec", "accessModes")
        if not is_unknown(modes) and tuple(modes or ()) != decl.access_modes:
            return [f"PersistentVolumeClaim {name!r} access modes {_show(modes)}, declared {list(decl.access_modes)}"]
    elif resource_type == "kubernetes:storage.k8s.io/v1:StorageClass":
        decl = next((v for k, v in declared.STORAGE_CLASSES.items() if declared.matches(k, name)), None)
        shape = (props.get("provisioner"), _get(props, "parameters", "type"))
        if decl is None or shape != decl:
            return [f"StorageClass {name!r} ({shape}) is not declared"]
    elif resource_type == "kubernetes:storage.k8s.io/v1:VolumeAttributesClass":
        decl = next((v for k, v in declared.VOLUME_ATTRIBUTES_CLASSES.items() if declared.matches(k, name)), None)
        parameters = props.get("parameters")
        keys = tuple(sorted(parameters)) if isinstance(parameters, Mapping) else ()
        if decl is None or props.get("driverName") != decl[0] or not set(keys) <= set(decl[1]):
            return [f"VolumeAttributesClass {name!r} ({props.get('driverName')}, {list(keys)}) is not declared"]
    elif resource_type == "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate":
        device_class = declared.CLAIM_TEMPLATES.get(name)
        found = [] if device_class else [f"ResourceClaimTemplate {name!r} is not declared"]
        for path, mapping in _mappings(props.get("spec")):
            if mapping.get("adminAccess") is True:
                found.append(f"ResourceClaimTemplate {name!r} {path}: adminAccess gives access to devices in use "
                             "by others")
            if "deviceClassName" in mapping and mapping["deviceClassName"] != device_class:
                found.append(f"ResourceClaimTemplate {name!r} {path}: device class "
                             f"{_show(mapping['deviceClassName'])}, declared {device_class!r}")
        return found
    return []


def _prefix(cidr: str) -> int:
    try:
        return ipaddress.ip_network(cidr, strict=False).prefixlen
    except ValueError:
        return 0


def _private(cidr: Any) -> bool:
    try:
        network = ipaddress.ip_network(str(cidr), strict=False)
    except ValueError:
        return False
    return any(network.subnet_of(ipaddress.ip_network(r)) for r in declared.PRIVATE_SUBNET_RANGES
               if network.version == 4)


def _last_segment(value: Any) -> str:
    return str(value).rstrip("/").rsplit("/", 1)[-1]


def check_declared_network(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The cloud network as declared: Cloud NAT for the listed subnets only, private subnet and secondary ranges,
    external addresses only the staging NAT's, the control plane's authorized networks set."""
    found = []
    if resource_type == "gcp:compute/routerNat:RouterNat":
        source = props.get("sourceSubnetworkIpRangesToNat")
        if source != declared.NAT_SOURCE and not is_unknown(source):
            found.append(f"sourceSubnetworkIpRangesToNat {_show(source)}: NAT only the declared subnets "
                         f"({declared.NAT_SOURCE})")
        subnets = props.get("subnetworks")
        for i, subnet in enumerate(subnets if _is_list(subnets) else []):
            name = _get(subnet, "name")
            if is_unknown(name):
                continue
            if not any(declared.matches(p, _last_segment(name)) for p in declared.NAT_SUBNETS):
                found.append(f"subnetworks[{i}] {_show(name)} is not a declared NAT subnet")
    elif resource_type == "gcp:compute/subnetwork:Subnetwork":
        purpose = props.get("purpose")
        if purpose not in (None, "PRIVATE") and purpose not in declared.SUBNET_PURPOSES:
            found.append(f"subnet purpose {_show(purpose)} is not declared")
        ranges = [("ipCidrRange", props.get("ipCidrRange"))] + [
            (f"secondaryIpRanges[{i}]", _get(r, "ipCidrRange"))
            for i, r in enumerate(props.get("secondaryIpRanges") or [])]
        for path, cidr in ranges:
            if not is_unknown(cidr) and not _private(cidr):
                found.append(f"{path} {_show(cidr)} is not a private range ({list(declared.PRIVATE_SUBNET_RANGES)})")
        if purpose is None and props.get("privateIpGoogleAccess") is not True:
            found.append("privateIpGoogleAccess is not true: private nodes reach Google APIs through it")
        if props.get("ipv6AccessType") == "EXTERNAL" or props.get("stackType") not in (None, "IPV4_ONLY"):
            found.append("an IPv6 (external) stack is not declared")
    elif resource_type == "gcp:compute/address:Address":
        name = props.get("name")
        kind = props.get("addressType", "EXTERNAL")
        if kind != "INTERNAL" and not is_unknown(name) and not any(
                declared.matches(p, str(name)) for p in declared.EXTERNAL_ADDRESSES):
            found.append(f"address {_show(name)} is external ({_show(kind)}): only the staging NAT's are declared")
        if props.get("purpose") not in (None, "NAT_AUTO") and kind != "INTERNAL":
            found.append(f"address purpose {_show(props.get('purpose'))} is not declared")
    elif resource_type == CLUSTER:
        if props.get("masterAuthorizedNetworksConfig") is None:
            found.append("masterAuthorizedNetworksConfig is not set: the control plane's IP endpoint would accept "
                         "every address")
        if props.get("enableKubernetesAlpha") is True:
            found.append("enableKubernetesAlpha is true")
    elif resource_type == K8S_SERVICE:
        kind = _get(props, "spec", "type")
        if kind not in (None, "ClusterIP") and not is_unknown(kind):
            found.append(f"Service type {_show(kind)}: only ClusterIP Services are declared")
        if _get(props, "spec", "externalName") or _get(props, "spec", "externalIPs"):
            found.append("a Service with externalName or externalIPs is not declared")
    elif resource_type == "gcp:compute/network:Network":
        if props.get("autoCreateSubnetworks") is not False and not is_unknown(props.get("autoCreateSubnetworks")):
            found.append("autoCreateSubnetworks is not false: auto-mode subnets in every region are not declared")
    return found


def check_declared_nodes(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Node pools as declared: the node service account, cloud-platform scope only (IAM decides), no instance
    metadata of their own (legacy endpoints stay off), no network tags, no public IPs."""
    found = []
    for path, config in _node_configs(resource_type, props):
        if not isinstance(config, Mapping):
            continue
        scopes = config.get("oauthScopes")
        if not is_unknown(scopes) and _is_list(scopes) and not set(scopes) <= declared.NODE_SCOPES:
            found.append(f"{path}.oauthScopes {_show(scopes)}: only {sorted(declared.NODE_SCOPES)} is declared")
        metadata = config.get("metadata")
        if isinstance(metadata, Mapping):
            for key, value in metadata.items():
                if declared.NODE_METADATA.get(key) != value:
                    found.append(f"{path}.metadata {key}={_show(value)} is not declared")
        account = config.get("serviceAccount")
        if isinstance(account, str) and not is_unknown(account) and not re.fullmatch(
                declared.NODE_SA, f"serviceAccount:{account}"):
            found.append(f"{path}.serviceAccount {account!r} is not the declared node service account")
        mode = _get(config, "workloadMetadataConfig", "mode")
        if mode != GKE_METADATA and not is_unknown(mode):
            found.append(f"{path}.workloadMetadataConfig.mode {_show(mode)}: nodes serve pods the GKE metadata server "
                         "only (Workload Identity), never the node's own credentials")
        if config.get("tags"):
            found.append(f"{path}.tags {_show(config.get('tags'))}: network tags would attach firewall rules")
    for prefix, pool in _pools(resource_type, props):
        if _get(pool, "networkConfig", "enablePrivateNodes") is False:
            continue  # gke-private-nodes says it
        if _get(pool, "networkConfig", "createPodRange") is True:
            found.append(f"{prefix}networkConfig.createPodRange: pod ranges are declared subnets only")
    return found



# --------------------------------------------------------------------------- whole-stack checks
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
        if is_unknown(name) or name in declared.SYSTEM_NAMESPACES:
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

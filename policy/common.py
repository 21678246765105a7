"""What every rule family shares: the resource types and facts the rules enforce, and the helpers that read a
resource's inputs (unknown values during preview, nested mappings and strings, pod specs and node configs)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
)

from components.facts import catalog, versions
from components.platform import hardening

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
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _mappings(value: Any, path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every object inside `value` (itself included), with its path such as `spec.containers[0]`: depth first,
    each object before what it holds, in key order (a stack of pending children rather than nested generators,
    which passed every object up through each level above it)."""
    pending = [(path, value)]
    while pending:
        path, value = pending.pop()
        kind = type(value)
        if kind is dict or (kind is not list and kind is not str and isinstance(value, Mapping)):
            yield path, value
            # Plain JSON first by exact type (most values are str or int), the ABC checks only for the rest.
            children = [(f"{path}.{key}" if path else str(key), item) for key, item in value.items()
                        if (t := type(item)) is dict or t is list
                        or (t not in _PLAIN and not isinstance(item, _SCALARS))]
        elif kind is list or _is_list(value):
            children = [(f"{path}[{index}]", item) for index, item in enumerate(value)
                        if type(item) not in _PLAIN and not isinstance(item, _SCALARS)]
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



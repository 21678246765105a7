"""The CrossGuard policy pack (policy/): each rule on passing and failing inputs, the pack's wiring, the
runtime wrapper (proxied props, unknown values), and the committed stacks' plan passing every rule."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pulumi_policy
import pytest
import yaml
from pulumi_policy import EnforcementLevel, ResourceValidationArgs
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from tests.conftest import rendered

ROOT = Path(__file__).resolve().parent.parent
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
NODE_SA = "kimi-k3-1-gpu-nodes@my-gcp-project.iam.gserviceaccount.com"
FAKE_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
RESERVATION = {"consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
               "values": ["projects/p/reservations/r"]}


# ----------------------------------------------------------------------------------- input builders
def bucket(**overrides: Any) -> dict[str, Any]:
    return {"name": "b", "publicAccessPrevention": "enforced", "uniformBucketLevelAccess": True, **overrides}


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
    # ---- k8s-pod-privileges
    ("k8s-pod-privileges", DEPLOYMENT, deployment(), []),
    ("k8s-pod-privileges", "kubernetes:disaggregatedset.x-k8s.io/v1:DisaggregatedSet",
     {"kind": "DisaggregatedSet", "spec": {"roles": [{"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {
         "hostIPC": True, "volumes": [{"name": "nvidia", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}}],
         "containers": [{"name": "vllm", "securityContext": {"privileged": True}}]}}}}}]}}, []),
    ("k8s-pod-privileges", DEPLOYMENT,
     {"kind": "Deployment", "spec": {"template": {"spec": {"hostNetwork": True, "containers": [
         {"name": "vllm", "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}}]}}}},
     ["spec.template.spec: privileged on container 'vllm' of Deployment: not in the pod-hardening exceptions "
      "(components/hardening.py)",
      "spec.template.spec: capabilities.add ['SYS_ADMIN'] on container 'vllm' of Deployment: not in the "
      "pod-hardening exceptions (components/hardening.py)",
      "spec.template.spec: hostNetwork on the pod of Deployment: not in the pod-hardening exceptions "
      "(components/hardening.py)"]),
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
    assert rules.RESERVATION_ONLY_MACHINE_TYPES == {"a4x-maxgpu-4g-metal", "a4x-highgpu-4g"}


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
    assert any(list(rules.image_references(r["inputs"])) for r in resources if r["type"].startswith("kubernetes:"))
    machines = {r["inputs"]["nodeConfig"]["machineType"] for r in resources if r["type"] == NODE_POOL}
    assert machines & rules.RESERVATION_ONLY_MACHINE_TYPES

    gpu_pool = next(r for r in plan_resources["gpu"] if r["type"] == NODE_POOL
                    and r["inputs"]["nodeConfig"]["machineType"] in rules.RESERVATION_ONLY_MACHINE_TYPES)
    broken = copy.deepcopy(gpu_pool["inputs"])
    del broken["nodeConfig"]["reservationAffinity"]
    assert len(rules.check_reservation_affinity(NODE_POOL, broken)) == 2
    gke = copy.deepcopy(next(r for r in plan_resources["gpu"] if r["type"] == CLUSTER)["inputs"])
    gke["privateClusterConfig"]["enablePrivateNodes"] = False
    assert rules.check_private_nodes(CLUSTER, gke) == ["privateClusterConfig.enablePrivateNodes is false, must be true"]


# --------------------------------------------------------------------------- unsafe changes to the real plans
def all_violations(resources: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Every resource and stack policy over a plan's resources: policy name -> its messages."""
    found: dict[str, list[str]] = {}
    for resource in resources:
        for name, (check, _) in rules.CHECKS.items():
            found.setdefault(name, []).extend(check(resource["type"], resource["inputs"]))
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
    spec = next(path for path, mapping in rules._mappings(serving["inputs"]) if "containers" in mapping)
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
        r["type"] == "kubernetes:networking.k8s.io/v1:NetworkPolicy" and rules._is_default_deny_ingress(r["inputs"]))]


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
    ("gpu", _privileged_pod, "k8s-pod-privileges"),
    ("tpu", _privileged_pod, "k8s-pod-privileges"),
    ("gpu", _privileged_sidecar, "k8s-pod-privileges"),
    ("tpu", _privileged_sidecar, "k8s-pod-privileges"),
    ("gpu", _ssh_from_internet, "firewall-no-internet-ingress"),
    ("gpu", _drop_default_deny, "k8s-namespace-default-deny"),
    ("tpu", _drop_default_deny, "k8s-namespace-default-deny"),
]


@pytest.mark.parametrize("stack, change, policy", UNSAFE_CHANGES,
                         ids=[f"{s}-{p}-{i}" for i, (s, _, p) in enumerate(UNSAFE_CHANGES)])
def test_unsafe_change_to_a_real_plan_is_caught(plan_resources, stack, change, policy):
    resources = copy.deepcopy(plan_resources[stack])
    change(resources)
    assert policy in all_violations(resources)


def test_gpu_cluster_turns_shielded_nodes_off_only_for_bare_metal(plan_resources):
    gke = {stack: _one(plan_resources[stack], CLUSTER) for stack in STACKS}
    assert gke["gpu"]["enableShieldedNodes"] is False and gke["tpu"]["enableShieldedNodes"] is True
    assert rules.SHIELDED_NODES_UNSUPPORTED == {"a4x-maxgpu-4g-metal"}


def test_every_exception_is_used_exactly_by_a_committed_plan(plans):
    """The allow-list is not stale: each exempt container really uses every field its exception grants. Some
    exempt containers come from charts (the NVIDIA DRA driver's kubelet plugin), so this needs chart objects."""
    from components import hardening

    used: dict[tuple[str, str], set[str]] = {}
    for resource in [r for stack in ("gpu", "tpu") for r in rendered(plans[stack]).resources]:
        if not resource["type"].startswith("kubernetes:") or resource["type"].startswith("kubernetes:helm.sh/"):
            continue
        kind = rules._kind(resource["type"], resource["inputs"])
        for _, spec in rules._pod_specs(resource["inputs"]):
            pod_fields = {f for f in rules.POD_FIELDS if spec.get(f) is True}
            pod_fields |= {"hostPath"} if any("hostPath" in v for v in spec.get("volumes") or []) else set()
            for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
                if hardening.exemption(kind, container["name"]):
                    mine = {"privileged"} if (container.get("securityContext") or {}).get("privileged") else set()
                    used.setdefault((kind, container["name"]), set()).update(mine | pod_fields)
    assert used == {(e.kind, e.container): set(e.fields) for e in hardening.EXCEPTIONS}
    assert all(e.reason and "http" in e.source for e in hardening.EXCEPTIONS)


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
    broken = copy.deepcopy(plan_resources["tpu"])
    _drop_default_deny(broken)
    policy.validate(StackValidationArgs(policy_resources(broken)), report)
    assert reported == ['namespace "kimi-k3-1" has no default-deny ingress NetworkPolicy (podSelector {}, '
                        "policyTypes [Ingress], no ingress rules)"]

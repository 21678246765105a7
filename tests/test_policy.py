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


def cluster(**overrides: Any) -> dict[str, Any]:
    props = {
        "enableShieldedNodes": True,
        "privateClusterConfig": {"enablePrivateNodes": True, "enablePrivateEndpoint": False},
        "workloadIdentityConfig": {"workloadPool": "my-gcp-project.svc.id.goog"},
        "nodeConfig": {"serviceAccount": NODE_SA, "workloadMetadataConfig": {"mode": "GKE_METADATA"}},
        "removeDefaultNodePool": True,
    }
    props.update(overrides)
    return props


def node_pool(machine: str = "n2-standard-8", **node_config: Any) -> dict[str, Any]:
    config = {"machineType": machine, "serviceAccount": NODE_SA, "workloadMetadataConfig": {"mode": "GKE_METADATA"}}
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
    # ---- gke-shielded-nodes
    ("gke-shielded-nodes", CLUSTER, cluster(), []),
    ("gke-shielded-nodes", CLUSTER, cluster(enableShieldedNodes=False), ["enableShieldedNodes is false, must be true"]),
    ("gke-shielded-nodes", NODE_POOL, node_pool(), []),
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
    assert [p.name for p in built["policies"]] == list(rules.CHECKS)
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

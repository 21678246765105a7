"""Every rendered Kubernetes object validates strictly; the validator itself rejects broken objects."""

from __future__ import annotations

import copy

import jsonschema
import kubernetes_validate
import pytest

from tests import schemas
from tests.conftest import STACKS, rendered


def _failures(manifests, shared) -> list[str]:
    failures = []
    rendered = schemas.rendered_validators(manifests)
    for manifest in manifests:
        try:
            schemas.validate(manifest, shared / "crds", rendered)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError, schemas.MissingSchemaError) as err:
            failures.append(f"{manifest['kind']}/{manifest['metadata'].get('name')}: {getattr(err, 'message', err)}")
    return failures


@pytest.mark.parametrize("stack", STACKS)
def test_every_manifest_validates(plans, shared, stack):
    assert not _failures(plans[stack].manifests, shared)


@pytest.mark.parametrize("name", ["gateway", "sglang", "spec", "bench", "quiet", "gpu-pinned"])
def test_every_variant_manifest_validates(variants, shared, name):
    """Objects only some configurations create: Gateway, HTTPRoute, calibration and benchmark Jobs, ..."""
    assert not _failures(variants[name].manifests, shared)


def test_allow_list_entries_have_reasons():
    assert all(reason.strip() for reason in schemas.NO_SCHEMA_ALLOWED.values())


CORE_OBJECT = {
    "apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "probe", "namespace": "default"}, "data": {"a": "b"},
}
CUSTOM_OBJECT = {
    "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
    "metadata": {"name": "probe", "namespace": "default"},
    "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {
        "spec": {"containers": [{"name": "c", "image": "registry.example/probe:1"}]}}}},
}


def test_validator_accepts_well_formed_objects(shared):
    schemas.validate(copy.deepcopy(CORE_OBJECT), shared / "crds")
    schemas.validate(copy.deepcopy(CUSTOM_OBJECT), shared / "crds")


def test_validator_rejects_unknown_core_field(shared):
    broken = copy.deepcopy(CORE_OBJECT)
    broken["dta"] = {"a": "b"}
    with pytest.raises(kubernetes_validate.ValidationError):
        schemas.validate(broken, shared / "crds")


def test_validator_rejects_unknown_nested_custom_field(shared):
    broken = copy.deepcopy(CUSTOM_OBJECT)
    broken["spec"]["leaderWorkerTemplate"]["sise"] = 2
    with pytest.raises(jsonschema.ValidationError):
        schemas.validate(broken, shared / "crds")


def test_validator_rejects_unknown_metadata_field(shared):
    broken = copy.deepcopy(CUSTOM_OBJECT)
    broken["metadata"]["lables"] = {}
    with pytest.raises(jsonschema.ValidationError):
        schemas.validate(broken, shared / "crds")


def test_validator_rejects_kind_without_schema(shared):
    unknown = {"apiVersion": "example.com/v1", "kind": "Gizmo", "metadata": {"name": "x"}}
    with pytest.raises(schemas.MissingSchemaError):
        schemas.validate(unknown, shared / "crds")


def test_cluster_version_is_supported_by_validator():
    utils = kubernetes_validate.utils
    assert utils.major_minor(schemas.KUBERNETES_VERSION) <= utils.latest_version()


@pytest.mark.parametrize("stack", STACKS)
def test_scaled_objects_are_checked_against_the_keda_charts_own_crds(plans, stack):
    """One ScaledObject per scaled role, valid against the CRD the pinned KEDA chart renders, min/max within what
    the stack's node pools hold. The CRD comes from the chart's render, so a clone without the charts skips here."""
    manifests = rendered(plans[stack]).manifests
    validators = schemas.rendered_validators(manifests)
    scaled = [m for m in manifests if m["kind"] == "ScaledObject"]
    assert [m["metadata"]["name"] for m in scaled] == (
        ["kimi-k3-1-prefill", "kimi-k3-1-decode"] if stack == "gpu" else ["kimi-k3-1-engines"])
    for m in scaled:
        validators[("keda.sh/v1alpha1", "ScaledObject")].validate(m)
        assert 1 <= m["spec"]["minReplicaCount"] <= m["spec"]["maxReplicaCount"]
    broken = copy.deepcopy(scaled[0])
    broken["spec"]["triggers"][0]["threshold"] = "25"  # a field KEDA does not have there
    with pytest.raises(jsonschema.ValidationError):
        validators[("keda.sh/v1alpha1", "ScaledObject")].validate(broken)

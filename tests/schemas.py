"""Strict schema validation of rendered Kubernetes objects.

Core kinds: kubernetes-validate's strict schemas for the Kubernetes minor the cluster pins.
Custom resources: the real CRD openAPIV3Schema from shared/crds, made strict (unknown fields are
errors unless the CRD itself preserves them). The project ships no schema of its own.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import yaml

from components.facts import catalog

KUBERNETES_VERSION = catalog.GKE_VERSION_PREFIX + "0"
"""Kubernetes version the cluster runs (GKE's minor line), the version core objects validate against."""

CORE_GROUPS = {"", "apps", "batch", "rbac.authorization.k8s.io", "storage.k8s.io", "policy", "networking.k8s.io",
               "resource.k8s.io", "scheduling.k8s.io", "autoscaling", "admissionregistration.k8s.io",
               "apiextensions.k8s.io", "apiregistration.k8s.io", "coordination.k8s.io"}

NO_SCHEMA_ALLOWED: dict[tuple[str, str], str] = {
    # (apiVersion, kind): reason. A kind rendered without a schema fails unless it is listed here.
    ("datalayer.gke.io/v1", "GCPDataSource"): "GKE-managed CRD with no published schema file; its shape is "
                                              "checked by tests/platform/test_platform.py against the GCPDataSource "
                                              "reference",
}

OBJECT_META_FIELDS = {"name", "namespace", "labels", "annotations", "finalizers", "ownerReferences",
                      "generateName"}


# kubernetes-validate reads and decodes its schema files (the 2 MB _definitions.json among them) on every call;
# they never change, so each is decoded once per process. The validation itself is still the library's own.
kubernetes_validate.utils.schema_contents = cache(kubernetes_validate.utils.schema_contents)


class MissingSchemaError(Exception):
    pass


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Forbid properties the schema does not declare, as the API server's pruning would drop them."""
    if isinstance(schema, dict):
        for key in ("properties", "patternProperties"):
            for sub in (schema.get(key) or {}).values():
                _strict(sub)
        for key in ("items", "additionalProperties", "not"):
            if isinstance(schema.get(key), dict):
                _strict(schema[key])
        for key in ("allOf", "anyOf", "oneOf"):
            for sub in schema.get(key) or []:
                _strict(sub)
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
    return schema


@cache
def crd_documents(crd_dir: Path) -> tuple[dict[str, Any], ...]:
    """Every CustomResourceDefinition in `crd_dir`, parsed once per process (0.3 s of libyaml for the folder) for
    this module and tests/cel.py; neither changes them."""
    return tuple(doc for path in sorted(crd_dir.glob("*.yaml"))
                 for doc in yaml.load_all(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
                 if doc and doc.get("kind") == "CustomResourceDefinition")


@cache
def crd_schemas(crd_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    schemas = {}
    for doc in crd_documents(crd_dir):
        group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
        for version in doc["spec"]["versions"]:
            schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
            schema.setdefault("properties", {})["metadata"] = {"type": "object"}
            schemas[(f"{group}/{version['name']}", kind)] = _strict(schema)
    return schemas


def is_core(api_version: str) -> bool:
    group = api_version.rpartition("/")[0]
    return group in CORE_GROUPS


def rendered_validators(manifests: list[dict[str, Any]]) -> dict[tuple[str, str], jsonschema.Draft7Validator]:
    """Strict validators of the CRDs a plan renders from its charts' templates (KEDA's are templates/crds/, not
    shared/crds): the custom resources of those kinds are checked against the chart's own schema."""
    found = {}
    for doc in manifests:
        if doc.get("kind") != "CustomResourceDefinition":
            continue
        for version in doc["spec"]["versions"]:
            schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
            schema.setdefault("properties", {})["metadata"] = {"type": "object"}
            found[(f"{doc['spec']['group']}/{version['name']}", doc["spec"]["names"]["kind"])] = \
                jsonschema.Draft7Validator(_strict(schema))
    return found


def validate(manifest: dict[str, Any], crd_dir: Path,
             rendered: dict[tuple[str, str], jsonschema.Draft7Validator] | None = None) -> None:
    """Raise on any schema violation; MissingSchemaError if the kind has no schema and is not allow-listed.
    `rendered`: validators of the plan's chart-rendered CRDs (rendered_validators), used where shared/crds has none."""
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    if is_core(api_version):
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        return
    unknown_meta = set(manifest.get("metadata", {})) - OBJECT_META_FIELDS
    if unknown_meta:
        raise jsonschema.ValidationError(f"unknown metadata fields {sorted(unknown_meta)}")
    validator = crd_validator(crd_dir, api_version, kind) or (rendered or {}).get((api_version, kind))
    if validator is None:
        if (api_version, kind) in NO_SCHEMA_ALLOWED:
            return
        raise MissingSchemaError(f"no CRD schema for {api_version} {kind} in {crd_dir} and not allow-listed")
    validator.validate(manifest)


@cache
def crd_validator(crd_dir: Path, api_version: str, kind: str) -> jsonschema.Draft7Validator | None:
    """One validator per kind: checking a CRD's (large) schema once, not once per object."""
    schema = crd_schemas(crd_dir).get((api_version, kind))
    if schema is None:
        return None
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)

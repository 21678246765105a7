"""Strict validation of Cloud Monitoring API objects against the API's published types: the discovery
documents google-api-python-client ships (monitoring v1 for dashboards, v3 for alert policies).

Discovery schemas give each field's type, `$ref`, `enum` and `items`/`additionalProperties`; they mark
neither required fields nor bounds, so this checks that every field exists with the right type and enum
value. Unknown fields are errors (the API rejects them too).
"""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

import googleapiclient


@cache
def document(api: str) -> dict[str, Any]:
    """`api` is e.g. 'monitoring.v1'."""
    folder = os.path.join(os.path.dirname(googleapiclient.__file__), "discovery_cache", "documents")
    with open(os.path.join(folder, f"{api}.json")) as f:
        return json.load(f)


def validate(value: Any, schema_name: str, api: str) -> list[str]:
    """Problems found (path: what), empty when `value` fits schema `schema_name` of `api`."""
    schemas = document(api)["schemas"]
    problems: list[str] = []
    _check(value, {"$ref": schema_name}, schemas, schema_name, problems)
    return problems


_JSON_TYPES = {"string": (str,), "boolean": (bool,), "integer": (int,), "number": (int, float)}


def _check(value: Any, spec: dict[str, Any], schemas: dict[str, Any], path: str, problems: list[str]) -> None:
    if "$ref" in spec:
        spec = schemas[spec["$ref"]]
    kind = spec.get("type")
    if kind == "object" and "properties" in spec:
        if not isinstance(value, dict):
            problems.append(f"{path}: expected an object, got {type(value).__name__}")
            return
        for key, item in value.items():
            if key not in spec["properties"]:
                problems.append(f"{path}.{key}: unknown field (known: {', '.join(sorted(spec['properties']))})")
            else:
                _check(item, spec["properties"][key], schemas, f"{path}.{key}", problems)
    elif kind == "object":
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a map, got {type(value).__name__}")
            return
        inner = spec.get("additionalProperties")
        for key, item in value.items():
            if inner:
                _check(item, inner, schemas, f"{path}[{key!r}]", problems)
    elif kind == "array":
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            _check(item, spec["items"], schemas, f"{path}[{i}]", problems)
    elif kind in _JSON_TYPES:
        # int64 fields travel as strings in JSON (format int64); a bool is no integer.
        allowed = _JSON_TYPES[kind] + ((str,) if spec.get("format") in ("int64", "uint64") else ())
        if isinstance(value, bool) and kind != "boolean" or not isinstance(value, allowed):
            problems.append(f"{path}: expected {kind}, got {value!r}")
        elif "enum" in spec and value not in spec["enum"]:
            problems.append(f"{path}: {value!r} is not one of {spec['enum']}")
    else:
        problems.append(f"{path}: schema type {kind!r} not understood")

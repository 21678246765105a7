"""CRD validation rules (`x-kubernetes-validations`) evaluated on custom resources with a real CEL engine.

The engine is cel-python (`celpy`, the CEL spec in pure Python). The API server defaults an object from its
schema before it runs the rules (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
custom-resource-definitions/#validation-rules), so defaults are applied first; each rule then runs with
`self` bound to every value its schema node describes (array items and map values one by one). Kubernetes
adds CEL libraries (https://kubernetes.io/docs/reference/using-api/cel/#cel-options-language-features-and-
libraries); the functions the CRDs in use call are added below. A rule that does not compile or calls a
function this module lacks is reported as unevaluable, by name; transition rules (`oldSelf`) only run on
update and are reported apart.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import celpy
from celpy import celtypes

from tests.schemas import crd_documents


def _split(text: Any, separator: Any, limit: Any = None) -> celtypes.ListType:
    """Kubernetes' strings library: `'a,b'.split(',')` (cel-go ext/strings)."""
    parts = str(text).split(str(separator)) if limit is None else str(text).split(str(separator), int(limit) - 1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _is_url(text: Any) -> celtypes.BoolType:
    """Kubernetes' URL library `isURL` is Go's `url.ParseRequestURI(s) == nil` (k8s.io/apiserver/pkg/cel/library/
    urls.go, https://github.com/kubernetes/kubernetes/blob/v1.35.0/staging/src/k8s.io/apiserver/pkg/cel/library/
    urls.go): an absolute URI with a scheme, or an absolute path; no fragment."""
    value = str(text)
    try:
        parts = urlsplit(value)
    except ValueError:
        return celtypes.BoolType(False)
    absolute = bool(parts.scheme) or value.startswith("/")
    return celtypes.BoolType(absolute and "#" not in value and " " not in value)


def _equal(left: Any, right: Any) -> celtypes.BoolType:
    """CEL's heterogeneous equality (cel-spec langdef.md, "Equality"): values of different types are unequal,
    not an error; numbers compare across int, uint and double. Kubernetes relies on it for int-or-string
    fields (`self != 0` on a port that may be a name). cel-python raises there, so `==`/`!=` use this."""
    numeric = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)
    if isinstance(left, numeric) and isinstance(right, numeric):
        return celtypes.BoolType(float(left) == float(right))
    if type(left) is not type(right) and not (left is None or right is None):
        return celtypes.BoolType(False)
    return celtypes.BoolType(left == right)


KUBERNETES_FUNCTIONS = {"split": _split, "isURL": _is_url, "_==_": _equal,
                        "_!=_": lambda left, right: celtypes.BoolType(not _equal(left, right))}


@dataclass
class Outcome:
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unevaluable: list[str] = field(default_factory=list)
    on_update_only: list[str] = field(default_factory=list)


@cache
def _environment() -> celpy.Environment:
    return celpy.Environment()


@cache
def _program(rule: str) -> Any:
    env = _environment()
    return env.program(env.compile(rule), functions=KUBERNETES_FUNCTIONS)


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server does it: missing properties with a `default` get it."""
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in [k for k in value if k not in (schema.get("properties") or {})]:
                value[key] = apply_defaults(extra, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], v) for v in value]
    return value


def _walk(schema: dict[str, Any], value: Any, path: str, outcome: Outcome) -> None:
    for index, rule in enumerate(schema.get("x-kubernetes-validations") or []):
        name = f"{path or '<root>'} rule {index}: {rule.get('message') or rule['rule']}"
        if "oldSelf" in rule["rule"]:
            outcome.on_update_only.append(name)
            continue
        try:
            program = _program(rule["rule"])
        except Exception as err:  # noqa: BLE001 - any compile failure makes the rule unevaluable
            outcome.unevaluable.append(f"{name} (does not compile: {err})")
            continue
        try:
            result = program.evaluate({"self": celpy.json_to_cel(value)})
        except celpy.CELEvalError as err:
            (outcome.unevaluable if "undeclared reference" in str(err) else outcome.failed).append(
                f"{name} ({str(err)[:200]})")
            continue
        if isinstance(result, celpy.CELEvalError):
            (outcome.unevaluable if "undeclared reference" in str(result) else outcome.failed).append(
                f"{name} ({str(result)[:200]})")
        elif result is True or result == celtypes.BoolType(True):
            outcome.passed.append(name)
        else:
            outcome.failed.append(name)
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, item in value.items():
            sub = properties.get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                _walk(sub, item, f"{path}.{key}" if path else key, outcome)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk(schema["items"], item, f"{path}[{i}]", outcome)


@cache
def _crd_schemas(crd_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    schemas = {}
    for doc in crd_documents(crd_dir):  # parsed once for tests/schemas.py and here
        for version in doc["spec"]["versions"]:
            schemas[(f"{doc['spec']['group']}/{version['name']}", doc["spec"]["names"]["kind"])] = (
                version["schema"]["openAPIV3Schema"])
    return schemas


def evaluate(obj: dict[str, Any], crd_dir: Path) -> Outcome | None:
    """Every rule of the object's CRD on the (defaulted) object; None if no CRD in `crd_dir` defines its kind."""
    schema = _crd_schemas(crd_dir).get((obj["apiVersion"], obj["kind"]))
    if schema is None:
        return None
    outcome = Outcome()
    _walk(schema, apply_defaults(schema, copy.deepcopy(obj)), "", outcome)
    return outcome

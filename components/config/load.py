"""Reading a stack's config: the declared keys (Pulumi.yaml's schema is generated from them), nesting the flat
dotted keys, the checks on raw values, and pydantic's errors as one `ConfigError` line."""

from __future__ import annotations

import difflib
import json
import math
import typing
from typing import Any

from pydantic import ValidationError

from .base import DEFAULT_PROVIDER_CONFIG, EXPLICIT_PROVIDERS, PROJECT, PROVIDER_NAMESPACES, SECRET_KEYS, ConfigError
from .operations import CostConfig
from .stack import SECTIONS, StackConfig


# --------------------------------------------------------------------------- loading
def declared_keys() -> dict[str, tuple[str, Any, type]]:
    """Every user key -> (description, default or None, Python type); the source of Pulumi.yaml's schema."""
    keys: dict[str, tuple[str, Any, type]] = {
        "track": (StackConfig.model_fields["track"].description, None, str),
    }
    for prefix, section in SECTIONS.items():
        for field, info in section.model_fields.items():
            default = None if info.is_required() else info.default
            keys[f"{prefix}.{field}"] = (info.description, default, info.annotation)
    return keys


def _nest(raw: dict[str, Any]) -> dict[str, Any]:
    """Flat `section.key` strings (as Pulumi hands them over) -> nested dict for the models."""
    nested: dict[str, Any] = {}
    known = declared_keys()
    for key, value in raw.items():
        if key in SECRET_KEYS:
            continue
        if key not in known:
            close = difflib.get_close_matches(key, list(known) + list(SECRET_KEYS), n=1)
            hint = f"did you mean {PROJECT}:{close[0]}?" if close else "see the config table in README.md"
            raise ConfigError(key, value, f"unknown key; {hint}")
        annotation = known[key][2]
        if isinstance(value, str) and "list" in str(annotation):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ConfigError(key, value, "expected a list, e.g. [\"203.0.113.7/32\"]") from None
        else:
            _check_scalar(key, value, numeric=int in (annotation, *typing.get_args(annotation))
                          or key.startswith(f"{CostConfig.prefix}."))
        if type(None) in typing.get_args(annotation) and (value == "" or (value in ("0", 0) and int in typing.get_args(
                annotation))):
            # Pulumi.yaml's stand-in default for "unset": "" (strings) or 0 (integers), tools/preview/schema.py
            value = None
        section, _, field = key.partition(".")
        if field:
            nested.setdefault(section, {})[field] = value
        else:
            nested[key] = value
    return nested


def _check_scalar(key: str, value: Any, numeric: bool) -> None:
    """Pulumi hands a YAML list or map to the program as JSON text, and `.inf`/`.nan` as text a float() accepts:
    neither may reach a key that takes one name or a number (a name may well be `nan`)."""
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, (list, dict)) or (isinstance(text, str) and len(text) > 1
                                              and text[0] in "[{" and text[-1] in "]}"):
        raise ConfigError(key, value, "expected a single value, not a YAML list or map")
    if not numeric:
        return
    if isinstance(text, str) and text.lower().lstrip("+-") in (".inf", ".nan"):
        text = text.replace(".", "")  # YAML's spelling, should it arrive as text
    try:
        number = float(text)
    except (TypeError, ValueError):
        return
    if not math.isfinite(number):
        raise ConfigError(key, value, "expected a finite number")


def check_namespaces(keys: typing.Iterable[str]) -> None:
    """Every stack key must belong to this project or to a namespace the program uses (PROVIDER_NAMESPACES);
    a key under any other namespace would be ignored silently, so it is an error, with a did-you-mean."""
    known = (PROJECT, *PROVIDER_NAMESPACES)
    for full in sorted(keys):
        namespace, sep, rest = full.partition(":")
        if sep and namespace in EXPLICIT_PROVIDERS:
            value = keys.get(full) if isinstance(keys, dict) else None
            raise ConfigError(full, value, f"has no effect: stack settings of a provider configure only its "
                                          f"default provider ({DEFAULT_PROVIDER_CONFIG}), and this program gives every "
                                          f"resource an explicit one ({EXPLICIT_PROVIDERS[namespace]}); remove it")
        if not sep or namespace in known:
            continue
        close = difflib.get_close_matches(namespace, known, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]}:{rest}?" if close else \
            f"this program reads {PROJECT}:, {', '.join(n + ':' for n in PROVIDER_NAMESPACES)} keys only"
        raise ConfigError(full, None, f"unknown namespace {namespace!r}; {hint}")


def _describe_pydantic(err: ValidationError, raw: dict[str, Any]) -> ConfigError:
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    key = ".".join(loc) if loc else "track"
    value = raw.get(key)
    kind = first["type"]
    if kind == "missing":
        info = declared_keys().get(key)
        return ConfigError(key, None, f"required: {info[0] if info else 'set this key'}")
    if kind == "extra_forbidden":
        return ConfigError(key, value, "unknown key; see the config table in README.md")
    ctx = first.get("ctx") or {}
    if "expected" in ctx:
        return ConfigError(key, value, f"expected one of {ctx['expected']}")
    return ConfigError(key, value, first["msg"].lower())


def parse_config(raw: dict[str, Any], stack: str | None = None) -> StackConfig:
    """Validate a flat map of project keys (namespace stripped) into a StackConfig or raise ConfigError. `stack`:
    the Pulumi stack's name, which the default cloud names derive from."""
    try:
        return StackConfig.model_validate({**_nest(raw), **({"stack": stack} if stack else {})})
    except ValidationError as err:
        raise _describe_pydantic(err, raw) from None


def raw_project_config() -> dict[str, Any]:
    """All `kimi-k3-1:*` keys given to this program run, with the namespace stripped.

    Pulumi hands config to the language host as a map (set via `set_all_config` or the
    PULUMI_CONFIG environment variable); `pulumi.Config` can only look keys up, not list them,
    and listing is what lets unknown keys be rejected.
    """
    from pulumi.runtime import config as runtime_config

    try:
        from_env = runtime_config.get_config_env()
    except ValueError as err:  # PULUMI_CONFIG is the CLI's JSON; set by hand it may be anything
        raise ConfigError("environment:PULUMI_CONFIG", None, f"the environment variable is not JSON ({err}): unset "
                                                             'it, or set a JSON object of "project:key": "value" '
                                                             "pairs") from None
    if not isinstance(from_env, dict):
        raise ConfigError("environment:PULUMI_CONFIG", None, "the environment variable must hold a JSON object of "
                                                             '"project:key": "value" pairs: unset it')
    merged = {str(k): v for k, v in {**from_env, **runtime_config.CONFIG.get()}.items()}
    check_namespaces(merged)
    prefix = f"{PROJECT}:"
    return {k[len(prefix):]: v for k, v in merged.items() if k.startswith(prefix)}


def load_config() -> StackConfig:
    import pulumi

    raw = raw_project_config()
    for key in SECRET_KEYS:
        if not raw.get(key):
            raise ConfigError(key, None, f"required secret: pulumi config set --secret {key} <value>")
    return parse_config(raw, pulumi.get_stack())

"""Kubernetes pods: pinned images, the Hugging Face token only from its Secret, no token in the model servers, no
credentials in plain env."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterator, Mapping
from typing import Any

from components.checks import declared
from components.platform import hardening

from .common import (
    CREDENTIAL_PAIRS,
    CREDENTIAL_WORDS,
    ENGINE_REPOSITORIES,
    HF_SECRET_NAME,
    HF_TOKEN_ENV_NAMES,
    HF_TOKEN_KEYS,
    HF_TOKEN_PATTERN,
    IMAGE_KEY,
    K8S_SECRET,
    MODEL_SERVER_LABEL_KEYS,
    PRIVATE_KEY_PATTERN,
    _get,
    _is_kubernetes,
    _is_list,
    _join,
    _mappings,
    _show,
    _strings,
    is_unknown,
)


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


CREDENTIAL_VALUES = {
    "an AWS access key": re.compile(r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    "a private key": PRIVATE_KEY_PATTERN,
    "a Hugging Face token": HF_TOKEN_PATTERN,
    "a URL with a password": re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/@:\s]+:[^/@\s]+@"),
}
"""Values that are credentials whatever their variable is called: an AWS access key id (gitleaks' default rule
`aws-access-token`, https://github.com/gitleaks/gitleaks/blob/420a0f55f4a7a03dfe701ceb1f4f66a7c68b26b4/config/
gitleaks.toml), a PEM private key (RFC 7468), a Hugging Face token, a password in a URL's userinfo (RFC 3986 3.2.1,
`user:password@`)."""


def _text(props: Mapping[str, Any]) -> str:
    """The object as JSON text, to test for a marker before walking it (a key or value that is not JSON, the
    engine's proxies included, is shown by `str`)."""
    return json.dumps(props, default=str)


def credential_value(text: str) -> str | None:
    """What kind of credential a value holds, or None."""
    return next((what for what, pattern in CREDENTIAL_VALUES.items() if pattern.search(text)), None)


def _env_entries(props: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, entry) of every environment variable of every container (any list under an `env` key)."""
    for path, mapping in _mappings(props):
        if path.rsplit(".", 1)[-1].startswith("env[") and isinstance(mapping.get("name"), str):
            yield path, mapping


def check_secrets_not_plain_env(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Credentials reach containers from Secrets (valueFrom.secretKeyRef), never as literal env values: an env var
    whose value is a credential (CREDENTIAL_VALUES) whatever its name, one the program fills from a Secret only
    (declared.SECRET_ENV_NAMES, or read from a Secret by another container of the object) given a plain `value`, one
    named like a credential (TOKEN, SECRET, PASSWORD, API_KEY, ...) with a `value`, a credential in a local command's
    environment, or a private key anywhere in a Kubernetes input outside a Secret. Which Secret (and key) each
    container may read is the workload's declaration (policy/inventory.py)."""
    if resource_type == "command:local:Command":
        environment = props.get("environment")
        return [f"environment {key}: holds {what}; a local command gets no credential from the plan"
                for key, value in (environment.items() if isinstance(environment, Mapping) else ())
                if isinstance(value, str) and not is_unknown(value) and (what := credential_value(value))]
    if not _is_kubernetes(resource_type):
        return []
    text = _text(props)  # one C-speed pass: most objects hold neither an env list nor a PEM block
    violations = []
    entries = list(_env_entries(props)) if '"env"' in text else []
    from_secrets = declared.SECRET_ENV_NAMES | {
        entry["name"] for _, entry in entries if isinstance(_get(entry, "valueFrom", "secretKeyRef"), Mapping)}
    for path, entry in entries:
        name, value = entry["name"], entry.get("value")
        if not isinstance(value, str) or is_unknown(value):
            continue
        what = credential_value(value)
        if what:
            violations.append(f"{path}: env {name} holds {what} as a literal value; use valueFrom.secretKeyRef to a "
                              "Secret the workload declares")
        elif name in from_secrets and name not in HF_TOKEN_ENV_NAMES:
            violations.append(f"{path}: env {name} is filled from a Secret only, but sets a plain value")
        elif name in from_secrets:
            continue  # the Hugging Face rule names the Secret it must come from
        elif value and _is_credential_name(name):
            violations.append(f"{path}: env {name} sets a literal credential; use valueFrom.secretKeyRef to a Secret")
    if resource_type != K8S_SECRET and "PRIVATE KEY-----" in text:
        said = {f"{path}.value" for path, _ in entries}
        violations += [f"{path} contains a private key; keep it in a Secret" for path, text in _strings(props)
                       if PRIVATE_KEY_PATTERN.search(text) and path not in said]
    return violations

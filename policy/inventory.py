"""Deny by default: every workload, resource type, ConfigMap, grant, command, RBAC rule, NetworkPolicy, storage
and network setting and node pool must be what components/checks/declared.py declares; each refusal names the
declaration it needs (file and name)."""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from components.checks import declared
from components.facts import contract
from components.platform import hardening

from .common import (
    ANY_IAM_GRANT,
    CLUSTER,
    GKE_METADATA,
    K8S_CLUSTER_ROLE,
    K8S_CLUSTER_ROLE_BINDING,
    K8S_NETWORK_POLICY,
    K8S_ROLE,
    K8S_ROLE_BINDING,
    K8S_SERVICE,
    _get,
    _is_kubernetes,
    _is_list,
    _mappings,
    _node_configs,
    _pools,
    _show,
    is_unknown,
)
from .grants import _grant_members, _limits_writes
from .pods import _containers, _host_paths, _image, _is_restricted, _kind, _pod_specs, split_image
from .shell import CREDENTIAL_FLAGS, _installer_args, shell_commands


def _start_commands(container: Mapping[str, Any], allowed: declared.Container) -> tuple[list[str], list[tuple[
        dict[str, Any], list[str]]]]:
    """(violations, commands) of what a container runs at start: its command (or the image's entrypoint) and the
    commands of a `shell -c` script."""
    command = container.get("command")
    args = container.get("args")
    argv = [str(w) for w in (command if _is_list(command) else [])] + [
        str(w) for w in (args if _is_list(args) else [])]
    if not _is_list(command) or not command:
        return [], []  # the image's own entrypoint, with arguments
    program = argv[0]
    if program in allowed.shells or posixpath.basename(program) in ("sh", "bash", "dash", "ash", "zsh"):
        if program not in allowed.shells:
            return [f"starts the shell {program!r}, which it does not declare"], []
        if "-c" not in argv[1:3]:  # `bash FILE`: the file is the program
            return [], [({"unset": set(), "clean": False}, argv[1:])]
        index = argv.index("-c")
        script = argv[index + 1] if index + 1 < len(argv) else ""
        return [], shell_commands(script)
    return [], [({"unset": set(), "clean": False}, argv)]


def _check_start(container: Mapping[str, Any], allowed: declared.Container, secret_env: set[str]) -> list[str]:
    found, commands = _start_commands(container, allowed)
    for facts, argv in commands:
        if not argv:
            continue
        program = argv[0]
        installer = _installer_args(argv)
        if installer is not None:
            name, install = installer
            if tuple(install) not in allowed.installs:
                found.append(f"runs the installer {name!r} with {shlex.join(install)!r}: not a declared install "
                             f"(declared: {[shlex.join(i) for i in allowed.installs] or 'none'})")
            visible = sorted(secret_env - facts["unset"]) if not facts["clean"] else []
            if visible:
                found.append(f"runs the installer {name!r} with the secret variables {visible} in its "
                             "environment (unset them with `env -u`)")
            continue
        if not _declared_program(argv, allowed.programs) and program not in declared.SHELL_BUILTINS:
            found.append(f"runs {program!r} at start, which it does not declare (declared: "
                         f"{sorted(allowed.programs)})")
    words = [str(w) for key in ("command", "args") for w in (container.get(key) or []) if _is_list(
        container.get(key))]
    for word in (w for text in words for w in text.replace("=", " ").split()):
        if word in CREDENTIAL_FLAGS:
            found.append(f"passes a credential on its command line ({word}): use a Secret")
    return found


def _declared_program(argv: list[str], programs: frozenset[str]) -> bool:
    """The command is a declared program: its executable, or the declared words it starts with."""
    return any(argv[:len(entry.split())] == entry.split() for entry in programs)


def _mounts(container: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    mounts = container.get("volumeMounts")
    return [m for m in mounts if isinstance(m, Mapping)] if _is_list(mounts) else []


def _volume_kinds(spec: Mapping[str, Any]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Volume name -> (source kind, volume) of a pod spec."""
    volumes = spec.get("volumes")
    found = {}
    for volume in volumes if _is_list(volumes) else []:
        if isinstance(volume, Mapping):
            kinds = [k for k in volume if k != "name"]
            found[str(volume.get("name"))] = (kinds[0] if len(kinds) == 1 else "+".join(sorted(kinds)), volume)
    return found


UNSAFE_SECCOMP = frozenset({"Unconfined", "Localhost"})


def _context_violations(context: Any, allowed: declared.Container, level: str) -> list[str]:
    found = []
    if not isinstance(context, Mapping):
        return ["no securityContext, but it is declared restricted"] if allowed.restricted and level else []
    privileged = allowed.privileged
    if context.get("privileged") is True and not privileged:
        found.append("privileged, which it does not declare")
    if context.get("allowPrivilegeEscalation") is True and not privileged:
        found.append("allowPrivilegeEscalation true")
    added = _get(context, "capabilities", "add")
    extra = sorted(str(c) for c in added if c not in allowed.capabilities) if _is_list(added) else []
    if extra and not privileged:
        found.append(f"adds capabilities {extra}")
    if (context.get("runAsUser") == 0 or context.get("runAsGroup") == 0
            or context.get("runAsNonRoot") is False) and not allowed.root:
        found.append("runs as root (UID/GID 0 or runAsNonRoot false), which it does not declare")
    if _get(context, "seccompProfile", "type") in UNSAFE_SECCOMP and not privileged:
        found.append(f"seccompProfile {_get(context, 'seccompProfile', 'type')}")
    if _get(context, "appArmorProfile", "type") == "Unconfined" and not privileged:
        found.append("appArmorProfile Unconfined")
    if context.get("procMount") == "Unmasked":
        found.append("procMount Unmasked")
    if _get(context, "seLinuxOptions", "type") in ("spc_t", "unconfined_t") and not privileged:
        found.append("an unconfined SELinux type")
    if context.get("readOnlyRootFilesystem") is False and not allowed.writable_root:
        found.append("a writable root filesystem, which it does not declare")
    if level and allowed.restricted and not _is_restricted(context):
        found.append("not the restricted profile (components/platform/hardening.py container_context), which it "
                     "declares")
    if level and allowed.restricted and context.get("readOnlyRootFilesystem") is not True:
        found.append("no read-only root filesystem, though declared restricted")
    return found


DECLARED = "components/checks/declared.py"
"""Where every declaration lives: each refusal below names it and the entry a change would need."""


def _at(entry: str) -> str:
    return f" ({DECLARED} {entry})"


def _pod_violations(kind: str, name: str, namespace: str, spec: Mapping[str, Any]) -> list[str]:
    candidates = declared.workloads(kind, name, namespace)
    if not candidates:
        return [f"{kind} {name!r} in namespace {namespace!r} is not a declared workload" + _at("WORKLOADS")]
    best: list[str] | None = None
    for workload in candidates:  # an object may fit one of several declarations (the engine choice of a profile)
        found = _workload_violations(workload, spec)
        if not found:
            return []
        if best is None or len(found) < len(best):
            best = [v + _at(f"WORKLOADS {workload.kind} {workload.name!r}") for v in found]
    return best or []


def _workload_violations(workload: declared.Workload, spec: Mapping[str, Any]) -> list[str]:
    found = []
    for host in sorted(declared.HOST_FIELDS):
        if spec.get(host) is True and host not in workload.host:
            found.append(f"the pod sets {host}, which the workload does not declare")
    if spec.get("hostUsers") is True and not workload.host:
        found.append("the pod sets hostUsers true")
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if workload.service_account is None:
        if account not in (None, "default") and not is_unknown(account):
            found.append(f"runs as service account {account!r}; the workload declares none")
    elif not (isinstance(account, str) and (is_unknown(account) or declared.matches(workload.service_account,
                                                                                     account))):
        found.append(f"runs as service account {_show(account)}, not the declared {workload.service_account!r}")
    token = spec.get("automountServiceAccountToken")
    if not workload.api_token and token is not False:
        found.append(f"automountServiceAccountToken is {_show(token)}: the workload declares no API access, so "
                     "it must be false")
    context = spec.get("securityContext")
    containers = _containers(spec)
    if isinstance(context, Mapping):
        if context.get("runAsUser") == 0 or context.get("runAsNonRoot") is False or context.get("runAsGroup") == 0:
            found.append("the pod runs as root (securityContext), which the workload does not declare") if not all(
                (_allowed_for(workload, c) or declared.Container("", frozenset())).root for c in containers) else None
        if _get(context, "seccompProfile", "type") in UNSAFE_SECCOMP:
            found.append(f"the pod's seccompProfile is {_get(context, 'seccompProfile', 'type')}")
        if context.get("sysctls"):
            found.append("the pod sets sysctls, which the workload does not declare")
    claims = spec.get("resourceClaims")
    for claim in claims if _is_list(claims) else []:
        template = _get(claim, "resourceClaimTemplateName")
        if not (isinstance(template, str) and template in workload.claim_templates):
            found.append(f"the pod claims {_show(_get(claim, 'name'))} from {_show(template)}: not a declared claim "
                         "template of the workload")
    volumes = _volume_kinds(spec)
    for volume_name, (source, volume) in volumes.items():
        declared_kind = workload.volumes.get(volume_name)
        if declared_kind != source:
            found.append(f"volume {volume_name!r} ({source}) is not declared for the workload")
        if source == "projected" and "serviceAccountToken" in json.dumps(volume) and not workload.api_token:
            found.append(f"volume {volume_name!r} projects a service-account token")
    host_paths = _host_paths(spec)
    for container in containers:
        cname = container.get("name")
        allowed = _allowed_for(workload, container)
        if allowed is None:
            known = [c.name for c in workload.containers]
            found.append(f"container {cname!r} (image {_image(container)!r}) is not declared for the workload "
                         f"(declared: {known})")
            continue
        where = f"container {cname!r}"
        found += [f"{where}: {v}" for v in _context_violations(container.get("securityContext"), allowed, where)]
        ports = container.get("ports")
        for port in ports if _is_list(ports) else []:
            if _get(port, "hostPort") not in (None, 0) or _get(port, "hostIP"):
                found.append(f"{where}: hostPort {_show(_get(port, 'hostPort'))} (port "
                             f"{_show(_get(port, 'containerPort'))}) opens the port on the node, outside every "
                             "NetworkPolicy")
        for mount in _mounts(container):
            vname = str(mount.get("name"))
            source = volumes.get(vname, ("missing", {}))[0]
            if source == "hostPath" and host_paths.get(vname) not in allowed.host_paths:
                found.append(f"{where}: mounts host path {host_paths.get(vname)} (volume {vname!r}), not declared")
            writable = mount.get("readOnly") is not True and source not in ("emptyDir", "configMap", "secret",
                                                                             "projected", "downwardAPI")
            if writable and vname not in allowed.writable_volumes:
                found.append(f"{where}: mounts volume {vname!r} ({source}) read-write, declared read-only")
            if source == "persistentVolumeClaim" and vname not in allowed.writable_volumes and _get(
                    volumes[vname][1], "persistentVolumeClaim", "readOnly") is False:
                found.append(f"{where}: volume {vname!r} claims its PVC read-write")
            if mount.get("mountPropagation") in ("Bidirectional", "HostToContainer") and not allowed.privileged:
                found.append(f"{where}: mountPropagation {mount.get('mountPropagation')}")
        secret_env: set[str] = set()
        env = container.get("env")
        for entry in env if _is_list(env) else []:
            ref = _get(entry, "valueFrom", "secretKeyRef")
            if isinstance(ref, Mapping):
                secret_env.add(str(_get(entry, "name")))
                pair = (ref.get("name"), ref.get("key"))
                if pair not in allowed.secrets:
                    found.append(f"{where}: reads secret {pair[0]!r} key {pair[1]!r} ({_get(entry, 'name')}), "
                                 "which it does not declare")
        env_from = container.get("envFrom")
        for entry in env_from if _is_list(env_from) else []:
            if _get(entry, "secretRef") is not None:
                found.append(f"{where}: imports a whole Secret (envFrom), which it does not declare")
        claims_used = _get(container, "resources", "claims")
        for claim in claims_used if _is_list(claims_used) else []:
            if _get(claim, "name") not in allowed.claims:
                found.append(f"{where}: uses resource claim {_show(_get(claim, 'name'))}, which it does not declare")
        found += [f"{where}: {v}" for v in _check_start(container, allowed, secret_env)]
        found += [f"{where}: {v}" for v in _digest_violations(container, allowed)]
        for hook in ("postStart", "preStop"):
            command = _get(container, "lifecycle", hook, "exec", "command")
            if _is_list(command) and command:
                shadow = {"command": command}
                found += [f"{where} ({hook} hook): {v}" for v in _check_start(shadow, allowed, secret_env)]
    return found


def _allowed_for(workload: declared.Workload, container: Mapping[str, Any]) -> declared.Container | None:
    """The container's declaration: same name, and its image one of the declared repositories (an entry without
    images takes a user-named image)."""
    repo = hardening.repository(_image(container)) if _image(container) else ""
    named = [c for c in workload.containers if c.name == container.get("name")]
    return next((c for c in named if repo in c.images), None) \
        or next((c for c in named if c.image_pattern and re.fullmatch(c.image_pattern, repo)), None) \
        or next((c for c in named if not c.images and not c.image_pattern), None)


DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _digest_violations(container: Mapping[str, Any], allowed: declared.Container) -> list[str]:
    """A container declared `digest_required` runs its image by digest, never by a tag alone."""
    image = _image(container)
    if not allowed.digest_required or is_unknown(image):
        return []
    _, digest = split_image(image)
    if digest is None or not DIGEST.fullmatch(digest):
        return [f"runs image {image!r} without a sha256 digest: the workload declares its image pinned by digest "
                "(the stack's own build, components/serving/engineimage.py)"]
    return []


def _object_name(props: Mapping[str, Any]) -> tuple[str, str]:
    name = _get(props, "metadata", "name")
    namespace = _get(props, "metadata", "namespace")
    return (name if isinstance(name, str) else "", namespace if isinstance(namespace, str) else "")


def check_declared_workloads(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every pod belongs to a declared workload (kind, name, namespace) and each of its containers to that
    workload's declaration (name and image): privileges, host namespaces and paths, root, volumes and their
    modes, secrets, resource claims, host ports, service account and API token, and what it runs at start (its
    shell, programs and exact installs), all as components/checks/declared.py declares them; anything else is refused.
    An exemption is the container's own, never shared by image."""
    if not _is_kubernetes(resource_type) or resource_type.startswith("kubernetes:helm.sh/"):
        return []
    specs = list(_pod_specs(props))
    if not specs:
        return []
    kind = _kind(resource_type, props)
    name, namespace = _object_name(props)
    if is_unknown(name):
        return []
    found: list[str] = []
    for path, spec in specs:
        found += [f"{path}: {v}" if path else v for v in _pod_violations(kind, name, namespace, spec)]
    return list(dict.fromkeys(found))


IMAGE_REFERENCE = re.compile(r"(?P<name>[^@:\s]+(?::[0-9]+)?/[^@:\s]+)(?::[\w][\w.-]{0,127})?@(?P<digest>[^@\s]*)")


def image_problem(image: Any, user_named: bool = False) -> str | None:
    """Why an image may not run, or None: not `registry/path[:tag]@sha256:<64 hex>`, or from a registry/repository
    the program does not declare (declared.IMAGE_REPOSITORIES, the stack's own engine build). A user-named image
    (`tpu.sglangImage`) is the user's declaration of its registry, but runs by digest too."""
    if not isinstance(image, str) or not image:
        return f"image {_show(image)} is not a reference"
    match = IMAGE_REFERENCE.fullmatch(image)
    if match is None or not re.fullmatch(declared.IMAGE_DIGEST, match["digest"]):
        return (f"image {image!r} is not registry/path[:tag]@sha256:<64 hex>: every image runs by digest from its "
                "registry" + _at("IMAGE_DIGEST"))
    repository = match["name"]
    if user_named or repository in declared.IMAGE_REPOSITORIES or re.fullmatch(
            declared.BUILT_ENGINE_REPOSITORY, repository):
        return None
    return (f"image {image!r} comes from {repository}, not a declared registry/repository" + _at("IMAGE_REPOSITORIES"))


def check_declared_images(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every image of every pod (containers, init and ephemeral containers, in every workload kind and custom
    resource) and of the engine build (its base and its Cloud Build step) runs by digest from a declared
    registry/repository. A Helm chart's values are left to the objects it renders, which are checked one by one."""
    found = []
    if resource_type == COMMAND:
        env = props.get("environment")
        for key in ("BASE", "STEP"):
            value = env.get(key) if isinstance(env, Mapping) else None
            if value is not None and not is_unknown(value) and (problem := image_problem(value)):
                found.append(f"environment {key}: {problem}")
        return found
    if not _is_kubernetes(resource_type) or resource_type.startswith("kubernetes:helm.sh/"):
        return []
    kind = _kind(resource_type, props)
    name, namespace = _object_name(props)
    for path, spec in _pod_specs(props):
        user = {c.name for w in declared.workloads(kind, name, namespace) for c in w.containers
                if not c.images and not c.image_pattern}
        for group in ("initContainers", "containers", "ephemeralContainers"):
            listed = spec.get(group)
            for index, container in enumerate(listed if _is_list(listed) else []):
                image = container.get("image") if isinstance(container, Mapping) else None
                if is_unknown(image):
                    continue
                problem = image_problem(image, isinstance(container, Mapping) and container.get("name") in user)
                if problem:
                    found.append(f"{path}.{group}[{index}]: {problem}" if path else f"{group}[{index}]: {problem}")
    return found


def check_declared_types(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Only the resource types the program declares (components/checks/declared.py TYPES) and its own components."""
    if resource_type in declared.TYPES or resource_type.startswith(declared.COMPONENT_PREFIX):
        return []
    return [f"resource type {resource_type} is not one the program declares (components/checks/declared.py TYPES)"]


def check_declared_config_maps(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every ConfigMap is declared; one that carries code or a lock holds exactly the declared files' bytes."""
    if resource_type != "kubernetes:core/v1:ConfigMap":
        return []
    name, _ = _object_name(props)
    decl = next((d for d in declared.CONFIGMAPS if declared.matches(d.name, name)), None)
    if decl is None:
        return [f"ConfigMap {name!r} is not declared (components/checks/declared.py CONFIGMAPS)"]
    if decl.code is None:
        return []
    data = props.get("data")
    if is_unknown(data):
        return []
    data = data if isinstance(data, Mapping) else {}
    expected = _expected_code(decl.name)
    found = []
    if props.get("binaryData"):
        found.append(f"ConfigMap {name!r} carries binaryData; it is declared to hold only {sorted(expected)}"
                     + _at(f"CONFIGMAPS {decl.name!r}"))
    for key in sorted(set(data) | set(expected)):
        if key not in expected:
            found.append(f"ConfigMap {name!r} key {key!r} is not a declared file" + _at(f"CONFIGMAPS {decl.name!r}"))
        elif key not in data:
            found.append(f"ConfigMap {name!r} lacks the declared file {key!r}" + _at(f"CONFIGMAPS {decl.name!r}"))
        elif is_unknown(data[key]):
            continue
        elif hashlib.sha256(str(data[key]).encode()).hexdigest() != expected[key]:
            found.append(f"ConfigMap {name!r} key {key!r} is not the declared file (sha256 differs from "
                         f"{decl.code[key]})")
    return found


@functools.cache
def _expected_code(name: str) -> dict[str, str]:
    """sha256 of each declared file of a code-carrying ConfigMap (read once per process)."""
    decl = next(d for d in declared.CONFIGMAPS if d.name == name)
    return {key: hashlib.sha256(text.encode()).hexdigest() for key, text in decl.expected().items()}


def check_declared_grants(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every IAM grant is a declared (type, role, member): no other role, no other identity (not the namespace's
    `default` account, not the nodes with a wider role)."""
    if not ANY_IAM_GRANT.match(resource_type):
        return []
    found = []
    for path, role, member in _grant_members(resource_type, props):
        if is_unknown(role) or is_unknown(member):
            continue
        matching = [g for g in declared.GRANTS if g.type == resource_type and g.role == role
                    and isinstance(member, str) and re.fullmatch(g.member, member)]
        if not matching:
            found.append(f"{path}: role {_show(role)} to {_show(member)} is not a declared grant "
                         "(components/checks/declared.py GRANTS)")
        elif all(g.folder and not _within_folder(props, g.folder) for g in matching):
            found.append(f"{path}: role {_show(role)} to {_show(member)} is declared only within the folder "
                         f"{matching[0].folder!r} of its bucket, and its condition "
                         f"{_show(_get(props, 'condition', 'expression'))} does not limit it so" + _at("GRANTS"))
        elif all(g.per_stack and not _has_title(props) for g in matching):
            found.append(f"{path}: role {_show(role)} to {_show(member)} has no IAM condition of its own stack: the "
                         "same Workload Identity principal in another stack's cluster would share the binding, and "
                         "either stack's destroy would remove it" + _at("GRANTS (per_stack)"))
    if not _grant_members(resource_type, props):
        found.append(f"{resource_type}: a grant with no single member is not declared" + _at("GRANTS"))
    return found


def _has_title(props: Mapping[str, Any]) -> bool:
    """The grant carries a condition with a title (unknown: allowed, checked at `pulumi up`)."""
    title = _get(props, "condition", "title")
    return is_unknown(title) or (isinstance(title, str) and bool(title.strip()))


def _within_folder(props: Mapping[str, Any], folder: str) -> bool:
    """The grant's condition limits every alternative to objects under `folder` of its bucket (unknown: allowed,
    checked at `pulumi up`)."""
    expression, bucket = _get(props, "condition", "expression"), props.get("bucket")
    if is_unknown(expression) or is_unknown(bucket):
        return True
    if not (isinstance(expression, str) and isinstance(bucket, str)) or "?" in expression:
        return False
    prefix = f"projects/_/buckets/{bucket.removeprefix('b/')}/objects/"
    return all(_limits_writes(a, prefix) and f'"{prefix}{folder}' in a for a in expression.split("||"))


COMMAND = "command:local:Command"


def check_declared_artifacts(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The checkpoint bucket keeps its objects (no lifecycle rule: the program declares none, and a Delete rule
    would drop the staged 1.56 TB); the engine's Artifact Registry repository keeps immutable tags (a moved tag
    would no longer be the lock it names)."""
    if resource_type == "gcp:storage/bucket:Bucket":
        return _bucket_violations(props)
    elif resource_type == "gcp:artifactregistry/repository:Repository":
        tags = _get(props, "dockerConfig", "immutableTags")
        if tags is not True and not is_unknown(tags):
            return [f"repository {_show(props.get('repositoryId'))}: tags must be immutable (dockerConfig."
                    "immutableTags true): the engine image's tag names its lock" + _at("commands: the engine build")]
    elif resource_type == COMMAND:
        env = props.get("environment")
        env = env if isinstance(env, Mapping) else {}
        base, builder, repository, project = (env.get(k) for k in ("BASE", "BUILDER", "REPOSITORY", "PROJECT"))
        found = []
        if isinstance(base, str) and not is_unknown(base) and \
                not re.fullmatch(re.escape(declared.ENGINE_BASE) + "@" + declared.IMAGE_DIGEST, base):
            found.append(f"the engine image's base is {_show(base)}, declared {declared.ENGINE_BASE}@sha256:..."
                         + _at("ENGINE_BASE"))
        step = env.get("STEP")
        if isinstance(step, str) and not is_unknown(step) and \
                not re.fullmatch(re.escape(declared.ENGINE_STEP) + "@" + declared.IMAGE_DIGEST, step):
            found.append(f"the engine image's build step is {_show(step)}, declared {declared.ENGINE_STEP}@sha256:..."
                         + _at("ENGINE_STEP"))
        if all(isinstance(v, str) and not is_unknown(v) for v in (builder, repository, project)):
            cluster = repository.rsplit("/", 1)[-1].removesuffix("-engine")
            if builder != f"{cluster}-build@{project}.iam.gserviceaccount.com":
                found.append(f"the engine image is built as {_show(builder)}, not the stack's builder "
                             f"{cluster}-build@{project}.iam.gserviceaccount.com" + _at("BUILD_SA"))
        return found
    return []


def _bucket_violations(props: Mapping[str, Any]) -> list[str]:
    """The bucket's deletion as its `on-destroy` label declares (declared.BUCKET_DISPOSITIONS), no lifecycle rule,
    no Autoclass, no retention lock and a soft-delete retention Cloud Storage offers."""
    bucket = f"bucket {_show(props.get('name'))}"
    found = []
    rules_ = props.get("lifecycleRules")
    if _is_list(rules_) and rules_:
        actions = [_show(_get(rule, "action", "type")) for rule in rules_]
        found.append(f"{bucket}: lifecycle rules ({', '.join(actions)}) are not declared; the checkpoint is staged "
                     "once and kept" + _at("TYPES: the bucket, without lifecycle rules"))
    labels = props.get("labels")
    disposition = _get(labels, contract.BUCKET_ON_DESTROY_LABEL) if isinstance(labels, Mapping) else None
    force = props.get("forceDestroy")
    if not is_unknown(labels) and not is_unknown(disposition) and not is_unknown(force):
        if disposition not in declared.BUCKET_DISPOSITIONS:
            found.append(f"{bucket}: label {contract.BUCKET_ON_DESTROY_LABEL} is {_show(disposition)}, not one of "
                         f"{sorted(declared.BUCKET_DISPOSITIONS)}: every bucket declares whether destroy keeps it"
                         + _at("BUCKET_DISPOSITIONS"))
        elif (force is True) != declared.BUCKET_DISPOSITIONS[disposition]:
            found.append(f"{bucket}: forceDestroy is {_show(force)} on a bucket declared {disposition!r} on destroy"
                         + (" (a kept bucket is never force-destroyable: its staged checkpoint outlives the stack)"
                            if disposition == "keep" else " (destroy would fail on its objects and leave it billing)")
                         + _at("BUCKET_DISPOSITIONS"))
    if _get(props, "autoclass", "enabled") is True:
        found.append(f"{bucket}: Autoclass would move the checkpoint to colder classes; not declared"
                     + _at("BUCKET_DISPOSITIONS"))
    if props.get("retentionPolicy") or props.get("enableObjectRetention") is True:
        found.append(f"{bucket}: a retention policy or object retention lock is not declared (a locked one could "
                     "never be removed, nor the bucket deleted)" + _at("BUCKET_DISPOSITIONS"))
    seconds = _get(props, "softDeletePolicy", "retentionDurationSeconds")
    off, low, high = declared.SOFT_DELETE_SECONDS
    number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
    if seconds is not None and not is_unknown(seconds) and not (number and (seconds == off or low <= seconds <= high)):
        found.append(f"{bucket}: soft-delete retention {_show(seconds)} s is not 0 or 7-90 days"
                     + _at("SOFT_DELETE_SECONDS"))
    return found


def check_declared_commands(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A local command `pulumi up` runs is a declared one exactly: its script, interpreter, directory and environment
    names (components/checks/declared.py `commands`), and no delete or update command of its own."""
    if resource_type != COMMAND:
        return []
    create, interpreter, where = props.get("create"), props.get("interpreter"), props.get("dir")
    environment = props.get("environment") or {}
    if any(is_unknown(v) for v in (create, interpreter, where)):
        return []
    for decl in declared.commands():
        if create == decl.script and list(interpreter or []) == list(decl.interpreter) and where == decl.dir:
            found = [f"runs a {key} command ({_show(props[key])}), which the declaration has none of" + _at("commands")
                     for key in ("delete", "update") if props.get(key)]
            extra = sorted(set(environment) - decl.environment) if isinstance(environment, Mapping) else ["?"]
            if extra:
                found.append(f"sets environment {extra}, which the declaration does not name" + _at("commands"))
            return found
    first = str(create).splitlines()[0] if create else ""
    return [f"a local command that is not declared (components/checks/declared.py commands): interpreter "
            f"{_show(interpreter)}, dir {_show(where)}, script starting {first[:60]!r}"]


K8S_MUTATING_WEBHOOKS = "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration"
K8S_VALIDATING_WEBHOOKS = "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration"


def check_declared_rbac(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Roles hold a permission that reads credentials, runs code in pods or grants more (declared.SENSITIVE_*) only
    where declared; bindings bind service accounts only."""
    found = []
    name, _ = _object_name(props)
    if resource_type in (K8S_CLUSTER_ROLE, K8S_ROLE):
        allowed = next((r.permissions for r in declared.ROLES if declared.matches(r.name, name)), frozenset())
        rules_ = props.get("rules")
        for i, rule in enumerate(rules_ if _is_list(rules_) else []):
            resources = _get(rule, "resources") or []
            verbs = _get(rule, "verbs") or []
            for resource in resources if _is_list(resources) else []:
                for verb in verbs if _is_list(verbs) else []:
                    sensitive = resource in declared.SENSITIVE_RESOURCES or verb in declared.SENSITIVE_VERBS
                    if sensitive and (resource, verb) not in allowed:
                        found.append(f"{name}: rules[{i}] grants {verb!r} on {resource!r}, not declared for this "
                                     "role (components/checks/declared.py ROLES)")
            if _get(rule, "nonResourceURLs") and "*" in (_get(rule, "nonResourceURLs") or []):
                found.append(f"{name}: rules[{i}] grants every non-resource URL" + _at("ROLES"))
        if props.get("aggregationRule"):
            found.append(f"{name}: an aggregated role takes whatever other roles grant; not declared" + _at("ROLES"))
    elif resource_type == "kubernetes:core/v1:ServiceAccount":
        annotations = _get(props, "metadata", "annotations")
        namespace = _get(props, "metadata", "namespace")
        acts_as = declared.ACTS_AS.get((namespace if isinstance(namespace, str) else "", name))
        for key in annotations if isinstance(annotations, Mapping) else {}:
            value = annotations[key]
            if (key == "iam.gke.io/gcp-service-account" and acts_as and isinstance(value, str)
                    and re.fullmatch(acts_as, "serviceAccount:" + value)):
                continue
            if key.startswith("iam.gke.io/"):
                found.append(f"service account {name!r} annotation {key}: acting as a Google service account is "
                             "not declared (Workload Identity principals are granted directly)")
    elif resource_type in (K8S_CLUSTER_ROLE_BINDING, K8S_ROLE_BINDING):
        subjects = props.get("subjects")
        namespace = _get(props, "metadata", "namespace")
        namespace = namespace if isinstance(namespace, str) else ""
        decl = next((b for b in declared.BINDINGS if declared.matches(b.name, name, namespace)), None)
        if decl is None:
            found.append(f"binding {name!r} is not declared (components/checks/declared.py BINDINGS)")
        for i, subject in enumerate(subjects if _is_list(subjects) else []):
            kind = _get(subject, "kind")
            if kind not in declared.ALLOWED_SUBJECT_KINDS:
                found.append(f"{name}: subjects[{i}] is a {kind} ({_show(_get(subject, 'name'))}); bindings bind "
                             "service accounts only" + _at("ALLOWED_SUBJECT_KINDS"))
                continue
            if _get(subject, "name") == "default":
                found.append(f"{name}: subjects[{i}] binds a namespace's default service account")
            where = _get(subject, "namespace") or (namespace if resource_type == K8S_ROLE_BINDING else "")
            who = _get(subject, "name")
            if decl is not None and not any(
                    isinstance(where, str) and isinstance(who, str) and declared.matches(ns, where, namespace)
                    and declared.matches(account, who, where) for ns, account in decl.subjects):
                found.append(f"{name}: subjects[{i}] binds {_show(where)}/{_show(who)}, which the binding does not "
                             "declare (components/checks/declared.py BINDINGS)")
    elif resource_type in (K8S_MUTATING_WEBHOOKS, K8S_VALIDATING_WEBHOOKS):
        webhooks = props.get("webhooks")
        for i, webhook in enumerate(webhooks if _is_list(webhooks) else []):
            config = _get(webhook, "clientConfig")
            if not isinstance(config, Mapping):
                continue
            if config.get("url") is not None:
                found.append(f"{name}: webhooks[{i}] calls the URL {_show(config.get('url'))}; a webhook calls only "
                             "a declared in-cluster Service (components/checks/declared.py WEBHOOK_SERVICES)")
            service = config.get("service")
            if isinstance(service, Mapping) and (service.get("namespace"), service.get("name")) not in \
                    declared.WEBHOOK_SERVICES and not is_unknown(service.get("name")):
                found.append(f"{name}: webhooks[{i}] calls Service {_show(service.get('namespace'))}/"
                             f"{_show(service.get('name'))}, not a declared one" + _at("WEBHOOK_SERVICES"))
    return found


def _cidr_ok(cidr: Any, excepts: Any, ports: set[Any], peers: Sequence[declared.AddressPeer]) -> bool:
    if not isinstance(cidr, str):
        return False
    for peer in peers:
        if not ports or not ports <= set(peer.ports):
            continue
        if peer.cidr is None:
            if cidr.endswith("/32") and not excepts:
                return True
        elif peer.cidr == declared.PRIVATE:
            if _private(cidr) and not excepts and _prefix(cidr) >= declared.PRIVATE_MIN_PREFIX:
                return True
        elif cidr == peer.cidr and tuple(excepts or ()) == peer.excluded:
            return True
    return False


def check_declared_network_policies(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """NetworkPolicy address peers (ipBlock) only as declared for the policy (declared.EGRESS: the metadata server,
    the internet minus private ranges on 443, one API-server address), with declared ports; no ingress from
    addresses unless declared."""
    if resource_type != K8S_NETWORK_POLICY:
        return []
    name, _ = _object_name(props)
    types = next((v for k, v in declared.NETWORK_POLICIES.items() if declared.matches(k, name)), None)
    found = []
    if types is None:
        found.append(f"NetworkPolicy {name!r} is not declared (components/checks/declared.py NETWORK_POLICIES)")
    else:
        policy_types = _get(props, "spec", "policyTypes")
        if not is_unknown(policy_types) and tuple(policy_types or ()) != types:
            found.append(f"{name}: policyTypes {_show(policy_types)}, declared {list(types)}"
                         + _at(f"NETWORK_POLICIES {name!r}"))
    for direction, key, table, entry in (("egress", "to", declared.EGRESS, "EGRESS"),
                                         ("ingress", "from", declared.INGRESS_ADDRESSES, "INGRESS_ADDRESSES")):
        peers_allowed = next((v for k, v in table.items() if declared.matches(k, name)), ())
        rules_ = _get(props, "spec", direction)
        for i, rule in enumerate(rules_ if _is_list(rules_) else []):
            ports = {_get(p, "port") for p in (_get(rule, "ports") or [])} if _is_list(_get(rule, "ports")) else set()
            if any(_get(p, "endPort") for p in (_get(rule, "ports") or []) if _is_list(_get(rule, "ports"))):
                ports.add("range")
            for j, peer in enumerate(_get(rule, key) or [] if _is_list(_get(rule, key)) else []):
                block = _get(peer, "ipBlock")
                if block is None or is_unknown(_get(block, "cidr")):
                    continue
                if not _cidr_ok(_get(block, "cidr"), _get(block, "except"), ports, peers_allowed):
                    found.append(f"{name}: {direction}[{i}].{key}[{j}] ipBlock {_show(_get(block, 'cidr'))} "
                                 f"(except {_show(_get(block, 'except'))}, ports {sorted(map(str, ports)) or 'all'}) "
                                 "is not a declared address peer of this policy" + _at(f"{entry} {name!r}"))
    return found


def check_declared_storage(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Claims, storage and volume attributes classes and device claim templates as declared: the checkpoint claim
    ReadOnlyMany, the Hyperdisk ML class and its throughput classes, RDMA templates of their one device class and
    never adminAccess."""
    name, _ = _object_name(props)
    if resource_type == "kubernetes:core/v1:PersistentVolumeClaim":
        decl = next((c for c in declared.CLAIMS if declared.matches(c.name, name)), None)
        if decl is None:
            return [f"PersistentVolumeClaim {name!r} is not declared" + _at("CLAIMS")]
        modes = _get(props, "spec", "accessModes")
        if not is_unknown(modes) and tuple(modes or ()) != decl.access_modes:
            return [f"PersistentVolumeClaim {name!r} access modes {_show(modes)}, declared {list(decl.access_modes)}"
                    + _at(f"CLAIMS {decl.name!r}")]
    elif resource_type == "kubernetes:storage.k8s.io/v1:StorageClass":
        decl = next((v for k, v in declared.STORAGE_CLASSES.items() if declared.matches(k, name)), None)
        shape = (props.get("provisioner"), _get(props, "parameters", "type"))
        if decl is None or shape != decl:
            return [f"StorageClass {name!r} ({shape}) is not declared" + _at("STORAGE_CLASSES")]
    elif resource_type == "kubernetes:storage.k8s.io/v1:VolumeAttributesClass":
        decl = next((v for k, v in declared.VOLUME_ATTRIBUTES_CLASSES.items() if declared.matches(k, name)), None)
        parameters = props.get("parameters")
        keys = tuple(sorted(parameters)) if isinstance(parameters, Mapping) else ()
        if decl is None or props.get("driverName") != decl[0] or not set(keys) <= set(decl[1]):
            return [f"VolumeAttributesClass {name!r} ({props.get('driverName')}, {list(keys)}) is not declared"
                    + _at("VOLUME_ATTRIBUTES_CLASSES")]
    elif resource_type == "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate":
        device_class = declared.CLAIM_TEMPLATES.get(name)
        found = [] if device_class else [f"ResourceClaimTemplate {name!r} is not declared" + _at("CLAIM_TEMPLATES")]
        for path, mapping in _mappings(props.get("spec")):
            if mapping.get("adminAccess") is True:
                found.append(f"ResourceClaimTemplate {name!r} {path}: adminAccess gives access to devices in use "
                             "by others")
            if "deviceClassName" in mapping and mapping["deviceClassName"] != device_class:
                found.append(f"ResourceClaimTemplate {name!r} {path}: device class "
                             f"{_show(mapping['deviceClassName'])}, declared {device_class!r}" + _at("CLAIM_TEMPLATES"))
        return found
    return []


def _prefix(cidr: str) -> int:
    try:
        return ipaddress.ip_network(cidr, strict=False).prefixlen
    except ValueError:
        return 0


def _private(cidr: Any) -> bool:
    try:
        network = ipaddress.ip_network(str(cidr), strict=False)
    except ValueError:
        return False
    return any(network.subnet_of(ipaddress.ip_network(r)) for r in declared.PRIVATE_SUBNET_RANGES
               if network.version == 4)


def _last_segment(value: Any) -> str:
    return str(value).rstrip("/").rsplit("/", 1)[-1]


def check_declared_network(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The cloud network as declared: Cloud NAT for the listed subnets only, private subnet and secondary ranges,
    external addresses only the staging NAT's, the control plane's authorized networks set."""
    found = []
    if resource_type == "gcp:compute/routerNat:RouterNat":
        source = props.get("sourceSubnetworkIpRangesToNat")
        if source != declared.NAT_SOURCE and not is_unknown(source):
            found.append(f"sourceSubnetworkIpRangesToNat {_show(source)}: NAT only the declared subnets "
                         f"({declared.NAT_SOURCE})" + _at("NAT_SOURCE"))
        subnets = props.get("subnetworks")
        for i, subnet in enumerate(subnets if _is_list(subnets) else []):
            name = _get(subnet, "name")
            if is_unknown(name):
                continue
            if not any(declared.matches(p, _last_segment(name)) for p in declared.NAT_SUBNETS):
                found.append(f"subnetworks[{i}] {_show(name)} is not a declared NAT subnet" + _at("NAT_SUBNETS"))
    elif resource_type == "gcp:compute/subnetwork:Subnetwork":
        purpose = props.get("purpose")
        if purpose not in (None, "PRIVATE") and purpose not in declared.SUBNET_PURPOSES:
            found.append(f"subnet purpose {_show(purpose)} is not declared" + _at("SUBNET_PURPOSES"))
        ranges = [("ipCidrRange", props.get("ipCidrRange"))] + [
            (f"secondaryIpRanges[{i}]", _get(r, "ipCidrRange"))
            for i, r in enumerate(props.get("secondaryIpRanges") or [])]
        for path, cidr in ranges:
            if not is_unknown(cidr) and not _private(cidr):
                found.append(f"{path} {_show(cidr)} is not a private range ({list(declared.PRIVATE_SUBNET_RANGES)})"
                             + _at("PRIVATE_SUBNET_RANGES"))
        if purpose is None and props.get("privateIpGoogleAccess") is not True:
            found.append("privateIpGoogleAccess is not true: private nodes reach Google APIs through it")
        if props.get("ipv6AccessType") == "EXTERNAL" or props.get("stackType") not in (None, "IPV4_ONLY"):
            found.append("an IPv6 (external) stack is not declared")
    elif resource_type == "gcp:compute/address:Address":
        name = props.get("name")
        kind = props.get("addressType", "EXTERNAL")
        if kind != "INTERNAL" and not is_unknown(name) and not any(
                declared.matches(p, str(name)) for p in declared.EXTERNAL_ADDRESSES):
            found.append(f"address {_show(name)} is external ({_show(kind)}): only the staging NAT's are declared"
                         + _at("EXTERNAL_ADDRESSES"))
        if props.get("purpose") not in (None, "NAT_AUTO") and kind != "INTERNAL":
            found.append(f"address purpose {_show(props.get('purpose'))} is not declared")
    elif resource_type == CLUSTER:
        if props.get("masterAuthorizedNetworksConfig") is None:
            found.append("masterAuthorizedNetworksConfig is not set: the control plane's IP endpoint would accept "
                         "every address")
        if props.get("enableKubernetesAlpha") is True:
            found.append("enableKubernetesAlpha is true")
    elif resource_type == K8S_SERVICE:
        kind = _get(props, "spec", "type")
        if kind not in (None, "ClusterIP") and not is_unknown(kind):
            found.append(f"Service type {_show(kind)}: only ClusterIP Services are declared")
        if _get(props, "spec", "externalName") or _get(props, "spec", "externalIPs"):
            found.append("a Service with externalName or externalIPs is not declared")
    elif resource_type == "gcp:compute/network:Network":
        if props.get("autoCreateSubnetworks") is not False and not is_unknown(props.get("autoCreateSubnetworks")):
            found.append("autoCreateSubnetworks is not false: auto-mode subnets in every region are not declared")
    return found


def check_declared_nodes(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Node pools as declared: the node service account, cloud-platform scope only (IAM decides), no instance
    metadata of their own (legacy endpoints stay off), no network tags, no public IPs."""
    found = []
    for path, config in _node_configs(resource_type, props):
        if not isinstance(config, Mapping):
            continue
        scopes = config.get("oauthScopes")
        if not is_unknown(scopes) and _is_list(scopes) and not set(scopes) <= declared.NODE_SCOPES:
            found.append(f"{path}.oauthScopes {_show(scopes)}: only {sorted(declared.NODE_SCOPES)} is declared"
                         + _at("NODE_SCOPES"))
        metadata = config.get("metadata")
        if isinstance(metadata, Mapping):
            for key, value in metadata.items():
                if declared.NODE_METADATA.get(key) != value:
                    found.append(f"{path}.metadata {key}={_show(value)} is not declared" + _at("NODE_METADATA"))
        account = config.get("serviceAccount")
        if isinstance(account, str) and not is_unknown(account) and not re.fullmatch(
                declared.NODE_SA, f"serviceAccount:{account}"):
            found.append(f"{path}.serviceAccount {account!r} is not the declared node service account"
                         + _at("NODE_SA"))
        mode = _get(config, "workloadMetadataConfig", "mode")
        if mode != GKE_METADATA and not is_unknown(mode):
            found.append(f"{path}.workloadMetadataConfig.mode {_show(mode)}: nodes serve pods the GKE metadata server "
                         "only (Workload Identity), never the node's own credentials")
        if config.get("tags"):
            found.append(f"{path}.tags {_show(config.get('tags'))}: network tags would attach firewall rules")
    for prefix, pool in _pools(resource_type, props):
        if _get(pool, "networkConfig", "enablePrivateNodes") is False:
            continue  # gke-private-nodes says it
        if _get(pool, "networkConfig", "createPodRange") is True:
            found.append(f"{prefix}networkConfig.createPodRange: pod ranges are declared subnets only")
    return found




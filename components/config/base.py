"""What every section shares: the project's key namespace, `ConfigError` and `Section` (a key's full name, one
line naming the key, the value and what would be valid), and the naming and reservation checks several sections
use."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

PROJECT = "kimi-k3-1"
"""Pulumi project name, and so the config namespace."""

PROVIDER_NAMESPACES = ("gcp", "kubernetes", "pulumi")
"""Config namespaces besides the project's that a stack file may use: the providers this program creates
(their own settings, e.g. `gcp:project`) and Pulumi's (`pulumi:tags`); any other is a typo
(https://www.pulumi.com/docs/iac/concepts/config/)."""

EXPLICIT_PROVIDERS = {
    "gcp": f"gcp from {PROJECT}:gcp.project and {PROJECT}:gcp.region",
    "kubernetes": "kubernetes from the kubeconfig of the cluster the stack creates",
}
"""Provider namespaces whose stack keys this program never reads: stacks/base.py and components/cloud/cluster.py pass
every resource and invoke an explicit provider (tests/config/test_config_mistakes.py checks the plan has no default
one)."""
DEFAULT_PROVIDER_CONFIG = "https://www.pulumi.com/docs/iac/concepts/resources/providers/#default-provider-configuration"

SECRET_KEYS = ("hfToken",)
"""Keys that only ever arrive as secrets; read with `pulumi.Config.require_secret`, never validated into
models, so their values cannot appear in an error message."""


class ConfigError(Exception):
    """A user error in stack config: reported on one line, without a traceback. `key` is a project key
    (shown with the project namespace) unless it already carries a namespace of its own."""

    def __init__(self, key: str, value: Any, problem: str):
        self.key, self.value, self.problem = key, value, problem
        shown = "(unset)" if value is None else json.dumps(value, default=str) if not isinstance(value, str) \
            else repr(value)
        full = key if ":" in key else f"{PROJECT}:{key}"
        super().__init__(f"{_shorten(full, 120)} = {_shorten(shown, SHOWN_CHARS)}: {_shorten(problem, 500)}")


SHOWN_CHARS = 80
"""A value longer than this is shortened in the middle in a message (a pasted file, a runaway script's output)."""


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit // 2]}...({len(text):,} characters)...{text[-(limit // 4):]}"


def _fail(key: str, value: Any, problem: str) -> None:
    raise ConfigError(key, value, problem)


class Section(BaseModel):
    """A group of keys sharing a prefix (`tpu.`); unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)
    prefix: ClassVar[str] = ""
    track: ClassVar[Optional[str]] = None
    """The track every key of the section belongs to (None: both); set on the other track, a key is an error."""

    def key(self, field: str) -> str:
        return f"{self.prefix}.{to_camel(field)}"

    def changed(self) -> list[str]:
        """Fields whose value differs from their default: what the user set (the CLI hands the program every
        Pulumi.yaml default, so a value equal to its default cannot be told from an unset one)."""
        return [f for f, info in type(self).model_fields.items()
                if not info.is_required() and getattr(self, f) != info.default]

    def blame(self, *fields: str) -> str:
        """The first of `fields` the user changed (else the first): the key a cross-field error names."""
        changed = self.changed()
        return next((f for f in fields if f in changed), fields[0])


def for_track(track: str, warn: bool = False) -> dict[str, Any]:
    """Field metadata: the key only acts on `track`'s stacks. `warn`: a file shared by both tracks legitimately
    carries it (prices, digests), so on the other track it is one warning line, not an error."""
    return {"track": track, "warn": warn}


_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
GCE_NAMING = "https://cloud.google.com/compute/docs/naming-resources"
"""Compute Engine names (reservations, blocks, machine types, networks): 1-63 characters matching
[a-z]([-a-z0-9]*[a-z0-9])?."""
GKE_CLUSTER_NAMING = "https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters"
"""GKE cluster names: up to 40 lowercase letters, digits and hyphens, starting with a letter, ending alphanumeric."""
PROJECT_ID_RULES = "https://cloud.google.com/resource-manager/docs/creating-managing-projects"
BUCKET_NAMING = "https://cloud.google.com/storage/docs/naming-buckets"
SERVICE_ACCOUNT_ID_RULES = "https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/create"
"""Service account IDs: 6-30 characters of a-z, 0-9 and '-'."""
PULUMI_STACK_NAMING = "https://www.pulumi.com/docs/iac/concepts/stacks/"
"""Stack names: alphanumeric characters, hyphens, underscores or periods, unique within the project."""
DERIVED_CLUSTER_NAME_MAX = 24
"""The longest cluster name every name derived from it fits: the node and build service accounts append '-nodes'
and '-build' within the 30 characters of a service account ID (SERVICE_ACCOUNT_ID_RULES); the network, subnets,
routers, NATs, addresses and resource policies (GCE_NAMING, 63) and the GKE cluster itself (GKE_CLUSTER_NAMING, 40)
have room to spare. Node pool names need no stack part: they are unique within their cluster."""


def default_cluster_name(stack: str) -> str:
    """`kimi-k3-1-<stack>`, the name every cloud resource of a stack starts with, so stacks of one project never
    collide. A stack name is not always a cloud name (PULUMI_STACK_NAMING allows upper case, '_' and '.'), and two
    stack names may map to one spelling: a name that had to change, or that is too long, is cut and keeps a short
    hash of the stack's full name."""
    prefix = f"{PROJECT}-"
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", stack.lower())).strip("-")
    if slug == stack and len(prefix) + len(slug) <= DERIVED_CLUSTER_NAME_MAX:
        return prefix + slug
    digest = hashlib.sha256(stack.encode()).hexdigest()[:6]
    room = DERIVED_CLUSTER_NAME_MAX - len(prefix) - len(digest) - 1
    cut = slug[:room].rstrip("-")
    return f"{prefix}{cut}-{digest}" if cut else f"{prefix}{digest}"


def _check_name(key: str, value: str, max_len: int, rules: str = GCE_NAMING) -> None:
    """GCP resource names: lowercase letters, digits, hyphens; start with a letter; bounded length."""
    if len(value) > max_len or not _NAME.match(value):
        _fail(key, value, f"must be 1-{max_len} characters of a-z, 0-9 and '-', start with a letter "
                          f"and not end with '-' ({rules})")


def _check_project_id(key: str, value: str) -> None:
    if not re.fullmatch(r"[a-z][-a-z0-9]{4,28}[a-z0-9]", value):
        _fail(key, value, f"a project ID is 6-30 characters of a-z, 0-9 and '-', starting with a letter and not "
                          f"ending with '-' ({PROJECT_ID_RULES})")


def check_bucket_name(key: str, value: str) -> None:
    """Cloud Storage's bucket name requirements, all of them, so `pulumi up` cannot fail on one."""
    problem = None
    parts = value.split(".")
    if not re.fullmatch(r"[a-z0-9][-_.a-z0-9]*[a-z0-9]", value):
        problem = "only a-z, 0-9, '-', '_' and '.', starting and ending with a letter or digit"
    elif not 3 <= len(value) <= (222 if "." in value else 63) or any(not 1 <= len(p) <= 63 for p in parts):
        problem = "3-63 characters (up to 222 with dots, each dot-separated part 1-63)"
    elif re.fullmatch(r"\d{1,3}(\.\d{1,3}){3}", value):
        problem = "must not look like an IP address"
    elif value.startswith("goog") or re.search(r"g[o0][o0]g[l1]e", value):
        problem = "must not begin with 'goog' or contain 'google' or a close misspelling"
    if problem:
        _fail(key, value, f"not a valid bucket name: {problem} ({BUCKET_NAMING})")
def _check_reservation(section: Section) -> None:
    """Reservation names go into a reservation URL (projects/P/reservations/R[/reservationBlocks/B...]): each
    part must be a Compute Engine name, the project a project ID."""
    for field in ("reservation", "reservationBlock"):
        value = getattr(section, field, None)
        if value is not None:
            _check_name(section.key(field), value, 63)
    for value in getattr(section, "reservationSubBlocks", []):
        _check_name(section.key("reservationSubBlocks"), value, 63)
    if section.reservationProject is not None:
        _check_project_id(section.key("reservationProject"), section.reservationProject)

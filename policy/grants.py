"""Privilege grants: no escalation roles, bucket writes limited to the checkpoint prefix, no cluster-admin."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .common import (
    ADMIN_CLUSTER_ROLES,
    BROAD_GROUPS,
    BUCKET_IAM_BINDING,
    BUCKET_IAM_MEMBER,
    DOMAIN_MEMBER_PREFIX,
    ESCALATION_ROLES,
    IAM_GRANT,
    K8S_CLUSTER_ROLE,
    K8S_CLUSTER_ROLE_BINDING,
    K8S_ROLE,
    K8S_ROLE_BINDING,
    OBJECT_CONDITION,
    OBJECT_WRITE_ROLES,
    PREFIX_CONDITION,
    PUBLIC_MEMBERS,
    SERVICE_ACCOUNT_KEY,
    _get,
    _is_list,
    _show,
    is_unknown,
)


def _grant_members(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(path, role, member) of every member an IAM grant names (member, members, policyData bindings)."""
    role = props.get("role")
    found: list[tuple[str, Any, Any]] = []
    if "member" in props:
        found.append(("member", role, props.get("member")))
    listed = props.get("members")
    for i, member in enumerate(listed if _is_list(listed) else []):
        found.append((f"members[{i}]", role, member))
    for i, binding in enumerate(_policy_bindings(props)):
        members = _get(binding, "members")
        for j, member in enumerate(members if _is_list(members) else []):
            found.append((f"policyData.bindings[{i}].members[{j}]", _get(binding, "role"), member))
    return found


def _policy_bindings(props: Mapping[str, Any]) -> list[Any]:
    """The bindings of an IAMPolicy resource's `policyData` document (none when unknown or not JSON)."""
    document = props.get("policyData")
    if not isinstance(document, str) or is_unknown(document):
        return []
    try:
        bindings = _get(json.loads(document), "bindings")
    except ValueError:
        return []
    return list(bindings) if _is_list(bindings) else []


def check_no_escalation_grants(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """No IAM grant of a role that hands out more access (IAM policy admin, service-account tokens or keys), no
    grant of any role to the public or a whole domain, and no service-account keys (long-lived credentials that
    would sit in the state)."""
    if resource_type == SERVICE_ACCOUNT_KEY:
        return ["a service-account key is a long-lived credential stored in the state: use Workload Identity or "
                "impersonation instead"]
    if not IAM_GRANT.match(resource_type):
        return []
    roles = [props.get("role"), *(role for _, role, _ in _grant_members(resource_type, props))]
    violations = [f"role {_show(role)}: {ESCALATION_ROLES[role]}"
                  for role in dict.fromkeys(r for r in roles if isinstance(r, str) and r in ESCALATION_ROLES)]
    for path, role, member in _grant_members(resource_type, props):
        if isinstance(member, str) and (member in PUBLIC_MEMBERS or member.startswith(DOMAIN_MEMBER_PREFIX)):
            violations.append(f"{path} {_show(member)} gets role {_show(role)}: no grant to the public or a "
                              "whole domain")
    return violations


def _limits_writes(alternative: str, prefix: str) -> bool:
    """True if one `||` alternative of a condition holds a term that limits it to a folder or an object under
    `prefix` (terms joined by `&&`; parentheses around a term do not matter)."""
    for term in (t.strip() for t in alternative.split("&&")):
        match = PREFIX_CONDITION.fullmatch(term) or OBJECT_CONDITION.fullmatch(term)
        folder = match is not None and match.re is PREFIX_CONDITION
        name = match["name"] if match else ""
        if name.startswith(prefix) and len(name) > len(prefix) + 1 and (name.endswith("/") or not folder):
            return True
    return False


def check_bucket_writes_prefixed(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A bucket grant of a role that creates, overwrites or deletes objects carries an IAM condition that limits it
    to one folder, `resource.name.startsWith("projects/_/buckets/<bucket>/objects/<prefix>/")`, or one object
    (`resource.name == "..."`); with `||`, every alternative is so limited (the staging writer, the benchmark
    results writer)."""
    if resource_type not in (BUCKET_IAM_MEMBER, BUCKET_IAM_BINDING):
        return []
    role = props.get("role")
    if not isinstance(role, str) or role not in OBJECT_WRITE_ROLES:
        return []
    expression = _get(props, "condition", "expression")
    bucket = props.get("bucket")
    if is_unknown(expression) or is_unknown(bucket):
        return []
    if isinstance(expression, str) and isinstance(bucket, str) and "?" not in expression:
        prefix = f"projects/_/buckets/{bucket.removeprefix('b/')}/objects/"
        if all(_limits_writes(alternative, prefix) for alternative in expression.split("||")):
            return []
    return [f"role {_show(role)} on bucket {_show(bucket)} without a folder condition "
            f"(condition.expression {_show(expression)}): writers must be limited with "
            '`resource.name.startsWith("projects/_/buckets/<bucket>/objects/<folder>/")`']


def check_no_cluster_admin(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """No RBAC binding to `cluster-admin` or to the `system:masters`, `system:authenticated` or
    `system:unauthenticated` groups, and no role that grants every verb on every resource
    (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#user-facing-roles)."""
    violations = []
    if resource_type in (K8S_CLUSTER_ROLE_BINDING, K8S_ROLE_BINDING):
        ref = _get(props, "roleRef", "name")
        if ref in ADMIN_CLUSTER_ROLES:
            violations.append(f"roleRef {_show(ref)}: binds cluster-wide admin rights")
        subjects = props.get("subjects")
        for i, subject in enumerate(subjects if _is_list(subjects) else []):
            name = _get(subject, "name")
            if _get(subject, "kind") == "Group" and name in BROAD_GROUPS:
                violations.append(f"subjects[{i}] is group {_show(name)}: binds every (or any) caller")
    elif resource_type in (K8S_CLUSTER_ROLE, K8S_ROLE):
        rules_ = props.get("rules")
        for i, rule in enumerate(rules_ if _is_list(rules_) else []):
            if all("*" in (_get(rule, key) or []) for key in ("apiGroups", "resources", "verbs")):
                violations.append(f"rules[{i}] grants every verb on every resource (cluster-admin by another name)")
    return violations



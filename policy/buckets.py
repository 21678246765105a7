"""Buckets: never public, uniform bucket-level access."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .common import (
    BUCKET,
    BUCKET_IAM_BINDING,
    BUCKET_IAM_MEMBER,
    BUCKET_IAM_POLICY,
    DOMAIN_MEMBER_PREFIX,
    PUBLIC_MEMBERS,
    _get,
    _is_list,
    _show,
    is_unknown,
)


def check_bucket_not_public(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Buckets enforce public access prevention; no bucket IAM grant names allUsers/allAuthenticatedUsers."""
    if resource_type == BUCKET:
        prevention = props.get("publicAccessPrevention")
        if is_unknown(prevention) or prevention == "enforced":
            return []
        return [f'publicAccessPrevention is {_show(prevention)}, must be "enforced"']

    members: list[Any] = []
    if resource_type == BUCKET_IAM_MEMBER:
        members = [props.get("member")]
    elif resource_type == BUCKET_IAM_BINDING:
        listed = props.get("members")
        members = list(listed) if _is_list(listed) else []
    elif resource_type == BUCKET_IAM_POLICY:
        members = _policy_members(props.get("policyData"))
    else:
        return []
    role = props.get("role")
    grant = f" role {_show(role)}" if isinstance(role, str) and not is_unknown(role) else ""
    bucket = _show(props.get("bucket"))
    return [f"grants{grant} to {member} on bucket {bucket}: buckets must not be public"
            for member in members if isinstance(member, str) and member in PUBLIC_MEMBERS] + [
            f"grants{grant} to {member} on bucket {bucket}: buckets must not be open to a whole domain"
            for member in members if isinstance(member, str) and member.startswith(DOMAIN_MEMBER_PREFIX)]


def _policy_members(policy_data: Any) -> list[Any]:
    if not isinstance(policy_data, str) or is_unknown(policy_data):
        return []
    try:
        document = json.loads(policy_data)
    except ValueError:
        return []
    bindings = _get(document, "bindings")
    found: list[Any] = []
    for binding in bindings if _is_list(bindings) else []:
        listed = _get(binding, "members")
        found.extend(listed if _is_list(listed) else [])
    return found


def check_bucket_uniform_access(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Buckets use uniform bucket-level access (IAM only, no object ACLs)."""
    if resource_type != BUCKET:
        return []
    uniform = props.get("uniformBucketLevelAccess")
    if uniform is True or is_unknown(uniform):
        return []
    return [f"uniformBucketLevelAccess is {_show(uniform)}, must be true"]



"""The OCI image-reference grammar Kubernetes pulls by, as one check for every image the config names.

Grammar of https://github.com/distribution/reference (`reference.go` and `regexp.go` at a3fb784), the parser
containerd and the kubelet name images with:

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [domain '/'] remote-name
    domain     := host [':' port-number]
    host       := domain-name | IPv4address | '[' IPv6address ']'
    domain-name:= domain-component ['.' domain-component]*
    domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
    remote-name:= path-component ['/' path-component]*
    path-component := alpha-numeric [separator alpha-numeric]*
    alpha-numeric := /[a-z0-9]+/
    separator  := /[_.]|__|[-]+/   (regexp.go; the comment in reference.go says [-]*)
    tag        := /[\\w][\\w.-]{0,127}/
    digest     := algorithm ":" hex   (algorithm := /[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*/)

The repository path (the name without its domain) is at most 255 characters (RepositoryNameTotalLengthMax).
Digests: the OCI image spec registers sha256 (64 hex digits) and sha512 (128 hex digits) (https://github.com/opencontainers/image-spec/blob/v1.1.0/descriptor.md#registered-algorithms);
a registry refuses other lengths, so they are refused here.
"""

from __future__ import annotations

import re
from typing import Optional

_ALPHA_NUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[_.]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALPHA_NUMERIC}(?:{_SEPARATOR}{_ALPHA_NUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN = rf"(?:{_DOMAIN_NAME}|{_IPV6})(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
NAME_TOTAL_LENGTH_MAX = 255

REGISTERED_DIGESTS: dict[str, int] = {"sha256": 64, "sha512": 128}
"""Registered digest algorithms and their hex length (image-spec v1.1.0 descriptor.md)."""

_REFERENCE = re.compile(
    rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>[^@]+))?")


def digest_problem(digest: str) -> Optional[str]:
    """Why `digest` is not a registered OCI digest, or None."""
    algorithm, sep, hex_part = digest.partition(":")
    if not sep or algorithm not in REGISTERED_DIGESTS:
        return f"a digest is '<algorithm>:<hex>' with a registered algorithm ({', '.join(REGISTERED_DIGESTS)})"
    length = REGISTERED_DIGESTS[algorithm]
    if not re.fullmatch(f"[0-9a-f]{{{length}}}", hex_part):
        return f"a {algorithm} digest is {length} lowercase hex digits after '{algorithm}:'"
    return None


def reference_problem(reference: str) -> Optional[str]:
    """Why Kubernetes could not pull `reference` as written, or None. A reference must also carry a tag or a
    digest: without either the kubelet pulls `:latest`, which moves."""
    match = _REFERENCE.fullmatch(reference)
    if not match:
        if reference != reference.lower() and _REFERENCE.fullmatch(reference.lower()):
            return "repository names are lowercase (distribution/reference grammar)"
        return ("not an image reference '[registry/]repository[:tag][@digest]' (distribution/reference grammar: "
                "lowercase path components, tag of word characters, '.' and '-' up to 128)")
    path = match["name"][len(match["domain"]) + 1:] if match["domain"] else match["name"]
    if len(path) > NAME_TOTAL_LENGTH_MAX:
        return f"the repository name is longer than {NAME_TOTAL_LENGTH_MAX} characters"
    if match["digest"] is not None:
        return digest_problem(match["digest"])
    if match["tag"] is None:
        return "needs a tag or a digest (without one the kubelet pulls ':latest', which moves)"
    return None

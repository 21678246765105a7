"""Every image the stack runs by digest: a tag's digest, read from its registry when `images.<name>Digest` does not
give one, so pods, the charts' objects and the engine build all pull exactly the content the plan names.

The registry answers `HEAD /v2/<name>/manifests/<tag>` (OCI distribution spec, endpoint end-3,
https://github.com/opencontainers/distribution-spec/blob/main/spec.md) with the manifest's digest in
`Docker-Content-Digest` (Docker Registry HTTP API V2, https://github.com/distribution/distribution/blob/main/docs/
content/spec/api.md); asked with the index media types first, a multi-platform tag answers with its index, whose
digest every node's runtime resolves to its own platform (docs/versions.md "Image architectures"). A registry that
wants a token answers 401 with `WWW-Authenticate: Bearer realm=...,service=...,scope=...`; an anonymous GET of the
realm with that service and scope gives a pull token (https://github.com/distribution/distribution/blob/main/docs/
content/spec/auth/token.md). A registry that leaves the header out gets a GET, and the digest is the sha256 of the
manifest's bytes (https://github.com/opencontainers/image-spec/blob/v1.1.0/descriptor.md#digests).

`pulumi preview` and `pulumi up` both read the digests before any resource is registered; a tag that moves between
two runs shows as a change of every pod that runs it. `images.<name>Digest` pins one for good. The offline plan asks
no registry: `LOOKUP` stands in (tools/preview/render.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from ..config import ConfigError, StackConfig
from ..plan import images

ROOT_ENV = "KIMI_REGISTRY_ROOT"
"""A root standing in for `https://<registry>` (a test's fake): requests go to `<root>/<registry>/v2/...`."""
TIMEOUT_S = 10.0
"""Each request's bound; the images are asked at once, so the whole lookup is bounded by a few of these."""
MEDIA_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"))
API_HOSTS = {"docker.io": "registry-1.docker.io"}
"""Docker Hub's registry API is served from registry-1.docker.io (its images are named docker.io/...)."""
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
CHALLENGE = re.compile(r'(\w+)="([^"]*)"')

Lookup = Callable[[str], str]
"""`registry/repository:tag` -> `sha256:<64 hex>`; raises RegistryError."""


class RegistryError(Exception):
    """The registry did not name the tag's digest; the message says what it answered."""


def split(reference: str) -> tuple[str, str, str]:
    """(registry, repository, tag) of a pinned `registry/repository:tag` (components/facts/versions.py spells every
    one with its registry)."""
    name, _, tag = reference.rpartition(":")
    registry, _, repository = name.partition("/")
    if not (registry and repository and tag) or "/" in tag:
        raise RegistryError(f"{reference!r} is not registry/repository:tag")
    return registry, repository, tag


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.HTTPRedirectHandler())


def _token(challenge: str, opener: urllib.request.OpenerDirector) -> str:
    params = dict(CHALLENGE.findall(challenge))
    realm = params.pop("realm", "")
    if not challenge.lower().startswith("bearer ") or not realm.startswith(("https://", "http://")):
        raise RegistryError(f"asks for credentials ({challenge[:120]!r}), not an anonymous pull token")
    url = f"{realm}?{urllib.parse.urlencode(params)}"
    try:
        with opener.open(urllib.request.Request(url), timeout=TIMEOUT_S) as response:
            answer = json.loads(response.read(1 << 20))
    except (OSError, ValueError) as err:  # URLError and HTTPError are OSErrors; a body that is not JSON
        raise RegistryError(f"gave no pull token ({type(err).__name__}: {str(err)[:120]})") from None
    token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
    if not isinstance(token, str) or not token:
        raise RegistryError("gave no pull token (its answer holds no token)")
    return token


def _ask(url: str, method: str, token: Optional[str], opener: urllib.request.OpenerDirector
         ) -> tuple[Optional[str], bytes]:
    headers = {"Accept": MEDIA_TYPES, **({"Authorization": f"Bearer {token}"} if token else {})}
    with opener.open(urllib.request.Request(url, method=method, headers=headers), timeout=TIMEOUT_S) as response:
        return response.headers.get("Docker-Content-Digest"), response.read(4 << 20) if method == "GET" else b""


def registry_digest(reference: str) -> str:
    """The digest the registry names for `registry/repository:tag`."""
    registry, repository, tag = split(reference)
    root = os.environ.get(ROOT_ENV)
    base = f"{root.rstrip('/')}/{registry}" if root else f"https://{API_HOSTS.get(registry, registry)}"
    url = f"{base}/v2/{repository}/manifests/{tag}"
    opener = _opener()
    token = None
    for method in ("HEAD", "GET"):
        for _ in range(2):  # the second time with the token a 401 asked for
            try:
                header, body = _ask(url, method, token, opener)
            except urllib.error.HTTPError as err:
                challenge = err.headers.get("WWW-Authenticate", "") if err.headers else ""
                if err.code == 401 and token is None and challenge:
                    token = _token(challenge, opener)
                    continue
                raise RegistryError(f"answered HTTP {err.code}") from None
            except (OSError, ValueError) as err:  # unreachable, timed out, a malformed URL or answer
                raise RegistryError(f"did not answer ({type(err).__name__}: {str(err)[:120]})") from None
            if header is not None:
                if not DIGEST.fullmatch(header):
                    raise RegistryError(f"named the digest {header[:80]!r}, not sha256:<64 hex>")
                return header
            if method == "GET":
                if not body:
                    raise RegistryError("sent no manifest")
                return f"sha256:{hashlib.sha256(body).hexdigest()}"
            break  # no header on HEAD: GET the manifest and hash it
    raise RegistryError("named no digest")


LOOKUP: Lookup = registry_digest
"""How a tag's digest is found: its registry; the offline plan's stand-in (tools/preview/render.py)."""


def names(cfg: StackConfig) -> list[str]:
    """The images this stack can run (components/plan/images.py names): the other track's are left out."""
    other = {"gpu": images.TPU_ONLY, "tpu": images.GPU_ONLY}[cfg.track]
    return [name for name in images.IMAGES if name not in other]


def pinned(cfg: StackConfig, lookup: Optional[Lookup] = None) -> StackConfig:
    """The config with a digest for every image the stack runs: the configured one, else its registry's. A registry
    that does not name one stops the program before any resource, in one line naming the key that pins it."""
    ask = lookup or LOOKUP
    missing = [name for name in names(cfg) if images.digest(cfg.images, name) is None]
    if not missing:
        return cfg

    def one(name: str) -> tuple[str, str | RegistryError]:
        try:
            return name, ask(images.IMAGES[name].reference)
        except RegistryError as err:
            return name, err

    with ThreadPoolExecutor(max_workers=min(8, len(missing))) as pool:
        found = dict(pool.map(one, missing))
    failed = {name: value for name, value in found.items() if isinstance(value, RegistryError)}
    if failed:
        name, err = sorted(failed.items())[0]
        image = images.IMAGES[name]
        more = f" ({len(failed) - 1} more images likewise)" if len(failed) > 1 else ""
        raise ConfigError(f"images.{image.config_key}", None,
                          f"the registry of {image.reference} {err}; set the tag's index digest (`crane digest "
                          f"{image.reference}`), or make the registry reachable{more}")
    update = {images.IMAGES[name].config_key: digest for name, digest in found.items()}
    return cfg.model_copy(update={"images": cfg.images.model_copy(update=update)})

"""components/checks/registry.py against a fake registry on loopback: the token dance, the digest header or the
manifest's own sha256, and every answer that names no digest ending in one line that names the key to pin it."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from components.checks import registry
from components.config import ConfigError
from components.plan import images
from tests.config.test_config import parse

INDEX = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}'
DIGEST = "sha256:" + hashlib.sha256(INDEX).hexdigest()


class FakeRegistry(http.server.ThreadingHTTPServer):
    """`/<registry host>/v2/<repo>/manifests/<tag>` behind a bearer token from `/token`, as Docker Hub and ghcr.io
    answer; `mode` turns one answer hostile."""

    request_queue_size = 64  # the lookups ask at once; socketserver's default backlog of 5 drops SYNs (1 s retry)

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.mode = "ok"
        self.asked: list[tuple[str, str]] = []
        self.release = threading.Event()

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    server: FakeRegistry
    disable_nagle_algorithm = True  # headers and body leave at once, not after a delayed ACK

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._answer()

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer()

    def _answer(self) -> None:
        mode = self.server.mode
        self.server.asked.append((self.command, self.path))
        if self.path.startswith("/token"):
            body = b"not json" if mode == "bad-token" else json.dumps({"token": "t0k"}).encode()
            return self._send(200, body)
        if mode == "slow":
            self.server.release.wait(5)
            return self._send(200, headers={"Docker-Content-Digest": DIGEST})
        if self.headers.get("Authorization") != "Bearer t0k":
            realm = f"{self.server.root}/token"
            challenge = 'Basic realm="x"' if mode == "basic" else \
                f'Bearer realm="{realm}",service="fake",scope="repository:x:pull"'
            return self._send(401, headers={"WWW-Authenticate": challenge})
        if mode == "missing":
            return self._send(404)
        if mode == "garbage-digest":
            return self._send(200, headers={"Docker-Content-Digest": "sha256:" + "z" * 64})
        if mode == "no-header":
            return self._send(200, INDEX, {"Content-Type": "application/vnd.oci.image.index.v1+json"})
        self._send(200, INDEX if self.command == "GET" else b"", {"Docker-Content-Digest": DIGEST})


@pytest.fixture
def fake(monkeypatch) -> Iterator[FakeRegistry]:
    server = FakeRegistry()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    monkeypatch.setenv(registry.ROOT_ENV, server.root)
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_a_tag_resolves_through_the_token_dance(fake):
    assert registry.registry_digest("ghcr.io/kedacore/keda:2.20.2") == DIGEST
    assert [m for m, _ in fake.asked] == ["HEAD", "GET", "HEAD"]  # 401, the token, the answer
    assert fake.asked[0][1] == "/ghcr.io/v2/kedacore/keda/manifests/2.20.2"


def test_without_the_header_the_digest_is_the_manifests_own_sha256(fake):
    fake.mode = "no-header"
    assert registry.registry_digest("docker.io/library/python:3.11-slim") == DIGEST


@pytest.mark.parametrize("mode, said", [
    ("missing", "answered HTTP 404"),
    ("garbage-digest", "named the digest 'sha256:zzzz"),
    ("bad-token", "gave no pull token (JSONDecodeError"),
    ("basic", "asks for credentials ('Basic realm=\"x\"'), not an anonymous pull token"),
])
def test_every_answer_without_a_digest_is_one_line_naming_the_key(fake, mode, said):
    fake.mode = mode
    with pytest.raises(ConfigError) as info:
        registry.pinned(parse("gpu"))
    line = str(info.value)
    assert "\n" not in line and line.startswith("kimi-k3-1:images.") and said in line, line
    assert "`crane digest " in line and "more images likewise" in line


def test_an_unreachable_or_slow_registry_is_one_line_within_the_bound(fake, monkeypatch):
    monkeypatch.setattr(registry, "TIMEOUT_S", 0.3)
    fake.mode = "slow"
    with pytest.raises(registry.RegistryError, match=r"did not answer \((TimeoutError|timeout)"):
        registry.registry_digest("ghcr.io/kedacore/keda:2.20.2")
    monkeypatch.setenv(registry.ROOT_ENV, "http://127.0.0.1:9")  # discard: nothing listens
    with pytest.raises(registry.RegistryError, match=r"did not answer \(URLError"):
        registry.registry_digest("ghcr.io/kedacore/keda:2.20.2")


def test_every_image_of_the_track_gets_a_digest_and_a_configured_one_is_kept():
    asked: list[str] = []

    def lookup(reference: str) -> str:
        asked.append(reference)
        return "sha256:" + hashlib.sha256(reference.encode()).hexdigest()

    pinned = "sha256:" + "e" * 64
    for track, other in (("gpu", images.TPU_ONLY), ("tpu", images.GPU_ONLY)):
        asked.clear()
        cfg = registry.pinned(parse(track, images__eppDigest=pinned), lookup)
        names = set(images.IMAGES) - other
        assert {n for n in names if images.digest(cfg.images, n) is None} == set()
        assert cfg.images.eppDigest == pinned and images.IMAGES["epp"].reference not in asked
        assert sorted(asked) == sorted(images.IMAGES[n].reference for n in names - {"epp"})
        assert all(images.digest(cfg.images, n) is None for n in other)

"""Loopback stand-ins for the two kinds of chart registry the pinned charts come from, for testing
`tools.preview.helm_render --fetch` with the real Helm SDK as the client:

- `OciRegistry`: the part of the OCI distribution API (https://github.com/opencontainers/distribution-spec/
  blob/v1.1.0/spec.md) that Helm's push and pull use: the `/v2/` check, blob upload (POST, then PATCH and/or
  PUT with `?digest=`), blob and manifest HEAD/GET/PUT, and the tag list. Content-addressed: a blob whose
  bytes do not hash to the digest it is put under is refused, as the spec requires.
- `ChartRepository`: a classic Helm repository, a folder with `index.yaml` and the archives, over plain HTTP.

Both listen on 127.0.0.1 only, serve from memory or one folder, and stop when their `with` block ends."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import uuid
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

_BLOB = re.compile(r"^/v2/(?P<name>.+)/blobs/(?P<digest>sha256:[0-9a-f]{64})$")
_UPLOAD = re.compile(r"^/v2/(?P<name>.+)/blobs/uploads/(?P<id>[0-9a-f-]*)$")
_MANIFEST = re.compile(r"^/v2/(?P<name>.+)/manifests/(?P<ref>[^/]+)$")
_TAGS = re.compile(r"^/v2/(?P<name>.+)/tags/list$")


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _Server:
    """A ThreadingHTTPServer on an ephemeral loopback port, serving until the `with` block ends."""

    def __init__(self, handler: Any):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, client_address: None  # a client hanging up is not news
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{host}:{port}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class OciRegistry(_Server):
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], tuple[str, bytes]] = {}
        """(repository, tag or digest) -> (media type, bytes)."""
        self.uploads: dict[str, bytearray] = {}
        self.lock = threading.Lock()
        super().__init__(partial(_OciHandler, self))

    def tamper_blob(self, digest: str, data: bytes) -> None:
        """Serve other bytes under a digest, as a corrupted mirror or a man in the middle would."""
        self.blobs[digest] = data


class _OciHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def __init__(self, registry: OciRegistry, *args: Any):
        self.registry = registry
        super().__init__(*args)

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
               head: bool = False) -> None:
        self.send_response(status)
        headers = {"Docker-Distribution-API-Version": "registry/2.0", **(headers or {})}
        headers.setdefault("Content-Length", str(len(body)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def _error(self, status: int, code: str) -> None:
        body = json.dumps({"errors": [{"code": code, "message": code.lower()}]}).encode()
        self._reply(status, body, {"Content-Type": "application/json"}, head=self.command == "HEAD")

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _route(self) -> tuple[str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        return parts.path, parse_qs(parts.query)

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
        self._get(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._get(head=False)

    def _get(self, head: bool) -> None:
        path, _ = self._route()
        registry = self.registry
        if path in ("/v2", "/v2/"):
            return self._reply(200, b"{}", {"Content-Type": "application/json"}, head)
        if match := _BLOB.match(path):
            data = registry.blobs.get(match["digest"])
            if data is None:
                return self._error(404, "BLOB_UNKNOWN")
            return self._reply(200, data, {"Content-Type": "application/octet-stream",
                                           "Docker-Content-Digest": match["digest"]}, head)
        if match := _MANIFEST.match(path):
            found = registry.manifests.get((match["name"], match["ref"]))
            if found is None:
                return self._error(404, "MANIFEST_UNKNOWN")
            media_type, data = found
            return self._reply(200, data, {"Content-Type": media_type, "Docker-Content-Digest": sha256(data)}, head)
        if match := _TAGS.match(path):
            tags = sorted(ref for name, ref in registry.manifests if name == match["name"]
                          and not ref.startswith("sha256:"))
            return self._reply(200, json.dumps({"name": match["name"], "tags": tags}).encode(),
                               {"Content-Type": "application/json"}, head)
        self._error(404, "NAME_UNKNOWN")

    def do_POST(self) -> None:  # noqa: N802
        path, query = self._route()
        match = _UPLOAD.match(path)
        if not match or match["id"]:
            return self._error(404, "NAME_UNKNOWN")
        data = self._body()
        if "digest" in query:  # monolithic upload in one POST
            return self._finish(match["name"], bytearray(data), query["digest"][0])
        upload = str(uuid.uuid4())
        with self.registry.lock:
            self.registry.uploads[upload] = bytearray(data)
        self._reply(202, headers={"Location": f"/v2/{match['name']}/blobs/uploads/{upload}", "Range": "0-0",
                                  "Docker-Upload-UUID": upload})

    def do_PATCH(self) -> None:  # noqa: N802
        path, _ = self._route()
        match = _UPLOAD.match(path)
        if not match or match["id"] not in self.registry.uploads:
            return self._error(404, "BLOB_UPLOAD_UNKNOWN")
        buffer = self.registry.uploads[match["id"]]
        buffer += self._body()
        self._reply(202, headers={"Location": path, "Range": f"0-{max(len(buffer) - 1, 0)}",
                                  "Docker-Upload-UUID": match["id"]})

    def do_PUT(self) -> None:  # noqa: N802
        path, query = self._route()
        if (match := _UPLOAD.match(path)) and match["id"] in self.registry.uploads:
            buffer = self.registry.uploads.pop(match["id"])
            buffer += self._body()
            return self._finish(match["name"], buffer, (query.get("digest") or [""])[0])
        if match := _MANIFEST.match(path):
            data = self._body()
            media_type = self.headers.get("Content-Type") or json.loads(data).get("mediaType", "")
            digest = sha256(data)
            with self.registry.lock:
                self.registry.manifests[(match["name"], match["ref"])] = (media_type, data)
                self.registry.manifests[(match["name"], digest)] = (media_type, data)
            return self._reply(201, headers={"Location": f"/v2/{match['name']}/manifests/{digest}",
                                             "Docker-Content-Digest": digest})
        self._error(404, "NAME_UNKNOWN")

    def _finish(self, name: str, data: bytearray, digest: str) -> None:
        if sha256(bytes(data)) != digest:
            return self._error(400, "DIGEST_INVALID")
        with self.registry.lock:
            self.registry.blobs[digest] = bytes(data)
        self._reply(201, headers={"Location": f"/v2/{name}/blobs/{digest}", "Docker-Content-Digest": digest})


class ChartRepository(_Server):
    """Serves `folder` (holding `index.yaml` and the chart archives) over plain HTTP."""

    def __init__(self, folder: Path):
        self.folder = folder
        super().__init__(partial(_QuietFiles, directory=str(folder)))


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

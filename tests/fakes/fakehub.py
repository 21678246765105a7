"""A small Hugging Face Hub for the copier's tests, on loopback: only the endpoints the copier and
huggingface_hub call for it, with the Hub's error headers, Range support and injectable faults.

Endpoints (shapes as huggingface_hub 2.4.0 reads them, `hf_api.py` ModelInfo/RepoSibling):
  GET  /api/models/<repo>/revision/<rev>?blobs=true  -> {"id", "sha", "siblings": [{rfilename, size, blobId, lfs}]}
  GET|HEAD /<repo>/resolve/<rev>/<path>               -> the bytes, 206 for a Range request
Errors carry X-Error-Code (GatedRepo, RepoNotFound, RevisionNotFound, EntryNotFound) like the real Hub,
which `huggingface_hub.utils.hf_raise_for_status` maps to typed errors.

With `xet=True` the LFS files are also Xet-backed, as the Hub serves them today, and the same server is their
Xet CAS (what hf_xet 1.8.0 calls, shapes from huggingface/xet-core `spec/api.md`, `spec/download_protocol.md`,
`spec/xorb.md`):
  resolve answers carry X-Xet-Hash and X-Xet-Refresh-Route (huggingface_hub `utils/_xet.py`
  parse_xet_file_data_from_response)
  GET /api/models/<repo>/xet-read-token/<rev>          -> X-Xet-Cas-Url, X-Xet-Access-Token, X-Xet-Token-Expiration
  GET /v1/reconstructions/<file hash> [Range]          -> {offset_into_first_range, terms, fetch_info}
  GET /xorbs/<xorb hash> Range                         -> the xorb's bytes: uncompressed chunks, 8-byte headers
(/v2/reconstructions answers 404: hf_xet then asks v1.) Each file is its own xorbs of XORB_CHUNKS chunks of
XET_CHUNK bytes, built on the fly from the file's bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qs, unquote, urlsplit

from tests.fakes.loopback_http import send_json

BLOCK = 1 << 16
XET_CHUNK = 1 << 16
"""Bytes per Xet chunk (the protocol's target chunk size is 64 KiB, huggingface/xet-core `spec/xorb.md`)."""
XORB_CHUNKS = 64
"""Chunks per xorb: 4 MiB xorbs, so a test file spans several."""
XET_TOKEN = "xet-read-token-for-tests"
XET_URL_SIGNATURE = "signed-for-tests"
_BASE = hashlib.shake_256(b"fake hub content").digest(BLOCK)
_TAIL = _BASE[16:]
_DIGESTS: dict[object, tuple[str, str]] = {}
"""(SHA-256, git blob id) by (size, seed) or by content: the bytes are a function of those, and the tests build
the same files afresh for every fake Hub (hashing them each time cost tests/weights/test_stage_weights.py ~1.1 s
CPU)."""


@dataclass
class FakeFile:
    size: int
    seed: int = 0
    lfs: bool = True
    corrupt: bool = False
    """Serve one flipped byte (the published hashes stay those of the true content)."""
    sha256: str = ""
    blob_sha1: str = ""
    content: Optional[bytes] = None
    """Serve these bytes instead of generated ones (a config.json a test reads); size is then ignored."""

    def __post_init__(self):
        if self.content is not None:
            self.size = len(self.content)
        key = (self.size, self.seed) if self.content is None else self.content
        if key not in _DIGESTS:
            sha256 = hashlib.sha256()
            git = hashlib.sha1(b"blob %d\0" % self.size)
            for offset in range(0, self.size, 1 << 22):
                piece = self.data(offset, min(1 << 22, self.size - offset), honest=True)
                sha256.update(piece)
                git.update(piece)
            _DIGESTS[key] = sha256.hexdigest(), git.hexdigest()
        self.sha256, self.blob_sha1 = _DIGESTS[key]

    def data(self, offset: int, length: int, honest: bool = False) -> bytes:
        """Position-dependent bytes: every 64 KiB block starts with its index and the file's seed. Built with one
        copy (a join of the blocks' parts), so serving costs the benchmark's Hub little CPU."""
        if self.content is not None:
            return self.content[offset:offset + length]
        parts, position, end = [], offset, offset + length
        seed = self.seed.to_bytes(8, "big")
        while position < end:
            block, start = divmod(position, BLOCK)
            stop = min(BLOCK, end - block * BLOCK)
            head = block.to_bytes(8, "big") + seed
            if start < 16:
                parts.append(head[start:min(16, stop)])
            if stop > 16:
                parts.append(_TAIL[max(start, 16) - 16:stop - 16] if start > 16 or stop < BLOCK else _TAIL)
            position = block * BLOCK + stop
        out = b"".join(parts)
        if self.corrupt and not honest and offset <= self.size // 2 < offset + length:
            out = bytearray(out)
            out[self.size // 2 - offset] ^= 0xFF
            out = bytes(out)
        return out

    def sibling(self, path: str) -> dict:
        entry = {"rfilename": path, "size": self.size}
        if self.lfs:
            entry["blobId"] = hashlib.sha1(f"pointer {self.sha256}".encode()).hexdigest()
            entry["lfs"] = {"sha256": self.sha256, "size": self.size, "pointerSize": 134}
        else:
            entry["blobId"] = self.blob_sha1
        return entry


@dataclass
class FakeRepo:
    files: dict[str, FakeFile]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    gated: bool = False
    allowed: set[str] = field(default_factory=set)
    """Tokens whose account accepted the license of a gated repository."""


@dataclass
class Stats:
    requests: list[tuple[str, Optional[str]]] = field(default_factory=list)
    """(path, Range header) of every file request."""
    served: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Bytes of file content sent per path (cut connections count what was sent)."""
    api_requests: int = 0
    rate_limited: list[float] = field(default_factory=list)
    """Hub clock time of every 429 answered inside a rate-limit window."""
    first_after_window: Optional[float] = None
    """Hub clock time of the first request answered after the window closed."""
    xet_served: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Bytes of file content sent per path through the Xet CAS (chunk payloads, headers not counted)."""
    xet_reconstructions: list[tuple[str, Optional[str]]] = field(default_factory=list)
    """(path, Range header) of every reconstruction query."""
    first_file_at: Optional[float] = None
    last_file_end_at: Optional[float] = None
    """time.monotonic() of the first file request and of the end of the last file body sent."""

    @property
    def bytes(self) -> int:
        return sum(self.served.values())


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client that hangs up mid-file (a cancelled or failed copy) is not a server error."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class ScaledClock:
    """Time that runs `scale` times faster than real time, with the copier's Clock interface (now, sleep, wait).
    Shared by the fake Hub's rate-limit window and the copier, it turns minutes of waiting into a fraction of a
    second without replacing any of the copier's code. Records every sleep the copier asks for."""

    def __init__(self, scale: float):
        self.scale, self.start = scale, time.monotonic()
        self.sleeps: list[float] = []

    def now(self) -> float:
        return (time.monotonic() - self.start) * self.scale

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        time.sleep(max(0.0, seconds) / self.scale)

    def wait(self, waitable, seconds: float) -> bool:
        return waitable.wait(max(0.0, seconds) / self.scale)


class FakeHub:
    """`faults[path]` is a list of actions taken by the next requests of that file, one each:
    an HTTP status (429, 500, 503), ("cut", n) to close the connection after n bytes of the body,
    "ignore-range" to answer 200 with the whole file, "extra" to send bytes beyond the file (and count them in
    Content-Length), or "fail" for a 500 on every request from then on.

    `rate_limit(seconds, retry_after, clock, after_files)`: once `after_files` file requests were answered,
    every request (API and files) is answered 429 with that `Retry-After` for `seconds` on `clock`.
    `per_client_bytes_s`: each client address is served at most this many bytes per second over all its
    connections (the Hub's per-IP limit; bind the clients to several 127.0.0.x addresses to model several
    egress IPs)."""

    def __init__(self, repos: dict[str, FakeRepo], tokens: set[str] = frozenset(), host: str = "127.0.0.1",
                 per_client_bytes_s: Optional[float] = None, xet: bool = False):
        self.repos, self.tokens = repos, set(tokens)
        self.xet = xet
        self.xet_faults: list = []
        """Actions for the next xorb requests, one each: a status (500, 503), "corrupt" to flip a byte, or "fail"
        for a 500 on every request from then on."""
        self.xet_failing_xorbs: dict[int, int] = {}
        """Xorb index -> how many more requests for it answer 500 (a stream that fails past its start)."""
        self.faults: dict[str, list] = defaultdict(list)
        self.stats = Stats()
        self._lock = threading.Lock()
        self.window: Optional[list] = None
        self.per_client_bytes_s = per_client_bytes_s
        self._client_budget: dict[str, list[float]] = {}
        self.server = LoopbackServer((host, 0), _handler(self))
        self.url = f"http://{host}:{self.server.server_port}"
        # shutdown() waits for the loop's next poll: at 0.05 s that was ~50 ms of idle wall per test
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.005},
                                        daemon=True)

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def rate_limit(self, seconds: float, retry_after: str, clock: ScaledClock, after_files: int = 0) -> None:
        self.window = [None, seconds, retry_after, clock, after_files]

    def limited(self) -> Optional[str]:
        """The Retry-After to answer with while the rate-limit window is open, else None."""
        if self.window is None:
            return None
        until, seconds, retry_after, clock, after_files = self.window
        now = clock.now()
        with self._lock:
            if until is None:
                if len(self.stats.requests) < after_files:
                    return None
                until = self.window[0] = now + seconds
            if now < until:
                self.stats.rate_limited.append(now)
                return retry_after
            if self.stats.first_after_window is None:
                self.stats.first_after_window = now
        return None

    def throttle(self, client: str, length: int) -> None:
        """Sleep until `client` may receive `length` more bytes (a token bucket per client address)."""
        if self.per_client_bytes_s is None:
            return
        with self._lock:
            bucket = self._client_budget.setdefault(client, [time.monotonic()])
            start = max(bucket[0], time.monotonic())
            bucket[0] = start + length / self.per_client_bytes_s
            delay = start - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def xet_file(self, file_hash: str) -> Optional[tuple[str, FakeFile]]:
        for repo in self.repos.values():
            for path, file in repo.files.items():
                if file.lfs and xet_hash(file) == file_hash:
                    return path, file
        return None

    def next_xet_fault(self):
        with self._lock:
            if not self.xet_faults:
                return None
            return self.xet_faults[0] if self.xet_faults[0] == "fail" else self.xet_faults.pop(0)

    def next_fault(self, path: str):
        with self._lock:
            queue = self.faults.get(path)
            if not queue:
                return None
            return queue[0] if queue[0] == "fail" else queue.pop(0)

    def count(self, path: str, sent: int, range_header: Optional[str] = None, request: bool = False) -> None:
        with self._lock:
            if request:
                self.stats.requests.append((path, range_header))
                if self.stats.first_file_at is None:
                    self.stats.first_file_at = time.monotonic()
            else:
                self.stats.last_file_end_at = time.monotonic()
            self.stats.served[path] += sent


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        """Headers and body are two writes: with Nagle the body waits for the client's delayed ACK (40 ms)."""

        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802
            self._route(head=True)

        def do_GET(self) -> None:  # noqa: N802
            self._route(head=False)

        # routing -------------------------------------------------------------------------
        def _route(self, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            retry_after = hub.limited()
            if retry_after is not None:
                self.send_response(429)
                if retry_after != "<absent>":
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            api = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/([^/]+)", path)
            resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            token = re.fullmatch(r"/api/models/([^/]+/[^/]+)/xet-read-token/([^/]+)", path)
            reconstruction = re.fullmatch(r"/v1/reconstructions/([0-9a-f]{64})", path)
            xorb = re.fullmatch(r"/xorbs/([0-9a-f]{64})/(\d+)", path)
            signed = parse_qs(urlsplit(self.path).query).get("sig") == [XET_URL_SIGNATURE]
            if hub.xet and token:
                if self._repo(token.group(1), token.group(2)):
                    self.send_response(200)
                    self.send_header("X-Xet-Cas-Url", hub.url)
                    self.send_header("X-Xet-Access-Token", XET_TOKEN)
                    self.send_header("X-Xet-Token-Expiration", str(int(time.time()) + 3600))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
            elif hub.xet and reconstruction:
                if self.headers.get("Authorization") != f"Bearer {XET_TOKEN}":
                    self._error(401, None, "Xet token missing or invalid")
                else:
                    self._reconstruction(reconstruction.group(1))
            elif hub.xet and xorb:
                if not signed:  # presigned URLs carry their authorization (spec/download_protocol.md)
                    self._error(403, None, "URL not signed")
                else:
                    self._xorb(xorb.group(1), int(xorb.group(2)))
            elif api:
                with hub._lock:
                    hub.stats.api_requests += 1
                repo = self._repo(api.group(1), api.group(2))
                if repo:
                    self._json(200, {"id": api.group(1), "sha": repo.commit,
                                     "siblings": [f.sibling(p) for p, f in sorted(repo.files.items())]})
            elif resolve:
                repo = self._repo(resolve.group(1), resolve.group(2))
                if repo:
                    file = repo.files.get(resolve.group(3))
                    if file is None:
                        self._error(404, "EntryNotFound", "Entry not found")
                    else:
                        self._file(repo, resolve.group(3), file, head)
            else:
                self._error(404, None, "Not Found")

        _repo_id = ""

        def _repo(self, repo_id: str, revision: str) -> Optional[FakeRepo]:
            self._repo_id = repo_id
            auth = self.headers.get("Authorization", "")
            token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
            if token is not None and token not in hub.tokens:
                self._error(401, None, "Invalid credentials in Authorization header")
                return None
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404 if token else 401, "RepoNotFound", "Repository not found")
                return None
            if repo.gated and token not in repo.allowed:
                self._error(403 if token else 401, "GatedRepo",
                            f"Access to model {repo_id} is restricted. You must have access to it and be "
                            "authenticated to access it.")
                return None
            if revision not in ("main", repo.commit):
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return None
            return repo

        # responses ------------------------------------------------------------------------
        def _json(self, status: int, body: dict) -> None:
            send_json(self, status, body)

        def _error(self, status: int, code: Optional[str], message: str) -> None:
            data = json.dumps({"error": message}).encode()
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        # Xet CAS -------------------------------------------------------------------------
        def _reconstruction(self, file_hash: str) -> None:
            found = hub.xet_file(file_hash)
            if found is None:
                self._error(404, None, "File not found")
                return
            path, file = found
            with hub._lock:
                hub.stats.xet_reconstructions.append((path, self.headers.get("Range")))
            start, end = 0, file.size - 1
            match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
            if match:
                start, end = int(match.group(1)), min(int(match.group(2)), file.size - 1)
            first, last = start // XET_CHUNK, end // XET_CHUNK
            terms, fetch_info = [], {}
            for index in range(first // XORB_CHUNKS, last // XORB_CHUNKS + 1):
                lo = index * XORB_CHUNKS
                a, b = max(lo, first) - lo, min(lo + XORB_CHUNKS - 1, last) - lo + 1
                name = xorb_hash(file, index)
                sizes = _chunk_sizes(file, index)
                terms.append({"hash": name, "unpacked_length": sum(sizes[a:b]), "range": {"start": a, "end": b}})
                fetch_info[name] = [{"range": {"start": a, "end": b},
                                     "url": f"{hub.url}/xorbs/{name}/{index}?sig={XET_URL_SIGNATURE}",
                                     "url_range": {"start": sum(8 + n for n in sizes[:a]),
                                                   "end": sum(8 + n for n in sizes[:b]) - 1}}]
            self._json(200, {"offset_into_first_range": start - first * XET_CHUNK, "terms": terms,
                             "fetch_info": fetch_info})

        def _xorb(self, name: str, index: int) -> None:
            found = next(((p, f) for p, f in ((p, f) for r in hub.repos.values() for p, f in r.files.items())
                          if f.lfs and xorb_hash(f, index) == name), None)
            match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
            if found is None or match is None:
                self._error(404 if found is None else 403, None, "xorbs are read by range")
                return
            fault = hub.next_xet_fault()
            with hub._lock:
                if hub.xet_failing_xorbs.get(index, 0) > 0:
                    hub.xet_failing_xorbs[index] -= 1
                    fault = 500
            if fault in (500, 503, "fail"):
                self._error(500 if fault == "fail" else fault, None, "injected")
                return
            path, file = found
            data = _xorb_bytes(file, index)
            a, b = int(match.group(1)), min(int(match.group(2)), len(data) - 1)
            body = data[a:b + 1]
            if fault == "corrupt":  # a byte of the first chunk's data (ranges start at a chunk header)
                body = body[:100] + bytes([body[100] ^ 0xFF]) + body[101:]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with hub._lock:
                hub.stats.xet_served[path] += len(body) - 8 * _headers_in(file, index, a, b)

        def _file(self, repo: FakeRepo, path: str, file: FakeFile, head: bool) -> None:
            range_header = self.headers.get("Range")
            fault = None if head else hub.next_fault(path)
            if not head:
                hub.count(path, 0, range_header, request=True)
            if fault in (429, 500, 502, 503) or fault == "fail":
                status = 500 if fault == "fail" else fault
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end = 0, file.size - 1
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", range_header or "")
            if fault == "ignore-range":
                match = None
            if match:
                start = int(match.group(1))
                end = min(int(match.group(2)), end) if match.group(2) else end
            extra = b"trailing bytes" if fault == "extra" else b""
            self.send_response(206 if match else 200)
            if match:
                self.send_header("Content-Range", f"bytes {start}-{end}/{file.size}")
            self.send_header("Content-Length", str(end - start + 1 + len(extra)))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("ETag", f'"{file.sha256 if file.lfs else file.blob_sha1}"')
            if file.lfs:
                self.send_header("X-Linked-Size", str(file.size))
                self.send_header("X-Linked-Etag", f'"{file.sha256}"')
            if file.lfs and hub.xet:
                self.send_header("X-Xet-Hash", xet_hash(file))
                self.send_header("X-Xet-Refresh-Route",
                                 f"{hub.url}/api/models/{self._repo_id}/xet-read-token/{repo.commit}")
            self.end_headers()
            if head:
                return
            limit = fault[1] if isinstance(fault, tuple) and fault[0] == "cut" else None
            offset, sent = start, 0
            while offset <= end:
                length = min(1 << 20, end - offset + 1)
                if limit is not None:
                    length = min(length, limit - sent)
                    if length <= 0:
                        hub.count(path, sent)
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                hub.throttle(self.client_address[0], length)
                self.wfile.write(file.data(offset, length))
                offset += length
                sent += length
            self.wfile.write(extra)
            hub.count(path, sent)

    return Handler


def xet_hash(file: FakeFile) -> str:
    """The file's Xet hash in this fake (the real one is a Merkle hash over its chunks; hf_xet only passes it on)."""
    return hashlib.sha256(f"xet file {file.sha256}".encode()).hexdigest()


def xorb_hash(file: FakeFile, index: int) -> str:
    return hashlib.sha256(f"xorb {index} of {file.sha256}".encode()).hexdigest()


def _chunk_sizes(file: FakeFile, index: int) -> list[int]:
    start = index * XORB_CHUNKS * XET_CHUNK
    end = min(file.size, start + XORB_CHUNKS * XET_CHUNK)
    return [min(XET_CHUNK, file.size - offset) for offset in range(start, end, XET_CHUNK)]


def _xorb_bytes(file: FakeFile, index: int) -> bytes:
    """Chunks stored uncompressed: version 0, 3-byte little-endian sizes, compression type 0 (spec/xorb.md)."""
    parts, offset = [], index * XORB_CHUNKS * XET_CHUNK
    for size in _chunk_sizes(file, index):
        parts += [bytes([0]) + size.to_bytes(3, "little") + bytes([0]) + size.to_bytes(3, "little"),
                  file.data(offset, size)]
        offset += size
    return b"".join(parts)


def _headers_in(file: FakeFile, index: int, start: int, end: int) -> int:
    """Chunk headers inside bytes start..end of a xorb."""
    count, position = 0, 0
    for size in _chunk_sizes(file, index):
        if start <= position <= end:
            count += 1
        position += 8 + size
    return count

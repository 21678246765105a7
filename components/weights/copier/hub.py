"""Hugging Face Hub side of the copier: one revision's files with the hashes the Hub publishes, and each
file's bytes as a stream that resumes cut connections and verifies what it hands on.

LFS files the Hub serves through Xet are read with hf_xet's ordered stream (XetDownloadStreamGroup, hf_xet
1.8.0, the pinned huggingface_hub's transfer path), resumed from the last byte received; every other file, and
the rest of a file whose Xet stream keeps failing, comes over HTTP `resolve` with Range requests. Either way the
copier computes the SHA-256 and CRC32C of the bytes itself.

Error mapping follows `huggingface_hub.utils.hf_raise_for_status` (the Hub's `X-Error-Code` header:
GatedRepo, RepoNotFound, RevisionNotFound), huggingface_hub 2.4.0 `utils/_http.py`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
import queue
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Optional

import google_crc32c
import httpx2
import requests
import urllib3
from huggingface_hub import HfApi, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import get_hf_file_metadata
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status
from huggingface_hub.utils._runtime import is_xet_available

from . import IntegrityError, StagingError

COMMIT = re.compile(r"^[0-9a-f]{40}$")
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""Answers worth another try: rate limits and server-side failures."""
READ_BYTES = 1 << 20
"""Bytes taken from the socket at a time: hashed right away, while they are in the CPU's cache (16 MiB blocks
are not: hashing them afterwards costs half as much again per byte on the development machine)."""
XET_TRIES = 3
"""Failed Xet streams in a row (hf_xet retries inside each) before the rest of a file comes over HTTP."""
XET_CONFIG = (("reconstruction.download_buffer_size", 256_000_000),
              ("reconstruction.download_buffer_limit", 512_000_000),
              ("reconstruction.download_buffer_perfile_size", 64_000_000),
              ("reconstruction.min_prefetch_buffer", 64_000_000),
              ("client.retry_max_duration", timedelta(seconds=120)))
"""hf_xet's download buffers, bounded for the copier (hf_xet 1.8.0 defaults: 1.58 GB, 6.31 GB, 392 MB and
1 GB, XetConfig().items()), so memory stays bounded whatever the file size; and its retries of one stream cut
from 6 min to 2, so a failing CAS hands the file to HTTP (which waits out rate limits itself) within
XET_TRIES x 2 min."""
READ_AHEAD_BYTES = 16 << 20
"""Bytes fetched ahead of the upload per file (one 16 MiB upload request), so download and upload overlap."""
TIMEOUT = httpx2.Timeout(connect=30.0, read=120.0, write=60.0, pool=60.0)
"""A stalled connection counts as cut after the read timeout (the shared session has none of its own)."""


class Clock:
    """Time as the copier waits on it: monotonic seconds and sleep. Tests pass one that runs faster than real
    time, shared with the loopback Hub's rate-limit window, instead of replacing any of the copier's code."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, waitable: Any, seconds: float) -> bool:
        """`waitable.wait(seconds)` for a threading.Event or a held threading.Condition."""
        return waitable.wait(max(0.0, seconds))


REAL_CLOCK = Clock()


CONNECT_PATIENCE_S = 8.0
"""How long the first call to the Hub retries while its name does not resolve or nothing takes the connection."""


@dataclass(frozen=True)
class Backoff:
    """When to try again and when to give up.

    Failures (cut connections, 5xx) are retried with exponential backoff and jitter, at most `tries` in a row
    without progress. Rate limits (429, and 503 with Retry-After) are a wait, not a failure. Every wait has a
    floor and jitter, whatever `Retry-After` says (0, negative, `nan`, a date in the past, absent or garbage):
    the wait is the largest of what it asks, `rate_floor_s`, and an exponential backoff over the rate-limited
    answers in a row (so a Hub that keeps answering `Retry-After: 0` is asked less and less often), times 1 to
    1.5 (jitter, so workers and pods do not come back together), at most `retry_after_max_s` (longer values
    wait that and ask again). The copier keeps going while the limit lifts within `patience_s` of the last
    byte received and within `rate_tries` rate-limited answers in a row; each wait of `announce_s` or more
    is logged with what it waits for."""

    tries: int = 8
    base_s: float = 1.0
    max_s: float = 30.0
    retry_after_max_s: float = 600.0
    patience_s: float = 3600.0
    rate_floor_s: float = 2.0
    """At most one request per worker per this many seconds while rate limited."""
    rate_tries: int = 300
    """Rate-limited answers in a row without progress before the copier stops (with patience_s, whichever first)."""
    announce_s: float = 10.0
    clock: Clock = REAL_CLOCK
    log: Optional[Callable[[str], None]] = None

    def delay(self, attempt: int) -> float:
        return min(self.max_s, self.base_s * 2 ** (max(attempt, 1) - 1)) * (0.5 + random.random() / 2)

    def rate_delay(self, retry_after: Optional[float], limited: int) -> float:
        """The wait before the next request after the `limited`-th rate-limited answer in a row."""
        asked = retry_after if retry_after is not None and math.isfinite(retry_after) else 0.0
        grown = min(self.max_s, self.rate_floor_s * 2 ** (max(limited, 1) - 1))
        return min(self.retry_after_max_s, max(asked, grown, self.rate_floor_s) * (1 + random.random() / 2))

    def retrier(self) -> Retrier:
        return Retrier(self)


class Retrier:
    """One operation's retry budget: `tries` failures in a row, or `rate_tries` rate-limited answers or
    `patience_s` of rate limiting, since the last progress (`progressed()` resets all)."""

    def __init__(self, backoff: Backoff):
        self.backoff = backoff
        self.failures = 0
        self.limited = 0
        self.since = backoff.clock.now()

    def progressed(self) -> None:
        self.failures, self.limited, self.since = 0, 0, self.backoff.clock.now()

    def failed(self, status: Optional[int], retry_after: Optional[float], what: str) -> None:
        """Wait before the next try, or raise StagingError with `what` when the budget is spent."""
        backoff = self.backoff
        limited = status == 429 or (status == 503 and retry_after is not None)
        if limited:
            self.limited += 1
            delay = backoff.rate_delay(retry_after, self.limited)
            waited = backoff.clock.now() - self.since
            if waited + delay > backoff.patience_s or self.limited > backoff.rate_tries:
                raise StagingError(f"{what}: still rate limited by the Hub (HTTP {status}) after "
                                   f"{waited / 60:.0f} min and {self.limited - 1} answers without progress (the "
                                   f"copier waits up to {backoff.patience_s / 60:.0f} min and {backoff.rate_tries} "
                                   "answers); rerun later, or use a token with a higher rate limit (HF_TOKEN)")
            if backoff.log is not None and delay >= backoff.announce_s:
                backoff.log(f"rate limited by the Hub (HTTP {status}) on {what}: waiting {delay:.0f} s "
                            f"(answer {self.limited} in a row, {waited / 60:.0f} of {backoff.patience_s / 60:.0f} min "
                            "without progress)")
            backoff.clock.sleep(delay)
            return
        self.failures += 1
        if self.failures >= backoff.tries:
            raise StagingError(f"{what}: giving up after {self.failures} tries in a row without progress")
        backoff.clock.sleep(backoff.delay(self.failures))


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    lfs_sha256: Optional[str]
    """SHA-256 of the content, published for LFS files (the LFS object id)."""
    blob_id: Optional[str]
    """Git object id; for a file stored in git itself it is the SHA-1 of `blob <size>\\0<content>`."""

    @property
    def hub_oid(self) -> str:
        """The Hub's identity of the content: the LFS SHA-256, else the git blob id."""
        return self.lfs_sha256 or self.blob_id or ""


class Hub:
    """The Hub at `endpoint` (default: HF_ENDPOINT, else huggingface.co) with an optional token (default: HF_TOKEN)."""

    def __init__(self, repo_id: str, token: Optional[str] = None, endpoint: Optional[str] = None,
                 backoff: Backoff = Backoff(), xet: bool = True):
        self.repo_id = repo_id
        self.xet_enabled = xet and is_xet_available()
        self.transfers: Counter[str] = Counter()
        """Files opened through Xet ("xet") or HTTP ("http"), and Xet streams that fell back to HTTP."""
        self._xet_lock = threading.Lock()
        self._group: Any = None
        self.api = HfApi(endpoint=endpoint, token=token)
        self.endpoint = self.api.endpoint
        self.token = token
        self.backoff = backoff

    def model_page(self) -> str:
        return f"{self.endpoint}/{self.repo_id}"

    def files(self, revision: str) -> tuple[str, list[HubFile]]:
        """(commit, files) of `revision`: one metadata call that also resolves a branch to its commit."""
        info = self._with_retries(lambda: self.api.model_info(
            self.repo_id, revision=revision, files_metadata=True, timeout=TIMEOUT.read), revision)
        files = [HubFile(path=s.rfilename, size=int(s.size or 0), lfs_sha256=(s.lfs or {}).get("sha256"),
                         blob_id=s.blob_id) for s in info.siblings or []]
        if not info.sha or not COMMIT.match(info.sha):
            raise StagingError(f"the Hub returned no commit for {self.repo_id}@{revision}")
        return info.sha, files

    def resolve(self, revision: str = "main") -> str:
        return self.files(revision)[0]

    def _with_retries(self, call: Callable[[], Any], revision: str) -> Any:
        retrier = self.backoff.retrier()
        answered, unreachable = False, 0
        while True:
            try:
                return call()
            except HfHubHTTPError as err:
                answered = True
                status = err.response.status_code if err.response is not None else None
                if status not in RETRY_STATUS:
                    raise self.explain(err, revision) from None
                try:
                    retrier.failed(status, _retry_after(err.response.headers.get("Retry-After")),
                                   f"listing {self.repo_id}@{revision}")
                except StagingError:
                    if status == 429:
                        raise
                    raise self.explain(err, revision) from None
            except httpx2.TransportError as err:
                # Nothing has answered yet and the name does not resolve or the connection is refused: said within
                # about CONNECT_PATIENCE_S instead of after every retry (a network that is not there stays so).
                if isinstance(err, httpx2.ConnectError) and not answered:
                    waited = self.backoff.clock.now() - retrier.since
                    if waited >= CONNECT_PATIENCE_S:
                        raise StagingError(f"cannot reach the Hub at {self.endpoint}: {err} (for {waited:.0f} s; "
                                           f"check the network, DNS or HF_ENDPOINT)") from None
                    unreachable += 1
                    self.backoff.clock.sleep(min(self.backoff.delay(unreachable), CONNECT_PATIENCE_S - waited))
                    continue
                try:
                    retrier.failed(None, None, f"listing {self.repo_id}@{revision}")
                except StagingError:
                    raise StagingError(f"cannot reach the Hub at {self.endpoint}: {err}") from None

    def explain(self, err: Exception, revision: str) -> StagingError:
        """One actionable line for a Hub error (401/403 gated or bad token, 404 repository or revision)."""
        response = getattr(err, "response", None)
        status = response.status_code if response is not None else "?"
        repo = self.repo_id
        if isinstance(err, GatedRepoError):
            return StagingError(
                f"{repo} is gated and the token has no access to it (HTTP {status}): accept the model's license "
                f"at {self.model_page()} while logged in as the token's owner, or use a token of an account "
                "that has; the token comes from HF_TOKEN (the `hfToken` secret in the stack)")
        if isinstance(err, RevisionNotFoundError):
            return StagingError(f"revision {revision} does not exist in {repo} (HTTP {status}): set model.revision "
                                f"to a commit listed at {self.model_page()}/commits/main")
        if isinstance(err, RepositoryNotFoundError):
            return StagingError(
                f"repository {repo} was not found (HTTP {status}): check model.repoId; a private or gated "
                "repository also answers this way when the token (HF_TOKEN) is missing or invalid")
        if status == 401:
            return StagingError(f"the Hub rejected the token (HTTP 401) for {repo}: set HF_TOKEN to a valid token")
        if status == 403:
            return StagingError(f"the token may not read {repo} (HTTP 403): use a token with read access and "
                                f"accept the license at {self.model_page()}")
        return StagingError(f"the Hub answered HTTP {status} for {repo}@{revision}: {str(err).strip()}")

    def open(self, commit: str, file: HubFile, cancelled: threading.Event, on_bytes: Callable[[int], None],
             block_bytes: int) -> HubStream:
        url = hf_hub_url(self.repo_id, file.path, revision=commit, endpoint=self.endpoint)
        xet, limited = self.xet_file(url, file)
        self.count("xet" if xet is not None else "http")
        stream = HubStream(self, url, file, commit, cancelled, on_bytes, block_bytes, xet)
        if limited is not None:
            # A rate-limited HEAD is a rate-limited answer like any other: the stream's first request waits
            # its floor and jitter (and counts against its bounds) instead of following the HEAD at once.
            stream.retrier.failed(*limited, file.path)
        return stream

    # Xet ---------------------------------------------------------------------------------------
    def xet_file(self, url: str, file: HubFile) -> tuple[Any, Optional[tuple[int, Optional[float]]]]:
        """The Xet hash and token route of an LFS file the Hub serves through Xet, from a HEAD of its resolve URL
        (huggingface_hub's get_hf_file_metadata, as hf_hub_download finds it: `file_download.py` HfFileMetadata
        xet_file_data); None for files in git, without hf_xet, with HF_HUB_DISABLE_XET, or when the HEAD fails
        (the HTTP path then meets the same answer and explains or waits it out). Second: (status, Retry-After)
        when the HEAD was rate limited (429, or 503 with Retry-After), which the caller waits out first."""
        if file.lfs_sha256 is None or not self.xet_enabled:
            return None, None
        try:
            return get_hf_file_metadata(url, token=self.token, endpoint=self.endpoint,
                                        timeout=TIMEOUT.read).xet_file_data, None
        except Exception as err:  # noqa: BLE001 - any failure here leaves the file to the HTTP path
            response = getattr(err, "response", None)
            status = getattr(response, "status_code", None)
            retry_after = _retry_after(response.headers.get("Retry-After")) if response is not None else None
            if status == 429 or (status == 503 and retry_after is not None):
                return None, (status, retry_after)
            return None, None

    def xet_stream(self, data: Any, file: HubFile, start: int) -> Any:
        """The file's bytes from `start` on, in order, from the Xet CAS (hf_xet XetDownloadStreamGroup)."""
        from hf_xet import XetFileInfo  # noqa: PLC0415 - only where the Hub serves Xet

        return self._xet_group(data).download_stream(XetFileInfo(data.file_hash, file.size), start=start or None)

    def _xet_group(self, data: Any) -> Any:
        """One stream group per copier (one CAS connection pool), with a read token for the commit that hf_xet
        refreshes from the Hub's token route; its download buffers bounded (XET_CONFIG)."""
        with self._xet_lock:
            if self._group is None:
                from hf_xet import XetConfig, XetSession  # noqa: PLC0415
                from huggingface_hub.utils._xet import (  # noqa: PLC0415
                    refresh_xet_connection_info,
                    xet_headers_without_auth,
                )

                headers = build_hf_headers(token=self.token)
                info = refresh_xet_connection_info(file_data=data, headers=headers)
                session = XetSession(config=XetConfig().with_config(dict(XET_CONFIG)))
                self._group = session.new_download_stream_group(
                    endpoint=info.endpoint, token=info.access_token, token_expiry_unix_secs=info.expiration_unix_epoch,
                    token_refresh_url=data.refresh_route, token_refresh_headers=headers,
                    custom_headers=xet_headers_without_auth(headers))
            return self._group

    def count(self, what: str) -> None:
        with self._xet_lock:
            self.transfers[what] += 1


def _retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a `Retry-After` value (delay-seconds or an HTTP-date, RFC 9110 section 10.2.3), else None."""
    if value is None:
        return None
    try:
        seconds = float(value)
        return max(0.0, seconds) if math.isfinite(seconds) else None  # nan, inf: not a delay
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


class _RetryError(Exception):
    def __init__(self, reason: str, status: Optional[int] = None, retry_after: Optional[float] = None):
        super().__init__(reason)
        self.status, self.retry_after = status, retry_after


class HubStream(io.RawIOBase):
    """A file's bytes, fetched once and hashed as they are handed out; read() raises IntegrityError instead of
    returning the last bytes when size or hash is wrong, so an upload built on it never completes.

    Three threads per file, so that on two cores no stage waits for another: a reader thread fetches the
    file 1 MiB at a time, computes the CRC32C and joins the pieces into blocks of `block_bytes` (the upload's
    request size); a hashing thread computes the SHA-256 of each piece as it arrives, while it is still in the
    CPU's cache; the caller (the upload) sends one block while the next ones are fetched and hashed (hashlib,
    google-crc32c and socket I/O release the GIL). Memory: the block being fetched, `read_ahead` blocks
    queued, the last block handed out (the upload may ask for it again: google-resumable-media seeks back to
    the last byte the server confirmed), and at most one block of pieces waiting to be hashed.

    The bytes come through `requests` (urllib3), not huggingface_hub's httpx2 session: httpcore2 reads the
    socket 64 KiB at a time (httpcore2 2.16.2 `_sync/http11.py`, READ_NUM_BYTES) and h11 and httpx2's chunker
    copy each byte again; urllib3 reads 1 MiB a call with one copy (docs/weights.md has the CPU per GB of
    each). Headers, URL and error mapping are huggingface_hub's."""

    def __init__(self, hub: Hub, url: str, file: HubFile, commit: str, cancelled: threading.Event,
                 on_bytes: Callable[[int], None], block_bytes: int, xet: Any = None,
                 read_ahead: int = READ_AHEAD_BYTES):
        super().__init__()
        self.hub, self.url, self.file, self.commit = hub, url, file, commit
        self.cancelled, self.on_bytes = cancelled, on_bytes
        self.block_bytes = block_bytes
        self.sha256 = hashlib.sha256()
        self.git_sha1 = None if file.lfs_sha256 else hashlib.sha1(b"blob %d\0" % file.size)
        self.crc32c = google_crc32c.Checksum()
        """CRC32C of the same bytes the SHA-256 covers: compared with what Cloud Storage computes over the object."""
        self.retrier = hub.backoff.retrier()
        self.fetched = 0  # bytes received from the Hub (reader thread)
        self.delivered = 0  # bytes taken from the queue (caller)
        self.position = 0  # the caller's offset: <= delivered after a seek back
        self.last: tuple[int, bytes] = (0, b"")  # the last block handed out, for a seek back
        self.requests = 0
        self._session: Any = None
        self._response: Any = None
        self.xet = xet
        """The file's Xet hash and token route when the Hub serves it through Xet; None: HTTP."""
        self._xet_stream: Any = None
        self._xet_leftover = b""
        self._xet_failures = 0
        self.xet_error = ""
        """The last failure of the Xet stream, if any."""
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, read_ahead // block_bytes))
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._hashing: queue.Queue = queue.Queue(maxsize=max(1, block_bytes // READ_BYTES))
        self._hasher: Optional[threading.Thread] = None
        self._leftover = b""
        self._ended = False

    # io.RawIOBase protocol ---------------------------------------------------------------------
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = {io.SEEK_SET: offset, io.SEEK_CUR: self.position + offset,
                  io.SEEK_END: self.file.size + offset}[whence]
        if not self.last[0] <= target <= self.delivered:
            raise OSError(f"{self.file.path}: cannot seek to {target}: only bytes {self.last[0]}-{self.delivered} "
                          "are kept")
        self.position = target
        return target

    def read(self, size: int = -1) -> bytes:
        want = self.file.size - self.position if size is None or size < 0 else size
        begin, (start, block) = self.position, self.last
        parts = [block[begin - start:begin - start + want]] if begin < self.delivered else []
        got = len(parts[0]) if parts else 0  # a re-read after a seek back is served from the kept block
        while got < want and self.delivered < self.file.size:
            piece = self._next_piece(want - got)
            parts.append(piece)
            got += len(piece)
        if self.delivered >= self.file.size and not self._ended:
            self._next_item()  # the end marker, or the reason there is none (a failed download)
            self._hashing.join()  # every byte hashed
            self._verify()  # before the last bytes are handed out: a wrong file never completes an upload
            self._ended = True
        out = parts[0] if len(parts) == 1 else b"".join(parts)  # one whole block: the object itself, no copy
        self.position = begin + len(out)
        if self.position == self.delivered:
            self.last = (begin, out)
        return out

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=TIMEOUT.read)
        if self._hasher is not None:
            self._hashing.put(None)
            self._hasher.join(timeout=TIMEOUT.read)
        self._disconnect()
        if self._session is not None:
            self._session.close()
        super().close()

    # caller's thread ---------------------------------------------------------------------------
    def _next_piece(self, limit: int) -> bytes:
        if not self._leftover:
            self._leftover = self._next_item()
        piece = self._leftover if len(self._leftover) <= limit else self._leftover[:limit]
        self._leftover = self._leftover[len(piece):]
        self.delivered += len(piece)
        return piece

    def _next_item(self) -> bytes:
        if self._thread is None:
            self._hasher = threading.Thread(target=self._hash_all, name=f"hash {self.file.path}", daemon=True)
            self._hasher.start()
            self._thread = threading.Thread(target=self._fetch_all, name=f"fetch {self.file.path}", daemon=True)
            self._thread.start()
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    # reader thread -----------------------------------------------------------------------------
    def _fetch_all(self) -> None:
        """Every byte in order, one block at a time, then the end marker; an error is queued in its place."""
        try:
            while self.fetched < self.file.size and not self._stop.is_set():
                self._put(self._take(min(self.block_bytes, self.file.size - self.fetched)))
            self._check_end()
            self._put(b"")
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread, which raises it
            self._put(err)
        finally:
            self._disconnect()

    def _hash_all(self) -> None:
        """SHA-256 (and the git blob id) of every byte received, in order, each piece as it arrives (still in the
        CPU's cache); None stops."""
        while (piece := self._hashing.get()) is not None:
            self.sha256.update(piece)
            if self.git_sha1 is not None:
                self.git_sha1.update(piece)
            self._hashing.task_done()
        self._hashing.task_done()

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    # network -----------------------------------------------------------------------------------
    def _take(self, count: int) -> bytes:
        """Exactly `count` bytes from the Hub: one read when the connection holds; after a cut, the bytes received
        so far are kept and the rest is asked for from where they end."""
        retrier, parts, got = self.retrier, [], 0
        while got < count:
            if self.cancelled.is_set() or self._stop.is_set():
                raise StagingError(f"{self.file.path}: cancelled")
            try:
                piece = self._xet_read(count - got) if self.xet is not None else self._http_read(count - got)
            except StagingError:
                raise
            except Exception as err:  # noqa: BLE001 - hf_xet raises its own kinds (it retries inside)
                if self.xet is not None:
                    self._xet_failed(err)
                    continue
                if not isinstance(err, (_RetryError, requests.RequestException, urllib3.exceptions.HTTPError,
                                        OSError)):
                    raise
                self._disconnect()
                retrier.failed(getattr(err, "status", None), getattr(err, "retry_after", None),
                               f"{self.file.path} at byte {self.fetched} of {self.file.size} ({err})")
                continue
            self._hashing.put(piece)
            self.crc32c.update(piece)  # here: the SHA-256 alone keeps the hashing thread busy
            parts.append(piece)
            got += len(piece)
            self.fetched += len(piece)
            self.on_bytes(len(piece))
            retrier.progressed()
            self._xet_failures = 0
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _http_read(self, limit: int) -> bytes:
        if self._response is None:
            self._connect()
        piece = self._response.raw.read(min(READ_BYTES, limit), decode_content=True)
        if not piece:
            raise _RetryError(f"connection ended at byte {self.fetched} of {self.file.size}")
        return piece

    def _xet_read(self, limit: int) -> bytes:
        """Up to `limit` bytes from the file's Xet stream (opened at the first byte not yet received): a piece as
        hf_xet hands it over (xorb-sized, already out of the cache), cut only at a block boundary."""
        if not self._xet_leftover:
            if self._xet_stream is None:
                self._xet_stream = self.hub.xet_stream(self.xet, self.file, self.fetched)
            chunk = next(self._xet_stream, None)
            if not chunk:
                raise _RetryError(f"the Xet stream ended at byte {self.fetched} of {self.file.size}")
            self._xet_leftover = chunk
        if len(self._xet_leftover) <= limit:
            piece, self._xet_leftover = self._xet_leftover, b""
        else:
            piece, self._xet_leftover = self._xet_leftover[:limit], self._xet_leftover[limit:]
        return piece

    def _xet_failed(self, err: Exception) -> None:
        """A failed Xet stream is opened again from the last byte received; after XET_TRIES failures in a row the
        rest of the file comes over HTTP (Range from the same byte)."""
        self._disconnect()
        self._xet_failures += 1
        self.xet_error = f"{type(err).__name__}: {err}"
        if self._xet_failures >= XET_TRIES:
            self.xet = None
            self.hub.count("xet_fell_back")

    def _check_end(self) -> None:
        """The Hub sent the size it publishes and not a byte more."""
        if self.xet is not None:
            more = bool(self._xet_leftover) or next(self._xet_stream, None) if self._xet_stream is not None else False
        else:
            more = self._response is not None and self._response.raw.read(1, decode_content=True)
        if more:
            raise IntegrityError(f"{self.file.path}: the Hub sent more than the {self.file.size} bytes it "
                                 "publishes; nothing was written for this file")

    def _connect(self) -> None:
        headers = build_hf_headers(token=self.hub.token)
        headers["Accept-Encoding"] = "identity"  # the bytes the hashes cover; Range offsets count those bytes
        if self.fetched:
            headers["Range"] = f"bytes={self.fetched}-"
        if self._session is None:
            self._session = requests.Session()
        self.requests += 1
        response = self._session.get(self.url, headers=headers, stream=True, timeout=(TIMEOUT.connect, TIMEOUT.read))
        self._response = response
        if response.status_code in RETRY_STATUS:
            self._disconnect()
            raise _RetryError(f"HTTP {response.status_code}", response.status_code,
                              _retry_after(response.headers.get("Retry-After")))
        if response.status_code >= 400:
            body = response.content
            self._disconnect()
            # huggingface_hub's own mapping of the Hub's answer (X-Error-Code) to typed errors, then one line
            answer = httpx2.Response(response.status_code, headers=list(response.headers.items()), content=body,
                                     request=httpx2.Request("GET", self.url))
            try:
                hf_raise_for_status(answer)
            except Exception as err:  # noqa: BLE001 - typed Hub errors -> one actionable line
                raise self.hub.explain(err, self.commit) from None
            raise StagingError(f"{self.file.path}: the Hub answered HTTP {response.status_code}")
        total = _total_size(response)
        if total is not None and total != self.file.size:
            self._disconnect()
            raise IntegrityError(f"{self.file.path}: the Hub serves {total} bytes, it publishes {self.file.size}; "
                                 "nothing was written for this file")
        if self.fetched and response.status_code == 200:
            self._discard(self.fetched)  # the server ignored Range: drop what we already have
        elif self.fetched:
            match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
            if not match or int(match.group(1)) != self.fetched:
                self._disconnect()
                raise _RetryError(f"unexpected Content-Range {response.headers.get('Content-Range')!r}")

    def _discard(self, count: int) -> None:
        while count:
            piece = self._response.raw.read(min(count, self.block_bytes), decode_content=True)
            if not piece:
                raise _RetryError(f"connection ended while skipping to byte {self.fetched}")
            count -= len(piece)

    def _disconnect(self) -> None:
        stream, self._xet_stream, self._xet_leftover = self._xet_stream, None, b""
        if stream is not None:
            stream.cancel()
        response, self._response = self._response, None
        if response is not None:
            try:
                response.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail again; it is gone either way
                pass

    @property
    def crc32c_b64(self) -> str:
        """The CRC32C as Cloud Storage's JSON API spells it (base64 of the big-endian 4 bytes)."""
        return base64.b64encode(self.crc32c.digest()).decode()

    def _verify(self) -> None:
        file = self.file
        if self.delivered != file.size:
            raise IntegrityError(f"{file.path}: received {self.delivered} bytes, the Hub publishes {file.size}; "
                                 "nothing was written for this file")
        if file.lfs_sha256 and self.sha256.hexdigest() != file.lfs_sha256:
            raise IntegrityError(f"{file.path}: SHA-256 of the bytes received is {self.sha256.hexdigest()}, the Hub "
                                 f"publishes {file.lfs_sha256}; nothing was written for this file")
        if self.git_sha1 is not None and file.blob_id and self.git_sha1.hexdigest() != file.blob_id:
            raise IntegrityError(f"{file.path}: git blob id of the bytes received is {self.git_sha1.hexdigest()}, the "
                                 f"Hub publishes {file.blob_id}; nothing was written for this file")


def _total_size(response: Any) -> Optional[int]:
    """The size of the whole file as the answer states it (Content-Range total, or a 200's Content-Length)."""
    if response.status_code == 206:
        match = re.search(r"/(\d+)$", response.headers.get("Content-Range", ""))
        return int(match.group(1)) if match else None
    length = response.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None

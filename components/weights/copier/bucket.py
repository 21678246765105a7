"""Cloud Storage side of the copier: the revision folder, the copier's own folder beside it, streamed uploads
whose CRC32C is checked against the bytes the Hub sent, and which object names are safe.

The revision folder (`--dest`, what hydration copies into the volume) holds the model's files and nothing
else. The copier's manifest, per-file records, leases and write probe live in `<folder>.copier/` beside it,
so no file of the model can collide with them and none of them reaches the volume.
Honors STORAGE_EMULATOR_HOST (google-cloud-storage's emulator switch).
"""

from __future__ import annotations

import hashlib
import io
import re
import threading
import unicodedata
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from google.api_core import exceptions as gexc
from google.cloud import storage
from google.cloud.storage.retry import DEFAULT_RETRY

from . import StagingError

CHUNK_BYTES = 16 << 20
"""Resumable upload request size (a multiple of 256 KiB, google-cloud-storage Blob.chunk_size); with the
block the stream keeps for a retry, about twice this is held per worker."""
URI = re.compile(r"^gs://([a-z0-9][-_.a-z0-9]{1,221}[a-z0-9])/((?:[^/]+/)+)$")
OBJECT_NAME_MAX_BYTES = 1024
"""Object names are at most 1,024 bytes of UTF-8 and contain no CR or LF
(https://cloud.google.com/storage/docs/objects#naming)."""
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
INVISIBLE_CATEGORIES = {"Cf": "an invisible formatting character (bidi control, zero-width)",
                        "Co": "a private-use character", "Cn": "an unassigned code point", "Cs": "a lone surrogate",
                        "Zl": "a line separator", "Zp": "a paragraph separator",
                        "Zs": "a space other than U+0020"}
"""Unicode general categories refused in a name: each renders as nothing, or as something else, so two names
that look the same would be different files (https://www.unicode.org/reports/tr36/ "Visual Security Issues")."""
PERCENT_SEPARATOR = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)
SIDECAR_SUFFIX = ".copier/"


@dataclass(frozen=True)
class Destination:
    bucket: str
    prefix: str
    """The revision folder in the bucket, ending with '/' (never the bucket's root: the copier's own folder
    sits beside it)."""

    @classmethod
    def parse(cls, uri: str) -> Destination:
        match = URI.match(uri)
        if not match:
            raise StagingError(f"--dest {uri!r}: expected gs://BUCKET/FOLDER/ (a folder inside the bucket, with a "
                               "trailing '/')")
        return cls(match.group(1), match.group(2))

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}"

    @property
    def sidecar(self) -> str:
        """`<folder>.copier/`: the copier's objects, outside the revision folder."""
        return self.prefix[:-1] + SIDECAR_SUFFIX

    def name(self, path: str) -> str:
        return self.prefix + path


def unsafe_reason(path: str, dest: Destination) -> Optional[str]:
    """Why a file name from the Hub cannot become an object (and a file in the volume), or None."""
    if not path:
        return "an empty name"
    if path.startswith("/"):
        return "an absolute path"
    if CONTROL.search(path):
        return "a control character"
    for char in path:
        category = unicodedata.category(char)
        if INVISIBLE_CATEGORIES.get(category) and char != " ":
            return f"{INVISIBLE_CATEGORIES[category]}, U+{ord(char):04X}"
    if "\\" in path:
        return "a backslash"
    if PERCENT_SEPARATOR.search(path):
        return "a percent-encoded '.', '/' or '\\'"
    folded = unicodedata.normalize("NFKC", path)
    if any(folded.count(c) != path.count(c) for c in "./\\"):
        return "a character that normalises to '.', '/' or '\\' (a fullwidth or compatibility form)"
    segments = path.split("/")
    if "" in segments:
        return "an empty path segment"
    if ".." in segments or "." in segments:
        return "a '.' or '..' path segment"
    if len(dest.name(path).encode()) > OBJECT_NAME_MAX_BYTES:
        return f"longer than the {OBJECT_NAME_MAX_BYTES} bytes an object name may have"
    return None


def twin_key(path: str) -> str:
    """Names equal under Unicode normalisation (NFC/NFD) and case are one name to a person, and to a
    case-insensitive or normalising file system: the same key."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", path).casefold())


def written_by_copier(blob: Any) -> bool:
    """Objects the copier writes carry `hub-revision` in their metadata (so stale ones may be cleared)."""
    return "hub-revision" in (blob.metadata or {})


def metadata(hub_oid: str, sha256: str, revision: str) -> dict[str, str]:
    return {"hub-oid": hub_oid, "sha256": sha256, "hub-revision": revision}


class Bucket:
    """One client per thread: the library's HTTP session is not documented as thread-safe."""

    def __init__(self, dest: Destination, client_factory: Any = None, chunk_bytes: int = CHUNK_BYTES):
        self.dest, self.chunk_bytes = dest, chunk_bytes
        self._factory = client_factory or storage.Client
        self._local = threading.local()

    @property
    def bucket(self) -> storage.Bucket:
        if not hasattr(self._local, "bucket"):
            self._local.bucket = self._factory().bucket(self.dest.bucket)
        return self._local.bucket

    def list(self, prefix: str) -> dict[str, Any]:
        """Objects under `prefix` by name (size, generation, CRC32C, MD5, metadata), one listing."""
        with self._explained("list"):
            return {blob.name: blob for blob in self.bucket.client.list_blobs(self.bucket, prefix=prefix)}

    def get(self, name: str) -> Any:
        with self._explained("read"):
            return self.bucket.get_blob(name)

    def stored_digests(self, name: str, generation: int, size: int, git: bool,
                       on_bytes: Callable[[int], None]) -> tuple[str, Optional[str]]:
        """(SHA-256, git blob id if `git`) of the bytes Cloud Storage holds for `name` at exactly `generation`,
        read back in `chunk_bytes` requests (so memory stays one chunk per worker, whatever the size)."""
        sha256 = hashlib.sha256()
        sha1 = hashlib.sha1(b"blob %d\0" % size) if git else None
        sink = _Hashing(sha256, sha1, on_bytes)
        blob = self.bucket.blob(name, chunk_size=self.chunk_bytes, generation=generation)
        with self._explained("read"):
            try:
                blob.download_to_file(sink, checksum=None, retry=DEFAULT_RETRY)
            except gexc.NotFound:
                return "", None  # replaced or deleted meanwhile: not this generation's bytes
        if sink.count != size:
            return "", None
        return sha256.hexdigest(), sha1.hexdigest() if sha1 is not None else None

    def check_writable(self) -> None:
        """Fail before downloading anything if the identity cannot create and delete objects here."""
        probe = self.bucket.blob(f"{self.dest.sidecar}write-probe-{uuid.uuid4().hex}")  # one per copier
        with self._explained("write"):
            probe.upload_from_string(b"", content_type="text/plain")
            probe.delete()

    def upload(self, name: str, stream: io.RawIOBase, size: int, meta: dict[str, str],
               crc32c: Callable[[], str]) -> Any:
        """Stream `size` bytes into `name`; the object is kept only if the CRC32C Cloud Storage computed over
        what it stored equals `crc32c()`, the CRC32C of the bytes the stream verified against the Hub."""
        blob = self.bucket.blob(name, chunk_size=self.chunk_bytes)
        blob.metadata = meta
        with self._explained("write"):
            # checksum=None: the stream computes the CRC32C itself, over the bytes its SHA-256 covers.
            blob.upload_from_file(stream, size=size, checksum=None, retry=DEFAULT_RETRY,
                                  content_type="application/octet-stream")
            self._check_stored(blob, crc32c())
        return blob

    def upload_bytes(self, name: str, data: bytes, meta: dict[str, str], content_type: str,
                     if_generation_match: Optional[int] = None) -> Any:
        blob = self.bucket.blob(name)
        blob.metadata = meta
        with self._explained("write"):
            blob.upload_from_string(data, content_type=content_type, checksum="crc32c", retry=DEFAULT_RETRY,
                                    if_generation_match=if_generation_match)
        return blob

    def delete(self, name: str, generation: Optional[int] = None) -> None:
        with self._explained("write"):
            try:
                self.bucket.blob(name).delete(if_generation_match=generation, retry=DEFAULT_RETRY)
            except (gexc.NotFound, gexc.PreconditionFailed):
                pass  # already gone, or replaced by someone else: not ours to delete

    def _check_stored(self, blob: Any, expected: str) -> None:
        if blob.crc32c != expected:
            self.delete(blob.name, blob.generation)
            raise StagingError(f"{blob.name}: Cloud Storage computed CRC32C {blob.crc32c} over the stored object, "
                               f"the bytes verified against the Hub have {expected}; the object was deleted")

    def _explained(self, action: str) -> _Explained:
        return _Explained(self.dest, action)


class _Hashing(io.RawIOBase):
    """A write-only file that hashes what the download writes into it and keeps nothing."""

    def __init__(self, sha256: Any, sha1: Any, on_bytes: Callable[[int], None]):
        super().__init__()
        self.sha256, self.sha1, self.on_bytes, self.count = sha256, sha1, on_bytes, 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.sha256.update(data)
        if self.sha1 is not None:
            self.sha1.update(data)
        self.count += len(data)
        self.on_bytes(len(data))
        return len(data)


class _Explained:
    """Turns Cloud Storage permission and existence errors into one actionable line."""

    def __init__(self, dest: Destination, action: str):
        self.dest, self.action = dest, action

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, err: Any, tb: Any) -> bool:
        if isinstance(err, gexc.Forbidden) or isinstance(err, gexc.Unauthorized):
            raise StagingError(
                f"the identity running the copy may not {self.action} objects in {self.dest.uri} "
                f"(HTTP {err.code}): it needs roles/storage.objectUser on the folder (the stack grants it to the "
                "staging Job's service account); by hand, use credentials that hold it") from None
        if isinstance(err, gexc.NotFound) and self.action in ("list", "write"):
            raise StagingError(f"bucket gs://{self.dest.bucket} does not exist or is not visible to this identity "
                               "(HTTP 404)") from None
        return False

"""Cloud Storage side of the copier: the destination folder, which of its objects are already a verified copy,
streamed uploads, and the manifest written last.

An object counts as staged only when its size and its `hub-oid` metadata (the Hub's LFS SHA-256 or git blob
id) match the file: uploads are resumable sessions that Cloud Storage finalizes with the last bytes, and the
stream raises before handing those out when the hash is wrong, so a wrong copy never becomes an object.
The client verifies the CRC32C Cloud Storage computes against the bytes sent (`checksum="crc32c"`).
Honors STORAGE_EMULATOR_HOST (google-cloud-storage's emulator switch).
"""

from __future__ import annotations

import io
import json
import re
import threading
from dataclasses import dataclass
from typing import Any, Optional

from google.api_core import exceptions as gexc
from google.cloud import storage
from google.cloud.storage.retry import DEFAULT_RETRY

from . import StagingError

MANIFEST = ".staged.json"
"""Written last, once every file is a verified object: its presence means the folder is complete."""
CHUNK_BYTES = 16 << 20
"""Resumable upload request size (a multiple of 256 KiB, google-cloud-storage Blob.chunk_size); with the
block the stream keeps for a retry, about twice this is held per worker."""
URI = re.compile(r"^gs://([a-z0-9][-_.a-z0-9]{1,221}[a-z0-9])/((?:[^/]+/)*)$")


@dataclass(frozen=True)
class Destination:
    bucket: str
    prefix: str
    """Folder in the bucket, '' or ending with '/'."""

    @classmethod
    def parse(cls, uri: str) -> Destination:
        match = URI.match(uri)
        if not match:
            raise StagingError(f"--dest {uri!r}: expected gs://BUCKET/FOLDER/ (a folder: trailing '/')")
        return cls(match.group(1), match.group(2))

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}"

    def name(self, path: str) -> str:
        return self.prefix + path


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

    def objects(self) -> dict[str, Any]:
        """Objects under the folder by name (size and metadata), one listing."""
        with self._explained("list"):
            return {blob.name: blob for blob in self.bucket.client.list_blobs(self.bucket, prefix=self.dest.prefix)}

    def read_manifest(self, objects: dict[str, Any]) -> Optional[dict[str, Any]]:
        blob = objects.get(self.dest.name(MANIFEST))
        if blob is None:
            return None
        with self._explained("read"):
            try:
                return json.loads(blob.download_as_bytes())
            except ValueError:
                return None  # unreadable: staged again, and rewritten

    def check_writable(self) -> None:
        """Fail before downloading anything if the identity cannot create and delete objects here."""
        probe = self.bucket.blob(self.dest.name(".write-probe"))
        with self._explained("write"):
            probe.upload_from_string(b"", content_type="text/plain")
            probe.delete()

    def upload(self, name: str, stream: io.RawIOBase, size: int, meta: dict[str, str]) -> None:
        blob = self.bucket.blob(name, chunk_size=self.chunk_bytes)
        blob.metadata = meta
        with self._explained("write"):
            try:
                blob.upload_from_file(stream, size=size, checksum="crc32c", retry=DEFAULT_RETRY,
                                      content_type="application/octet-stream")
            except Exception as err:
                if type(err).__name__ == "DataCorruption":  # CRC32C mismatch after the object was finalized
                    blob.delete()
                    raise StagingError(f"{name}: Cloud Storage stored bytes whose CRC32C differs from the bytes "
                                       "sent; the object was deleted") from None
                raise

    def upload_bytes(self, name: str, data: bytes, meta: dict[str, str], content_type: str) -> None:
        blob = self.bucket.blob(name)
        blob.metadata = meta
        with self._explained("write"):
            blob.upload_from_string(data, content_type=content_type, checksum="crc32c", retry=DEFAULT_RETRY)

    def _explained(self, action: str) -> _Explained:
        return _Explained(self.dest, action)


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

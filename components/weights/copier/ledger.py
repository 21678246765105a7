"""What the copier knows about a revision folder, kept in `<folder>.copier/` beside it: one record per staged
file, one lease per file being copied, and the manifest.

Hints, not proof: a record (written after the upload, from what Cloud Storage returned once the CRC32C it
computed over the stored bytes matched the CRC32C of the bytes verified against the Hub's SHA-256) names the
object's generation, size, CRC32C and MD5. Any identity that may write the objects may write records too, so
no copier trusts one: each proves its share by the Hub's hash over the stored bytes (copy.py). Records say
which files are done for the manifest and for people; a record that does not match its object (`proven`)
means the folder is changing.

Leases: copiers (pods of one Job, or a second Job or a person on the same folder) claim a file by creating
`claims/<path>` only if it does not exist (ifGenerationMatch=0), renew it by rewriting it only if it is still
their generation, and release it after the record is written. A claim whose generation has not changed for
`Lease.ttl_s` on the observer's own clock (no clock skew involved) is taken over by a conditional rewrite,
which only one copier can win. So no file is downloaded twice while its copier lives, and a dead copier's files
are picked up after one lease period.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Optional

from google.api_core import exceptions as gexc

from .bucket import Bucket
from .hub import Clock, HubFile

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Lease:
    ttl_s: float = 120.0
    """A claim not renewed for this long belongs to a copier that is gone."""
    renew_s: float = 30.0
    poll_s: float = 5.0
    """How often a copier with nothing left to claim looks at the files others hold."""


def holder_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def proven(obj: Any, record: Any, file: HubFile, revision: str) -> bool:
    """The object is the copy its record describes (a hint: see the module docstring)."""
    if obj is None or record is None:
        return False
    meta = record.metadata or {}
    return (meta.get("hub-revision") == revision and meta.get("hub-oid") == file.hub_oid != ""
            and meta.get("size") == str(file.size) == str(obj.size)
            and meta.get("generation") == str(obj.generation)
            and meta.get("crc32c") == obj.crc32c is not None
            and meta.get("md5") == (obj.md5_hash or ""))


@dataclass
class Held:
    generation: int
    lost: bool = False
    released: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Orders a renewal and the release: a rewrite after the delete would leave a claim nobody holds."""


@dataclass(frozen=True)
class Busy:
    """Someone else's live claim: its generation and when this copier first saw it."""

    generation: int
    seen_at: float


class Ledger:
    def __init__(self, bucket: Bucket, revision: str, clock: Clock, lease: Lease = Lease()):
        self.bucket, self.revision, self.clock, self.lease = bucket, revision, clock, lease
        self.root = bucket.dest.sidecar
        self.holder = holder_id()
        self.held: dict[str, Held] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: Optional[threading.Thread] = None
        self._manifest_dropped = False

    # names -------------------------------------------------------------------------------------
    def record_name(self, path: str) -> str:
        return f"{self.root}done/{path}"

    def claim_name(self, path: str) -> str:
        return f"{self.root}claims/{path}"

    @property
    def manifest_name(self) -> str:
        return self.root + MANIFEST

    # records -----------------------------------------------------------------------------------
    def records(self, listing: dict[str, Any]) -> dict[str, Any]:
        start = self.root + "done/"
        return {name[len(start):]: blob for name, blob in listing.items() if name.startswith(start)}

    def write_record(self, file: HubFile, obj: Any, sha256: str) -> None:
        self.bucket.upload_bytes(self.record_name(file.path), b"", {
            "hub-revision": self.revision, "hub-oid": file.hub_oid, "sha256": sha256, "size": str(obj.size),
            "generation": str(obj.generation), "crc32c": obj.crc32c, "md5": obj.md5_hash or ""}, "text/plain")

    def drop_manifest(self) -> None:
        """Remove the summary once, before this copier changes the folder (it is written again when done)."""
        with self._lock:
            if self._manifest_dropped:
                return
            self._manifest_dropped = True
        self.bucket.delete(self.manifest_name)

    # leases ------------------------------------------------------------------------------------
    def claim(self, path: str, seen: Optional[Busy]) -> Busy | Held:
        """Hold `path` (a fresh claim, or one whose holder stopped renewing), or say who holds it."""
        name = self.claim_name(path)
        try:
            return self._hold(path, self._write_claim(name, 0))
        except gexc.PreconditionFailed:
            pass
        current = self.bucket.get(name)
        if current is None:  # released meanwhile: try once more on the next round
            return Busy(0, self.clock.now())
        if (current.metadata or {}).get("holder") == self.holder:  # our own create, retried after a timeout
            return self._hold(path, current.generation)
        if seen is None or seen.generation != current.generation:
            return Busy(current.generation, self.clock.now())
        if self.clock.now() - seen.seen_at < self.lease.ttl_s:
            return seen
        try:
            return self._hold(path, self._write_claim(name, current.generation))
        except gexc.PreconditionFailed:  # another copier took it over first, or its holder renewed
            return Busy(0, self.clock.now())

    def still_held(self, path: str) -> bool:
        """Renew now; False when another copier took the claim over (then its copy wins)."""
        with self._lock:
            held = self.held.get(path)
        if held is None:
            return False
        with held.lock:
            if held.lost or held.released:
                return False
            try:
                held.generation = self._write_claim(self.claim_name(path), held.generation)
            except gexc.PreconditionFailed:
                held.lost = True
            return not held.lost

    def release(self, path: str) -> None:
        with self._lock:
            held = self.held.pop(path, None)
        if held is None:
            return
        with held.lock:
            held.released = True
            if not held.lost:
                self.bucket.delete(self.claim_name(path), held.generation)

    def __enter__(self) -> Ledger:
        self._renewer = threading.Thread(target=self._renew, name="staging-lease", daemon=True)
        self._renewer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=30)
        for path in list(self.held):
            self.release(path)

    def _hold(self, path: str, generation: int) -> Held:
        held = Held(generation)
        with self._lock:
            self.held[path] = held
        return held

    def _write_claim(self, name: str, if_generation_match: int) -> int:
        blob = self.bucket.upload_bytes(name, self.holder.encode(), {"holder": self.holder,
                                                                     "hub-revision": self.revision},
                                        "text/plain", if_generation_match=if_generation_match)
        return blob.generation

    def _renew(self) -> None:
        while not self.clock.wait(self._stop, self.lease.renew_s):
            with self._lock:
                paths = [p for p, h in self.held.items() if not h.lost]
            for path in paths:
                if self._stop.is_set():
                    return
                try:
                    self.still_held(path)
                except Exception:  # noqa: BLE001 - a failed renewal is retried next period; expiry is the bound
                    pass

    # manifest ----------------------------------------------------------------------------------
    def write_manifest(self, repo_id: str, files: list[HubFile], listing: dict[str, Any]) -> None:
        """A summary for people and tools, written once every file is proven. Never trusted on a rerun."""
        records = self.records(listing)
        document = {
            "repoId": repo_id,
            "revision": self.revision,
            "folder": self.bucket.dest.uri,
            "finishedAt": datetime.now(UTC).isoformat(timespec="seconds"),
            "totalBytes": sum(f.size for f in files),
            "files": [{"path": f.path, "size": f.size, "sha256": records[f.path].metadata["sha256"],
                       "hubOid": f.hub_oid, "crc32c": records[f.path].metadata["crc32c"],
                       "generation": records[f.path].metadata["generation"]}
                      for f in sorted(files, key=lambda f: f.path)],
        }
        self.bucket.upload_bytes(self.manifest_name, json.dumps(document, indent=1).encode(),
                                 {"hub-revision": self.revision}, "application/json")

"""Orchestration: what is already staged, what to copy, parallel verified copies, the manifest last.

A rerun lists the destination once: with a manifest for the requested revision and every object it names
in place, it transfers nothing and does not even ask the Hub; otherwise it copies only the files whose object
is missing or not a verified copy, then writes the manifest.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Optional

from . import StagingError
from .bucket import CHUNK_BYTES, MANIFEST, Bucket, Destination, metadata
from .hub import COMMIT, Backoff, Hub, HubFile
from .progress import Progress, human_bytes, human_seconds

DEFAULT_BACKOFF = Backoff()
INLINE_LIMIT = 32 << 20
"""Files stored in git itself (not LFS) are read whole, hashed, then uploaded with their SHA-256 in the
object's metadata; larger non-LFS files are refused rather than held in memory."""


@dataclass(frozen=True)
class Report:
    revision: str
    files: int
    copied_files: int
    copied_bytes: int
    total_bytes: int
    seconds: float
    manifest: str


def stage(repo_id: str, revision: str, dest_uri: str, *, workers: int = 8, token: Optional[str] = None,
          endpoint: Optional[str] = None, log: Callable[[str], None] = print, progress_s: float = 10.0,
          backoff: Backoff = DEFAULT_BACKOFF, client_factory: Any = None,
          chunk_bytes: int = CHUNK_BYTES) -> Report:
    """Make `dest_uri` hold a verified copy of `repo_id` at commit `revision`; raise StagingError otherwise."""
    if not COMMIT.match(revision):
        raise StagingError(f"--revision {revision!r}: a full 40-character commit hash (branches and tags move)")
    if workers < 1:
        raise StagingError(f"--workers {workers}: at least 1")
    started = time.monotonic()
    dest = Destination.parse(dest_uri)
    bucket = Bucket(dest, client_factory, chunk_bytes)
    objects = bucket.objects()
    manifest = bucket.read_manifest(objects)
    if _complete(manifest, objects, dest, repo_id, revision):
        total = sum(f["size"] for f in manifest["files"])
        log(f"already staged: {dest.uri} holds a verified copy of {repo_id}@{revision} "
            f"({len(manifest['files'])} files, {human_bytes(total)}); 0 bytes transferred")
        return Report(revision, len(manifest["files"]), 0, 0, total, time.monotonic() - started,
                      dest.uri + MANIFEST)

    hub = Hub(repo_id, token=token, endpoint=endpoint, backoff=backoff)
    commit, files = hub.files(revision)
    if commit != revision:
        raise StagingError(f"the Hub resolved {revision} to {commit}; pass the commit itself")
    bucket.check_writable()
    todo = [f for f in files if not _staged(objects.get(dest.name(f.path)), f)]
    todo.sort(key=lambda f: -f.size)  # largest first: the tail of the run is many small files in parallel
    need = sum(f.size for f in todo)
    log(f"staging {repo_id}@{revision} into {dest.uri}: {len(todo)} of {len(files)} files to copy "
        f"({human_bytes(need)} of {human_bytes(sum(f.size for f in files))}), {workers} workers")
    sha256 = {f.path: f.lfs_sha256 or (objects[dest.name(f.path)].metadata or {}).get("sha256", "")
              for f in files if f not in todo}
    cancelled = threading.Event()
    with Progress(need, len(todo), log, progress_s) as progress:
        copy = _Copier(hub, bucket, commit, cancelled, progress)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stage") as pool:
            futures = {pool.submit(copy, f): f for f in todo}
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in done if f.exception() is not None]
            if failed:
                # Files not started are left for the rerun; those in flight finish, so their bytes count.
                for future in futures:
                    future.cancel()
                wait(futures)
                raise failed[0].exception()
            sha256.update({futures[f].path: f.result() for f in done})
        log(progress.line())
    _write_manifest(bucket, dest, repo_id, commit, files, sha256)
    seconds = time.monotonic() - started
    log(f"staged: {dest.uri} holds a verified copy of {repo_id}@{commit}; {human_bytes(need)} transferred in "
        f"{human_seconds(seconds)} ({human_bytes(need / max(seconds, 1e-6))}/s); manifest {dest.uri}{MANIFEST}")
    return Report(commit, len(files), len(todo), need, sum(f.size for f in files), seconds, dest.uri + MANIFEST)


def _staged(blob: Any, file: HubFile) -> bool:
    return (blob is not None and blob.size == file.size
            and (blob.metadata or {}).get("hub-oid") == file.hub_oid != "")


def _complete(manifest: Optional[dict[str, Any]], objects: dict[str, Any], dest: Destination, repo_id: str,
              revision: str) -> bool:
    if not manifest or manifest.get("repoId") != repo_id or manifest.get("revision") != revision:
        return False
    for entry in manifest.get("files", []):
        blob = objects.get(dest.name(entry["path"]))
        if blob is None or blob.size != entry["size"] or (blob.metadata or {}).get("hub-oid") != entry["hubOid"]:
            return False
    return bool(manifest.get("files"))


class _Copier:
    """Copies one file; returns the SHA-256 of the bytes written."""

    def __init__(self, hub: Hub, bucket: Bucket, commit: str, cancelled: threading.Event, progress: Progress):
        self.hub, self.bucket, self.commit, self.cancelled, self.progress = hub, bucket, commit, cancelled, progress

    def __call__(self, file: HubFile) -> str:
        name = self.bucket.dest.name(file.path)
        stream = self.hub.open(self.commit, file, self.cancelled, self.progress.add_bytes)
        try:
            if file.lfs_sha256 is None:
                if file.size > INLINE_LIMIT:
                    raise StagingError(f"{file.path}: {file.size} bytes stored outside LFS; the copier reads such "
                                       f"files whole and takes at most {INLINE_LIMIT} bytes")
                data = stream.read()
                digest = hashlib.sha256(data).hexdigest()
                self.bucket.upload_bytes(name, data, metadata(file.hub_oid, digest, self.commit),
                                         "application/octet-stream")
            else:
                digest = file.lfs_sha256
                self.bucket.upload(name, stream, file.size, metadata(file.hub_oid, digest, self.commit))
        finally:
            stream.close()
        self.progress.file_done()
        return digest


def _write_manifest(bucket: Bucket, dest: Destination, repo_id: str, commit: str, files: list[HubFile],
                    sha256: dict[str, str]) -> None:
    document = {
        "repoId": repo_id,
        "revision": commit,
        "finishedAt": datetime.now(UTC).isoformat(timespec="seconds"),
        "totalBytes": sum(f.size for f in files),
        "files": [{"path": f.path, "size": f.size, "sha256": sha256[f.path], "hubOid": f.hub_oid}
                  for f in sorted(files, key=lambda f: f.path)],
    }
    bucket.upload_bytes(dest.name(MANIFEST), json.dumps(document, indent=1).encode(),
                        {"hub-revision": commit}, "application/json")

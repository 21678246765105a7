"""Orchestration: the Hub's file list for the commit, this copier's share of it, leased parallel copies (several
copiers, pods or Jobs, may work on one folder at once), then the manifest.

Proof is the Hub's hash over the stored bytes, held in this process only: a file of this copier's share counts
as staged only when this process either streamed it from the Hub (SHA-256 checked against the Hub's) into the
object's current generation, or read that generation back from Cloud Storage and found the Hub's SHA-256 (LFS)
or git blob id. Nothing in the bucket is trusted as proof, so no identity that can write the bucket can forge
it: records, manifests and object metadata are hints for people and for the other copiers' waits. A folder
already staged costs a re-read of the share (no download from the Hub); a first copy costs no re-read.

A folder is complete when every file the Hub lists for the commit is proven by the copier whose share it is
and the folder holds nothing else. Objects that are not files of the commit are deleted when a copier wrote
them (a folder reused for another commit, an old manifest) and refused otherwise (never delete what the
copier did not write). Every run asks the Hub for the list (one API call).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import google_crc32c

from . import StagingError
from .bucket import CHUNK_BYTES, Bucket, Destination, metadata, twin_key, unsafe_reason, written_by_copier
from .hub import COMMIT, Backoff, Clock, Hub, HubFile
from .ledger import Busy, Lease, Ledger, proven
from .progress import Progress, human_bytes, human_seconds

DEFAULT_BACKOFF = Backoff()
DEFAULT_LEASE = Lease()
INLINE_LIMIT = 32 << 20
"""Files stored in git itself (not LFS) are read whole, hashed, then uploaded with their SHA-256 in the
object's metadata; larger non-LFS files are refused rather than held in memory."""
ROUNDS = 3
"""Re-checks of the whole folder after the copy (a lease lost to a takeover can leave a file to redo)."""


@dataclass(frozen=True)
class Report:
    revision: str
    files: int
    copied_files: int
    copied_bytes: int
    total_bytes: int
    seconds: float
    manifest: str
    read_back: int = 0
    """Files of this copier's share proven by reading the stored bytes back (not copied by this run)."""


def stage(repo_id: str, revision: str, dest_uri: str, *, workers: int = 8, token: Optional[str] = None,
          endpoint: Optional[str] = None, log: Callable[[str], None] = print, progress_s: float = 10.0,
          backoff: Backoff = DEFAULT_BACKOFF, lease: Lease = DEFAULT_LEASE, client_factory: Any = None,
          chunk_bytes: int = CHUNK_BYTES, shard: tuple[int, int] = (0, 1)) -> Report:
    """Make `dest_uri` hold exactly the verified files of `repo_id` at commit `revision`; raise StagingError
    otherwise. `shard` (index, count) only picks where in the file list this copier starts: leases share the
    work, so any number of copiers may run on one folder."""
    if not COMMIT.match(revision):
        raise StagingError(f"--revision {revision!r}: a full 40-character commit hash (branches and tags move)")
    if workers < 1:
        raise StagingError(f"--workers {workers}: at least 1")
    started = time.monotonic()
    if backoff.log is None:
        backoff = dataclasses.replace(backoff, log=log)  # rate-limit waits are shown where the user waits
    dest = Destination.parse(dest_uri)
    hub = Hub(repo_id, token=token, endpoint=endpoint, backoff=backoff)
    commit, files = hub.files(revision)
    if commit != revision:
        raise StagingError(f"the Hub resolved {revision} to {commit}; pass the commit itself")
    check_names(files, dest, f"{repo_id}@{commit}")
    bucket = Bucket(dest, client_factory, chunk_bytes)
    ledger = Ledger(bucket, commit, backoff.clock, lease)
    total = sum(f.size for f in files)
    mine = share(files, shard)

    folder, sidecar = bucket.list(dest.prefix), bucket.list(dest.sidecar)
    stale = _stale(folder, files, dest, f"{repo_id}@{commit}")
    bucket.check_writable()
    manifest = sidecar.get(ledger.manifest_name)
    if manifest is not None and (stale or _unrecorded(files, folder, ledger.records(sidecar), dest, commit)):
        ledger.drop_manifest()  # the folder changes: no summary until done
    for blob in stale:
        bucket.delete(blob.name, blob.generation)
    names = {f.path for f in files}
    for path, record in ledger.records(sidecar).items():
        if path not in names:
            bucket.delete(record.name, record.generation)
    if stale:
        log(f"cleared {len(stale)} objects that are not files of {repo_id}@{commit} (left by an earlier copy)")

    proofs: dict[str, int] = {}
    copied: list[HubFile] = []
    todo = list(mine)
    whose = f"share {shard[0] + 1} of {shard[1]}: " if shard[1] > 1 else ""
    with ledger:
        for _ in range(ROUNDS):
            todo.sort(key=lambda f: -f.size)  # largest first: the tail of the run is many small files at once
            need = sum(f.size for f in todo)
            log(f"staging {repo_id}@{commit} into {dest.uri}: {whose}{len(todo)} of {len(files)} files to prove "
                f"({human_bytes(need)} of {human_bytes(total)}), {workers} workers; a stored file is read back and "
                "checked against the Hub's hash, any other is copied from the Hub")
            with Progress(need, len(todo), log, progress_s) as progress:
                done = _Workers(hub, bucket, ledger, commit, progress, backoff.clock, lease, proofs).run(todo, workers)
                log(progress.line())
            copied.extend(done)
            folder = bucket.list(dest.prefix)
            todo = [f for f in mine if _generation(folder.get(dest.name(f.path))) != proofs.get(f.path)]
            if not todo:
                break
        else:
            raise StagingError(f"{len(todo)} files of {repo_id}@{commit} are still not proven in {dest.uri} after "
                               f"{ROUNDS} rounds (first: {todo[0].path}); is another copier writing other bytes "
                               "into the folder?")
    sidecar = bucket.list(dest.sidecar)
    if not _unrecorded(files, folder, ledger.records(sidecar), dest, commit):
        ledger.write_manifest(repo_id, files, sidecar)  # a summary; the last copier of the folder writes it
    seconds = time.monotonic() - started
    copied_bytes = sum(f.size for f in copied)
    mine_bytes = sum(f.size for f in mine)
    read_back = len(mine) - len({f.path for f in copied})
    if not copied:
        log(f"already staged: {dest.uri} holds exactly the files of {repo_id}@{commit} ({whose}{len(mine)} files, "
            f"{human_bytes(mine_bytes)}): every byte read back from Cloud Storage in {human_seconds(seconds)} matches "
            "the Hub's SHA-256 or git blob id; 0 bytes transferred")
        return Report(commit, len(files), 0, 0, total, seconds, _uri(dest, ledger.manifest_name), read_back)
    via = hub.transfers
    log(f"staged: {dest.uri} holds exactly the verified files of {repo_id}@{commit} ({whose}{len(mine)} files, "
        f"{read_back} of them read back and checked); {human_bytes(copied_bytes)} transferred by this copier in "
        f"{human_seconds(seconds)} ({human_bytes(copied_bytes / max(seconds, 1e-6))}/s); "
        f"files read through Xet {via['xet']} (fell back to HTTP {via['xet_fell_back']}), over HTTP {via['http']}; "
        f"manifest {_uri(dest, ledger.manifest_name)}")
    return Report(commit, len(files), len(copied), copied_bytes, total, seconds, _uri(dest, ledger.manifest_name),
                  read_back)


def share(files: list[HubFile], shard: tuple[int, int]) -> list[HubFile]:
    """The files copier `index` of `count` proves: largest first, each onto the share with the fewest bytes so
    far, so the shares are balanced and every copier computes the same split."""
    index, count = shard
    loads, shares = [0] * max(count, 1), [[] for _ in range(max(count, 1))]
    for file in sorted(files, key=lambda f: (-f.size, f.path)):
        least = min(range(len(loads)), key=lambda b: (loads[b], b))
        shares[least].append(file)
        loads[least] += file.size
    return shares[index]


def _generation(blob: Any) -> Optional[int]:
    return None if blob is None else blob.generation


def check_names(files: list[HubFile], dest: Destination, where: str) -> None:
    """Refuse, before anything is written, file names that cannot be objects or files in the volume."""
    paths = {f.path for f in files}
    seen: dict[str, str] = {}
    for file in sorted(files, key=lambda f: f.path):
        reason = unsafe_reason(file.path, dest)
        twin = seen.setdefault(twin_key(file.path), file.path)
        if reason is None and twin != file.path:
            reason = f"the same name as {ascii(twin)} under Unicode normalisation or case"
        if reason is None and any("/".join(file.path.split("/")[:i]) in paths
                                  for i in range(1, file.path.count("/") + 1)):
            reason = "a folder with the name of another file"
        if reason is not None:
            raise StagingError(f"the Hub lists {ascii(file.path)} in {where}: not a safe object name ({reason}); "
                               "nothing was copied")


def _uri(dest: Destination, name: str) -> str:
    return f"gs://{dest.bucket}/{name}"


def _stale(folder: dict[str, Any], files: list[HubFile], dest: Destination, where: str) -> list[Any]:
    wanted = {dest.name(f.path) for f in files}
    stale = [blob for name, blob in sorted(folder.items()) if name not in wanted]
    foreign = [blob for blob in stale if not written_by_copier(blob)]
    if foreign:
        raise StagingError(f"{dest.uri} holds {len(foreign)} objects that are not files of {where} and were not "
                           f"written by the copier (first: {foreign[0].name}); delete them or stage into an empty "
                           "folder")
    return stale


def _unrecorded(files: list[HubFile], folder: dict[str, Any], records: dict[str, Any], dest: Destination,
                revision: str) -> list[HubFile]:
    """Files without a record matching their object: a hint only (records are written by any writer)."""
    return [f for f in files if not proven(folder.get(dest.name(f.path)), records.get(f.path), f, revision)]


class _Workers:
    """`workers` threads take files from one queue. A file another copier holds waits (Lease.poll_s) and is
    asked about again, until its record appears or its lease expires and this copier takes it over."""

    def __init__(self, hub: Hub, bucket: Bucket, ledger: Ledger, commit: str, progress: Progress, clock: Clock,
                 lease: Lease, proofs: dict[str, int]):
        self.hub, self.bucket, self.ledger, self.commit = hub, bucket, ledger, commit
        self.proofs = proofs
        """path -> the generation this process proved (copied, or read back and hashed)."""
        self.progress, self.clock, self.lease = progress, clock, lease
        self.pending: deque[tuple[HubFile, Optional[Busy]]] = deque()
        self.waiting: dict[str, tuple[HubFile, Busy, float]] = {}
        self.active = 0
        self.copied: list[HubFile] = []
        self.error: Optional[BaseException] = None
        self.cancelled = threading.Event()
        """Stops the streams in flight (never set by a failure: files in flight finish, so their bytes count)."""
        self.stopping = threading.Event()
        """Set by the first failure: no new file is started."""
        self.cond = threading.Condition()

    def run(self, files: list[HubFile], workers: int) -> list[HubFile]:
        self.pending.extend((f, None) for f in files)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stage") as pool:
            for _ in range(min(workers, len(files))):
                pool.submit(self._loop)
        if self.error is not None:
            raise self.error
        return self.copied

    def _take(self) -> Optional[tuple[HubFile, Optional[Busy]]]:
        with self.cond:
            while not self.stopping.is_set():
                if self.pending:
                    self.active += 1
                    return self.pending.popleft()
                if self.waiting:
                    path = min(self.waiting, key=lambda p: self.waiting[p][2])
                    file, busy, due = self.waiting[path]
                    if due <= self.clock.now():
                        del self.waiting[path]
                        self.active += 1
                        return file, busy
                    self.clock.wait(self.cond, due - self.clock.now())
                    continue
                if self.active == 0:
                    return None
                self.clock.wait(self.cond, self.lease.poll_s)
            return None

    def _finish(self, file: HubFile, busy: Optional[Busy]) -> None:
        with self.cond:
            self.active -= 1
            if busy is not None:
                self.waiting[file.path] = (file, busy, self.clock.now() + self.lease.poll_s)
            self.cond.notify_all()

    def _loop(self) -> None:
        while (item := self._take()) is not None:
            file, seen = item
            busy = None
            try:
                busy = self._attempt(file, seen)
            except BaseException as err:  # noqa: BLE001 - the first failure stops the run; run() raises it
                with self.cond:
                    self.error = self.error or err
                self.stopping.set()
            finally:
                self._finish(file, busy)

    def _attempt(self, file: HubFile, seen: Optional[Busy]) -> Optional[Busy]:
        """None when this process proved the file (read back, or copied); Busy while another copier holds it."""
        claim = self.ledger.claim(file.path, seen)
        if isinstance(claim, Busy):
            return claim
        try:
            stored = self.bucket.get(self.bucket.dest.name(file.path))
            sha256 = self._stored_sha256(file, stored) if stored is not None and stored.size == file.size else None
            if sha256 is not None:
                with self.cond:
                    self.proofs[file.path] = stored.generation
                self.ledger.write_record(file, stored, sha256)  # for the manifest; never trusted
                self.progress.file_done()
                return None
            self.ledger.drop_manifest()
            sha256, obj = self._copy(file)
            if not self.ledger.still_held(file.path):
                return Busy(0, self.clock.now())  # taken over meanwhile: read back once the other copier is done
            self.ledger.write_record(file, obj, sha256)
            with self.cond:
                self.proofs[file.path] = obj.generation
                self.copied.append(file)
            self.progress.file_done()
            return None
        finally:
            self.ledger.release(file.path)

    def _stored_sha256(self, file: HubFile, stored: Any) -> Optional[str]:
        """The SHA-256 of the stored generation's bytes when they hash to what the Hub publishes (LFS SHA-256,
        else the git blob id); None otherwise."""
        if not file.hub_oid:
            return None
        sha256, blob_id = self.bucket.stored_digests(stored.name, stored.generation, file.size,
                                                     file.lfs_sha256 is None, self.progress.add_bytes)
        matches = sha256 == file.lfs_sha256 if file.lfs_sha256 else blob_id == file.blob_id
        return sha256 if matches else None

    def _copy(self, file: HubFile) -> tuple[str, Any]:
        """Stream one file into its object; (SHA-256 of the bytes, the object as Cloud Storage stored it)."""
        name = self.bucket.dest.name(file.path)
        stream = self.hub.open(self.commit, file, self.cancelled, self.progress.add_bytes, self.bucket.chunk_bytes)
        try:
            if file.lfs_sha256 is None:
                if file.size > INLINE_LIMIT:
                    raise StagingError(f"{file.path}: {file.size} bytes stored outside LFS; the copier reads such "
                                       f"files whole and takes at most {INLINE_LIMIT} bytes")
                data = stream.read()
                digest = hashlib.sha256(data).hexdigest()
                obj = self.bucket.upload(name, io.BytesIO(data), len(data),
                                         metadata(file.hub_oid, digest, self.commit), lambda: _crc32c(data))
            else:
                digest = file.lfs_sha256
                obj = self.bucket.upload(name, stream, file.size, metadata(file.hub_oid, digest, self.commit),
                                         lambda: stream.crc32c_b64)
        finally:
            stream.close()
        return digest, obj


def _crc32c(data: bytes) -> str:
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()

"""One claim per benchmark stack, taken, renewed, taken over and released by compare-and-set, with a
generation that fences every writer, and a deadline on it that outlives the driver.

The claim is one object beside the stack's state, `<backend>/.pulumi/bench-claims/<project>/<stack>.json`,
holding the run id, a deadline and a generation (1 when created, +1 on every rewrite):
- Cloud Storage backends (`gs://`): created only if absent (`ifGenerationMatch=0`), rewritten and removed only
  at the object generation the writer read (https://cloud.google.com/storage/docs/request-preconditions), so
  of two drivers exactly one creates it and nobody can rewrite or remove a claim that changed since they read it;
- local backends (`file://`): the same under an exclusive lock on `.<stack>.lock` beside it (held for one read
  and one write, bounded), written to a temporary file and renamed, so a reader never sees a half-written claim.
Pulumi Cloud keeps no objects of ours and its stack tags have no compare-and-set, so a claim there could not be
atomic (two drivers within a second could both claim): `bench` refuses such a backend in one line before touching
anything (tools/live/bench.py). The reaper still reads and clears the stack tag `kimi-k3-1:bench-run` there
(`TagClaims`), which earlier runs set. README.md (Run a benchmark) says so.

The deadline is a lease: the driver renews it while it lives (RENEW_S); a driver that dies (SIGKILL, a lost
runner) stops renewing, and `python -m tools reap` (the teardown workflow, every 15 minutes) takes the claim over
under a run id of its own (so a driver that wakes up late can neither renew nor remove it), destroys the stack
and reports what is left through `leftovers`.

A claim that cannot be read (empty, not JSON, a field missing or of the wrong type, a deadline without a time
zone) is never expired: it may be a live driver's, so the reaper names it and leaves the stack alone, and a
person decides (`release_command`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Optional, Protocol
from urllib.parse import urlparse

CLAIMS_DIR = ".pulumi/bench-claims"
LEASE_S = 1800.0
"""How long a claim stays valid without renewal: a dead driver's stack is reaped within this plus the reaper's
period (15 min), inside the hour."""
RENEW_S = 300.0
LOCK_WAIT_S = 10.0
"""How long a local-backend writer waits for another's read-and-write of the same claim (milliseconds normally)."""
MAX_CLAIM_BYTES = 4096
"""A claim is about 150 bytes; anything far larger is not one of ours (and is not read whole)."""


class ClaimStoreError(Exception):
    """The store could not be asked (lock held too long, backend unreachable): nothing was changed."""


@dataclass(frozen=True)
class Claim:
    run: str
    stack: str
    deadline: str
    """ISO 8601 with a time zone: after it, the reaper takes the claim over and destroys the stack."""
    host: str = ""
    generation: int = 0
    """The fencing token: 1 when created, +1 on every rewrite; a write names the generation it read."""
    version: Any = None
    """The store's token for a conditional rewrite (Cloud Storage object generation, the document's generation
    for a local backend); not serialized."""
    unreadable: str = ""
    """Why the stored claim could not be read ('' when it could): such a claim never expires."""

    def expired(self, now: datetime) -> bool:
        if self.unreadable:
            return False
        return datetime.fromisoformat(self.deadline) <= now

    def document(self) -> bytes:
        return json.dumps({k: v for k, v in asdict(self).items() if k not in ("version", "unreadable")}).encode()

    @classmethod
    def parse(cls, data: bytes, version: Any, stack: str = "") -> Claim:
        """The claim in `data`, or an unreadable claim saying why (never an exception, never 'expired')."""
        why = _invalid(data)
        if why:
            return cls.stranger(stack, why, version)
        doc = json.loads(data)
        return cls(run=doc["run"], stack=doc.get("stack", stack), deadline=doc["deadline"],
                   host=doc.get("host", ""), generation=doc.get("generation", 0), version=version)

    @classmethod
    def stranger(cls, stack: str, why: str, version: Any = None) -> Claim:
        return cls(run="?", stack=stack, deadline="", version=version, unreadable=why)


def _invalid(data: bytes) -> str:
    """Why `data` is not a claim this module wrote ('' if it is one)."""
    if not data.strip():
        return "empty"
    if len(data) > MAX_CLAIM_BYTES:
        return f"{len(data)} bytes, more than a claim's {MAX_CLAIM_BYTES}"
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        return f"not JSON ({type(err).__name__})"
    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__}, not an object"
    run, deadline_, generation = doc.get("run"), doc.get("deadline"), doc.get("generation", 0)
    if not isinstance(run, str) or not run.strip():
        return "no run id"
    for key in ("stack", "host"):
        if key in doc and not isinstance(doc[key], str):
            return f"{key} is not a string"
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        return "generation is not a non-negative integer"
    if not isinstance(deadline_, str):
        return "no deadline"
    try:
        when = datetime.fromisoformat(deadline_)
    except ValueError:
        return f"deadline {deadline_[:40]!r} is not an ISO 8601 time"
    if when.tzinfo is None:
        return f"deadline {deadline_[:40]!r} has no time zone"
    return ""


def deadline(now: datetime, seconds: float = LEASE_S) -> str:
    return (now + timedelta(seconds=seconds)).astimezone(UTC).isoformat(timespec="seconds")


def _same(stored: Optional[Claim], expected: Claim) -> bool:
    """`stored` is exactly the claim the writer read: readable, same run, same generation, same store version."""
    return (stored is not None and not stored.unreadable and not expected.unreadable and expected.version is not None
            and stored.run == expected.run and stored.generation == expected.generation
            and stored.version == expected.version)


class ClaimStore(Protocol):
    def create(self, claim: Claim) -> Optional[Claim]:
        """Take the stack's claim if nobody holds it: None when this call created it, else the holder's claim."""

    def get(self, stack: str) -> Optional[Claim]: ...

    def renew(self, claim: Claim, until: str) -> Optional[Claim]:
        """The claim with a later deadline, only if it is still exactly the one held; None when it was lost."""

    def take_over(self, claim: Claim, run: str, until: str) -> Optional[Claim]:
        """The claim rewritten to `run` (the reaper's), only if it is still exactly `claim`; None otherwise."""

    def remove(self, claim: Claim) -> bool:
        """Remove the claim only if it is still exactly the one held (never another run's, never a newer one)."""

    def all(self) -> list[Claim]: ...

    def where(self, stack: str) -> str:
        """Where the claim lives, for messages (a URL or a path)."""

    def release_command(self, stack: str) -> str:
        """What a person runs to remove a claim whose run is over."""

    @property
    def atomic(self) -> bool: ...


class _Rewrites:
    """renew and take_over as one conditional rewrite, `_replace(expected, new)`, of the store."""

    def _replace(self, expected: Claim, new: Claim) -> Optional[Claim]:
        raise NotImplementedError

    def renew(self, claim: Claim, until: str) -> Optional[Claim]:
        return self._replace(claim, replace(claim, deadline=until, generation=claim.generation + 1))

    def take_over(self, claim: Claim, run: str, until: str) -> Optional[Claim]:
        return self._replace(claim, replace(claim, run=run, deadline=until, generation=claim.generation + 1,
                                            host=os.uname().nodename))


class FileClaims(_Rewrites):
    """Claims of a local (`file://`) backend: every read-compare-write under an exclusive lock file."""

    atomic = True

    def __init__(self, root: Path, project: str, lock_wait: float = LOCK_WAIT_S):
        self.folder = root / CLAIMS_DIR / project
        self.lock_wait = lock_wait

    def _path(self, stack: str) -> Path:
        return self.folder / f"{stack}.json"

    def where(self, stack: str) -> str:
        return str(self._path(stack))

    def release_command(self, stack: str) -> str:
        return f"rm {self._path(stack)}"

    @contextlib.contextmanager
    def _locked(self, stack: str) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / f".{stack}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            give_up = time.monotonic() + self.lock_wait
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= give_up:
                        raise ClaimStoreError(f"{self.folder / f'.{stack}.lock'} was held for more than "
                                              f"{self.lock_wait:g} s; nothing changed") from None
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _write(self, claim: Claim) -> None:
        temporary = self.folder / f".{claim.stack}.{os.getpid()}.tmp"
        with open(temporary, "wb") as handle:
            handle.write(claim.document())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self._path(claim.stack))

    def create(self, claim: Claim) -> Optional[Claim]:
        with self._locked(claim.stack):
            held = self.get(claim.stack)
            if held is not None:
                return held
            self._write(replace(claim, generation=1))
        return None

    def get(self, stack: str) -> Optional[Claim]:
        path = self._path(stack)
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_CLAIM_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as err:
            return Claim.stranger(stack, f"not readable ({err.strerror or type(err).__name__})")
        claim = Claim.parse(data, None, stack)
        return claim if claim.unreadable else replace(claim, version=claim.generation)

    def _replace(self, expected: Claim, new: Claim) -> Optional[Claim]:
        with self._locked(expected.stack):
            if not _same(self.get(expected.stack), expected):
                return None
            self._write(new)
        return replace(new, version=new.generation)

    def remove(self, claim: Claim) -> bool:
        with self._locked(claim.stack):
            if not _same(self.get(claim.stack), claim):
                return False
            self._path(claim.stack).unlink()
        return True

    def all(self) -> list[Claim]:
        found = [self.get(path.stem) for path in sorted(self.folder.glob("*.json"))]
        return [claim for claim in found if claim is not None]


class GcsClaims(_Rewrites):
    """Claims of a Cloud Storage (`gs://`) backend: object-generation preconditions."""

    atomic = True
    READ_ATTEMPTS = 3

    def __init__(self, bucket: str, prefix: str, project: str, client_factory: Callable[[], Any] | None = None):
        self.bucket_name = bucket
        self.prefix = f"{prefix.strip('/') + '/' if prefix.strip('/') else ''}{CLAIMS_DIR}/{project}/"
        self._factory = client_factory
        self._bucket: Any = None

    @property
    def bucket(self) -> Any:
        if self._bucket is None:
            from google.cloud import storage  # noqa: PLC0415 - only for gs:// backends

            self._bucket = (self._factory or storage.Client)().bucket(self.bucket_name)
        return self._bucket

    def where(self, stack: str) -> str:
        return f"gs://{self.bucket_name}/{self.prefix}{stack}.json"

    def release_command(self, stack: str) -> str:
        return f"gcloud storage rm {self.where(stack)}"

    def create(self, claim: Claim) -> Optional[Claim]:
        from google.api_core import exceptions  # noqa: PLC0415

        try:
            self.bucket.blob(f"{self.prefix}{claim.stack}.json").upload_from_string(
                replace(claim, generation=1).document(), content_type="application/json", if_generation_match=0)
        except exceptions.PreconditionFailed:
            return self.get(claim.stack) or Claim.stranger(claim.stack, "removed while being read")
        return None

    def get(self, stack: str) -> Optional[Claim]:
        from google.api_core import exceptions  # noqa: PLC0415

        for _ in range(self.READ_ATTEMPTS):  # rewritten between the metadata and the read: read again
            blob = self.bucket.get_blob(f"{self.prefix}{stack}.json")
            if blob is None:
                return None
            if (blob.size or 0) > MAX_CLAIM_BYTES:
                return Claim.stranger(stack, f"{blob.size} bytes, more than a claim's {MAX_CLAIM_BYTES}",
                                      blob.generation)
            try:
                data = blob.download_as_bytes(if_generation_match=blob.generation)
            except exceptions.PreconditionFailed:
                continue
            except exceptions.NotFound:
                return None
            return Claim.parse(data, blob.generation, stack)
        return Claim.stranger(stack, f"rewritten during each of {self.READ_ATTEMPTS} reads")

    def _replace(self, expected: Claim, new: Claim) -> Optional[Claim]:
        from google.api_core import exceptions  # noqa: PLC0415

        if not _same(self.get(expected.stack), expected):  # then the write is conditional on what was read
            return None
        blob = self.bucket.blob(f"{self.prefix}{expected.stack}.json")
        try:
            blob.upload_from_string(new.document(), content_type="application/json",
                                    if_generation_match=expected.version)
        except exceptions.PreconditionFailed:
            return None
        return replace(new, version=blob.generation)

    def remove(self, claim: Claim) -> bool:
        from google.api_core import exceptions  # noqa: PLC0415

        if not _same(self.get(claim.stack), claim):
            return False
        try:
            self.bucket.blob(f"{self.prefix}{claim.stack}.json").delete(if_generation_match=claim.version)
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            return False
        return True

    def all(self) -> list[Claim]:
        names = [b.name for b in self.bucket.client.list_blobs(self.bucket, prefix=self.prefix)]
        found = [self.get(name[len(self.prefix):-len(".json")]) for name in names if name.endswith(".json")]
        return [claim for claim in found if claim is not None]


def store_for(backend_url: Optional[str], project: str) -> Optional[ClaimStore]:
    """The claim store of a DIY backend URL (`gs://`, `file://`); None for Pulumi Cloud or an unknown scheme."""
    if not backend_url:
        return None
    url = urlparse(backend_url)
    if url.scheme == "gs":
        return GcsClaims(url.netloc, url.path, project)
    if url.scheme == "file":
        path = backend_url[len("file://"):]
        return FileClaims(Path(os.path.expanduser(path or "~")), project)
    return None


class TagClaims(_Rewrites):
    """Pulumi Cloud: the stack tags `<project>:bench-run` and `<project>:bench-deadline`, set then read back
    (not atomic: the Pulumi Cloud API has no conditional tag update)."""

    atomic = False

    def __init__(self, get_tag: Callable[[str], Optional[str]], set_tag: Callable[[str, Optional[str]], None],
                 stack: str, project: str, work_dir: str = "."):
        self.get_tag, self.set_tag, self.stack = get_tag, set_tag, stack
        self.run_key, self.deadline_key = f"{project}:bench-run", f"{project}:bench-deadline"
        self.work_dir = work_dir

    def where(self, stack: str) -> str:
        return f"stack tag {self.run_key}"

    def release_command(self, stack: str) -> str:
        return f"pulumi stack tag rm {self.run_key} --stack {stack} --cwd {self.work_dir}"

    def create(self, claim: Claim) -> Optional[Claim]:
        held = self.get(claim.stack)
        if held is not None:
            return held
        self.set_tag(self.deadline_key, claim.deadline)
        self.set_tag(self.run_key, claim.run)
        now = self.get(claim.stack)
        return None if now is None or now.run == claim.run else now

    def get(self, stack: str) -> Optional[Claim]:
        run = self.get_tag(self.run_key)
        if not run:
            return None
        until = self.get_tag(self.deadline_key) or "9999-12-31T00:00:00+00:00"
        claim = Claim.parse(json.dumps({"run": run, "stack": stack, "deadline": until}).encode(), run, stack)
        return replace(claim, version=(run, until)) if not claim.unreadable else claim

    def _replace(self, expected: Claim, new: Claim) -> Optional[Claim]:
        if not _same(self.get(expected.stack), expected):
            return None
        self.set_tag(self.deadline_key, new.deadline)
        if new.run != expected.run:
            self.set_tag(self.run_key, new.run)
        return replace(new, generation=expected.generation, version=(new.run, new.deadline))

    def remove(self, claim: Claim) -> bool:
        if not _same(self.get(claim.stack), claim):
            return False
        self.set_tag(self.run_key, None)
        self.set_tag(self.deadline_key, None)
        return True

    def all(self) -> list[Claim]:
        claim = self.get(self.stack)
        return [claim] if claim is not None else []

"""One claim per benchmark stack, taken with a compare-and-set the state backend itself guarantees, and a
deadline on it that outlives the driver.

The claim is one object beside the stack's state, `<backend>/.pulumi/bench-claims/<project>/<stack>.json`,
holding the run id and a deadline:
- Cloud Storage backends (`gs://`): created only if absent (`ifGenerationMatch=0`), renewed and removed only at
  the generation the holder wrote (https://cloud.google.com/storage/docs/request-preconditions), so of two
  drivers exactly one creates it and neither can remove or renew the other's;
- local backends (`file://`): the same with `O_CREAT | O_EXCL` and an atomic rename.
Pulumi Cloud keeps no objects of ours and its stack tags have no compare-and-set, so there the claim falls back
to the stack tag `kimi-k3-1:bench-run`, set then read back: not atomic (two drivers within a second may both
claim; Pulumi's update lock still lets only one `up` run). README.md (Run a benchmark) says so.

The deadline is a lease: the driver renews it while it lives (RENEW_S); a driver that dies (SIGKILL, a lost
runner) stops renewing, and `python -m tools reap` (the teardown workflow, every 15 minutes) destroys any
stack whose claim is past its deadline, listed anywhere or not, and reports what is left through `leftovers`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Optional, Protocol
from urllib.parse import urlparse

CLAIMS_DIR = ".pulumi/bench-claims"
LEASE_S = 1800.0
"""How long a claim stays valid without renewal: a dead driver's stack is reaped within this plus the reaper's
period (15 min), inside the hour."""
RENEW_S = 300.0


@dataclass(frozen=True)
class Claim:
    run: str
    stack: str
    deadline: str
    """ISO 8601 UTC: after it, the reaper destroys the stack."""
    host: str = ""
    version: Any = None
    """The store's token for a conditional rewrite (Cloud Storage generation, file mtime_ns); not serialized."""

    def expired(self, now: datetime) -> bool:
        return datetime.fromisoformat(self.deadline) <= now

    def document(self) -> bytes:
        return json.dumps({k: v for k, v in asdict(self).items() if k != "version"}).encode()

    @classmethod
    def parse(cls, data: bytes, version: Any) -> Claim:
        doc = json.loads(data)
        return cls(run=str(doc.get("run", "")), stack=str(doc.get("stack", "")),
                   deadline=str(doc.get("deadline", "1970-01-01T00:00:00+00:00")), host=str(doc.get("host", "")),
                   version=version)


def deadline(now: datetime, seconds: float = LEASE_S) -> str:
    return (now + timedelta(seconds=seconds)).astimezone(UTC).isoformat(timespec="seconds")


class ClaimStore(Protocol):
    def create(self, claim: Claim) -> Optional[Claim]:
        """Take the stack's claim if nobody holds it: None when this call created it, else the holder's claim."""

    def get(self, stack: str) -> Optional[Claim]: ...

    def renew(self, claim: Claim, until: str) -> Optional[Claim]:
        """The claim with a later deadline, only if it is still exactly the one held; None when it was lost."""

    def remove(self, claim: Claim) -> bool:
        """Remove the claim only if it is still exactly the one held (never another run's)."""

    def all(self) -> list[Claim]: ...

    def where(self, stack: str) -> str:
        """Where the claim lives, for messages (a URL or a path)."""

    def release_command(self, stack: str) -> str:
        """What a person runs to remove a claim whose run is over."""

    @property
    def atomic(self) -> bool: ...


class FileClaims:
    """Claims of a local (`file://`) backend: exclusive create, rename to renew."""

    atomic = True

    def __init__(self, root: Path, project: str):
        self.folder = root / CLAIMS_DIR / project

    def _path(self, stack: str) -> Path:
        return self.folder / f"{stack}.json"

    def where(self, stack: str) -> str:
        return str(self._path(stack))

    def release_command(self, stack: str) -> str:
        return f"rm {self._path(stack)}"

    def create(self, claim: Claim) -> Optional[Claim]:
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self._path(claim.stack), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return self.get(claim.stack) or Claim("?", claim.stack, claim.deadline)
        with os.fdopen(fd, "wb") as handle:
            handle.write(claim.document())
        return None

    def get(self, stack: str) -> Optional[Claim]:
        path = self._path(stack)
        try:
            return Claim.parse(path.read_bytes(), path.stat().st_ino)
        except FileNotFoundError:
            return None
        except ValueError:
            return Claim("?", stack, "1970-01-01T00:00:00+00:00", version=path.stat().st_ino)

    def renew(self, claim: Claim, until: str) -> Optional[Claim]:
        current = self.get(claim.stack)
        if current is None or current.run != claim.run or current.version != claim.version:
            return None
        renewed = Claim(claim.run, claim.stack, until, claim.host)
        temporary = self._path(claim.stack).with_suffix(f".{os.getpid()}.tmp")
        temporary.write_bytes(renewed.document())
        os.replace(temporary, self._path(claim.stack))
        return self.get(claim.stack)

    def remove(self, claim: Claim) -> bool:
        current = self.get(claim.stack)
        if current is None or current.run != claim.run:
            return False
        self._path(claim.stack).unlink(missing_ok=True)
        return True

    def all(self) -> list[Claim]:
        found = [self.get(path.stem) for path in sorted(self.folder.glob("*.json"))]
        return [claim for claim in found if claim is not None]


class GcsClaims:
    """Claims of a Cloud Storage (`gs://`) backend: generation preconditions."""

    atomic = True

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
                claim.document(), content_type="application/json", if_generation_match=0)
        except exceptions.PreconditionFailed:
            return self.get(claim.stack) or Claim("?", claim.stack, claim.deadline)
        return None

    def get(self, stack: str) -> Optional[Claim]:
        blob = self.bucket.get_blob(f"{self.prefix}{stack}.json")
        if blob is None:
            return None
        try:
            return Claim.parse(blob.download_as_bytes(if_generation_match=blob.generation), blob.generation)
        except Exception:  # noqa: BLE001 - replaced meanwhile, or not a claim: read it as a stranger's
            return Claim("?", stack, "1970-01-01T00:00:00+00:00", version=blob.generation)

    def renew(self, claim: Claim, until: str) -> Optional[Claim]:
        from google.api_core import exceptions  # noqa: PLC0415

        if not self._holds(claim):
            return None
        renewed = Claim(claim.run, claim.stack, until, claim.host)
        blob = self.bucket.blob(f"{self.prefix}{claim.stack}.json")
        try:
            blob.upload_from_string(renewed.document(), content_type="application/json",
                                    if_generation_match=claim.version)
        except exceptions.PreconditionFailed:
            return None
        return Claim(claim.run, claim.stack, until, claim.host, blob.generation)

    def remove(self, claim: Claim) -> bool:
        from google.api_core import exceptions  # noqa: PLC0415

        if not self._holds(claim):
            return False
        try:
            self.bucket.blob(f"{self.prefix}{claim.stack}.json").delete(if_generation_match=claim.version)
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            return False
        return True

    def _holds(self, claim: Claim) -> bool:
        """The stored claim is this run's, at the generation it holds (the write after is conditional on it)."""
        current = self.get(claim.stack)
        return current is not None and current.run == claim.run and current.version == claim.version

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


class TagClaims:
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
        return Claim(run, stack, self.get_tag(self.deadline_key) or "9999-12-31T00:00:00+00:00", version=run)

    def renew(self, claim: Claim, until: str) -> Optional[Claim]:
        current = self.get(claim.stack)
        if current is None or current.run != claim.run:
            return None
        self.set_tag(self.deadline_key, until)
        return Claim(claim.run, claim.stack, until, claim.host, claim.run)

    def remove(self, claim: Claim) -> bool:
        current = self.get(claim.stack)
        if current is None or current.run != claim.run:
            return False
        self.set_tag(self.run_key, None)
        self.set_tag(self.deadline_key, None)
        return True

    def all(self) -> list[Claim]:
        claim = self.get(self.stack)
        return [claim] if claim is not None else []

"""The weight copier end to end on loopback: the real huggingface_hub and google-cloud-storage clients against
a fake Hub (tests/fakes/fakehub.py) and the real fake-gcs-server (tests/fakes/gcsemulator.py)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import threading
import uuid

import pytest

from tests.conftest import ROOT
from tests.fakes.fakehub import FakeFile, FakeHub, FakeRepo, ScaledClock
from tests.fakes.gcsemulator import GcsEmulator

REPO = "moonshotai/Tiny-K3"
TOKEN = "hf_testTokenWithAccess0000000000000000"
OTHER_TOKEN = "hf_testTokenWithoutAccess000000000000000"
MIB = 1 << 20


@pytest.fixture(scope="module")
def gcs():
    """The emulator, and the clients' environment as the command line sets it for the copier (no background
    bucket-metadata fetch per client: tools/live/stage_weights.py NO_BUCKET_METADATA)."""
    from tools.live.stage_weights import NO_BUCKET_METADATA

    names = ("STORAGE_EMULATOR_HOST", NO_BUCKET_METADATA)
    previous = {name: os.environ.get(name) for name in names}
    with GcsEmulator() as emulator:
        os.environ.update({"STORAGE_EMULATOR_HOST": emulator.url, NO_BUCKET_METADATA: "true"})
        yield emulator
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def hub_env(monkeypatch, tmp_path):
    """No token or Hub settings from the machine running the tests."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


BIG = "model-00001-of-00002.safetensors"


def files(big: bool = False) -> dict[str, FakeFile]:
    """With `big` (the tests about the upload path, Xet streams and resume offsets) the shards are 9 MiB + 12345,
    above google-cloud-storage's 8 MiB multipart limit (blob.py _MAX_MULTIPART_SIZE), so a resumable upload of
    10 chunks of 1 MiB and three 4 MiB xorbs, and 2 MiB. Otherwise 1 MiB + 12345 and 1 MiB (multipart uploads,
    read back in 2 chunks and 1), in the same order of size, so the copier takes the files in the same order:
    the Cloud Storage emulator spends ~0.17 s CPU on each resumable 9 MiB upload (it rehashes the object so far
    on every chunk) and ~5 ms per MiB otherwise."""
    return {
        BIG: FakeFile((9 if big else 1) * MIB + 12345, seed=1),
        "model-00002-of-00002.safetensors": FakeFile((2 if big else 1) * MIB, seed=2),
        "tokenizer.model": FakeFile(300_000, seed=3),                              # small LFS file
        "config.json": FakeFile(2_000, seed=4, lfs=False),                         # stored in git itself
        "nested/chat_template.jinja": FakeFile(700, seed=5, lfs=False),
    }


@functools.cache
def _client(emulator: str):
    from google.cloud import storage

    return storage.Client()


def gcs_client():
    """One client for the tests' own reads and writes: a client made per call cost ~2 ms CPU more each (and a
    background fetch of the bucket's metadata, google-cloud-storage 3.17 `_bucket_metadata_cache.py`)."""
    return _client(os.environ["STORAGE_EMULATOR_HOST"])


def new_bucket(gcs) -> str:
    name = f"b-{uuid.uuid4().hex[:12]}"
    gcs_client().create_bucket(name)
    return name


def objects(bucket: str, prefix: str = "") -> dict:
    return {b.name: b for b in gcs_client().list_blobs(bucket, prefix=prefix)}


def content_sha256(bucket: str, name: str) -> str:
    return hashlib.sha256(gcs_client().bucket(bucket).blob(name).download_as_bytes()).hexdigest()


def sidecar(dest: str) -> str:
    """The copier's own folder beside the revision folder: gs://b/x/ -> x.copier/."""
    return dest.split("/", 3)[3][:-1] + ".copier/"


def run(hub: FakeHub, dest: str, token: str | None = TOKEN, repo: str = REPO, **kwargs):
    from components.weights.copier.copy import stage
    from components.weights.copier.hub import Backoff

    lines: list[str] = []
    kwargs.setdefault("workers", 3)
    kwargs.setdefault("chunk_bytes", MIB)
    kwargs.setdefault("backoff", Backoff(tries=4, base_s=0.01, max_s=0.05, rate_floor_s=0.01))
    report = stage(repo, hub.repos[repo].commit, dest, token=token, endpoint=hub.url, log=lines.append,
                   progress_s=0.05, **kwargs)
    return report, lines


def assert_exactly_the_commit(hub: FakeHub, dest: str, repo: str = REPO) -> None:
    """The folder holds the Hub's file list for the commit and nothing else, each object with the Hub's bytes
    (read back from Cloud Storage and hashed here, not taken from any metadata), and the manifest beside it."""
    bucket, prefix = dest[len("gs://"):].split("/", 1)
    stored = objects(bucket, prefix)
    expected = hub.repos[repo].files
    assert set(stored) == {prefix + path for path in expected}
    for path, file in expected.items():
        assert content_sha256(bucket, prefix + path) == file.sha256, path
    manifest = json.loads(objects(bucket, sidecar(dest))[sidecar(dest) + "manifest.json"].download_as_bytes())
    assert manifest["revision"] == hub.repos[repo].commit and manifest["repoId"] == repo
    assert {(f["path"], f["size"], f["sha256"]) for f in manifest["files"]} == {
        (p, f.size, f.sha256) for p, f in expected.items()}


def assert_not_verified(bucket: str, dest: str) -> None:
    assert sidecar(dest) + "manifest.json" not in objects(bucket, sidecar(dest)), "no manifest, no claim of a copy"


def fake_hub(gated: bool = True, xet: bool = False, big: bool = False, **file_changes) -> FakeHub:
    repo_files = files(big)
    repo_files.update(file_changes)
    return FakeHub({REPO: FakeRepo(repo_files, gated=gated, allowed={TOKEN})}, tokens={TOKEN, OTHER_TOKEN}, xet=xet)


def test_full_copy_is_verified_and_a_rerun_transfers_nothing(gcs):
    bucket = new_bucket(gcs)
    with fake_hub(big=True) as hub:
        commit = hub.repos[REPO].commit
        dest = f"gs://{bucket}/models/tiny/{commit}/"
        report, lines = run(hub, dest)
        expected = hub.repos[REPO].files
        assert report.copied_files == len(expected) and report.copied_bytes == sum(f.size for f in expected.values())
        assert_exactly_the_commit(hub, dest)
        stored = objects(bucket, f"models/tiny/{commit}/")
        for path, file in expected.items():
            blob = stored[f"models/tiny/{commit}/{path}"]
            assert blob.metadata["sha256"] == file.sha256
            assert blob.metadata["hub-oid"] == (file.sha256 if file.lfs else file.blob_sha1)
        assert not objects(bucket, sidecar(dest) + "claims/"), "every lease released"
        assert any(line.startswith("progress: ") and " of " in line and "ETA" in line for line in lines), lines

        served, requests, listings = hub.stats.bytes, len(hub.stats.requests), hub.stats.api_requests
        again, lines = run(hub, dest)
        assert again.copied_bytes == 0 and again.copied_files == 0
        assert hub.stats.bytes == served and len(hub.stats.requests) == requests, "a complete copy downloads nothing"
        assert hub.stats.api_requests == listings + 1, "but it asks the Hub for the commit's file list"
        assert "0 bytes transferred" in lines[-1]


def test_interrupted_run_resumes_with_only_the_missing_files(gcs):
    from components.weights.copier import StagingError

    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        dest = f"gs://{bucket}/m/"
        broken = "model-00002-of-00002.safetensors"
        hub.faults[broken] = ["fail"]
        with pytest.raises(StagingError, match=broken):
            run(hub, dest)
        stored = {name[len("m/"):] for name in objects(bucket, "m/")}
        assert_not_verified(bucket, dest)
        assert broken not in stored and "model-00001-of-00002.safetensors" in stored, "files in flight finish"
        hub.faults.clear()
        before = dict(hub.stats.served)
        report, _ = run(hub, dest)
        missing = {p: f.size for p, f in hub.repos[REPO].files.items() if p not in stored}
        assert report.copied_files == len(missing) and report.copied_bytes == sum(missing.values())
        assert {p: n - before.get(p, 0) for p, n in hub.stats.served.items() if n != before.get(p, 0)} == missing
        assert_exactly_the_commit(hub, dest)


def lfs_sizes(hub: FakeHub) -> dict[str, int]:
    return {p: f.size for p, f in hub.repos[REPO].files.items() if f.lfs}


def test_xet_backed_files_come_through_hf_xet_and_are_verified(gcs):
    """The Hub serves LFS files through Xet: the copier reads them with hf_xet's stream (the real client against a
    loopback CAS), hashes them as it does HTTP bytes, and reads the files stored in git over HTTP."""
    bucket = new_bucket(gcs)
    with fake_hub(xet=True, big=True) as hub:
        dest = f"gs://{bucket}/x/{hub.repos[REPO].commit}/"
        report, lines = run(hub, dest)
        assert_exactly_the_commit(hub, dest)
        assert dict(hub.stats.xet_served) == lfs_sizes(hub), "every LFS byte once, through Xet"
        assert {p for p, _ in hub.stats.requests} == {p for p, f in hub.repos[REPO].files.items() if not f.lfs}
        assert "files read through Xet 3 (fell back to HTTP 0), over HTTP 2" in lines[-1], lines[-1]
        served = dict(hub.stats.xet_served)
        again, _ = run(hub, dest)
        assert again.copied_bytes == 0 and dict(hub.stats.xet_served) == served


def test_a_xet_stream_that_fails_midway_is_opened_again_where_the_bytes_end(gcs, monkeypatch):
    monkeypatch.setenv("HF_XET_CLIENT_RETRY_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("HF_XET_CLIENT_RETRY_BASE_DELAY", "10ms")
    bucket = new_bucket(gcs)
    big = BIG  # three xorbs
    with fake_hub(xet=True, big=True) as hub:
        hub.xet_failing_xorbs = {1: 2}  # the second xorb fails twice: hf_xet gives the stream up
        dest = f"gs://{bucket}/r/"
        report, lines = run(hub, dest)
        assert_exactly_the_commit(hub, dest)
        queries = [r for p, r in hub.stats.xet_reconstructions if p == big]
        starts = [int(r[len("bytes="):].split("-")[0]) for r in queries]
        # when hf_xet reports the failure (before or after it hands over the first xorb's 4 MiB) is its own
        # business; each new stream opens at a byte already received and verified, never past it
        assert len(queries) >= 2 and starts == sorted(starts) and {s % MIB for s in starts} == {0}, queries
        assert starts[-1] <= 4 * MIB
        assert hub.stats.served.get(big, 0) == 0 and "fell back to HTTP 0" in lines[-1], lines[-1]


def test_a_failing_xet_cas_falls_back_to_http_and_the_copy_completes(gcs, monkeypatch):
    monkeypatch.setenv("HF_XET_CLIENT_RETRY_MAX_ATTEMPTS", "1")  # hf_xet's own retries, kept short here
    monkeypatch.setenv("HF_XET_CLIENT_RETRY_BASE_DELAY", "10ms")
    bucket = new_bucket(gcs)
    with fake_hub(xet=True) as hub:
        hub.xet_faults = ["fail"]  # every xorb request answers 500
        dest = f"gs://{bucket}/f/"
        report, lines = run(hub, dest)
        assert_exactly_the_commit(hub, dest)
        assert not hub.stats.xet_served and dict(hub.stats.served) == {
            p: f.size for p, f in hub.repos[REPO].files.items()}
        assert "files read through Xet 3 (fell back to HTTP 3), over HTTP 2" in lines[-1], lines[-1]


def test_corrupted_xet_bytes_fail_the_run_and_write_nothing(gcs):
    from components.weights.copier import IntegrityError

    bucket = new_bucket(gcs)
    with fake_hub(xet=True, big=True) as hub:
        hub.xet_faults = ["corrupt"]  # one flipped byte in the first xorb served
        with pytest.raises(IntegrityError, match=r": SHA-256 of the bytes received is"):
            run(hub, f"gs://{bucket}/c/", workers=1)
    assert not [n for n in objects(bucket, "c/") if n.endswith(".safetensors") or n.endswith(".model")]
    assert_not_verified(bucket, f"gs://{bucket}/c/")


def test_429s_5xx_and_cut_connections_resume_mid_file(gcs):
    bucket = new_bucket(gcs)
    big = BIG
    with fake_hub(big=True) as hub:
        hub.faults[big] = [429, ("cut", 5 * MIB + 17), 503, ("cut", 1 * MIB), 500]
        report, _ = run(hub, f"gs://{bucket}/r/", workers=2)
        file = hub.repos[REPO].files[big]
        assert content_sha256(bucket, f"r/{big}") == file.sha256
        # Each cut loses at most the bytes in flight, never the file so far: every retry is a Range request
        # from where the received bytes end, at or after where the previous one began.
        assert file.size <= hub.stats.served[big] < file.size + 2 * (1 << 20)
        requests = [r for p, r in hub.stats.requests if p == big]
        assert len(requests) == 6 and requests[:2] == [None, None]
        offsets = [int(r[len("bytes="):-1]) for r in requests[2:]]
        assert 4 * MIB < offsets[0] <= 5 * MIB + 17 and offsets == sorted(offsets)
        assert offsets[-1] == offsets[-2], "a 5xx does not move the offset"
        assert report.copied_files == len(hub.repos[REPO].files)


def test_a_resume_the_hub_answers_with_the_whole_file_keeps_the_bytes_right(gcs):
    """A server that ignores Range (200, the whole file) on a resume: the copier drops what it already has."""
    bucket = new_bucket(gcs)
    big = BIG
    with fake_hub(big=True) as hub:
        hub.faults[big] = [("cut", 3 * MIB + 5), "ignore-range"]
        report, _ = run(hub, f"gs://{bucket}/i/")
        file = hub.repos[REPO].files[big]
        assert content_sha256(bucket, f"i/{big}") == file.sha256
        assert hub.stats.served[big] == file.size + 3 * MIB + 5
        assert report.copied_files == len(hub.repos[REPO].files)


def test_a_hub_serving_more_bytes_than_it_publishes_fails_and_writes_nothing(gcs):
    from components.weights.copier import IntegrityError

    bucket = new_bucket(gcs)
    path = "model-00002-of-00002.safetensors"
    with fake_hub() as hub:
        hub.faults[path] = ["extra"]
        served = hub.repos[REPO].files[path].size + 14  # b"trailing bytes"
        with pytest.raises(IntegrityError, match=rf"{path}: the Hub serves {served} bytes, it publishes"):
            run(hub, f"gs://{bucket}/m/", workers=1)
    assert f"m/{path}" not in objects(bucket)
    assert_not_verified(bucket, f"gs://{bucket}/m/")


@pytest.mark.parametrize("path", ["model-00002-of-00002.safetensors", "config.json"])
def test_corrupted_bytes_fail_the_run_and_write_nothing(gcs, path):
    from components.weights.copier import IntegrityError

    bucket = new_bucket(gcs)
    original = files()[path]
    corrupt = FakeFile(original.size, seed=original.seed, lfs=original.lfs, corrupt=True)
    with fake_hub(**{path: corrupt}) as hub:
        with pytest.raises(IntegrityError, match=rf"{path}: (SHA-256|git blob id) of the bytes received is"):
            run(hub, f"gs://{bucket}/c/", workers=1)
    assert f"c/{path}" not in objects(bucket)
    assert_not_verified(bucket, f"gs://{bucket}/c/")


def test_a_wrong_object_in_the_folder_is_copied_again(gcs):
    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        gcs_client().bucket(bucket).blob("w/tokenizer.model").upload_from_string(b"not the tokenizer")
        report, _ = run(hub, f"gs://{bucket}/w/")
        assert report.copied_files == len(hub.repos[REPO].files)
        assert_exactly_the_commit(hub, f"gs://{bucket}/w/")


def test_hub_files_named_like_the_copiers_objects_are_just_files(gcs):
    """The manifest, records and leases live beside the revision folder, so no file name can collide with them."""
    bucket = new_bucket(gcs)
    tricky = {".staged.json": FakeFile(120, seed=11, lfs=False), "manifest.json": FakeFile(90, seed=12, lfs=False),
              "done/config.json": FakeFile(80, seed=13, lfs=False), "claims/x": FakeFile(70, seed=14, lfs=False),
              "write-probe": FakeFile(60, seed=15, lfs=False)}
    with fake_hub(**tricky) as hub:
        dest = f"gs://{bucket}/n/{hub.repos[REPO].commit}/"
        run(hub, dest)
        assert_exactly_the_commit(hub, dest)
        again, lines = run(hub, dest)
        assert again.copied_files == 0 and "already staged" in lines[-1]


def test_a_preseeded_partial_manifest_proves_nothing(gcs):
    """An earlier copier's manifest in the folder and a forged one beside it, each naming two files whose objects
    carry the right metadata and bytes: the copy still proves every file the Hub lists (those two by reading their
    bytes back, the rest by copying them), and clears the old manifest."""
    from components.weights.copier.bucket import metadata

    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        commit = hub.repos[REPO].commit
        dest = f"gs://{bucket}/p/{commit}/"
        store = gcs_client().bucket(bucket)
        partial = [(p, f) for p, f in sorted(hub.repos[REPO].files.items())][:2]
        for path, file in partial:
            blob = store.blob(f"p/{commit}/{path}")
            blob.metadata = metadata(file.sha256 if file.lfs else file.blob_sha1, file.sha256, commit)
            blob.upload_from_string(file.data(0, file.size))
        document = json.dumps({"repoId": REPO, "revision": commit, "files": [
            {"path": p, "size": f.size, "sha256": f.sha256, "hubOid": f.sha256} for p, f in partial]}).encode()
        old = store.blob(f"p/{commit}/.staged.json")
        old.metadata = {"hub-revision": commit}
        old.upload_from_string(document)
        store.blob(sidecar(dest) + "manifest.json").upload_from_string(document)
        report, _ = run(hub, dest)
        assert report.copied_files == len(hub.repos[REPO].files) - 2 and report.read_back == 2
        assert_exactly_the_commit(hub, dest)


def test_an_object_with_the_right_metadata_and_other_bytes_is_copied_again(gcs):
    """After a verified copy, an object is replaced by other bytes of the same size with the same metadata:
    its generation and the hashes Cloud Storage computed no longer match the record, so a rerun copies that
    file again, and only that file."""
    bucket = new_bucket(gcs)
    target = "model-00002-of-00002.safetensors"
    with fake_hub() as hub:
        dest = f"gs://{bucket}/o/"
        run(hub, dest)
        store = gcs_client().bucket(bucket)
        original = store.get_blob(f"o/{target}")
        forged = store.blob(f"o/{target}")
        forged.metadata = dict(original.metadata)
        forged.upload_from_string(bytes(original.size))
        assert store.get_blob(f"o/{target}").metadata == original.metadata
        before = dict(hub.stats.served)
        report, _ = run(hub, dest)
        assert report.copied_files == 1 and hub.stats.served[target] - before[target] == original.size
        assert_exactly_the_commit(hub, dest)


def forge(bucket: str, dest: str, path: str, data: bytes, hub: FakeHub) -> None:
    """What any writer of the bucket can do: put other bytes under a file's name with the copier's metadata and
    a record naming exactly the new generation, size, CRC32C and MD5 Cloud Storage reports."""
    from components.weights.copier.bucket import metadata

    commit, file = hub.repos[REPO].commit, hub.repos[REPO].files[path]
    store = gcs_client().bucket(bucket)
    prefix = dest.split("/", 3)[3]
    oid = file.sha256 if file.lfs else file.blob_sha1
    blob = store.blob(prefix + path)
    blob.metadata = metadata(oid, file.sha256, commit)
    blob.upload_from_string(data)
    blob.reload()
    record = store.blob(sidecar(dest) + "done/" + path)
    record.metadata = {"hub-revision": commit, "hub-oid": oid, "sha256": file.sha256, "size": str(blob.size),
                       "generation": str(blob.generation), "crc32c": blob.crc32c, "md5": blob.md5_hash or ""}
    record.upload_from_string(b"", content_type="text/plain")


def assert_copied_from_the_hub(lines: list[str], report, forged: set[str], hub: FakeHub, before: dict) -> None:
    assert not [line for line in lines if "already staged" in line], lines
    assert report.copied_files == len(forged)
    assert {p: n - before.get(p, 0) for p, n in hub.stats.served.items() if n != before.get(p, 0)} == {
        p: hub.repos[REPO].files[p].size for p in forged}, "exactly the forged files came from the Hub again"


def test_a_forged_record_after_a_good_copy_is_not_trusted(gcs):
    bucket = new_bucket(gcs)
    target = "model-00002-of-00002.safetensors"
    with fake_hub() as hub:
        dest = f"gs://{bucket}/fr/{hub.repos[REPO].commit}/"
        run(hub, dest)
        forge(bucket, dest, target, bytes(hub.repos[REPO].files[target].size), hub)
        before = dict(hub.stats.served)
        report, lines = run(hub, dest)
        assert_copied_from_the_hub(lines, report, {target}, hub, before)
        assert report.read_back == len(hub.repos[REPO].files) - 1
        assert_exactly_the_commit(hub, dest)


def test_a_preseeded_folder_with_forged_records_is_copied_from_the_hub(gcs):
    """Zero-filled objects of the right sizes, the copier's metadata, a record for each and a manifest: nobody
    staged this folder, so the first run reads every object back, finds none of the Hub's bytes and copies all."""
    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        dest = f"gs://{bucket}/seed/{hub.repos[REPO].commit}/"
        for path, file in hub.repos[REPO].files.items():
            forge(bucket, dest, path, bytes(file.size), hub)
        gcs_client().bucket(bucket).blob(sidecar(dest) + "manifest.json").upload_from_string(b"{}")
        report, lines = run(hub, dest)
        assert_copied_from_the_hub(lines, report, set(hub.repos[REPO].files), hub, {})
        assert_exactly_the_commit(hub, dest)


def test_a_tampered_staged_config_json_is_copied_again(gcs):
    """The config.json hydration would copy (the geometry the engines start with) is checked from the stored
    bytes against the Hub's git blob id, not from the Hub: a changed layer count is replaced by the Hub's file."""
    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        dest = f"gs://{bucket}/cfg/{hub.repos[REPO].commit}/"
        run(hub, dest)
        size = hub.repos[REPO].files["config.json"].size
        tampered = json.dumps({"num_hidden_layers": 7}).encode().ljust(size)
        forge(bucket, dest, "config.json", tampered, hub)
        before = dict(hub.stats.served)
        report, lines = run(hub, dest)
        assert_copied_from_the_hub(lines, report, {"config.json"}, hub, before)
        stored = gcs_client().bucket(bucket).blob(dest.split("/", 3)[3] + "config.json").download_as_bytes()
        assert stored == hub.repos[REPO].files["config.json"].data(0, size)


def test_a_complete_folder_is_read_back_not_taken_on_trust(gcs):
    """A rerun on a complete folder downloads nothing from the Hub but reads every stored byte back."""
    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        dest = f"gs://{bucket}/rb/"
        run(hub, dest)
        report, lines = run(hub, dest)
        assert report.copied_files == 0 and report.read_back == len(hub.repos[REPO].files)
        assert "every byte read back from Cloud Storage" in lines[-1] and lines[-1].startswith("already staged")
        assert any(line.startswith("progress: ") and "(100.0%)" in line for line in lines), lines


def test_shares_are_balanced_and_cover_every_file_once():
    from components.weights.copier.copy import share
    from components.weights.copier.hub import HubFile

    hub_files = [HubFile(f"f{i}", size, None, "b") for i, size in enumerate([90, 50, 40, 30, 30, 20, 5, 1])]
    shares = [share(hub_files, (i, 3)) for i in range(3)]
    assert sorted(f.path for s in shares for f in s) == sorted(f.path for f in hub_files)
    loads = [sum(f.size for f in s) for s in shares]
    assert max(loads) - min(loads) <= 30, loads
    assert share(hub_files, (0, 1)) == sorted(hub_files, key=lambda f: (-f.size, f.path))


@pytest.mark.parametrize("path,reason", [
    ("../escape.safetensors", r"a '\.' or '\.\.' path segment"),
    ("/etc/cron.d/x", "an absolute path"),
    ("shards//model.safetensors", "an empty path segment"),
    ("bad\nname.json", "a control character"),
    ("a/./b.json", r"a '\.' or '\.\.' path segment"),
    ("config.json/inner", "a folder with the name of another file"),
])
def test_an_unsafe_hub_file_name_is_refused_in_one_line_before_anything_is_written(gcs, path, reason):
    from components.weights.copier import StagingError

    bucket = new_bucket(gcs)
    with fake_hub(**{path: FakeFile(100, seed=9, lfs=False)}) as hub:
        with pytest.raises(StagingError, match=rf"the Hub lists .* not a safe object name \({reason}\); nothing was "
                                               "copied") as failure:
            run(hub, f"gs://{bucket}/u/")
        assert "\n" not in str(failure.value) and not hub.stats.requests
    assert not objects(bucket), "nothing written, not even the write probe"


@pytest.mark.parametrize("names,reason", [
    (["model\u202egpj.safetensors"], "an invisible formatting character (bidi control, zero-width), U+202E"),
    (["config\u200b.json"], "an invisible formatting character (bidi control, zero-width), U+200B"),
    (["tokenizer\ufeff.model"], "U+FEFF"),
    (["chat\u00a0template.jinja"], "a space other than U+0020, U+00A0"),
    (["\uff0e\uff0e/escape.json"], "a character that normalises to '.', '/' or '\\' (a fullwidth or compatibility"),
    (["a\u2024b/x.json"], "a character that normalises to '.'"),
    (["%2e%2e/escape.json"], "a percent-encoded '.', '/' or '\\'"),
    (["shards%2Fmodel.safetensors"], "a percent-encoded"),
    (["caf\u00e9.json", "cafe\u0301.json"], "the same name as 'cafe\\u0301.json' under Unicode normalisation or case"),
    (["Config.json"], "the same name as 'Config.json' under Unicode normalisation or case"),
])
def test_names_that_spoof_or_collide_are_refused_in_one_line(gcs, names, reason):
    """The rule (docs/weights.md): no invisible or bidi characters, no compatibility forms of '.', '/' or '\\',
    no percent-encoded separators, and no two names equal under NFC and case folding (`config.json` is in the
    repository already)."""
    from components.weights.copier import StagingError

    bucket = new_bucket(gcs)
    with fake_hub(**{name: FakeFile(100, seed=9 + i, lfs=False) for i, name in enumerate(names)}) as hub:
        with pytest.raises(StagingError, match=r"the Hub lists .* not a safe object name \(.*\); nothing was "
                                               "copied") as failure:
            run(hub, f"gs://{bucket}/un/")
        assert reason in str(failure.value) and str(failure.value).isascii(), "printable, with the culprit spelled out"
        assert "\n" not in str(failure.value) and not hub.stats.requests
    assert not objects(bucket)


def test_stale_files_of_another_commit_are_cleared_and_foreign_objects_refused(gcs):
    from components.weights.copier import StagingError
    from components.weights.copier.bucket import metadata

    bucket = new_bucket(gcs)
    store = gcs_client().bucket(bucket)
    with fake_hub() as hub:
        dest = f"gs://{bucket}/s/"
        stale = store.blob("s/model-00003-of-00003.safetensors")
        stale.metadata = metadata("ab" * 32, "ab" * 32, "f" * 40)
        stale.upload_from_string(b"a shard of another commit")
        report, lines = run(hub, dest)
        assert any("cleared 1 objects that are not files of" in line for line in lines), lines
        assert_exactly_the_commit(hub, dest)

        store.blob("s/notes.txt").upload_from_string(b"someone else's file")
        with pytest.raises(StagingError, match=r"gs://.*/s/ holds 1 objects that are not files of .* and were not "
                                               r"written by the copier \(first: s/notes.txt\); delete them or stage "
                                               "into an empty folder"):
            run(hub, dest)
        assert store.get_blob("s/notes.txt") is not None, "never deletes what the copier did not write"


def test_a_three_minute_rate_limit_window_with_retry_after_is_waited_out(gcs):
    """Mid-copy, the Hub answers 429 with Retry-After: 60 to every request for 3 minutes (on a clock running 300x,
    shared by the fake Hub and the copier): every worker waits as asked, and the copy completes after the window."""
    from components.weights.copier.hub import Backoff

    bucket = new_bucket(gcs)
    clock = ScaledClock(300)
    with fake_hub() as hub:
        hub.rate_limit(180, "60", clock, after_files=2)
        dest = f"gs://{bucket}/rl/"
        report, _ = run(hub, dest, backoff=Backoff(tries=4, base_s=0.01, max_s=0.05, clock=clock))
        limited = hub.stats.rate_limited
        assert len(limited) >= 4 and hub.stats.first_after_window - limited[0] >= 180
        assert report.copied_files == len(hub.repos[REPO].files)
        assert any(60 <= s <= 90 for s in clock.sleeps), "Retry-After honoured (plus jitter), not the backoff's 0.05 s"
        assert_exactly_the_commit(hub, dest)


def test_retry_after_is_bounded_and_a_window_longer_than_the_patience_fails_in_one_line(gcs):
    from components.weights.copier import StagingError
    from components.weights.copier.hub import Backoff

    bucket = new_bucket(gcs)
    clock = ScaledClock(10000)
    with fake_hub() as hub:
        hub.rate_limit(7200, "86400", clock)
        backoff = Backoff(tries=4, base_s=0.01, max_s=0.05, retry_after_max_s=600, patience_s=1800, clock=clock)
        with pytest.raises(StagingError, match=r"still rate limited by the Hub \(HTTP 429\) after \d+ min and \d+ "
                                               r"answers without progress \(the copier waits up to 30 min") as failure:
            run(hub, f"gs://{bucket}/rl2/", backoff=backoff)
        assert "\n" not in str(failure.value)
        assert clock.sleeps and max(clock.sleeps) == 600, "Retry-After beyond the bound waits the bound"
    assert not objects(bucket)


@pytest.mark.parametrize("retry_after", ["0", "-5", "nan", "Wed, 21 Oct 2015 07:28:00 GMT", "<absent>", "soon",
                                         "99999999"])
def test_every_retry_after_waits_at_least_the_floor_with_jitter(gcs, retry_after):
    """A Hub rate limiting for 60 s answers with a Retry-After that asks for no wait (or garbage, or absurdly
    long): one worker sends at most one request per floor interval, waits are jittered, the copy completes."""
    from components.weights.copier.hub import Backoff

    bucket = new_bucket(gcs)
    clock = ScaledClock(1000)
    lines: list[str] = []
    with fake_hub(gated=False) as hub:
        hub.rate_limit(60, retry_after, clock, after_files=1)
        backoff = Backoff(tries=4, base_s=0.01, max_s=30, rate_floor_s=2, retry_after_max_s=120, clock=clock,
                          announce_s=1, log=lines.append)
        report, _ = run(hub, f"gs://{bucket}/ra/", workers=1, backoff=backoff)
        limited = hub.stats.rate_limited
        assert limited and report.copied_files == len(hub.repos[REPO].files)
        gaps = [b - a for a, b in zip(limited, limited[1:], strict=False)]
        assert all(gap >= 2 for gap in gaps), gaps
        assert len(limited) <= 60 / 2 + 1
        waits = [s for s in clock.sleeps if s >= 2]
        assert len(set(waits)) == len(waits) and max(waits) <= 120, "jittered, and never past the bound"
        assert any(line.startswith("rate limited by the Hub (HTTP 429) on ") and "waiting" in line
                   for line in lines), lines


def test_rate_limited_waits_are_bounded_in_count(gcs):
    from components.weights.copier import StagingError
    from components.weights.copier.hub import Backoff

    bucket = new_bucket(gcs)
    clock = ScaledClock(1000)
    with fake_hub(gated=False) as hub:
        hub.rate_limit(86400, "0", clock)
        backoff = Backoff(tries=4, base_s=0.01, max_s=0.05, rate_floor_s=1, rate_tries=5, clock=clock)
        with pytest.raises(StagingError, match=r"after \d+ min and 5 answers without progress") as failure:
            run(hub, f"gs://{bucket}/rc/", backoff=backoff)
        assert "\n" not in str(failure.value) and len(hub.stats.rate_limited) == 6


def test_two_copiers_at_once_download_every_file_once(gcs):
    """Two copiers (two pods, or a Job and a person) on one folder at the same moment: the leases split the
    files, each byte comes from the Hub once, and both end with the verified folder."""
    from components.weights.copier.ledger import Lease

    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        dest = f"gs://{bucket}/two/"
        results: dict[int, object] = {}

        def copier(index: int) -> None:
            try:
                results[index] = run(hub, dest, workers=2, shard=(index, 2), lease=Lease(poll_s=0.2))[0]
            except Exception as err:  # noqa: BLE001 - reported by the assertion below
                results[index] = err

        threads = [threading.Thread(target=copier, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        reports = [results[0], results[1]]
        assert all(not isinstance(r, Exception) for r in reports), reports
        assert sum(r.copied_files for r in reports) == len(hub.repos[REPO].files)
        assert dict(hub.stats.served) == {p: f.size for p, f in hub.repos[REPO].files.items()}, "no file twice"
        assert_exactly_the_commit(hub, dest)


def test_a_dead_copiers_lease_is_taken_over_after_it_expires(gcs):
    from components.weights.copier.hub import Backoff
    from components.weights.copier.ledger import Lease

    bucket = new_bucket(gcs)
    big = BIG
    clock = ScaledClock(400)
    with fake_hub() as hub:
        dest = f"gs://{bucket}/dead/"
        claim = gcs_client().bucket(bucket).blob(sidecar(dest) + "claims/" + big)
        claim.metadata = {"holder": "a-pod-that-was-evicted", "hub-revision": hub.repos[REPO].commit}
        claim.upload_from_string(b"a-pod-that-was-evicted")
        started = clock.now()
        report, _ = run(hub, dest, backoff=Backoff(tries=4, base_s=0.01, max_s=0.05, clock=clock),
                        lease=Lease(ttl_s=120, renew_s=30, poll_s=10))
        assert clock.now() - started >= 120, "a live-looking lease is respected for one lease period"
        assert report.copied_files == len(hub.repos[REPO].files)
        assert not objects(bucket, sidecar(dest) + "claims/")
        assert_exactly_the_commit(hub, dest)


@pytest.mark.parametrize("token,repo,revision,expected", [
    (None, REPO, None, r"gated and the token has no access to it \(HTTP 401\): accept the model's license at "
                       r"http://127\.0\.0\.1:\d+/moonshotai/Tiny-K3"),
    (OTHER_TOKEN, REPO, None, r"gated and the token has no access to it \(HTTP 403\): accept the model's license"),
    ("hf_notAValidToken000000000000000000000", REPO, None, r"rejected the token \(HTTP 401\)"),
    (TOKEN, "moonshotai/No-Such-Model", None, r"repository moonshotai/No-Such-Model was not found \(HTTP 404\)"),
    (TOKEN, REPO, "f" * 40, r"revision f{40} does not exist in moonshotai/Tiny-K3 \(HTTP 404\)"),
])
def test_hub_errors_say_what_to_do(gcs, token, repo, revision, expected):
    from components.weights.copier import StagingError
    from components.weights.copier.copy import stage
    from components.weights.copier.hub import Backoff

    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        with pytest.raises(StagingError, match=expected):
            stage(repo, revision or hub.repos[REPO].commit, f"gs://{bucket}/e/", token=token, endpoint=hub.url,
                  log=lambda _: None, backoff=Backoff(tries=2, base_s=0.01))
    assert not objects(bucket)


def test_bucket_errors_say_what_to_do(gcs):
    from google.api_core import exceptions

    from components.weights.copier import StagingError
    from components.weights.copier.bucket import Destination, _Explained

    with fake_hub() as hub, pytest.raises(StagingError, match=r"gs://no-such-bucket-here does not exist"):
        run(hub, "gs://no-such-bucket-here/x/")
    with pytest.raises(StagingError, match=r"may not write objects in gs://b/p/ \(HTTP 403\): it needs "
                                           r"roles/storage.objectUser"):
        with _Explained(Destination("b", "p/"), "write"):
            raise exceptions.Forbidden("denied")
    with pytest.raises(StagingError, match="expected gs://BUCKET/FOLDER/"):
        Destination.parse("gs://bucket/no-trailing-slash")
    with pytest.raises(StagingError, match="a folder inside the bucket"):
        Destination.parse("gs://bucket/")


def test_command_line_runs_the_same_copier(gcs, tmp_path):
    bucket = new_bucket(gcs)
    with fake_hub(big=True) as hub:
        commit = hub.repos[REPO].commit
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "STORAGE_EMULATOR_HOST": gcs.url,
               "HF_HOME": str(tmp_path)}
        command = [sys.executable, "-m", "tools.live.stage_weights", "--repo-id", REPO, "--revision", commit,
                   "--dest", f"gs://{bucket}/cli/{commit}/", "--workers", "4"]
        first = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert first.returncode == 0, first.stderr
        assert f"staged: gs://{bucket}/cli/{commit}/ holds exactly the verified files" in first.stdout
        second = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0 and "0 bytes transferred" in second.stdout


def test_command_line_rejects_a_branch_name(capsys):
    from tools.live.stage_weights import parse_args

    with pytest.raises(SystemExit) as stop:
        parse_args(["--repo-id", REPO, "--revision", "main", "--dest", "gs://b/p/"])
    assert stop.value.code == 2
    assert "--revision: 'main' is not a full 40-character commit hash" in capsys.readouterr().err


def test_help_works_without_the_client_libraries():
    code = ("import sys, tools.live.stage_weights as s\n"
            "try:\n    s.main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "assert not [m for m in sys.modules if m.startswith(('huggingface_hub', 'google.cloud'))]\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "STORAGE_EMULATOR_HOST": ""})
    assert proc.returncode == 0, proc.stderr
    assert "--repo-id" in proc.stdout and "HF_TOKEN" in proc.stdout


def test_unset_revision_resolves_main_once_from_the_serialized_provider(tmp_path):
    """The provider `pulumi up` runs is a dill copy loaded in another process: it must not need this checkout."""
    from pulumi.dynamic.dynamic import serialize_provider

    from components.weights.revision import _ResolveMain

    serialized = serialize_provider(_ResolveMain())
    script = ("import base64, sys, dill\n"
              "provider = dill.loads(base64.b64decode(sys.stdin.read()))\n"
              "print(provider.create({'repoId': sys.argv[1], 'token': sys.argv[2]}).outs['revision'])\n"
              "print(provider.diff('id', {'repoId': sys.argv[1]}, {'repoId': sys.argv[1]}).changes)\n")
    with fake_hub() as hub:
        env = {"PATH": os.environ["PATH"], "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path)}
        proc = subprocess.run([sys.executable, "-c", script, REPO, TOKEN], cwd=tmp_path, input=serialized, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [hub.repos[REPO].commit, "False"], "kept until the repository changes"
        gated = subprocess.run([sys.executable, "-c", script, REPO, OTHER_TOKEN], cwd=tmp_path, input=serialized,
                               env=env, capture_output=True, text=True, timeout=60)
        assert gated.returncode == 1 and "accept the model's license at" in gated.stderr


# --------------------------------------------------------------------------- no network: one line, in seconds
class _StepClock:
    """Time that passes only when the copier sleeps: the test takes no real wait."""

    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


def test_a_hub_nobody_answers_for_is_one_line_within_its_patience():
    """Connection refused on every try (nothing on the port): the listing gives up after hub.CONNECT_PATIENCE_S
    instead of walking the whole retry budget (86 s seen for a DNS failure), naming what to check."""
    import socket

    from components.weights.copier import StagingError, hub

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens there
    clock = _StepClock()
    client = hub.Hub("moonshotai/Kimi-K3.1-Pro", endpoint=f"http://127.0.0.1:{port}",
                     backoff=hub.Backoff(clock=clock), xet=False)
    with pytest.raises(StagingError) as caught:
        client.files("a" * 40)
    assert clock.t == pytest.approx(hub.CONNECT_PATIENCE_S) and hub.CONNECT_PATIENCE_S < 10
    message = str(caught.value)
    assert message.startswith(f"cannot reach the Hub at http://127.0.0.1:{port}: ") and "\n" not in message
    assert "check the network, DNS or HF_ENDPOINT" in message


def test_stage_names_itself_as_the_user_typed_it(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tools", "stage", "--repo-id", "a/b", "--revision", "x",
                           "--dest", "gs://b/f/"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("python -m tools stage: error:")

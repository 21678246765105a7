"""The weight copier end to end on loopback: the real huggingface_hub and google-cloud-storage clients against
a fake Hub (tests/fakehub.py) and the real fake-gcs-server (tests/gcsemulator.py)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.conftest import ROOT
from tests.fakehub import FakeFile, FakeHub, FakeRepo
from tests.gcsemulator import GcsEmulator

REPO = "moonshotai/Tiny-K3"
TOKEN = "hf_testTokenWithAccess0000000000000000"
OTHER_TOKEN = "hf_testTokenWithoutAccess000000000000000"
MIB = 1 << 20


@pytest.fixture(scope="module")
def gcs():
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    with GcsEmulator() as emulator:
        os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
        yield emulator
    if previous is None:
        os.environ.pop("STORAGE_EMULATOR_HOST", None)
    else:
        os.environ["STORAGE_EMULATOR_HOST"] = previous


@pytest.fixture(autouse=True)
def hub_env(monkeypatch, tmp_path):
    """No token or Hub settings from the machine running the tests."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


def files() -> dict[str, FakeFile]:
    return {
        "model-00001-of-00002.safetensors": FakeFile(9 * MIB + 12345, seed=1),  # a resumable upload, 10 chunks
        "model-00002-of-00002.safetensors": FakeFile(2 * MIB, seed=2),
        "tokenizer.model": FakeFile(300_000, seed=3),                              # small LFS file
        "config.json": FakeFile(2_000, seed=4, lfs=False),                         # stored in git itself
        "nested/chat_template.jinja": FakeFile(700, seed=5, lfs=False),
    }


def new_bucket(gcs) -> str:
    from google.cloud import storage

    name = f"b-{uuid.uuid4().hex[:12]}"
    storage.Client().create_bucket(name)
    return name


def objects(bucket: str, prefix: str = "") -> dict:
    from google.cloud import storage

    return {b.name: b for b in storage.Client().list_blobs(bucket, prefix=prefix)}


def content_sha256(bucket: str, name: str) -> str:
    from google.cloud import storage

    return hashlib.sha256(storage.Client().bucket(bucket).blob(name).download_as_bytes()).hexdigest()


def run(hub: FakeHub, dest: str, token: str | None = TOKEN, **kwargs):
    from tools.staging.copy import stage
    from tools.staging.hub import Backoff

    lines: list[str] = []
    kwargs.setdefault("workers", 3)
    kwargs.setdefault("chunk_bytes", MIB)
    report = stage(REPO, hub.repos[REPO].commit, dest, token=token, endpoint=hub.url, log=lines.append,
                   progress_s=0.05, backoff=Backoff(tries=4, base_s=0.01, max_s=0.05), **kwargs)
    return report, lines


def fake_hub(gated: bool = True, **file_changes) -> FakeHub:
    repo_files = files()
    repo_files.update(file_changes)
    return FakeHub({REPO: FakeRepo(repo_files, gated=gated, allowed={TOKEN})}, tokens={TOKEN, OTHER_TOKEN})


def test_full_copy_is_verified_and_a_rerun_transfers_nothing(gcs):
    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        commit = hub.repos[REPO].commit
        dest = f"gs://{bucket}/models/tiny/{commit}/"
        report, lines = run(hub, dest)
        expected = hub.repos[REPO].files
        assert report.copied_files == len(expected) and report.copied_bytes == sum(f.size for f in expected.values())
        stored = objects(bucket, f"models/tiny/{commit}/")
        for path, file in expected.items():
            blob = stored[f"models/tiny/{commit}/{path}"]
            assert blob.size == file.size
            assert content_sha256(bucket, blob.name) == file.sha256 == blob.metadata["sha256"]
            assert blob.metadata["hub-oid"] == (file.sha256 if file.lfs else file.blob_sha1)
        manifest = json.loads(stored[f"models/tiny/{commit}/.staged.json"].download_as_bytes())
        assert manifest["revision"] == commit and manifest["repoId"] == REPO
        assert {(f["path"], f["size"], f["sha256"]) for f in manifest["files"]} == {
            (p, f.size, f.sha256) for p, f in expected.items()}
        assert any(line.startswith("progress: ") and " of " in line and "ETA" in line for line in lines), lines

        served, requests = hub.stats.bytes, len(hub.stats.requests)
        again, lines = run(hub, dest)
        assert again.copied_bytes == 0 and again.copied_files == 0
        assert hub.stats.bytes == served and len(hub.stats.requests) == requests, "a complete copy needs no Hub"
        assert "0 bytes transferred" in lines[-1]


def test_interrupted_run_resumes_with_only_the_missing_files(gcs):
    from tools.staging import StagingError

    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        dest = f"gs://{bucket}/m/"
        broken = "model-00002-of-00002.safetensors"
        hub.faults[broken] = ["fail"]
        with pytest.raises(StagingError, match=broken):
            run(hub, dest)
        stored = {name[len("m/"):] for name in objects(bucket)}
        assert ".staged.json" not in stored, "no manifest until every file is verified"
        assert broken not in stored and "model-00001-of-00002.safetensors" in stored, "files in flight finish"
        hub.faults.clear()
        before = dict(hub.stats.served)
        report, _ = run(hub, dest)
        missing = {p: f.size for p, f in hub.repos[REPO].files.items() if p not in stored}
        assert report.copied_files == len(missing) and report.copied_bytes == sum(missing.values())
        assert {p: n - before.get(p, 0) for p, n in hub.stats.served.items() if n != before.get(p, 0)} == missing
        assert "m/.staged.json" in objects(bucket)


def test_429s_5xx_and_cut_connections_resume_mid_file(gcs):
    bucket = new_bucket(gcs)
    big = "model-00001-of-00002.safetensors"
    with fake_hub() as hub:
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


@pytest.mark.parametrize("path", ["model-00002-of-00002.safetensors", "config.json"])
def test_corrupted_bytes_fail_the_run_and_write_nothing(gcs, path):
    from tools.staging import IntegrityError

    bucket = new_bucket(gcs)
    original = files()[path]
    corrupt = FakeFile(original.size, seed=original.seed, lfs=original.lfs, corrupt=True)
    with fake_hub(**{path: corrupt}) as hub:
        with pytest.raises(IntegrityError, match=rf"{path}: (SHA-256|git blob id) of the bytes received is"):
            run(hub, f"gs://{bucket}/c/", workers=1)
    names = objects(bucket)
    assert f"c/{path}" not in names and "c/.staged.json" not in names


def test_a_wrong_object_in_the_folder_is_copied_again(gcs):
    from google.cloud import storage

    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        storage.Client().bucket(bucket).blob("w/tokenizer.model").upload_from_string(b"not the tokenizer")
        report, _ = run(hub, f"gs://{bucket}/w/")
        assert report.copied_files == len(hub.repos[REPO].files)
        assert content_sha256(bucket, "w/tokenizer.model") == hub.repos[REPO].files["tokenizer.model"].sha256


@pytest.mark.parametrize("token,repo,revision,expected", [
    (None, REPO, None, r"gated and the token has no access to it \(HTTP 401\): accept the model's license at "
                       r"http://127\.0\.0\.1:\d+/moonshotai/Tiny-K3"),
    (OTHER_TOKEN, REPO, None, r"gated and the token has no access to it \(HTTP 403\): accept the model's license"),
    ("hf_notAValidToken000000000000000000000", REPO, None, r"rejected the token \(HTTP 401\)"),
    (TOKEN, "moonshotai/No-Such-Model", None, r"repository moonshotai/No-Such-Model was not found \(HTTP 404\)"),
    (TOKEN, REPO, "f" * 40, r"revision f{40} does not exist in moonshotai/Tiny-K3 \(HTTP 404\)"),
])
def test_hub_errors_say_what_to_do(gcs, token, repo, revision, expected):
    from tools.staging import StagingError
    from tools.staging.copy import stage
    from tools.staging.hub import Backoff

    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        with pytest.raises(StagingError, match=expected):
            stage(repo, revision or hub.repos[REPO].commit, f"gs://{bucket}/e/", token=token, endpoint=hub.url,
                  log=lambda _: None, backoff=Backoff(tries=2, base_s=0.01))
    assert not objects(bucket)


def test_bucket_errors_say_what_to_do(gcs):
    from google.api_core import exceptions

    from tools.staging import StagingError
    from tools.staging.bucket import Destination, _Explained

    with fake_hub() as hub, pytest.raises(StagingError, match=r"gs://no-such-bucket-here does not exist"):
        run(hub, "gs://no-such-bucket-here/x/")
    with pytest.raises(StagingError, match=r"may not write objects in gs://b/p/ \(HTTP 403\): it needs "
                                           r"roles/storage.objectUser"):
        with _Explained(Destination("b", "p/"), "write"):
            raise exceptions.Forbidden("denied")
    with pytest.raises(StagingError, match="expected gs://BUCKET/FOLDER/"):
        Destination.parse("gs://bucket/no-trailing-slash")


def test_command_line_runs_the_same_copier(gcs, tmp_path):
    bucket = new_bucket(gcs)
    with fake_hub() as hub:
        commit = hub.repos[REPO].commit
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "STORAGE_EMULATOR_HOST": gcs.url,
               "HF_HOME": str(tmp_path)}
        command = [sys.executable, "-m", "tools.stage_weights", "--repo-id", REPO, "--revision", commit,
                   "--dest", f"gs://{bucket}/cli/{commit}/", "--workers", "4"]
        first = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert first.returncode == 0, first.stderr
        assert f"staged: gs://{bucket}/cli/{commit}/ holds a verified copy" in first.stdout
        second = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0 and "0 bytes transferred" in second.stdout


def test_command_line_rejects_a_branch_name(capsys):
    from tools.stage_weights import parse_args

    with pytest.raises(SystemExit) as stop:
        parse_args(["--repo-id", REPO, "--revision", "main", "--dest", "gs://b/p/"])
    assert stop.value.code == 2
    assert "--revision: 'main' is not a full 40-character commit hash" in capsys.readouterr().err


def test_help_works_without_the_client_libraries():
    code = ("import sys, tools.stage_weights as s\n"
            "try:\n    s.main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "assert not [m for m in sys.modules if m.startswith(('huggingface_hub', 'google.cloud'))]\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "STORAGE_EMULATOR_HOST": ""})
    assert proc.returncode == 0, proc.stderr
    assert "--repo-id" in proc.stdout and "HF_TOKEN" in proc.stdout


def test_unset_revision_resolves_main_once_from_the_serialized_provider(tmp_path):
    """The provider `pulumi up` runs is a dill copy loaded in another process: it must not need this checkout."""
    from pulumi.dynamic.dynamic import serialize_provider

    from components.revision import _ResolveMain

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

"""The benchmark claim store under the races a live run meets (tools/live/claims.py, tools/live/reap.py), on both
stores that offer a compare-and-set: a local backend (`file://`) and Cloud Storage (the real fake-gcs-server on
loopback). Each race is played by the real store and the real reaper; only the destroy is a stand-in.

- an empty or unreadable claim is never expired: the reaper names it and destroys nothing;
- a driver that stalls past its deadline and wakes up mid-destroy can neither remove nor renew the reaper's claim;
- a renewal racing a takeover: exactly one of them wins, and the stored claim is the winner's.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tools.live import claims, reap

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
PAST = claims.deadline(NOW, -60)
FUTURE = claims.deadline(NOW, 1800)


@pytest.fixture(scope="module")
def gcs():
    from tests.fakes.gcsemulator import GcsEmulator

    with GcsEmulator() as emulator:
        yield emulator


@pytest.fixture(params=["file", "gs"])
def store(request, tmp_path, monkeypatch):
    if request.param == "file":
        return claims.store_for(f"file://{tmp_path}", "kimi-k3-1")
    emulator = request.getfixturevalue("gcs")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.url)
    from google.cloud import storage

    bucket = f"state-{uuid.uuid4().hex[:10]}"
    storage.Client().create_bucket(bucket)
    return claims.store_for(f"gs://{bucket}/team", "kimi-k3-1")


def _put_raw(store, stack: str, data: bytes) -> None:
    """Write bytes where the claim lives, as a crashed writer, another tool or a person could."""
    if isinstance(store, claims.FileClaims):
        store.folder.mkdir(parents=True, exist_ok=True)
        Path(store.where(stack)).write_bytes(data)
    else:
        store.bucket.blob(f"{store.prefix}{stack}.json").upload_from_string(data)


def _driver(store, stack: str = "gpu", until: str = FUTURE) -> claims.Claim:
    assert store.create(claims.Claim("run-driver", stack, until, "runner-1")) is None
    held = store.get(stack)
    assert held is not None and held.run == "run-driver" and held.generation == 1
    return held


def _reaper(store, out: list[str], destroy=lambda stack: True):
    """The real reaper over this store, at NOW, with `destroy` standing in for pulumi destroy + leftovers."""
    def destroy_and_list(work_dir, stack, out_, billing):
        return destroy(stack)

    original = reap._destroy_and_list
    reap._destroy_and_list = destroy_and_list
    try:
        return reap.reap(Path("."), out=out.append, now=lambda: NOW,
                         claims=lambda _work_dir: [(store, c) for c in store.all()])
    finally:
        reap._destroy_and_list = original


UNREADABLE = {
    "empty": b"",
    "whitespace": b" \n",
    "garbage": b"\x00\xff{not json",
    "latin-1": '{"run": "r\xe9", "deadline": "2026-01-01T00:00:00+00:00"}'.encode("latin-1"),
    "a list": b"[1, 2]",
    "no run": b'{"stack": "gpu", "deadline": "2020-01-01T00:00:00+00:00"}',
    "run not a string": b'{"run": 7, "deadline": "2020-01-01T00:00:00+00:00"}',
    "no deadline": b'{"run": "r"}',
    "deadline garbage": b'{"run": "r", "deadline": "yesterday"}',
    "deadline without zone": b'{"run": "r", "deadline": "2020-01-01T00:00:00"}',
    "generation a string": b'{"run": "r", "deadline": "2020-01-01T00:00:00+00:00", "generation": "2"}',
    "negative generation": b'{"run": "r", "deadline": "2020-01-01T00:00:00+00:00", "generation": -1}',
    "oversized": b'{"run": "r", "deadline": "2020-01-01T00:00:00+00:00", "host": "' + b"x" * 8000 + b'"}',
    "deep": b"[" * 50_000 + b"]" * 50_000,
}


@pytest.mark.parametrize("kind", UNREADABLE)
def test_an_unreadable_claim_is_never_expired_and_never_taken_over(tmp_path, kind):
    store = claims.store_for(f"file://{tmp_path}", "kimi-k3-1")
    _put_raw(store, "gpu", UNREADABLE[kind])
    held = store.get("gpu")
    assert held is not None and held.unreadable and not held.expired(NOW + timedelta(days=3650)), held
    assert store.take_over(held, "reaper-x", FUTURE) is None and not store.remove(held)
    assert store.create(claims.Claim("run-b", "gpu", FUTURE)) is not None, "an unreadable claim still holds"
    assert Path(store.where("gpu")).read_bytes() == UNREADABLE[kind], "nobody rewrote it"


def test_race_1_an_empty_claim_is_not_reaped(store):
    """A claim being written (a driver between its create and its write, on a store without atomic writes) or
    emptied reads as nothing: the reaper must not take that for expired and destroy a live stack."""
    _put_raw(store, "gpu", b"")
    _put_raw(store, "tpu", b'{"run": "r", "deadline": "not a time"}')
    destroyed: list[str] = []
    out: list[str] = []
    code = _reaper(store, out, destroy=lambda stack: destroyed.append(stack) or True)
    assert destroyed == [] and code == 1, out
    named = [line for line in out if "cannot be read" in line]
    assert len(named) == 2 and "(empty;" in named[0] and store.release_command("gpu") in named[0], out
    assert store.get("gpu").unreadable == "empty" and store.get("tpu").unreadable.startswith("deadline")


def test_race_2_a_driver_waking_after_its_deadline_cannot_release_or_renew_the_reapers_claim(store):
    """The driver stalls past its deadline (a suspended laptop, a stopped runner); the reaper takes the claim over
    and starts destroying; the driver wakes up mid-destroy and finishes its own teardown: it must neither remove
    nor renew the claim the reaper now holds, and the reaper releases it only after its destroy."""
    stale = _driver(store, until=PAST)
    seen: dict[str, object] = {}

    def destroy(stack: str) -> bool:
        current = store.get(stack)
        seen["during"] = current
        seen["driver renews"] = store.renew(stale, FUTURE)
        seen["driver removes"] = store.remove(stale)
        seen["after"] = store.get(stack)
        return True

    out: list[str] = []
    assert _reaper(store, out, destroy) == 0, out
    during = seen["during"]
    assert during.run.startswith("reaper-") and during.generation == 2, during
    assert seen["driver renews"] is None and seen["driver removes"] is False, seen
    assert seen["after"] == during, "the reaper's claim held through its destroy"
    assert store.get("gpu") is None and any("released the claim of run run-driver" in line for line in out), out


def test_race_3_a_renewal_racing_a_takeover_has_exactly_one_winner(store, monkeypatch):
    """The driver's renewal reads the claim, then the reaper takes it over before the renewal writes. Exactly one
    of the two may win, and the stored claim must be the winner's (a renewal that overwrites a takeover leaves
    the reaper destroying a stack whose driver believes it still owns it)."""
    expired = _driver(store, until=PAST)
    read_once = threading.Event()
    reaper_done = threading.Event()
    results: dict[str, object] = {}
    real_get = type(store).get

    def get(self, stack):
        claim = real_get(self, stack)
        if threading.current_thread().name == "driver" and not read_once.is_set():
            read_once.set()
            reaper_done.wait(0.5)  # the reaper's takeover lands here, between the renewal's read and its write
        return claim

    monkeypatch.setattr(type(store), "get", get)

    def reaper() -> None:
        read_once.wait(5)
        try:
            results["reaper"] = store.take_over(expired, "reaper-1", FUTURE)
        finally:
            reaper_done.set()

    threads = [threading.Thread(target=lambda: results.__setitem__("driver", store.renew(expired, FUTURE)),
                                name="driver"), threading.Thread(target=reaper, name="reaper")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert not any(thread.is_alive() for thread in threads)
    winners = {who: claim for who, claim in results.items() if claim is not None}
    assert len(winners) == 1, f"both won: {results}"
    (who, claim), = winners.items()
    stored = real_get(store, "gpu")
    assert (stored.run, stored.deadline, stored.generation) == (claim.run, claim.deadline, 2), (who, stored)


def test_concurrent_renewals_and_takeovers_advance_the_generation_once_per_winning_write(tmp_path):
    """Four writers, each rewriting the claim it last read 40 times: every successful write is a distinct
    generation, so the final generation is exactly 1 + the number of wins (no lost or doubled write)."""
    store = claims.store_for(f"file://{tmp_path}", "kimi-k3-1")
    _driver(store)
    wins: list[int] = []
    lock = threading.Lock()

    def writer(name: str) -> None:
        for i in range(40):
            current = store.get("gpu")
            new = (store.renew(current, FUTURE) if i % 2 else store.take_over(current, name, FUTURE))
            if new is not None:
                with lock:
                    wins.append(new.generation)

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(wins) == list(range(2, 2 + len(wins))) and store.get("gpu").generation == 1 + len(wins)


def test_kimi_reap_without_the_pulumi_cli_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert reap.main(["--work-dir", str(tmp_path)]) == 2
    out = capsys.readouterr()
    assert out.out.count("\n") == 1 and "Pulumi CLI is not on PATH" in out.out and not out.err


def test_a_store_that_cannot_be_listed_is_one_line(tmp_path):
    def broken(_work_dir):
        raise FileNotFoundError(2, "No such file or directory", "pulumi")

    out: list[str] = []
    assert reap.reap(tmp_path, out=out.append, claims=broken) == 2
    assert out == [f"reap: FAILED to list the benchmark claims of {tmp_path}: No such file or directory: pulumi"]

"""`python -m tools preflight` against a fake Google Cloud and a fake Hub on loopback (tests/fakes/fakegoogle.py,
tests/fakes/fakehub.py): a healthy project passes; each failure class fails with one line naming what to change; only
GETs are made. The `pulumi up` gate through the program itself, and the limits that grow with the stack.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from components.checks import preflight
from components.config import ConfigError
from components.facts import catalog
from components.plan import limits
from tests.config.test_config import parse
from tests.conftest import ROOT, fixture_stack, stack_document, write_stack
from tests.engine_facts import MTP_READINGS
from tests.fakes import fakegoogle
from tests.fakes.fakehub import FakeFile, FakeHub, FakeRepo
from tests.plan.test_engines import K3_CONFIG
from tools.live import preflight as cli

REPO = "moonshotai/Kimi-K3.1-Pro"
TOKEN = "hf_preflightTestToken"
STACK = fixture_stack("gpu3")


def _repo(config: dict, gated: bool = False, commit: str = "a" * 40) -> FakeRepo:
    return FakeRepo({"config.json": FakeFile(0, lfs=False, content=json.dumps(config).encode())}, commit=commit,
                    gated=gated, allowed={TOKEN})


@pytest.fixture(scope="module")
def google():
    with fakegoogle.FakeGoogle() as fake:
        yield fake


@pytest.fixture(scope="module")
def hub():
    with FakeHub({REPO: _repo(K3_CONFIG)}, tokens={TOKEN, "hf_other"}) as fake:
        yield fake


FAKE_GCLOUD = """#!/bin/bash
[ "$1 $2" = "auth list" ] || exit 4
printf '%s\\n' ${FAKE_GCLOUD_ACCOUNTS:-}
"""
"""`gcloud auth list --filter=status:ACTIVE --format=value(account)`: the active accounts, one a line."""


def fake_gcloud(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "gcloud").write_text(FAKE_GCLOUD)
    (folder / "gcloud").chmod(0o755)
    return folder


@pytest.fixture
def run(google, hub, variants, monkeypatch, tmp_path, capsys):
    """Run the CLI as a user would (credentials and endpoints from the environment) against the fakes."""
    import huggingface_hub.constants

    monkeypatch.setenv("PATH", f"{fake_gcloud(tmp_path / 'bin')}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_GCLOUD_ACCOUNTS", "builder@example.com")
    monkeypatch.delenv(preflight.GCLOUD_TOKEN_FILE_ENV, raising=False)
    google.reset()
    hub.repos[REPO] = _repo(K3_CONFIG)
    monkeypatch.setenv(preflight.API_ROOT_ENV, google.url)
    monkeypatch.setenv(preflight.TOKEN_ENV, "ya29.test-token")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    # Online to loopback whatever the worker imported before (tests/engine_support.py sets HF_HUB_OFFLINE at import,
    # and huggingface_hub reads it once, at its own import).
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    plan = variants["gpu3"].folder

    def go(*extra: str, stack: Path = STACK, plan: Path = plan, timeout: float = 10) -> tuple[int, list[str]]:
        # A timeout no loopback answer reaches on a loaded 2-core machine; the tests of a slow answer lower it
        # and delay that answer well past it.
        code = cli.main(["--stack-file", str(stack), "--plan", str(plan), "--request-timeout", f"{timeout:g}",
                         *extra])
        out = capsys.readouterr().out.splitlines()
        assert {method for method, _ in google.calls} <= {"GET"}, google.calls  # preflight only reads
        return code, out

    return go


def failures(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("FAIL")]


def test_a_healthy_project_passes_and_prints_cost_and_time(run, google):
    code, out = run()
    assert code == 0, out
    assert not failures(out)
    assert out[-1].startswith("preflight: all ") and "checks passed" in out[-1]
    assert any(line.startswith("cost: $") and "/h" in line for line in out)
    assert any(line.startswith("time to serving: ") for line in out)
    assert any("rack-c: HEALTHY" in line for line in out)
    assert any(path.endswith("/reservationSubBlocks/rack-a") for _, path in google.calls)
    assert google.billed_to == {fakegoogle.PROJECT}  # user credentials need a quota project for these APIs


def _only_failure(out: list[str]) -> str:
    failed = failures(out)
    assert len(failed) == 1, out
    return failed[0]


def test_a_reservation_in_another_zone_names_the_zone(run, google):
    google.state["reservations"] = {"us-central1-a": google.state["reservations"][fakegoogle.ZONE]}
    code, out = run()
    assert code == 1
    assert "is in zone us-central1-a, not the serving zone us-central1-b: pulumi config set gcp.zone " \
           "us-central1-a" in _only_failure(out)
    assert any(line.startswith("`pulumi up` would fail at gpu-0 about ") and "having spent $" in line for line in out)


def test_one_free_host_short(run, google):
    google.state["reservations"][fakegoogle.ZONE][fakegoogle.RESERVATION]["specificReservation"]["inUseCount"] = "1"
    code, out = run()
    assert code == 1
    assert "has 47 free hosts of 48, the stack asks for 48: set gpu.slices to 2" in _only_failure(out)


def test_an_unhealthy_sub_block_names_its_slice_and_what_a_failed_up_costs(run, google, tmp_path):
    """The other slices' pools come up beside the one that fails: they are what a failed `up` leaves billing."""
    google.state["sub_blocks"]["rack-b"]["healthInfo"]["healthStatus"] = "DEGRADED"
    priced = write_stack(tmp_path, "priced",
                         {**stack_document("gpu3")["config"], "kimi-k3-1:cost.gpuNodeHourUsd": "10"})
    code, out = run(stack=priced)
    assert code == 1
    assert "sub-block rack-b (slice 1) is DEGRADED: name a healthy sub-block in gpu.reservationSubBlocks[1]" \
        in _only_failure(out)
    cost = next(line for line in out if line.startswith("`pulumi up` would fail at gpu-1 about "))
    rate = float(cost.split("bills $")[1].split("/h")[0].replace(",", ""))
    assert 2 * 16 * 10 < rate < 2 * 16 * 10 + 10, cost  # gpu-0 and gpu-2 at $10/node-hour, plus cluster and CPU


def test_a_failed_up_bills_its_unpriced_pools_too(run, google):
    """A4X Max has no list price: the pools a failed `up` created still bill, and the line says how many nodes."""
    google.state["sub_blocks"]["rack-b"]["healthInfo"]["healthStatus"] = "DEGRADED"
    code, out = run()
    assert code == 1
    cost = next(line for line in out if line.startswith("`pulumi up` would fail at gpu-1 about "))
    bills = cost.split("what it created bills ", 1)[1]
    assert "+ 32 a4x-maxgpu-4g-metal nodes (gpu-0, gpu-2) unpriced until `pulumi destroy`" in bills, cost
    assert "set kimi-k3-1:cost.gpuNodeHourUsd to price them" in bills


def test_a_failed_later_up_counts_what_the_cluster_holds(run, google):
    """On a later `up` the cluster's own pools bill whatever the update does: the line counts them."""
    google.state["sub_blocks"]["rack-b"]["healthInfo"]["healthStatus"] = "DEGRADED"
    google.state["node_pools"] = [fakegoogle.node_pool("system", "n2-standard-8", 3),
                                  fakegoogle.node_pool("gpu-0", "a4x-maxgpu-4g-metal", 16)]
    code, out = run()
    assert code == 1
    cost = next(line for line in out if line.startswith("`pulumi up` would fail at gpu-1 about "))
    assert "this cluster already holds 3 n2-standard-8 + 16 a4x-maxgpu-4g-metal nodes, so after the failure the " \
           "stack bills $" in cost, cost
    # gpu-0 and gpu-2 come up (32 nodes), the 16 held are gpu-0's: counted once
    assert cost.endswith("+ 32 a4x-maxgpu-4g-metal nodes unpriced in all"), cost


def test_unnamed_racks_need_a_healthy_sub_block_per_slice(run, google, gpu):
    """The one-slice stack names no sub-block: one of the reservation's racks must be HEALTHY with 16 hosts free."""
    stack = fixture_stack("gpu")
    for rack in google.state["sub_blocks"].values():
        rack["inUseCount"] = 3
    code, out = run(stack=stack, plan=gpu.folder)
    assert code == 1
    assert "0 of the 3 sub-blocks of test-a4x-max-reservation are HEALTHY with 16 free hosts, gpu.slices = 1 needs " \
           "1: wait for a rack or ask your account team" in _only_failure(out)
    google.state["sub_blocks"]["rack-c"]["inUseCount"] = 2
    code, out = run(stack=stack, plan=gpu.folder)
    assert code == 0, out
    assert any(path.endswith(f"/reservationBlocks/{fakegoogle.BLOCK}/reservationSubBlocks")
               for _, path in google.calls)


def _running_stack(google, slices: int = 3) -> None:
    """The gpu3 stack after its first `up`: its pools hold 16 hosts of each rack, the GPUs and CPUs they use."""
    path = f"projects/{fakegoogle.PROJECT}/reservations/{fakegoogle.RESERVATION}/reservationBlocks/{fakegoogle.BLOCK}"
    google.state["node_pools"] = [
        fakegoogle.node_pool("system", "n2-standard-8", 2),
        fakegoogle.node_pool("weights-transfer", "c3-standard-44", 1),
        *(fakegoogle.node_pool(f"a4x-max-nvl72-{i}", "a4x-maxgpu-4g-metal", 16,
                               f"{path}/reservationSubBlocks/{rack}") for i, rack in enumerate(("rack-a", "rack-b",
                                                                                                 "rack-c")[:slices]))]
    google.state["reservations"][fakegoogle.ZONE][fakegoogle.RESERVATION]["specificReservation"]["inUseCount"] = \
        str(16 * slices)
    for rack in ("rack-a", "rack-b", "rack-c")[:slices]:
        google.state["sub_blocks"][rack]["inUseCount"] = 16
    quotas = {q["metric"]: q for q in google.state["quotas"]}
    quotas["NVIDIA_GB300_GPUS"]["usage"] = 64.0 * slices
    quotas["NVIDIA_GB300_GPUS"]["limit"] = 192.0
    quotas["STATIC_ADDRESSES"]["usage"] = quotas["STATIC_ADDRESSES"]["limit"] = 3.0


def test_a_later_up_counts_what_the_stack_already_holds(run, google):
    """Every later `pulumi up` runs the gate too: the stack's own nodes, GPUs and addresses are its, not missing."""
    _running_stack(google)
    code, out = run()
    assert code == 0, out
    assert any("(the stack's pools hold 48)" in line for line in out)
    _running_stack(google, slices=2)  # scaling 2 -> 3 slices: the third rack must still be free
    google.state["sub_blocks"]["rack-c"]["inUseCount"] = 4
    code, out = run()
    assert code == 1
    assert "sub-block rack-c (slice 2) has 14 free hosts, a slice needs 16" in _only_failure(out)


def test_a_scale_up_needs_only_the_volumes_rise_in_throughput(run, google):
    """2 -> 3 slices raises the existing Hyperdisk ML volume from 76,800 to 115,200 MiB/s in place: the 76,800 it
    has are the stack's own, so only the 38,400 more must be free."""
    _running_stack(google, slices=2)
    google.state["sub_blocks"]["rack-c"]["inUseCount"] = 0
    _quota(google, "HDML_TOTAL_THROUGHPUT").update(limit=120000.0, usage=76800.0)
    _quota(google, "HDML_TOTAL_GB").update(usage=1800.0)
    code, out = run()
    assert code == 0, out
    _quota(google, "HDML_TOTAL_THROUGHPUT").update(limit=110000.0)
    code, out = run()
    assert code == 1
    assert "HDML_TOTAL_THROUGHPUT in us-central1: 110000 free of 110000, the stack needs 115200" in _only_failure(out)


def test_a_short_accelerator_quota(run, google):
    google.state["quotas"][-1]["usage"] = 100.0
    code, out = run()
    assert code == 1
    assert "NVIDIA_GB300_GPUS in us-central1: 156 free of 256, the stack needs 192 for gpu.slices" in _only_failure(out)


def _quota(google, metric: str) -> dict:
    return next(q for q in google.state["quotas"] if q["metric"] == metric)


@pytest.mark.parametrize(("metric", "quota", "line", "fails_at"), [
    ("HDML_TOTAL_THROUGHPUT", {"usage": 100000.0},
     "HDML_TOTAL_THROUGHPUT in us-central1: 100000 free of 200000, the stack needs 115200 for the Hyperdisk ML volume "
     "(115200 MiB/s, storage.throughputMiBps)", "weights-volume"),
    ("HDML_TOTAL_GB", {"usage": 3000.0},
     "HDML_TOTAL_GB in us-central1: 1000 free of 4000, the stack needs 1800 for the Hyperdisk ML volume (1800 GiB, "
     "storage.volumeSizeGi)", "weights-volume"),
    # 48 accelerator nodes x 500 GB hyperdisk-balanced boot disks (compute v1 Quota.metric HDB_TOTAL_GB).
    ("HDB_TOTAL_GB", {"limit": 30000.0, "usage": 10000.0},
     "HDB_TOTAL_GB in us-central1: 20000 free of 30000, the stack needs 24000 for the hyperdisk-balanced boot "
     "disks (500 GB per accelerator node, gpu.slices)", "gpu-0 "),
    # The staging NAT takes one static address per staging VM (gpu3: 3 VMs).
    ("STATIC_ADDRESSES", {"limit": 8.0, "usage": 6.0},
     "STATIC_ADDRESSES in us-central1: 2 free of 8, the stack needs 3 for Cloud NAT: one static address per "
     "staging VM (storage.stagingPods)", "net-staging-ip-"),
], ids=["hdml-throughput", "hdml-size", "boot-disks", "nat-addresses"])
def test_a_short_regional_quota_names_what_needs_it(run, google, metric, quota, line, fails_at):
    """What the stack adds in the region against each quota: the one failure names the metric, the free and needed
    amounts and the key that sets them, and the cost line names the resource `up` would first fail at (the boot
    disks: the first accelerator pool)."""
    _quota(google, metric).update(quota)
    code, out = run()
    assert code == 1
    assert line in _only_failure(out)
    assert any(printed.startswith(f"`pulumi up` would fail at {fails_at}") for printed in out), out


def test_a_region_without_hyperdisk_ml_metrics_is_a_note(run, google):
    google.state["quotas"] = [q for q in google.state["quotas"] if not q["metric"].startswith("HDML_")]
    code, out = run()
    assert code == 0, out
    assert any("Hyperdisk ML MiB/s: regions.get reports no HDML_*_THROUGHPUT metric in us-central1; check 115200 "
               "MiB/s on the Quotas page" in line for line in out)
    assert any("Hyperdisk ML GiB: regions.get reports no HDML_*_GB metric" in line for line in out)


def test_cloud_nat_ports_per_vm_against_its_addresses(run, monkeypatch):
    """Ports per VM x VMs above what the addresses hold: the line names storage.stagingPods."""
    from components.facts import catalog

    code, out = run()
    assert code == 0 and any("staging NAT: 3 VMs x 32768 ports on 3 static addresses" in line for line in out), out
    monkeypatch.setattr(catalog, "NAT_MIN_PORTS_PER_VM_ONE_ADDRESS", 65536)
    code, out = run()
    assert code == 1
    assert "the staging NAT needs 3 VMs x 65536 ports = 196608 of 3 addresses x 64512: lower storage.stagingPods " \
           "to 2" in _only_failure(out)


def test_throttled_and_slow_quota_reads_are_one_line(run, google):
    throttled = (429, fakegoogle.status(429, "RESOURCE_EXHAUSTED", "Quota exceeded"), {"Retry-After": "0"})
    google.state["errors"]["/regions/"] = [throttled] * preflight.RETRIES
    code, out = run()
    assert code == 1
    assert f"throttled reading region us-central1's quotas after {preflight.RETRIES} tries (429)" in _only_failure(out)
    google.reset()
    google.state["delay"]["/regions/"] = 4
    code, out = run(timeout=1.5)
    assert code == 1
    assert "could not read region us-central1's quotas: no answer from compute.googleapis.com within 1.5 s" \
        in _only_failure(out)


def test_a_disabled_compute_api_names_the_command(run, google):
    google.state["services"]["compute.googleapis.com"] = "DISABLED"
    code, out = run()
    assert code == 1
    assert "gcloud services enable compute.googleapis.com --project kimi-test-project" in _only_failure(out)


def test_a_blocking_org_policy(run, google):
    google.state["policies"]["gcp.resourceLocations"] = {
        "name": "projects/kimi-test-project/policies/gcp.resourceLocations",
        "spec": {"rules": [{"values": {"allowedValues": ["in:europe-locations"]}}]}}
    code, out = run()
    assert code == 1
    assert "constraints/gcp.resourceLocations does not allow us-central1/us-central1-b" in _only_failure(out)


@pytest.mark.parametrize(("constraint", "policy", "line"), [
    ("gcp.restrictServiceUsage", {"rules": [{"values": {"deniedValues": ["networkservices.googleapis.com"]}}]},
     "constraints/gcp.restrictServiceUsage refuses networkservices.googleapis.com, which the stack enables"),
    ("compute.requireShieldedVm", {"rules": [{"enforce": True}]},
     "constraints/compute.requireShieldedVm is enforced, and a4x-maxgpu-4g-metal nodes run without Shielded GKE "
     "Nodes"),
    ("gcp.resourceLocations", {"rules": [{"denyAll": True}]}, "constraints/gcp.resourceLocations does not allow"),
])
def test_each_org_policy_the_plan_meets(run, google, constraint, policy, line):
    google.state["policies"][constraint] = {"name": f"projects/kimi-test-project/policies/{constraint}", "spec": policy}
    code, out = run()
    assert code == 1 and line in _only_failure(out)


def test_allowed_locations_pass(run, google):
    google.state["policies"]["gcp.resourceLocations"] = {
        "spec": {"rules": [{"values": {"allowedValues": ["in:us-locations"]}}]}}
    code, out = run()
    assert code == 0, out


def test_a_pinned_revision_the_repo_lacks(run, tmp_path):
    pinned = write_stack(tmp_path, "pinned", {**stack_document("gpu3")["config"],
                                              "kimi-k3-1:model.revision": "f" * 40})
    code, out = run(stack=pinned)
    assert code == 1
    assert f"{REPO} has no revision {'f' * 40}: set model.revision to a commit of it" in _only_failure(out)


def test_an_unreadable_gated_repo(run, hub):
    hub.repos[REPO] = _repo(K3_CONFIG, gated=True)
    hub.repos[REPO].allowed = set()
    code, out = run()
    assert code == 1
    assert f"{REPO} is gated and the token cannot read it: accept the model's license" in _only_failure(out)


def test_an_architecture_the_engine_does_not_register(run, hub):
    hub.repos[REPO] = _repo(dict(K3_CONFIG, architectures=["KimiK25ForConditionalGeneration"]), commit="b" * 40)
    code, out = run()
    assert code == 1
    assert "names architecture 'KimiK25ForConditionalGeneration', which vLLM 0.33.0 does not register" \
        in _only_failure(out)


@pytest.mark.parametrize(("text_config", "layers"), MTP_READINGS)
def test_the_plan_reads_the_mtp_layers_as_vllm_does(text_config, layers):
    from components.weights.geometry import _CheckGeometry

    assert _CheckGeometry.observed({"text_config": text_config})["mtpLayers"] == layers


def test_mtp_on_a_checkpoint_without_mtp_layers(run, hub, tmp_path):
    """model.speculative=mtp with model.mtpLayers set: the revision's config.json must have the layers (vLLM divides
    by their count at start); a checkpoint without them is one line naming the key, its value and what is valid."""
    mtp = write_stack(tmp_path, "mtp", {**stack_document("gpu3")["config"], "kimi-k3-1:model.speculative": "mtp",
                                        "kimi-k3-1:model.mtpLayers": 1})
    text = {k: v for k, v in K3_CONFIG["text_config"].items() if k != "num_nextn_predict_layers"}
    hub.repos[REPO] = _repo(dict(K3_CONFIG, text_config=text), commit="c" * 40)
    code, out = run(stack=mtp)
    assert code == 1
    assert _only_failure(out) == ("FAIL checkpoint: config.json text_config.num_nextn_predict_layers is 0: the "
                                  "checkpoint has no MTP layers for model.speculative=mtp (vLLM needs 1 or more): use "
                                  "off or dflash")
    hub.repos[REPO] = _repo(dict(K3_CONFIG, text_config={**text, "num_nextn_predict_layers": 1}), commit="d" * 40)
    code, out = run(stack=mtp)
    assert code == 0, out


def _tpu7x_reservation(google, hosts: int = 8) -> dict:
    """The TPU fixture stack's reservation in its zone: SPECIFIC, READY, `hosts` tpu7x-standard-4t VMs free."""
    reservation = {
        "kind": "compute#reservation", "name": "test-tpu7x-reservation", "zone": "us-central1-c", "status": "READY",
        "specificReservationRequired": True,
        "specificReservation": {"count": str(hosts), "inUseCount": "0",
                                "instanceProperties": {"machineType": "tpu7x-standard-4t"}}}
    google.state["reservations"] = {"us-central1-c": {"test-tpu7x-reservation": reservation}}
    return reservation


def test_a_tpu_stack_asks_for_its_slices_hosts(run, google, tpu):
    """Ironwood: the reservation in the TPU zone must hold tpu7x VMs for every host of every slice."""
    _tpu7x_reservation(google)
    code, out = run(stack=fixture_stack("tpu"), plan=tpu.folder)
    assert code == 0, out
    assert any("test-tpu7x-reservation in us-central1-c: SPECIFIC, tpu7x-standard-4t, 8 of 8 hosts free, 8 asked"
               in line for line in out)
    _tpu7x_reservation(google, hosts=7)
    code, out = run(stack=fixture_stack("tpu"), plan=tpu.folder)
    assert code == 1
    assert "has 7 free hosts of 7, the stack asks for 8: set tpu.slices to 1" in _only_failure(out)
    assert any(line.startswith("`pulumi up` would fail at tpu-0 about ") for line in out)


@pytest.mark.parametrize(("path", "accounts", "line"), [
    ("bin-only", "builder@example.com", "local tools: gcloud is not on PATH: install the Google Cloud CLI "
                                        "(https://cloud.google.com/sdk/docs/install); pulumi up runs `gcloud builds "
                                        "submit` for the TPU engine image"),
    ("fake", "", "local tools: gcloud has no active account: run gcloud auth login (the TPU engine image's build "
                 "runs as gcloud's account, not as the Application Default Credentials;"),
])
def test_a_machine_that_cannot_run_the_engine_build_is_one_line(run, google, tpu, tmp_path, monkeypatch, path,
                                                                accounts, line):
    """The TPU engine image's build runs on the machine of `pulumi up` (bash + gcloud as its logged-in account):
    what that machine lacks is one line naming what to install or run, and `pulumi up`'s gate stops on it."""
    _tpu7x_reservation(google)
    code, out = run(stack=fixture_stack("tpu"), plan=tpu.folder)
    assert code == 0, out
    assert any(printed.startswith("ok   local tools: gcloud ") and "active account builder@example.com" in printed
               for printed in out)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty if path == "bin-only" else tmp_path / "bin"))
    monkeypatch.setenv("FAKE_GCLOUD_ACCOUNTS", accounts)
    code, out = run(stack=fixture_stack("tpu"), plan=tpu.folder)
    assert code == 1
    assert _only_failure(out).startswith("FAIL " + line), out
    failed = preflight.gate(parse("tpu"), "tpu", preflight.Google.from_environment("p"))
    assert [c.name for c in failed] == ["local tools"]
    assert "nothing was created" in preflight.gate_message(failed)


def test_a_gpu_stack_runs_nothing_on_this_machine(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert preflight.check_local(parse("gpu3")) == []


def test_tpu_chips_reserved_need_no_quota_and_spot_names_its_chips(run, google, tpu, tmp_path):
    """tpu7x: chips from the reservation need no TPU quota; Spot needs the region's preemptible TPU7x quota, which
    regions.get does not report, so the line names the chips to check."""
    _tpu7x_reservation(google)
    code, out = run(stack=fixture_stack("tpu"), plan=tpu.folder)
    assert code == 0, out
    assert any("tpu7x: 32 chips come from reservation test-tpu7x-reservation, which needs no TPU quota" in line
               for line in out)
    config = {k: v for k, v in stack_document("tpu")["config"].items() if k != "kimi-k3-1:tpu.reservation"}
    spot = write_stack(tmp_path, "spot", {**config, "kimi-k3-1:tpu.spot": True})
    google.calls.clear()
    code, out = run(stack=spot, plan=tpu.folder)
    assert code == 0, out
    assert any("tpu7x Spot: 32 chips need the region's preemptible TPU7x quota in us-central1" in line for line in out)
    assert not any("/reservations/" in path for _, path in google.calls)  # Spot: no reservation to read


BUCKET = "kimi-test-project-kimi-k3-1-weights"
GUIDE = {"llm-d-guide": "kimi-k3-1"}


@pytest.mark.parametrize(("answer", "verdict"), [
    (None, "ok   bucket: gs://kimi-test-project-kimi-k3-1-weights is free; pulumi up creates it, every destroy keeps "
           "it"),
    ({"name": BUCKET, "projectNumber": "123456789012", "labels": {**GUIDE, "pulumi-stack": "gpu3"}},
     "ok   bucket: gs://kimi-test-project-kimi-k3-1-weights exists and is this stack's (kept by its last destroy): "
     "pulumi up takes it back as it is, nothing to set; every destroy keeps it"),
    ({"name": BUCKET, "projectNumber": "123456789012", "labels": {**GUIDE, "pulumi-stack": "tpu"}},
     "ok   bucket: gs://kimi-test-project-kimi-k3-1-weights exists and is stack tpu's of this project, which staged "
     "the checkpoint for every stack: pulumi up uses it as it is, and no destroy of this stack deletes it"),
    ({"name": BUCKET, "labels": {}}, "FAIL bucket: gs://kimi-test-project-kimi-k3-1-weights already exists and has no "
                                     "llm-d-guide label of this guide: set storage.bucketName to a free name, or "
                                     "storage.bucketExists true if it is yours to share"),
    ({"name": BUCKET, "projectNumber": "999", "labels": {**GUIDE, "pulumi-stack": "gpu3"}},
     "FAIL bucket: gs://kimi-test-project-kimi-k3-1-weights already exists and is in project number 999, not this "
     "project's 123456789012: set storage.bucketName to a free name, or storage.bucketExists true if it is yours to "
     "share"),
    (403, "FAIL bucket: gs://kimi-test-project-kimi-k3-1-weights exists and this identity cannot read it (another "
          "project's): set storage.bucketName to a free name"),
])
def test_the_bucket_is_created_taken_back_shared_or_refused(run, google, answer, verdict):
    """Whose the bucket name is decides what `pulumi up` does with it (preflight.find_bucket): one line each."""
    if answer is not None:
        google.state["buckets"][BUCKET] = answer
    code, out = run()
    assert verdict in out, out
    assert code == (1 if verdict.startswith("FAIL") else 0)
    if code:
        assert _only_failure(out) == verdict


@pytest.mark.parametrize(("answer", "use"), [
    (None, "create"),
    ({"name": BUCKET, "labels": {**GUIDE, "pulumi-stack": "gpu"}}, "import"),
    ({"name": BUCKET, "labels": {**GUIDE, "pulumi-stack": "gpu-staging"}}, "read"),
])
def test_up_uses_the_bucket_as_the_preflight_says(google, answer, use):
    """What the program does with the bucket (`pulumi up` and `preview`): the same answer, asked of Google."""
    from components.config import parse_config

    google.reset()
    if answer is not None:
        google.state["buckets"][BUCKET] = answer
    raw = {k.removeprefix("kimi-k3-1:"): v for k, v in stack_document("gpu")["config"].items()
           if k.startswith("kimi-k3-1:")}
    client = preflight.Google(requests.Session(), google.url, 5.0)
    assert preflight.bucket_use(parse_config(raw, "gpu"), "gpu", google=client) == use


def test_a_bucket_of_someone_else_stops_up_in_one_line(google):
    from components.config import parse_config

    google.reset()
    google.state["buckets"][BUCKET] = {"name": BUCKET, "labels": {}}
    raw = {k.removeprefix("kimi-k3-1:"): v for k, v in stack_document("gpu")["config"].items()
           if k.startswith("kimi-k3-1:")}
    with pytest.raises(ConfigError) as err:
        preflight.bucket_use(parse_config(raw, "gpu"), "gpu",
                             google=preflight.Google(requests.Session(), google.url, 5))
    assert str(err.value).startswith("kimi-k3-1:storage.bucketName = 'kimi-test-project-kimi-k3-1-weights': gs://")
    assert "\n" not in str(err.value)


def test_permission_denied_names_the_permission(run, google):
    google.state["errors"]["/regions/"] = [(403, fakegoogle.status(403, "PERMISSION_DENIED", "Required "
                                                                   "'compute.regions.get' permission"), {})]
    code, out = run()
    assert code == 1
    assert "permission denied reading region us-central1's quotas: the identity needs compute.regions.get" \
        in _only_failure(out)


def test_throttling_is_waited_out_then_reported(run, google):
    throttled = (429, fakegoogle.status(429, "RESOURCE_EXHAUSTED", "Quota exceeded"), {"Retry-After": "0"})
    google.state["errors"]["/aggregated/"] = []
    google.state["errors"]["/reservations/" + fakegoogle.RESERVATION] = [throttled]
    code, out = run()
    assert code == 0, out  # one 429, then the answer
    google.reset()
    google.state["errors"]["/reservations/" + fakegoogle.RESERVATION] = [throttled] * preflight.RETRIES
    code, out = run()
    assert code == 1
    assert f"throttled reading reservation {fakegoogle.RESERVATION} after {preflight.RETRIES} tries" \
        in _only_failure(out)


def test_a_timeout_is_one_line(run, google):
    google.state["delay"]["/storage/v1/b/"] = 4
    code, out = run(timeout=1.5)
    assert code == 1
    assert "no answer from storage.googleapis.com within 1.5 s" in _only_failure(out)


def test_exit_codes(run, variants, tmp_path, monkeypatch, capsys):
    """As tools/__main__.py's table: 0 passed (above), 1 a check or the config failed, 2 a missing input."""
    plan = str(variants["gpu3"].folder)
    assert cli.main(["--stack-file", str(tmp_path / "Pulumi.none.yaml")]) == 2  # no stack file
    assert cli.main(["--stack-file", str(STACK), "--plan", str(tmp_path)]) == 2  # no plan there
    bad = write_stack(tmp_path, "bad", {**stack_document("gpu3")["config"], "kimi-k3-1:gpu.slices": 99})
    assert cli.main(["--stack-file", str(bad), "--plan", plan]) == 1  # the program rejects the config
    assert "kimi-k3-1:gpu.slices = '99'" in capsys.readouterr().err
    monkeypatch.delenv(preflight.TOKEN_ENV)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    assert cli.main(["--stack-file", str(STACK), "--plan", plan]) == 2  # no Google credentials
    assert "gcloud auth application-default login" in capsys.readouterr().err


def test_the_command_a_user_types_exits_as_the_table_says(google, hub, variants, tmp_path):
    """`python -m tools preflight` in its own process (the dispatcher, its fast exit, credentials and endpoints
    from the environment): 0 on a healthy project, 1 on a failed check with the line naming what to change."""
    google.reset()
    hub.repos[REPO] = _repo(K3_CONFIG)
    env = {"PATH": "/usr/bin:/bin", preflight.API_ROOT_ENV: google.url, preflight.TOKEN_ENV: "ya29.test-token",
           "HF_TOKEN": TOKEN, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "hub")}
    command = [sys.executable, "-m", "tools", "preflight", "--stack-file", str(STACK), "--plan",
               str(variants["gpu3"].folder), "--request-timeout", "5"]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("preflight: all ")
    google.state["sub_blocks"]["rack-c"]["healthInfo"]["healthStatus"] = "UNHEALTHY"
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL reservation sub-block: sub-block rack-c (slice 2) is UNHEALTHY: name a healthy sub-block in " \
           "gpu.reservationSubBlocks[2]" in proc.stdout
    assert {method for method, _ in google.calls} == {"GET"}


def test_the_readme_runs_preflight_right_before_up():
    """The first-answer path (README, Run it for real): the preflight line comes just before `pulumi up`."""
    section = (ROOT / "README.md").read_text().split("## Run it for real", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```sh\n")[1:]
    commands = [line.split("#", 1)[0].strip() for block in blocks for line in block.split("```", 1)[0].splitlines()]
    commands = [c for c in commands if c]
    up = commands.index("pulumi up -s gpu")
    assert "-m tools preflight --stack gpu" in commands[up - 1], commands[up - 2:up + 1]
    assert not any(c.startswith("pulumi up") for c in commands[:up]), "no `pulumi up` before the preflight"


# --------------------------------------------------------------------------- the gate in `pulumi up`
def _degraded_rack(google) -> None:
    google.state["sub_blocks"]["rack-a"]["healthInfo"]["healthStatus"] = "DEGRADED"


def _hdml_throughput_spent(google) -> None:
    _quota(google, "HDML_TOTAL_THROUGHPUT")["usage"] = 190000.0


@pytest.mark.parametrize(("breaks", "line"), [
    (_degraded_rack, "sub-block rack-a (slice 0) is DEGRADED"),
    (_hdml_throughput_spent, "HDML_TOTAL_THROUGHPUT in us-central1: 10000 free of 200000, the stack needs 115200"),
])
def test_a_failing_preflight_creates_no_accelerator_pool(google, breaks, line):
    """The real program run as `pulumi up` runs it (mock engine, preview=False): the gate stops it before any
    resource is registered; the offline plan (as_up False) never asks the cloud."""
    google.reset()
    breaks(google)
    from tests import plan_server

    env = {"PATH": "/usr/bin:/bin", preflight.API_ROOT_ENV: google.url, preflight.TOKEN_ENV: "ya29.test-token"}
    proc = plan_server.run([str(STACK)], env, module="tests.up_gate")  # the program, forked from the providers
    assert proc.returncode != 0
    assert "preflight: 1 check(s) failed, nothing was created" in proc.stderr
    assert line in proc.stderr
    assert "pulumi config set lifecycle.preflight false" in proc.stderr
    assert "gpu-" not in proc.stdout
    assert google.calls and {m for m, _ in google.calls} == {"GET"}


def test_a_passing_preflight_lets_up_go_on(google, monkeypatch):
    """What __main__.py asks: no failed check against a healthy project, so `up` goes on to compose the stack (a
    whole second run of the program would cost the suite 4 s for the same two lines)."""
    google.reset()
    monkeypatch.setenv(preflight.API_ROOT_ENV, google.url)
    monkeypatch.setenv(preflight.TOKEN_ENV, "ya29.test-token")
    assert preflight.gate(parse("gpu3"), "gpu3") == []
    assert {m for m, _ in google.calls} == {"GET"}


def test_the_offline_plan_asks_no_cloud(variants):
    """Every session plan rendered with the gate in place and no Google endpoint: the plan never ran it."""
    assert any(r["type"] == "gcp:container/nodePool:NodePool" for r in variants["gpu3"].resources)


# --------------------------------------------------------------------------- limits that grow with the stack
@pytest.mark.parametrize("slices", range(1, 17))
def test_every_accepted_gpu_slice_count_stays_within_its_limits(slices):
    cfg = parse("gpu3", gpu__slices=slices, gpu__reservationSubBlocks=[f"rack-{i}" for i in range(slices)])
    found = {limit.name: limit for limit in limits.check(cfg)}
    dra = found["NVIDIA DRA driver: critical-priority pods"]
    assert dra.cap >= 2 * cfg.gpu.node_count + 1 and dra.cap >= limits.DRA_CT_QUOTA


def test_eight_gpu_slices_render_a_dra_quota_for_every_node(variants):
    plan = variants["gpu8"]
    gpu_nodes = sum(r["inputs"]["nodeCount"] for r in plan.of_type("gcp:container/nodePool:NodePool")
                    if r["name"].startswith("gpu-"))
    assert gpu_nodes == 8 * 16
    quota = next(m for m in plan.manifests if m["kind"] == "ResourceQuota" and m["metadata"]["namespace"]
                 == "nvidia-dra-driver-gpu")
    assert int(quota["spec"]["hard"]["pods"]) >= 2 * gpu_nodes + 1


@pytest.mark.parametrize(("key", "value", "limit"), [
    ("network.podsCidr", "10.64.0.0/20", "pod range: per-node /24 ranges"),
    ("network.nodesCidr", "10.0.0.0/28", "node range: node addresses"),
])
def test_each_capped_count_fails_naming_its_key(key, value, limit):
    """Mutations of the demand side: each limit refuses a stack that outgrows it with its key and source."""
    try:
        cfg = parse("gpu3", **{key.replace(".", "__"): value})
    except ConfigError as err:  # the config's own range check got there first, naming the same key
        assert err.key == key
        return
    with pytest.raises(ConfigError) as err:
        limits.check(cfg)
    assert err.value.key == key and limit in str(err.value)


@pytest.mark.parametrize(("topology", "slices"),
                         [(t, n) for t in catalog.TPU_MULTIHOST_TOPOLOGIES for n in range(1, 9)])
def test_every_accepted_tpu_shape_stays_within_its_limits(topology, slices):
    cfg = parse("tpu", tpu__topology=topology, tpu__slices=slices,
                tpu__tensorParallel=catalog.topology_chips(topology) * catalog.IRONWOOD.tensorcores_per_chip)
    found = {limit.name: limit for limit in limits.check(cfg)}
    assert found["tpu7x sub-block: hosts of one slice's pool"].demand == cfg.tpu.hosts_per_slice


def _exceed(monkeypatch, name: str, value: int) -> None:
    monkeypatch.setattr(limits, name, value)


@pytest.mark.parametrize(("stack", "limit", "key", "push"), [
    ("gpu3", "staging NAT: ports per VM x staging VMs", "storage.stagingPods",
     lambda m: _exceed(m, "NAT_PORTS_PER_ADDRESS", 1024)),
    ("gpu3", "Hyperdisk ML volume: read-only attachments", "gpu.slices",
     lambda m: _exceed(m, "HYPERDISK_ML_READERS", 16)),
    ("gpu3", "NVL72 sub-block: nodes of one slice's pool", "gpu.prefillGroups",
     lambda m: m.setattr(limits.catalog, "NVL72_MAX_NODES", 8)),
    ("tpu", "tpu7x sub-block: hosts of one slice's pool", "tpu.topology",
     lambda m: _exceed(m, "TPU7X_SUB_BLOCK_HOSTS", 2)),
])
def test_each_cloud_cap_refuses_the_stack_that_outgrows_it(monkeypatch, stack, limit, key, push):
    """Caps no accepted config reaches today, lowered: the stack is refused with the key that drives the count and
    the cap's source (what a lower cap in a future release would do)."""
    cfg = parse(stack)
    push(monkeypatch)
    with pytest.raises(ConfigError) as err:
        limits.check(cfg)
    assert err.value.key == key and limit in str(err.value) and "(http" in str(err.value)


def test_the_service_range_holds_every_service_the_plan_creates(variants):
    """ClusterIP Services counted on the rendered plan (charts included): the same at 3 and 8 slices, within
    network.servicesCidr, listed in the plan summary; a range too small is refused naming the key."""
    gpu3, gpu8 = variants["gpu3"], variants["gpu8"]
    count = limits.cluster_ip_services(gpu3.manifests)
    assert count == limits.cluster_ip_services(gpu8.manifests) >= 1
    assert f"service range: ClusterIP Services: {count} of 4096" in gpu8.summary
    # The largest range one address short of the Services (one more stands in where, without the charts' copies,
    # the plan renders a single Service, which any range holds).
    manifests = [*gpu3.manifests, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "one-more"}}]
    short = 32 - ((limits.cluster_ip_services(manifests) - 1).bit_length() - 1)
    cfg = parse("gpu3", network__servicesCidr=f"10.8.0.0/{short}")
    with pytest.raises(ConfigError) as err:
        limits.check(cfg, manifests)
    assert err.value.key == "network.servicesCidr" and limits.SERVICE_RANGE_SOURCE in str(err.value)


def test_the_dra_rule_is_gkes_own_words():
    assert "at least 2 times the number of A4X Max nodes in the cluster plus 1" in limits.DRA_QUOTA_SOURCE
    assert "https://docs.cloud.google.com/ai-hypercomputer/docs/create/gke-ai-hypercompute-custom-a4x-max" \
        in limits.DRA_QUOTA_SOURCE
    assert limits.dra_critical_pods(18) >= 37 and limits.dra_critical_pods(128) == 257


def test_every_limit_names_its_source_and_can_fail():
    cfg = parse("gpu3")
    for limit in limits.limits(cfg):
        assert limit.source and limit.ok
        assert not limits.Limit(limit.name, limit.cap + 1, limit.cap, limit.key, limit.source).ok

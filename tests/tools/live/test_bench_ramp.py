"""`python -m tools bench --ramp` against the fakes of tests/tools/live/test_bench.py, whose KEDA moves each scaled
role as the cluster would (FakeKeda): the driver sees the scale-down of a fresh stack, the scale-up under the
benchmark Job's load and the scale-down once the Job is deleted, reports both with the plan's times, stops the load
whatever happens and fails the step when a role does not move within the plan's bound."""

from __future__ import annotations

import json
import math
import re

from tests.conftest import ROOT
from tests.tools.live.test_bench import ROLES, FakeKeda, World, drive, run_record
from tools.live import bench, bench_ramp
from tools.live.pulumi_stack import CONCURRENCY_KEY, CONVERSATIONS_KEY


def ramp_record(tmp_path) -> dict:
    return json.loads((tmp_path / "results" / "gpu" / "20260102T030405Z" / bench_ramp.RAMP_FILE).read_text())


def test_the_ramp_reports_a_scale_up_and_a_scale_down_within_the_plans_times(tmp_path):
    world = World()
    code, lines = drive(world, tmp_path, "--ramp")
    assert code == 0, "\n".join(lines)
    steps = [line for line in lines if line.startswith("==> ")]
    assert steps[1:5] == ["==> up", "==> wait", "==> smoke", "==> ramp"]
    record = ramp_record(tmp_path)
    assert set(record["roles"]) == {"prefill"}  # decode is fixed at one replica: nothing to ramp
    phases = {p["name"]: p for p in record["phases"]}
    assert [p["want"] for p in record["phases"]] == ["min", "max", "min"]
    up, down = phases["up"]["reached_s"]["prefill"], phases["down"]["reached_s"]["prefill"]
    assert up <= bench_ramp.UP_MARGIN * ROLES["prefill"]["upSeconds"]
    assert down <= bench_ramp.DOWN_MARGIN * ROLES["prefill"]["downSeconds"]
    rise = [s["current"] for s in phases["up"]["samples"]["prefill"]]
    assert rise[0] == 1 and rise[-1] == 3
    assert f"ramp up: prefill 1 -> 3 replicas in {up / 60:.1f} min (plan 18.1 min)" in lines
    assert "ramp: prefill asks for 3 replicas at 243,725 uncached prompt tokens/s at the router" in lines
    assert f"ramp down: prefill 3 -> 1 replicas in {down / 60:.1f} min (plan 69.0 min)" in lines
    # The load was the benchmark Job at benchmark.concurrency, deleted before the down phase; the keys came back.
    loads = [entry for entry in world.log if entry[0] == "set_config" and entry[1] == CONVERSATIONS_KEY]
    assert loads[0][2] == str(32 * bench_ramp.ROUNDS)
    assert CONVERSATIONS_KEY not in world.config and CONCURRENCY_KEY not in world.config
    assert world.names().count("up") == 4  # the stack, load on, load off, the benchmark
    assert json.loads((tmp_path / "results" / "gpu" / "20260102T030405Z" / "run.json").read_text())[
        "steps"]["ramp"] == "ok"


def test_a_role_that_never_scales_up_fails_the_step_and_the_load_is_stopped(tmp_path):
    world = World()
    world.keda = FakeKeda(world, ROLES, no_up=frozenset({"keda-hpa-kimi-k3-1-prefill"}))
    code, lines = drive(world, tmp_path, "--ramp", "--ramp-concurrency", "8")
    assert code == 1
    record = run_record(tmp_path)
    assert record["steps"]["ramp"] == "failed"
    assert "the ramp did not see up prefill reach its target" in "\n".join(lines)
    assert "ramp up: prefill 1 -> 1 replicas, not at its max (3) after 27.1 min" in lines
    assert world.load[0] is False  # the Job was deleted before the teardown
    sets = [entry[2] for entry in world.log if entry[0] == "set_config" and entry[1] == CONCURRENCY_KEY]
    assert sets[0] == "8"
    assert world.names().count("destroy") == 1 and "wait_job" not in world.names()


def test_a_role_that_never_comes_down_ends_the_ramp_before_any_load(tmp_path):
    world = World()
    world.keda = FakeKeda(world, ROLES, no_down=frozenset({"keda-hpa-kimi-k3-1-prefill"}))
    code, lines = drive(world, tmp_path, "--ramp")
    assert code == 1
    assert "ramp settle: prefill 3 -> 3 replicas, not at its min (1) after 86.2 min" in lines
    assert [p["name"] for p in ramp_record(tmp_path)["phases"]] == ["settle"]
    assert not any(entry[1] == CONVERSATIONS_KEY for entry in world.log if entry[0] == "set_config")


def test_a_scale_up_slower_than_the_plans_bound_fails(tmp_path):
    world = World()
    world.keda = FakeKeda(world, ROLES, up_share=bench_ramp.UP_MARGIN + 0.1)
    code, lines = drive(world, tmp_path, "--ramp")
    assert code == 1
    assert "ramp up: prefill 1 -> 1 replicas, not at its max (3) after 27.1 min" in lines


def test_a_stack_that_scales_nothing_is_refused_with_the_reason(tmp_path):
    world = World()
    world.extra_outputs = {"autoscaledRoles": {"decode": ROLES["decode"]}}
    code, lines = drive(world, tmp_path, "--ramp")
    assert code == 1
    assert any("scales no role between two sizes" in line for line in lines)
    assert "hpa" not in world.names()


def test_the_fakes_roles_are_the_plans(gpu, tpu):
    """The ramp's bounds are the stack output the plan renders: the fake's are the GPU fixture's, and each role's
    time up is the summary's time to add one step."""
    assert gpu.outputs["autoscaledRoles"] == ROLES
    for plan in (gpu, tpu):
        add_s = 60 * float(re.search(r"time to add one step: ([\d.]+) min", plan.summary).group(1))
        hpas = {m["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["name"] for m in plan.manifests
                if m.get("kind") == "ScaledObject"}
        roles = plan.outputs["autoscaledRoles"]
        assert {r["hpa"] for r in roles.values()} == hpas
        assert all(abs(r["upSeconds"] - add_s) <= 6 for r in roles.values())
        assert all(r["downSeconds"] > r["upSeconds"] for r in roles.values())
    doc = (ROOT / "docs" / "scaling.md").read_text()
    prefill, engines = gpu.outputs["autoscaledRoles"]["prefill"], tpu.outputs["autoscaledRoles"]["engines"]
    assert (f"GPU prefill up {prefill['upSeconds']:,} s, down {prefill['downSeconds']:,} s; TPU engines up "
            f"{engines['upSeconds']:,} s, down\n{engines['downSeconds']:,} s") in doc
    assert f"(TPU engines: {engines['loadAtMax']['sessions']} sessions)" in doc
    needed = prefill['loadAtMax']['uncachedPromptTokensPerSecond']
    assert f"GPU prefill needs {needed:,} uncached prompt tokens/s" in doc


def test_the_load_is_what_the_triggers_need_for_the_maximum(tpu):
    """Sessions-based roles (TPU engines, GPU decode) name the sessions at which their trigger asks for the maximum:
    the ramp runs at least that many; the TPU fixture's engines need 4 (0.8 x 2 sessions per slice x 2 slices)."""
    engines = tpu.outputs["autoscaledRoles"]["engines"]
    assert engines["loadAtMax"] == {"sessions": 4}
    assert bench_ramp.ramp_sessions({"engines": engines}, 2) == 4
    assert bench_ramp.ramp_sessions({"engines": engines}, 32) == 32
    assert bench_ramp.load_lines({"engines": engines}) == ["ramp: engines asks for 2 replicas at 4 sessions in flight"]


def test_ramp_options_reach_the_driver():
    opts = bench.options_from_args(bench.build_parser().parse_args(["--stack", "gpu", "--ramp",
                                                                    "--ramp-concurrency", "5"]))
    assert opts.ramp and opts.ramp_concurrency == 5
    assert math.isclose(bench_ramp.bounds(ROLES)[0], bench_ramp.UP_MARGIN * 1085)

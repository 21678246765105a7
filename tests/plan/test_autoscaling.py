"""Autoscaling within the reservation, offline: the HPA algorithm as released (what a KEDA ScaledObject drives), a step
and a diurnal trace replayed through each track's scaled roles, and the envelope the plan prints."""

from __future__ import annotations

import pytest

from components.facts import versions
from components.observe import monitoring
from components.plan import autoscaling as a
from components.plan import capacity, cost, loading
from tests.config.test_config import parse
from tools.preview import scaling as tool

GPU_2P2D = {"gpu__prefillGroups": 2, "gpu__decodeGroups": 2}
"""A GPU slice whose two roles both scale (16 nodes of the 18-node rack at the maximum)."""


def role(name: str = "decode", lo: int = 1, hi: int = 4, sessions: int = 10, add: float = 600.0) -> a.Role:
    return a.Role(name, lo, hi, 1, 4, sessions, 0.0, add)


# --------------------------------------------------------------------------- the HPA
def test_per_pod_replicas_is_ceil_of_usage_over_target_outside_the_tolerance():
    assert a.per_pod_replicas(2, 41.0, 20.0) == 2      # ratio 1.025: inside the 10 % tolerance, keep
    assert a.per_pod_replicas(2, 45.0, 20.0) == 3      # 1.125: ceil(45 / 20)
    assert a.per_pod_replicas(4, 10.0, 20.0) == 1      # 0.125: ceil(0.5)
    assert a.per_pod_replicas(1, 0.0, 20.0) == 0       # the HPA then holds minReplicas
    assert a.per_pod_replicas(3, 60.0, 20.0) == 3


def test_scale_up_is_immediate_and_scale_down_waits_the_window_then_one_step_per_period():
    r = role(add=600)
    rules = a.behavior(r)
    assert (rules.up_window_s, rules.down_window_s, rules.down_period_s, rules.down_pods) == (0, 600, 600, 1)
    hpa = a.Hpa(r, rules)
    assert hpa.normalize(0, 1, 4) == 4                  # a burst gets every replica it needs at once
    assert hpa.normalize(15, 4, 9) == 4                 # never above max
    assert hpa.normalize(30, 4, 1) == 4                 # recent recommendations of 4 hold it (stabilisation)
    assert hpa.normalize(600, 4, 1) == 4                # the window still holds what was recommended at 15 s
    assert hpa.normalize(616, 4, 1) == 3                # window past: one step down
    assert hpa.normalize(631, 3, 1) == 3                # the next step waits a whole period
    assert hpa.normalize(1217, 3, 1) == 2
    assert hpa.normalize(1818, 2, 0) == 1
    assert hpa.normalize(2419, 1, 0) == 1               # never below min


def test_windows_and_drain_follow_the_models_clock():
    """Cooldowns at least the time to add a step; a scaled-down pod's grace outlasts its longest session."""
    for track in ("gpu", "tpu"):
        cfg = parse(track)
        add, _ = a.time_to_add_s(cfg)
        for r in a.default_roles(cfg):
            rules = a.behavior(r)
            assert rules.down_window_s >= add and rules.down_period_s >= add
    assert a.drain_grace_s() >= a.SESSION_S
    assert a.SCRAPE_S == int(monitoring.SCRAPE_INTERVAL.rstrip("s"))


def test_time_to_add_is_the_load_and_warm_start_the_plan_models():
    """A replica a scale-out adds starts warm (a role never goes below one replica, whose first start filled the
    compile cache): the engine start less the compile an empty cache costs, as the warm restart counts it."""
    cfg = parse("tpu")
    seconds, terms = a.time_to_add_s(cfg)
    assert seconds == pytest.approx(a.DETECT_S + a.SCHEDULE_S + loading.pod_start_s(cfg)
                                    + loading.load_model(cfg).load_s + loading.ENGINE_START_S["tpu"]
                                    - loading.COLD_COMPILE_S["tpu"])
    assert seconds == pytest.approx(a.DETECT_S + a.SCHEDULE_S + loading.group_start(cfg).warm_s)
    assert "weight load" in terms and "engine start 10 min (compile caches warm)" in terms
    assert all(r.min >= 1 for track in ("gpu", "tpu") for r in a.default_roles(parse(track)))


# --------------------------------------------------------------------------- the replay, in CI
@pytest.mark.parametrize("track, changes", [("tpu", {}), ("gpu", GPU_2P2D), ("gpu", {})])
def test_step_and_diurnal_reach_the_target_in_time_and_never_cut_a_session(track, changes):
    cfg = parse(track, **changes)
    for trace in a.standard_traces(cfg):
        result = a.simulate_track(cfg, trace)
        line = a.summary_line(result)
        print(f"{track} {changes or ''}: {line}")
        assert result.max_reach_s <= result.add_s, line
        assert result.cut_sessions == 0, line
        assert max(r.drain_s for r in result.roles) <= a.drain_grace_s(), line
        assert 0 < result.node_hours < result.fixed_node_hours, line
        scaled = [r for r in result.roles if r.role.max > r.role.min]
        if "step" in trace.name:
            # the burst takes every scalable role to what it needs, and the quiet hours after bring each back to min
            for r in scaled:
                assert r.rows[-1].in_use == r.role.min, (r.role.name, line)
        for r in result.roles:
            assert all(r.role.min <= row.replicas <= r.role.max for row in r.rows)
            assert all(row.in_use <= r.role.max for row in r.rows)


def test_the_burst_queues_at_the_router_until_the_added_replicas_serve():
    cfg = parse("gpu", **GPU_2P2D)
    step, _ = a.standard_traces(cfg)
    decode = next(r for r in a.simulate_track(cfg, step).roles if r.role.name == "decode")
    rise = next(row for row in decode.rows if row.demand > decode.rows[0].demand)
    assert rise.queued > 0 and rise.replicas == 2 and rise.ready == 1
    served = next(row for row in decode.rows if row.t > rise.t and row.queued == 0)
    assert served.ready == 2 and served.t - rise.t <= decode.role.add_s
    assert a.flow_control_ttl_s() < a.PROXY_EXT_PROC_TIMEOUT_S


def test_cost_saved_is_priced_where_the_accelerators_are():
    cfg = parse("tpu", cost__tpuChipHourUsd=2.5)
    step, _ = a.standard_traces(cfg)
    result = a.simulate_track(cfg, step)
    chips_per_host = cfg.tpu.chips_per_slice // cfg.tpu.hosts_per_slice
    assert result.accelerator_hour_usd == pytest.approx(2.5 * chips_per_host)
    assert result.usd(result.saved_node_hours) == pytest.approx(result.saved_node_hours * 2.5 * chips_per_host)
    assert "$" in a.summary_line(result)


# --------------------------------------------------------------------------- the envelope
def test_envelope_at_max_is_the_configured_stack_and_its_cost():
    for track, changes in (("gpu", {"cost__gpuNodeHourUsd": 40.0}), ("tpu", {"cost__tpuChipHourUsd": 2.5})):
        cfg = parse(track, **changes)
        env = a.envelope(cfg)
        sliced = capacity.slice_capacity(cfg)
        assert env.sessions_max == sliced.sessions_hbm * (sliced.slices if track == "tpu" else 1)
        vms = cfg.gpu.node_count if track == "gpu" else cfg.tpu.slices * cfg.tpu.hosts_per_slice
        assert env.nodes_max == vms
        assert env.usd_per_hour(env.nodes_max) == pytest.approx(cost.total(cost.hourly_costs(cfg))[0])
        assert env.usd_per_hour(env.nodes_min) < env.usd_per_hour(env.nodes_max)
        lines = a.envelope_lines(cfg)
        assert lines[1].startswith(f"  at min: {env.nodes_min} ") and "time to add one step" in lines[2]


def test_unpriced_accelerators_name_the_key():
    lines = a.envelope_lines(parse("gpu"))
    assert "set kimi-k3-1:cost.gpuNodeHourUsd" in lines[1]


def test_the_tool_writes_the_report_and_plot(tmp_path, capsys):
    assert tool.main(["--stack-file", "tests/stacks/Pulumi.tpu.yaml", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "tpu" / "report.md").read_text()
    assert "## step" in report and "## diurnal" in report and "| time | sessions wanted |" in report
    assert (tmp_path / "tpu" / "scaling.png").stat().st_size > 10_000
    assert "sessions cut" in capsys.readouterr().out


def test_docs_state_the_replays_figures():
    """docs/scaling.md's table and clocks are what the replay computes."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "scaling.md").read_text()
    for track, changes, label in (("tpu", {}, "TPU (2 slices)"), ("gpu", GPU_2P2D, "GPU 2P+2D")):
        cfg = parse(track, **changes)
        step, day = (a.simulate_track(cfg, t) for t in a.standard_traces(cfg))
        name = step.trace.name if track == "tpu" else step.trace.name.removesuffix(" sessions")
        assert f"| {label} | {name} |" in doc
        assert f"{step.max_reach_s / 60:.1f} min (add {step.add_s / 60:.1f})" in doc
        for r in (step, day):
            assert f"{r.node_hours:.1f} / {r.fixed_node_hours:.1f} | {r.saved_node_hours / r.fixed_node_hours:.0%}"\
                .replace("%", " %") in doc
    gpu, tpu = (a.time_to_add_s(parse(track))[0] / 60 for track in ("gpu", "tpu"))
    assert f"GPU {gpu:.1f} min, TPU {tpu:.1f} min" in doc


# --------------------------------------------------------------------------- what the cluster gets, against KEDA's CRDs
def keda_validators(shared_dir):
    """Strict validators of the KEDA chart 2.20.2's own CRDs, rendered with the chart (templates/crds/)."""
    import jsonschema

    from tests.schemas import _strict
    from tools.preview.helm_render import render_templates

    found = {}
    for obj in render_templates(shared_dir / "charts" / "keda", {}, "keda", "keda"):
        if obj["kind"] != "CustomResourceDefinition":
            continue
        for version in obj["spec"]["versions"]:
            schema = dict(version["schema"]["openAPIV3Schema"])
            schema.setdefault("properties", {})["metadata"] = {"type": "object"}
            found[(f"{obj['spec']['group']}/{version['name']}", obj["spec"]["names"]["kind"])] = \
                jsonschema.Draft7Validator(_strict(schema))
    return found


@pytest.mark.parametrize("track, changes", [("tpu", {}), ("gpu", {**GPU_2P2D, "gpu__slices": 1})])
def test_scaled_objects_and_their_auth_are_valid_against_the_charts_crds(shared, track, changes):
    import jsonschema

    cfg = parse(track, **changes)
    validators = keda_validators(shared)
    objects = [a.scaled_object(cfg, r, "set") for r in a.default_roles(cfg)] + [a.trigger_authentication(cfg)]
    for obj in objects:
        validators[(obj["apiVersion"], obj["kind"])].validate(obj)
    names = [o["spec"]["scaleTargetRef"]["name"] for o in objects[:-1]]
    assert names == (["set-prefill", "set-decode"] if track == "gpu" else ["set"])
    # a mutation of any spec field KEDA does not know is refused (the strict schema holds)
    bad = a.scaled_object(cfg, a.default_roles(cfg)[0], "set")
    bad["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["window"] = 1
    with pytest.raises(jsonschema.ValidationError, match="window"):
        validators[(bad["apiVersion"], bad["kind"])].validate(bad)


def test_triggers_read_only_checked_router_metrics_of_this_stack():
    from components.facts import metrics

    cfg = parse("gpu", **GPU_2P2D)
    prefill, decode = (a.trigger(cfg, r) for r in a.default_roles(cfg))
    for t, names in ((decode, ("llm_d_epp_request_running", "llm_d_epp_flow_control_queue_size")),
                     (prefill, ("llm_d_epp_request_input_tokens", "llm_d_epp_request_cached_tokens"))):
        for name in names:
            assert metrics.require(name, "epp") == name and name in t["metadata"]["query"]
        assert f'cluster="{cfg.cluster_name}"' in t["metadata"]["query"]
        assert t["metadata"]["serverAddress"].endswith(f"/projects/{cfg.gcp.project}/location/global/prometheus")
    assert decode["metadata"]["threshold"] == f"{a.KV_TARGET * capacity.decode_capacity(cfg).sequences:g}"


def test_flow_control_is_on_at_the_autoscalers_set_point():
    fc = a.flow_control(parse("tpu"))
    assert fc["featureGates"] == ["flowControl"]
    assert fc["plugins"][0]["parameters"]["kvCacheUtilThreshold"] == a.KV_TARGET
    assert fc["flowControl"]["saturationDetector"]["pluginRef"] == fc["plugins"][0]["name"]
    assert fc["flowControl"]["defaultRequestTTL"] == "940s"


def test_keda_renders_pinned_images_and_scales_only_the_two_target_kinds(shared):
    from tools.preview.helm_render import content_digest, directory_files, render_templates

    folder = shared / "charts" / "keda"
    assert content_digest(directory_files(folder)) == versions.KEDA_CHART.content_sha256
    digest = "sha256:" + "a" * 64
    cfg = parse("tpu", images__kedaDigest=digest, kubernetes__namespace="kimi")
    objects = render_templates(folder, a.keda_values(cfg), "keda", a.KEDA_NAMESPACE)
    images = sorted(c["image"] for o in objects if o["kind"] == "Deployment"
                    for c in o["spec"]["template"]["spec"]["containers"])
    assert images == [f"ghcr.io/kedacore/keda-admission-webhooks:{versions.KEDA_CHART.version}",
                      f"ghcr.io/kedacore/keda-metrics-apiserver:{versions.KEDA_CHART.version}",
                      f"ghcr.io/kedacore/keda:{versions.KEDA_CHART.version}@{digest}"]
    scale_rules = [r for o in objects if o["kind"] == "ClusterRole" for r in o.get("rules", [])
                   if any(res.endswith("/scale") for res in r.get("resources", []))]
    groups = {g for r in scale_rules for g in r["apiGroups"]}
    assert "*" not in groups and {"disaggregatedset.x-k8s.io", "leaderworkerset.x-k8s.io"} <= groups
    assert not [o for o in objects if o["kind"] == "NetworkPolicy"]
    operator = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "keda-operator")
    env = {e["name"]: e.get("value") for e in operator["spec"]["template"]["spec"]["containers"][0].get("env", [])}
    assert env.get("WATCH_NAMESPACE") == "kimi"


def test_a_maximum_above_what_the_stack_holds_is_refused_naming_the_key():
    from tests.config.test_config import error

    assert error("tpu", autoscaling__enginesMax=3).startswith(
        "kimi-k3-1:autoscaling.enginesMax = 3: the stack holds 2")
    assert "tpu.slices" in error("tpu", autoscaling__enginesMax=3)
    assert error("gpu", autoscaling__decodeMin=2).startswith(
        "kimi-k3-1:autoscaling.decodeMin = 2: above the maximum")
    # on wherever it applies and off elsewhere (the plan summary says why)
    assert not parse("tpu", monitoring__enabled=False).autoscaling_on and parse("tpu").autoscaling_on
    assert not parse("gpu", gpu__slices=3, gpu__reservationBlock="b",
                     gpu__reservationSubBlocks=["r1", "r2", "r3"]).autoscaling_on
    assert error("gpu", autoscaling__enginesMax=1).startswith("kimi-k3-1:autoscaling.enginesMax")  # other track's key
    assert [r.max for r in a.roles(parse("gpu", autoscaling__prefillMax=2))] == [2, 1]
    assert a.roles(parse("gpu", autoscaling__enabled=False)) == ()

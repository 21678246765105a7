"""Weight loading and time to serving: each rank reads only what it serves, the loader and the probes follow the
modelled load, and the plan's critical path comes from its own dependency graph.

The bytes are recomputed here tensor by tensor: the released Kimi K3 tensor list (vllm-project/tpu-inference
tests/models/jax/test_kimi_k3_real_shapes.py RELEASED_TENSORS @0860a9c, transcribed from the Hub's safetensors
metadata) run through each engine's own filter predicate, not through components/plan/loading.py's aggregates."""

from __future__ import annotations

import copy
import re

import pytest

from components.config import parse_config
from components.plan import timeline
from tests import engine_facts as facts
from tests.conftest import ROOT, STACKS, Plan, stack_document

# (name pattern, elements per tensor, tensors, bytes per element): MXFP4 codes and E8M0 scales are bytes,
# everything else bf16 (the sum is the 1.56 TB the seed post gives).
RELEASED = [
    ("model.embed_tokens.weight", 163840 * 7168, 1, 2), ("lm_head.weight", 163840 * 7168, 1, 2),
    ("model.norm.weight", 7168, 1, 2), ("model.output_attn_res_norm.weight", 7168, 1, 2),
    ("model.output_attn_res_proj.weight", 7168, 1, 2),
    *[(f"model.layers.N.{n}.weight", 7168, 93, 2) for n in (
        "input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "self_attention_res_proj",
        "mlp_res_norm", "mlp_res_proj")],
    *[(f"model.layers.N.mlp.{n}.weight", 33792 * 7168, 1, 2) for n in ("gate_proj", "up_proj", "down_proj")],
    *[(f"model.layers.N.self_attn.{n}_proj.weight", 12288 * 7168, 69, 2) for n in "qkv"],
    *[(f"model.layers.N.self_attn.{n}_conv1d.weight", 12288 * 4, 69, 2) for n in "qkv"],
    ("model.layers.N.self_attn.A_log", 128, 69, 2), ("model.layers.N.self_attn.dt_bias", 12288, 69, 2),
    ("model.layers.N.self_attn.f_a_proj.weight", 128 * 7168, 69, 2),
    ("model.layers.N.self_attn.f_b_proj.weight", 12288 * 128, 69, 2),
    ("model.layers.N.self_attn.b_proj.weight", 96 * 7168, 69, 2),
    ("model.layers.N.self_attn.o_norm.weight", 128, 69, 2),
    ("model.layers.N.self_attn.q_a_proj.weight", 1536 * 7168, 24, 2),
    ("model.layers.N.self_attn.q_a_layernorm.weight", 1536, 24, 2),
    ("model.layers.N.self_attn.q_b_proj.weight", 18432 * 1536, 24, 2),
    ("model.layers.N.self_attn.kv_a_proj_with_mqa.weight", 576 * 7168, 24, 2),
    ("model.layers.N.self_attn.kv_a_layernorm.weight", 512, 24, 2),
    ("model.layers.N.self_attn.kv_b_proj.weight", 24576 * 512, 24, 2),
    ("model.layers.N.self_attn.g_proj.weight", 12288 * 7168, 93, 2),
    ("model.layers.N.self_attn.o_proj.weight", 7168 * 12288, 93, 2),
    ("model.layers.N.block_sparse_moe.gate.weight", 896 * 7168, 92, 2),
    ("model.layers.N.block_sparse_moe.gate.e_score_correction_bias", 896, 92, 2),
    ("model.layers.N.block_sparse_moe.routed_expert_down_proj.weight", 3584 * 7168, 92, 2),
    ("model.layers.N.block_sparse_moe.routed_expert_up_proj.weight", 7168 * 3584, 92, 2),
    ("model.layers.N.block_sparse_moe.routed_expert_norm.weight", 3584, 92, 2),
    *[(f"model.layers.N.block_sparse_moe.shared_experts.{n}.weight", 6144 * 7168, 92, 2)
      for n in ("gate_proj", "up_proj", "down_proj")],
    ("model.layers.N.block_sparse_moe.experts.N.w1.weight_packed", 3072 * 1792, 82432, 1),
    ("model.layers.N.block_sparse_moe.experts.N.w1.weight_scale", 3072 * 112, 82432, 1),
    ("model.layers.N.block_sparse_moe.experts.N.w2.weight_packed", 3584 * 1536, 82432, 1),
    ("model.layers.N.block_sparse_moe.experts.N.w2.weight_scale", 3584 * 96, 82432, 1),
    ("model.layers.N.block_sparse_moe.experts.N.w3.weight_packed", 3072 * 1792, 82432, 1),
    ("model.layers.N.block_sparse_moe.experts.N.w3.weight_scale", 3072 * 112, 82432, 1),
]
EXPERTS = 896
# vLLM 0.33.0 vllm/model_executor/model_loader/ep_weight_filter.py: `_EXPERT_ID_RE` and the suffixes
# `should_skip_weight` skips; vLLM-TorchTPU 0.29.0 vllm_torchtpu/model_loader_patches.py `_EXPERT_WEIGHT_SUFFIXES`.
EXPERT_ID = re.compile(r"\.experts\.(\d+)\.")
SKIPPED_SUFFIXES = {"gpu": (".weight", ".weight_packed"),
                    "tpu": (".weight", ".weight_packed", ".weight_scale", ".scale")}
SHARES_PAGE_CACHE = {"gpu": True, "tpu": True}  # InstantTensor's buffered backend, TorchTPU's page-cache prefetch


def rank_bytes(track: str, ep: int, rank: int = 0) -> tuple[int, int]:
    """(bytes rank `rank` reads, bytes every rank reads) under the engine's filter, linear expert placement
    (`compute_local_expert_ids`)."""
    base, extra = divmod(EXPERTS, ep)
    start = rank * base + min(rank, extra)
    local = set(range(start, start + base + (1 if rank < extra else 0)))
    total = whole = 0
    for pattern, elements, count, width in RELEASED:
        size = elements * width
        if ".experts.N." not in pattern:
            total += size * count
            whole += size * count
            continue
        kept = 0
        for expert in range(EXPERTS):
            name = pattern.replace("experts.N.", f"experts.{expert}.").replace("layers.N.", "layers.7.")
            eid = int(EXPERT_ID.search(name).group(1))
            skipped = name.endswith(SKIPPED_SUFFIXES[track]) and eid not in local
            kept += not skipped
        total += size * count // EXPERTS * kept
        if kept == EXPERTS:
            whole += size * count
    return total, whole


def engine_argvs(plan: Plan) -> list[list[str]]:
    served = next(m for m in plan.manifests if m["kind"] in ("DisaggregatedSet", "LeaderWorkerSet"))
    return [facts.exec_argv(c["args"][0]) for _, c in facts.containers(served)
            if c["name"] not in ("routing-proxy", "tpu-node-setup")]


def summary_figure(plan: Plan, pattern: str) -> float:
    return float(re.search(pattern, plan.summary).group(1).replace(",", ""))


def test_both_gpu_roles_run_the_filter_and_the_chosen_loader(gpu):
    served = next(m for m in gpu.manifests if m["kind"] == "DisaggregatedSet")
    assert [role["name"] for role in served["spec"]["roles"]] == ["prefill", "decode"]
    argvs = engine_argvs(gpu)
    assert len(argvs) == 2  # one engine container per role's pod template
    for argv in argvs:
        flags = dict(facts.split_flags(argv))
        assert "--enable-ep-weight-filter" in flags and "--enable-expert-parallel" in flags
        assert flags["--load-format"] == "instanttensor"
        assert "--safetensors-load-strategy" not in flags  # prefetch reads whole files in 0.33.0
    for _, container in facts.containers(served):
        if container["name"] == "vllm":
            env = {e["name"]: e.get("value") for e in container["env"]}
            # Buffered reads: the engines of a pod share the page cache (instanttensor _impl.py BackendPolicy).
            assert env["INSTANTTENSOR_BACKEND"] == "BUFFERED"


def test_the_checkpoint_is_the_published_size():
    total, _ = rank_bytes("gpu", 1)
    assert total == pytest.approx(1.56e12, rel=0.001)


@pytest.mark.parametrize("stack", STACKS)
def test_each_rank_and_node_reads_what_the_engine_rule_keeps(plans, stack):
    plan = plans[stack]
    cfg = parse_config({k.split(":", 1)[1]: v for k, v in stack_document(stack)["config"].items()})
    if stack == "gpu":
        flags = dict(facts.split_flags(engine_argvs(plan)[0]))
        ep = int(flags["--data-parallel-size"]) * int(flags["--tensor-parallel-size"])
        ranks = int(flags["--data-parallel-size-local"])
    else:
        ep, ranks = cfg.tpu.tensorParallel, cfg.tpu.tensorParallel // cfg.tpu.hosts_per_slice
    per_rank, whole = rank_bytes(stack, ep)
    node = per_rank * ranks - (whole * (ranks - 1) if SHARES_PAGE_CACHE[stack] else 0)
    line = re.search(rf"\(EP {ep}, {ranks} ranks/node\): ([\d,.]+) GB per rank, ([\d,.]+) GB per node", plan.summary)
    assert line, plan.summary
    assert float(line.group(1).replace(",", "")) == pytest.approx(per_rank / 1e9, abs=0.06)
    assert float(line.group(2).replace(",", "")) == pytest.approx(node / 1e9, abs=0.06)
    # The filter is what makes the load possible: without it every rank reads the whole checkpoint.
    assert per_rank < 0.2 * rank_bytes(stack, 1)[0]


@pytest.mark.parametrize("stack", STACKS)
def test_load_time_meets_the_target_and_names_its_limit(plans, stack):
    plan = plans[stack]
    load_min = summary_figure(plan, r"load time ([\d.]+) min \(target 10 min\), limited by the ")
    assert load_min <= 10
    node_gb = summary_figure(plan, r"GB per rank, ([\d,.]+) GB per node")
    rate = summary_figure(plan, r"GB per node, [\d.]+ TB per replica, [\d.]+ min at ([\d,]+) MiB/s per node")
    assert load_min == pytest.approx(node_gb * 1e9 / (rate * 2**20) / 60, abs=0.06)


@pytest.mark.parametrize("stack", STACKS)
def test_startup_probes_follow_the_modelled_load_time(plans, stack):
    plan = plans[stack]
    load_min = summary_figure(plan, r"load time ([\d.]+) min")
    start_min = summary_figure(plan, r"engine start (\d+) min assumed")
    if re.search(r"min assumed \+ image pull", plan.summary):  # a TPU leader waits for hosts still pulling
        start_min += summary_figure(plan, r"min assumed \+ image pull ([\d.]+) min")
    served = next(m for m in plan.manifests if m["kind"] in ("DisaggregatedSet", "LeaderWorkerSet"))
    for where, container in facts.containers(served):
        if container["name"] in ("routing-proxy", "tpu-node-setup"):
            continue
        if "--headless" in container["args"][0]:  # a headless vLLM-TorchTPU worker serves no HTTP to probe
            assert "startupProbe" not in container, where
            continue
        probe = container["startupProbe"]
        budget_s = probe["periodSeconds"] * probe["failureThreshold"]
        assert 2 * (load_min + start_min) * 60 - 10 <= budget_s <= 2 * (load_min + start_min) * 60 + 20, where


def test_a_slower_disk_lengthens_the_load_and_every_wait(gpu, variants):
    slow = variants["slow-disk"]
    fast_min, slow_min = (summary_figure(p, r"load time ([\d.]+) min") for p in (gpu, slow))
    assert slow_min == pytest.approx(2 * fast_min, abs=0.15)  # both printed to 0.1 min

    def waits(plan: Plan) -> tuple[int, int]:
        served = next(m for m in plan.manifests if m["kind"] == "DisaggregatedSet")
        probe = next(c for _, c in facts.containers(served) if c["name"] == "vllm")["startupProbe"]
        return probe["failureThreshold"] * probe["periodSeconds"], int(
            served["metadata"]["annotations"]["pulumi.com/timeoutSeconds"])

    (fast_probe, fast_wait), (slow_probe, slow_wait) = waits(gpu), waits(slow)
    assert slow_probe - fast_probe == pytest.approx(2 * (slow_min - fast_min) * 60, abs=20)
    assert slow_wait > fast_wait


@pytest.mark.parametrize("stack", STACKS)
def test_the_throughput_is_where_the_volume_stops_limiting(plans, stack):
    """Hand-worked: every reader node at the 2,400 MiB/s per-node limit; 512 MiB/s less and the volume limits."""
    plan = plans[stack]
    throughput = summary_figure(plan, r"Hyperdisk ML ([\d,]+) MiB/s \(")
    readers = summary_figure(plan, r"(\d+) nodes read")
    assert throughput / readers >= 2400 > (throughput - 512) / readers
    assert "limited by the per-node read limit" in plan.summary


@pytest.mark.parametrize("stack", STACKS)
def test_time_to_serving_is_the_graphs_longest_path_and_meets_the_bound(plans, stack):
    plan = plans[stack]
    match = re.search(r"time to serving \(first up, from the dependency graph\): ([\d.]+) min; bound ([\d.]+) "
                      r"min = .*; ratio ([\d.]+) \(target <= 1.05\)", plan.summary)
    assert match, plan.summary
    serving, bound, ratio = (float(g) for g in match.groups())
    assert ratio <= 1.05 and ratio == pytest.approx(serving / bound, abs=0.002)
    path = re.search(r"critical path \(min\): (.*)", plan.summary).group(1).split(" -> ")
    steps = [(step.rsplit(" ", 1)[0], float(step.rsplit(" ", 1)[1])) for step in path]
    assert steps[-1][0] in {r["name"] for r in plan.resources if r["type"] in timeline.SERVING_TYPES}
    assert sum(minutes for _, minutes in steps) == pytest.approx(serving, abs=0.1 * len(steps))
    names = [name for name, _ in steps]
    assert names.index("cluster-gke") < names.index("weights-staging-job") < names.index("weights-volume-pvc")


@pytest.mark.parametrize("stack", STACKS)
def test_nothing_waits_on_what_it_does_not_need(plans, stack):
    plan = plans[stack]
    server = next(r["name"] for r in plan.resources if r["type"] in timeline.SERVING_TYPES)
    waits = plan.closure(server)
    side = {r["name"] for r in plan.resources if r["type"].startswith((
        "kimi:router", "kimi:monitoring", "kimi:netpol", "kimi:observability"))}
    side |= {r["name"] for r in plan.resources if r["parent"] in side}
    assert not waits & side, "the model servers wait for the router, monitoring or NetworkPolicies"
    heavy = {r["name"] for r in plan.resources if r["type"] == "gcp:container/nodePool:NodePool"
             and r["parent"] != "cpu"} | {"weights-volume-pvc", "weights-staging-job"}
    for name in side:
        assert not plan.closure(name) & heavy, f"{name} waits for an accelerator pool or the weights"


def test_an_unneeded_wait_shows_in_the_ratio(gpu):
    """Staging made to wait for the accelerator pool: the path grows by that pool, the bound does not."""
    cfg = parse_config({k.split(":", 1)[1]: v for k, v in stack_document("gpu")["config"].items()})
    resources = copy.deepcopy(gpu.resources)
    before = timeline.critical_path(cfg, resources)
    pool = next(r["name"] for r in resources if r["type"] == "gcp:container/nodePool:NodePool" and r["parent"] != "cpu")
    next(r for r in resources if r["name"] == "weights-staging-job")["dependsOn"].append(pool)
    after = timeline.critical_path(cfg, resources)
    assert after.bound_s == before.bound_s
    assert after.ratio > timeline.TARGET_RATIO
    assert pool in [name for name, _ in after.path]


def test_docs_weights_figures_are_the_plans(plans):
    """docs/weights.md's figures block is the plan's own summary lines (regenerate: see the block)."""
    doc = (ROOT / "docs" / "weights.md").read_text()
    block = re.search(r"<!-- figures:begin -->\n(.*?)<!-- figures:end -->", doc, flags=re.S)
    assert block, "docs/weights.md has no figures block"
    for stack in STACKS:
        section = re.search(rf"^{stack}:\n((?:  .*\n)+)", block.group(1), flags=re.M)
        assert section, f"no {stack} section in the figures block"
        lines = [line[2:] for line in section.group(1).splitlines()]
        summary = [line.strip() for line in plans[stack].summary.splitlines()]
        for line in lines:
            assert line.strip() in summary, f"docs/weights.md {stack}: {line.strip()!r} is not in the plan"


def test_docs_say_how_the_gpu_track_attaches_the_volume():
    doc = (ROOT / "docs" / "weights.md").read_text()
    assert "https://docs.cloud.google.com/compute/docs/accelerator-optimized-machines" in doc
    assert "February 4, 2026" in doc



@pytest.mark.parametrize("stack", STACKS)
def test_the_engine_image_is_pulled_while_the_weights_stage(plans, stack):
    """A DaemonSet holding the engine image on exactly the engines' nodes, which nothing waits for and which
    waits for nothing slow: the pull overlaps staging and hydration instead of following them."""
    plan = plans[stack]
    served = next(m for m in plan.manifests if m["kind"] in ("DisaggregatedSet", "LeaderWorkerSet"))
    template = served["spec"]["roles"][0]["spec"] if stack == "gpu" else served["spec"]
    pod = template["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    engine = next(c for c in pod["containers"] if c["name"] in ("vllm", "vllm-tpu", "sglang"))
    [prepull] = [m for m in plan.manifests if m["kind"] == "DaemonSet" and "prepull" in m["metadata"]["name"]]
    spec = prepull["spec"]["template"]["spec"]
    assert [c["image"] for c in spec["containers"]] == [engine["image"]]
    assert spec["nodeSelector"] == pod["nodeSelector"] and spec["tolerations"] == pod["tolerations"]
    [resource] = [r for r in plan.resources if r["type"] == timeline.PREPULL_TYPE and "prepull" in r["name"]]
    assert not any(resource["name"] in plan.closure(r["name"]) for r in plan.resources if r is not resource)
    assert not plan.closure(resource["name"]) & {"weights-volume-pvc", "weights-staging-job"}


def test_every_tpu_host_runs_the_filter_and_the_ranged_prefetch(tpu):
    """Leader and headless workers alike: each host's ranks load their own shard."""
    argvs = engine_argvs(tpu)
    assert len(argvs) == 2  # leader and worker templates
    for argv in argvs:
        flags = dict(facts.split_flags(argv))
        assert "--enable-ep-weight-filter" in flags and "--enable-expert-parallel" in flags
        assert flags["--load-format"] == "safetensors"
        # TorchTPU's patched prefetch reads only the rank's byte ranges (vllm_torchtpu/model_loader_patches.py).
        assert flags["--safetensors-load-strategy"] == "prefetch"
        assert int(flags["--safetensors-prefetch-num-threads"]) >= 8


@pytest.mark.parametrize("name", ["gpu", "gpu2", "gpu3", "slow-disk", "spec"])
def test_gpu_startup_budget_is_at_least_upstreams(plans, variants, name):
    """llm-d's GB200 NVL72 engines get a 2,700 s startup probe (components/plan/loading.py UPSTREAM_STARTUP_S); a probe
    that fires mid-start recreates the whole group, so no GPU stack allows less, whatever its modelled load."""
    from components.plan import loading

    plan = plans[name] if name in plans else variants[name]
    served = next(m for m in plan.manifests if m["kind"] == "DisaggregatedSet")
    for where, container in facts.containers(served):
        if container["name"] == "vllm":
            probe = container["startupProbe"]
            assert probe["periodSeconds"] * probe["failureThreshold"] >= loading.UPSTREAM_STARTUP_S["gpu"], where
            assert any(m["mountPath"] == "/var/cache/vllm" for m in container["volumeMounts"]), where
            env = {e["name"]: e.get("value") for e in container["env"]}
            for key in ("VLLM_CACHE_ROOT", "FLASHINFER_WORKSPACE_BASE", "CUDA_CACHE_PATH"):
                assert env[key].startswith("/var/cache/vllm/"), (where, key)


def test_tpu_image_build_and_pull_follow_the_lock_size(monkeypatch, tpu):
    """The engine image's build and each host's pull are timeline steps computed from the lock's size, and the TPU
    startup budget counts the pull: a lock four times larger moves the build, the pull and the budget; a GPU stack
    (its image is released, not built) has neither."""
    from components.plan import loading, timeline
    from tests.config.test_config import parse

    cfg = parse("tpu")
    built = loading.engine_image(cfg)
    assert built.wheel_bytes == loading.lock_download_bytes()
    build, pull, budget = (timeline.build_step(cfg).seconds, timeline.image_pull_step(cfg).seconds,
                           loading.startup_budget_s(cfg))
    assert build == built.build_s and pull == built.pull_s
    assert "loading.engine_image" in timeline.image_pull_step(cfg).basis
    [resource] = tpu.of_type(timeline.BUILD_TYPE)
    assert timeline.step(cfg, resource).seconds == build
    real = loading.lock_download_bytes
    monkeypatch.setattr(loading, "lock_download_bytes", lambda text=None: 4 * real(text))
    bigger = loading.engine_image(cfg)
    assert timeline.build_step(cfg).seconds > build and timeline.image_pull_step(cfg).seconds > pull
    assert bigger.image_bytes - built.image_bytes == pytest.approx(3 * built.wheel_bytes)
    assert loading.startup_budget_s(cfg) >= budget + 2 * (bigger.pull_s - built.pull_s) - loading.PROBE_PERIOD_S
    assert loading.engine_image(parse("gpu")) is None and loading.pod_start_s(parse("gpu")) == 0
    assert timeline.image_pull_step(parse("gpu")).seconds == loading.IMAGE_PULL_S


def test_tpu_build_runs_alongside_the_cluster(tpu):
    """The build waits only for the APIs, its repository and its grants, so it is done before the slices are up."""
    from components.plan import timeline
    from tests.config.test_config import parse

    cfg = parse("tpu")
    durations = lambda r, start, finish: timeline.step(cfg, r).seconds  # noqa: E731
    finish, _ = timeline.finish_times(tpu.resources, durations)
    [build] = tpu.of_type(timeline.BUILD_TYPE)
    pools = [r["name"] for r in tpu.of_type("gcp:container/nodePool:NodePool") if r["name"].startswith("tpu-")]
    assert not any(r["type"] == "gcp:container/cluster:Cluster" for r in tpu.resources
                   if r["name"] in tpu.closure(build["name"]))
    assert finish[build["name"]] < min(finish[p] for p in pools)


def test_tpu_hosts_reach_the_rendezvous_well_within_its_timeout():
    """What remains of per-pod start skew (the pull's spread between a slice's hosts, from the timeline's figures)
    stays under half the engine's 300 s host rendezvous, so a slow host cannot recreate the group."""
    from components.plan import loading
    from tests.config.test_config import parse

    built = loading.engine_image(parse("tpu"))
    assert built.skew_s == pytest.approx(loading.PULL_SPREAD * built.pull_s)
    assert built.skew_s < loading.TPU_RENDEZVOUS_TIMEOUT_S / 2, \
        f"start skew {built.skew_s:.0f} s against the {loading.TPU_RENDEZVOUS_TIMEOUT_S} s rendezvous"

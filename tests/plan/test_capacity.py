"""Capacity model against hand-worked figures (arithmetic in the docstrings; docs/capacity.md), and the
configurations it must reject."""

from __future__ import annotations

import pytest

from components.config import ConfigError
from components.plan import capacity, prefixcache
from tests.config.test_config import parse
from tests.conftest import run_plan, stack_document, write_stack

# vLLM groups 24 MLA + 69 KDA layers into 1 + 3 groups of 24 (kv_cache_planning._get_kv_cache_groups_uniform_page_size),
# so a cached prefix token costs 4 x 24 x the attention page per token on each rank:
#   GPU (vLLM, fp8): 96 x 576 B = 55,296 B;  TPU (Pallas MLA pads 576 to 640 lanes): 96 x 640 = 61,440 B.
GPU_BYTES = 55_296
TPU_BYTES = 61_440


def test_per_token_figures():
    assert capacity.serving_capacity(parse("gpu")).bytes_per_token == GPU_BYTES
    assert capacity.serving_capacity(parse("tpu")).bytes_per_token == TPU_BYTES
    assert capacity.serving_capacity(parse("gpu", model__kvCacheDtype="bf16")).bytes_per_token == 2 * GPU_BYTES


def test_gpu_hand_worked():
    """A prefill group: 4 nodes x 4 GB300 = 16 GPUs, TP=1, EP=16.
    weights/GPU = non-expert 113.487e9 (whole at TP=1) + 56/896 of the experts 85.086e9 + their scales 5.318e9
    = 203.89e9; usable = 279e9 x 0.90 = 251.1e9; non-weight 12e9 assumed; KV pool = 35.209e9 B/GPU.
    blocks = 35.209e9 // (24 x 11,392 x 576 B) - 1 = 222; a 1,048,576-token request holds 93 MLA + 3 KDA groups x
    (2 align-mode states + 1 FlashKDA prefill checkpoint) = 102 -> 2 per engine, 32 per group.
    Host (vLLM's CPU tier per engine, what it logs at the served context): 120e9 // 157,483,008 B per chunk = 761
    chunks; a 1M request takes 93 MLA + 3 KDA chunks = 96, so 761 x 1,048,576 // 96 = 8,312,149 tokens x 16 engines
    = 132,994,384. What either tier keeps of a session shape: tests/plan/test_prefixcache.py."""
    c = capacity.serving_capacity(parse("gpu"))
    assert c.weight_bytes_per_device == pytest.approx(203.89e9, rel=1e-4)
    assert c.kv_pool_bytes_per_device == pytest.approx(35.209e9, rel=1e-4)
    assert (c.blocks_per_engine, c.blocks_per_sequence, c.sequences_per_engine, c.sequences) == (222, 102, 2, 32)
    assert c.host_tokens == 132_994_384 and c.endpoints_per_replica == 16
    assert capacity.slice_capacity(parse("gpu")).sessions_host == 16 * (761 // 96)  # 112 per decode group
    # 251.1e9 - 203.89e9 - (2 x 102 + 1) x 157,483,008 = 14.93e9: above that, one 1M request per engine fewer.
    assert c.non_weight_ceiling_bytes == pytest.approx(14.925e9, rel=1e-4)
    assert capacity.cpu_offload_bytes_per_engine(parse("gpu")) == 120_000_000_000  # 480e9 / 4 local DP engines


def test_tpu_hand_worked():
    """A 2x2x4 slice: 32 TensorCores of 96 GiB, TP = EP = 32: weights 48.75e9; usable x 0.85 = 87.617e9;
    non-weight = the nightly's 0.70 x 96 GiB - 48.75e9 - 3 GiB = 20.19e9; pool 18.68e9.
    blocks = 18.68e9 // (24 x 1,024 x 640) - 1 = 1,186; a 491,520-token request holds 480 + 6 = 486 -> 2."""
    c = capacity.serving_capacity(parse("tpu"))
    assert c.weight_bytes_per_device == pytest.approx(48.75e9, rel=1e-3)
    assert c.non_weight_bytes_per_device == pytest.approx(20.186e9, rel=1e-3)
    assert (c.blocks_per_engine, c.blocks_per_sequence, c.sequences) == (1_186, 486, 2)
    assert c.host_tokens == 606_208
    assert capacity.tpu_offload_bytes_per_engine(parse("tpu")) == int(2 * c.kv_pool_bytes_per_device * 32)


@pytest.mark.parametrize("changes", [{"gpu__tensorParallel": 2}, {"model__kvCacheDtype": "bf16"},
                                     {"model__contextLength": "262144"},
                                     # EP 32: 8-node groups, one prefill and one decode group per rack.
                                     {"gpu__prefillNodesPerGroup": 8, "gpu__decodeNodesPerGroup": 8,
                                      "gpu__prefillGroups": 1}])
def test_weights_pool_sessions_and_router_move_together(changes):
    """TP=2 splits the column/row/vocab-parallel part per GPU but keeps the replicated part and (sequence parallel)
    the dense MLP and shared experts whole (more pool, half the engines, a smaller block); EP 32 halves each rank's
    experts; bf16 doubles every page; a shorter context admits more requests. Each figure follows from the one
    before it."""
    base, c = capacity.serving_capacity(parse("gpu")), capacity.serving_capacity(parse("gpu", **changes))
    assert c.kv_pool_bytes_per_device == pytest.approx(
        c.usable_bytes_per_device - c.weight_bytes_per_device - c.non_weight_bytes_per_device)
    assert c.blocks_per_engine == int(c.kv_pool_bytes_per_device) // c.groups.bytes_per_block - 1
    assert c.sequences_per_engine == c.blocks_per_engine // c.blocks_per_sequence
    lru, base_lru = (prefixcache.lru_capacity_per_server(parse("gpu", **kw)) for kw in (changes, {}))
    assert (c.weight_bytes_per_device, c.sequences, lru) != (base.weight_bytes_per_device, base.sequences, base_lru)
    if "gpu__tensorParallel" in changes:
        # 76.2e9 split / 2 + 11.5e9 replicated + 25.8e9 MLP and shared experts whole = 75.4e9 (TP=1: 113.5e9).
        assert c.weights.dense == pytest.approx(75.36e9, rel=1e-3) and c.kv_groups == base.kv_groups // 2
        assert c.block_tokens < base.block_tokens
    if "gpu__prefillNodesPerGroup" in changes:
        assert c.weights.experts == pytest.approx(base.weights.experts / 2) and c.kv_groups == 2 * base.kv_groups


@pytest.mark.parametrize("stack,changes,expected", [
    # 2x2x2: 16 devices -> 97.3e9 B of weights per device + 20.2e9 non-weight over 87.6e9 usable.
    ("tpu", {"tpu__topology": "2x2x2", "tpu__tensorParallel": 16},
     "kimi-k3-1:tpu.topology = '2x2x2': weights need 97 GB per device and the engine 20 GB more, of 88 GB usable "
     "HBM; more devices per replica are needed (tpu.topology or tpu.memFractionPercent)"),
    ("tpu", {"tpu__memFractionPercent": 60},
     "kimi-k3-1:tpu.memFractionPercent = 60: weights need 49 GB per device and the engine 20 GB more, of 62 GB "
     "usable HBM; more devices per replica are needed (tpu.topology or tpu.memFractionPercent)"),
    # One node per prefill group: every GPU holds the non-expert 113.5e9 and a quarter of the experts.
    ("gpu", {"gpu__prefillNodesPerGroup": 1},
     "kimi-k3-1:gpu.prefillNodesPerGroup = 1: weights need 475 GB per device and the engine 12 GB more, of 251 GB "
     "usable HBM; more devices per replica are needed (gpu.prefillNodesPerGroup or gpu.gpuMemoryPercent)"),
    # The decode groups are checked too; 2-node groups no longer hold the weights at TP=1.
    ("gpu", {"gpu__prefillNodesPerGroup": 2, "gpu__decodeNodesPerGroup": 2},
     "kimi-k3-1:gpu.decodeNodesPerGroup = 2: weights need 294 GB per device and the engine 12 GB more, of 251 GB "
     "usable HBM; more devices per replica are needed (gpu.decodeNodesPerGroup or gpu.gpuMemoryPercent)"),
    # 70%: 203 blocks, less than the 486 one 491,520-token request holds.
    ("tpu", {"tpu__memFractionPercent": 70},
     "kimi-k3-1:tpu.memFractionPercent = 70: one sequence of 491,520 tokens needs 486 KV blocks (7.6 GB) but one "
     "engine's pool holds 203 (3.2 GB); lower it or change tpu.topology or tpu.memFractionPercent"),
    # Ratio 8: 8 x 18.68e9 x 8 devices = 1,114 GiB per host.
    ("tpu", {"tpu__hicacheRatio": 8},
     "kimi-k3-1:tpu.hicacheRatio = 8: the host pool (tpu.hicacheRatio 8 x the HBM KV pool) would take 1114 GiB per "
     "node, over 720 GiB of the ~800 GiB usable; lower tpu.hicacheRatio"),
])
def test_configurations_that_cannot_fit(stack, changes, expected):
    with pytest.raises(ConfigError) as info:
        capacity.serving_capacity(parse(stack, **changes))
    assert str(info.value) == expected


def test_plan_rejects_what_does_not_fit(tmp_path):
    config = dict(stack_document("tpu")["config"])
    config["kimi-k3-1:tpu.hicacheRatio"] = 8
    out = tmp_path / "out"
    proc = run_plan(out, "--stack-file", str(write_stack(tmp_path, "big", config)))
    assert proc.returncode != 0
    assert "kimi-k3-1:tpu.hicacheRatio = 8" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_summary_prints_the_capacity_figures(plans, stack):
    c = capacity.serving_capacity(parse(stack))
    summary = plans[stack].summary
    assert f"weights {c.weight_bytes_per_device / 1e9:.1f} GB held" in summary
    assert f"{c.sequences_per_engine} per engine, {c.sequences} per {c.role} replica" in summary
    assert f"HBM left for KV {c.kv_pool_bytes_per_device / 1e9:.1f} GB" in summary
    s = prefixcache.shape_capacity(parse(stack), prefixcache.router_shape(parse(stack)))
    assert f"{s.hbm_tokens_per_replica:,} prefix tokens in HBM ({s.hbm_sessions_per_engine} sessions per engine)" \
        in summary
    assert f"lruCapacityPerServer {prefixcache.lru_capacity_per_server(parse(stack)):,} blocks" in summary
    assert f"the pool runs at most {c.max_running}" in summary if stack == "tpu" else \
        f"prefill --max-num-seqs {c.max_running} ({c.blocks_per_engine:,} blocks // {c.groups.groups};" in summary
    if stack == "gpu":
        assert f"passes {c.non_weight_ceiling_bytes / 1e9:.1f} GB per GPU (12 GB assumed)" in summary
    device = "GPU" if stack == "gpu" else "TensorCore"
    roles = (("prefill", c), ("decode", capacity.decode_capacity(parse(stack)))) if stack == "gpu" else (("slice", c),)
    for role, r in roles:
        assert (f"{role} starts while non-weight memory stays under {r.start_ceiling_non_weight_bytes / 1e9:.1f} GB "
                f"per {device}; assumed {r.non_weight_bytes_per_device / 1e9:.1f}") in summary


def test_the_start_ceiling_is_usable_hbm_less_weights_and_one_request():
    """docs/engine-preconditions.md GPU-KVFIT-1: one 1,048,576-token request holds 102 blocks + the null block of
    24 pages x 6,561,792 B, 16.2 GB; 251.1 GB usable - 203.9 GB of weights - that = 31.0 GB, over the 12 assumed."""
    c = capacity.serving_capacity(parse("gpu"))
    assert c.one_request_pool_bytes == 103 * 24 * 6_561_792
    assert c.start_ceiling_non_weight_bytes == pytest.approx(30.99e9, rel=1e-3)
    assert c.start_ceiling_non_weight_bytes > c.non_weight_bytes_per_device


def test_engine_settings_follow_the_pool():
    """--max-num-seqs is the requests one engine's pool can run at once (each holds a block in every group:
    222 // 4 = 55), and it moves with the pool (TP=2: 919 // 4 = 229)."""
    from components.plan import engines

    for changes, expected in (({}, 55), ({"gpu__tensorParallel": 2}, 229)):
        cfg = parse("gpu", **changes)
        assert capacity.decode_capacity(cfg).max_running == expected
        for role in ("prefill", "decode"):
            argv = engines.vllm_command(cfg, role).argv
            # vLLM sizes its graphs from max_num_seqs; a capture ceiling of 55 would be rounded down to 48
            # (tests/engine/test_vllm_engine_config.py).
            assert "--max-cudagraph-capture-size" not in argv and "--cudagraph-capture-sizes" not in argv
        argv = engines.vllm_command(cfg, "decode").argv
        assert argv[argv.index("--max-num-seqs") + 1] == str(expected)

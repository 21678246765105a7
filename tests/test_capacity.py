"""Capacity model against hand-worked figures (arithmetic in the docstrings; docs/capacity.md), and the
configurations it must reject."""

from __future__ import annotations

import pytest

from components import capacity
from components.config import ConfigError
from tests.conftest import run_plan, stack_document, write_stack
from tests.test_config import parse

# Shared by both tracks (fp8 KV, model.md analogs):
#   MLA bytes/token = 24 MLA layers x 576 elements x 1 B = 13,824
#   KDA state/sequence = 69 layers x (32 heads x 128 x 128 x 4 B + 3 x 32 x 128 x (4 - 1) x 2 B)
#                      = 69 x (2,097,152 + 73,728) = 149,790,720 B
MLA_BYTES = 13_824
KDA_BYTES = 149_790_720


def test_per_token_figures():
    cfg = parse("gpu")
    assert capacity.mla_bytes_per_token(cfg) == MLA_BYTES
    assert capacity.kda_state_bytes_per_sequence(cfg) == KDA_BYTES
    assert capacity.mla_bytes_per_token(parse("gpu", model__kvCacheDtype="bf16")) == 2 * MLA_BYTES


def test_gpu_hand_worked():
    """A prefill group: 4 nodes x 4 GB300 = 16 GPUs.
    weights/GPU = 1.56e12 / 16 = 97.5e9 B; usable = 279e9 x 0.90 = 251.1e9; KV pool = 153.6e9 B/GPU.
    B/token at 1,048,576 context = 13,824 + 149,790,720 / 1,048,576 = 13,966.85.
    HBM tokens = 16 engines (TP=1) x 153.6e9 / 13,966.85 = 175,959,484.
    host: 960e9 x 50% = 480e9 B/node; 4 nodes -> 1.92e12 / 13,966.85 = 137,468,347 tokens.
    lruCapacityPerServer = (175,959,484 + 137,468,347) // 4 pods // 128 = 612,163 blocks."""
    c = capacity.serving_capacity(parse("gpu"))
    assert c.weight_bytes_per_device == pytest.approx(97.5e9)
    assert c.kv_pool_bytes_per_device == pytest.approx(153.6e9)
    assert c.bytes_per_token == pytest.approx(13_966.85, abs=0.01)
    assert (c.hbm_tokens, c.host_tokens) == (175_959_484, 137_468_347)
    assert c.lru_capacity_per_server == 612_163
    assert capacity.cpu_offload_bytes_per_engine(parse("gpu")) == 120_000_000_000  # 480e9 / 4 local DP engines


def test_tpu_hand_worked():
    """A 2x2x4 slice: 16 chips x 2 TensorCores = 32 devices of 96 GiB (103,079,215,104 B).
    usable = x 0.85 = 87,617,332,838.4; weights = 1.56e12 / 32 = 48.75e9; KV pool = 38,867,332,838.4 B.
    TP=32 replicates the MLA latent on every device, so one pool per replica.
    B/token at 491,520 context = 13,824 + 149,790,720 / 491,520 = 14,128.75.
    HBM tokens = 38,867,332,838.4 / 14,128.75 = 2,750,939; HiCache ratio 2 -> 5,501,878 in host DRAM
    (8 devices x 2 x 38.87e9 = 579 GiB per host, under 90% of ~800 GiB).
    lruCapacityPerServer = 8,252,817 // 1 leader // 128 = 64,475 blocks."""
    c = capacity.serving_capacity(parse("tpu"))
    assert c.weight_bytes_per_device == pytest.approx(48.75e9)
    assert c.kv_pool_bytes_per_device == pytest.approx(38_867_332_838.4)
    assert (c.hbm_tokens, c.host_tokens) == (2_750_939, 5_501_878)
    assert c.host_bytes_per_node / 2**30 == pytest.approx(579.17, abs=0.01)
    assert c.lru_capacity_per_server == 64_475


def test_replicated_non_expert_weights_assumption():
    """50 GB held whole by every TP=1 engine: (1.56e12 - 50e9) / 16 + 50e9 = 144.375e9 B per GPU, leaving
    251.1e9 - 144.375e9 = 106.725e9 B for KV."""
    c = capacity.serving_capacity(parse("gpu", model__replicatedWeightsGB="50"))
    assert c.weight_bytes_per_device == pytest.approx(144.375e9)
    assert c.kv_pool_bytes_per_device == pytest.approx(106.725e9)


@pytest.mark.parametrize("stack,changes,expected", [
    # 2x2x2: 16 devices -> 97.5e9 B of weights per device over 87.6e9 usable.
    ("tpu", {"tpu__topology": "2x2x2", "tpu__tensorParallel": 16},
     "kimi-k3-1:tpu.topology = '2x2x2': weights need 98 GB per device of 88 GB usable HBM; more devices per "
     "replica are needed (tpu.topology or tpu.memFractionPercent)"),
    # One node per prefill group: 390e9 B per GPU over 251e9 usable.
    ("gpu", {"gpu__prefillNodesPerGroup": 1},
     "kimi-k3-1:gpu.prefillNodesPerGroup = 1: weights need 390 GB per device of 251 GB usable HBM; more devices "
     "per replica are needed (gpu.prefillNodesPerGroup or gpu.gpuMemoryPercent)"),
    # The decode groups are checked too.
    ("gpu", {"gpu__decodeNodesPerGroup": 1},
     "kimi-k3-1:gpu.decodeNodesPerGroup = 1: weights need 390 GB per device of 251 GB usable HBM; more devices "
     "per replica are needed (gpu.decodeNodesPerGroup or gpu.gpuMemoryPercent)"),
    # 2-node groups at 74%: 8 GPUs hold 195e9 B of weights each, leaving 11.46e9 B per engine = 820,514 tokens,
    # less than one 1,048,576-token sequence, although the group as a whole holds 6.5M tokens.
    ("gpu", {"gpu__prefillNodesPerGroup": 2, "gpu__decodeNodesPerGroup": 2, "gpu__gpuMemoryPercent": 74},
     "kimi-k3-1:gpu.decodeNodesPerGroup = 2: one sequence of 1,048,576 tokens needs 14.6 GB of KV cache but one "
     "engine's pool holds 11.5 GB (820,514 tokens); lower it or change gpu.decodeNodesPerGroup or "
     "gpu.gpuMemoryPercent"),
    # 52%: pool 4.85e9 B holds 343,356 tokens, less than one 491,520-token sequence.
    ("tpu", {"tpu__memFractionPercent": 52},
     "kimi-k3-1:tpu.memFractionPercent = 52: one sequence of 491,520 tokens needs 6.9 GB of KV cache but one "
     "engine's pool holds 4.9 GB (343,356 tokens); lower it or change tpu.topology or tpu.memFractionPercent"),
    # Ratio 4: 4 x 38.87e9 x 8 = 1,158 GiB per host.
    ("tpu", {"tpu__hicacheRatio": 4},
     "kimi-k3-1:tpu.hicacheRatio = 4: the host pool (tpu.hicacheRatio 4 x the HBM KV pool) would take 1158 GiB per "
     "node, over 720 GiB of the ~800 GiB usable; lower tpu.hicacheRatio"),
])
def test_configurations_that_cannot_fit(stack, changes, expected):
    with pytest.raises(ConfigError) as info:
        capacity.serving_capacity(parse(stack, **changes))
    assert str(info.value) == expected


def test_plan_rejects_what_does_not_fit(tmp_path):
    config = dict(stack_document("tpu")["config"])
    config["kimi-k3-1:tpu.hicacheRatio"] = 4
    out = tmp_path / "out"
    proc = run_plan(out, "--stack-file", str(write_stack(tmp_path, "big", config)))
    assert proc.returncode != 0
    assert "kimi-k3-1:tpu.hicacheRatio = 4" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_summary_prints_the_capacity_figures(plans, stack):
    c = capacity.serving_capacity(parse(stack))
    summary = plans[stack].summary
    assert f"weights {c.weight_bytes_per_device / 1e9:.1f} GB" in summary
    assert f"HBM left for KV {c.kv_pool_bytes_per_device / 1e9:.1f} GB" in summary
    assert f"{c.hbm_tokens:,} tokens in HBM + {c.host_tokens:,} in host DRAM" in summary

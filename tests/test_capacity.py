"""Capacity model against hand-worked figures (arithmetic in the docstrings; docs/capacity.md), and the
configurations it must reject."""

from __future__ import annotations

import pytest

from components import capacity
from components.config import ConfigError
from tests.conftest import run_plan, stack_document, write_stack
from tests.test_config import parse

# Every cached block keeps one page per MLA layer and, with prefix caching in `align` mode, one KDA state page per
# KDA layer padded to the same size (components/kvblocks.py), so a token costs (24 + 69) layers x the engine's
# attention page per token on each rank:
#   GPU (vLLM, fp8): 93 x (512 + 64) x 1 B = 53,568 B;  TPU (Pallas MLA pads 576 to 640 lanes): 93 x 640 = 59,520 B.
GPU_BYTES = 53_568
TPU_BYTES = 59_520


def test_per_token_figures():
    assert capacity.serving_capacity(parse("gpu")).bytes_per_token == GPU_BYTES
    assert capacity.serving_capacity(parse("tpu")).bytes_per_token == TPU_BYTES
    assert capacity.serving_capacity(parse("gpu", model__kvCacheDtype="bf16")).bytes_per_token == 2 * GPU_BYTES


def test_gpu_hand_worked():
    """A prefill group: 4 nodes x 4 GB300 = 16 GPUs.
    weights/GPU = 1.56e12 / 16 = 97.5e9 B; usable = 279e9 x 0.90 = 251.1e9; KV pool = 153.6e9 B/GPU.
    HBM tokens = 16 engines (TP=1) x 153.6e9 / 53,568 = 45,878,136.
    host: 960e9 x 50% = 480e9 B/node; 4 nodes -> 1.92e12 / 53,568 = 35,842,293 tokens.
    lruCapacityPerServer = (45,878,136 + 35,842,293) // 4 pods // 11,392-token blocks = 1,793."""
    c = capacity.serving_capacity(parse("gpu"))
    assert c.weight_bytes_per_device == pytest.approx(97.5e9)
    assert c.kv_pool_bytes_per_device == pytest.approx(153.6e9)
    assert c.bytes_per_token == GPU_BYTES and c.block_tokens == 11_392
    assert (c.hbm_tokens, c.host_tokens) == (45_878_136, 35_842_293)
    assert c.lru_capacity_per_server == 1_793
    assert capacity.cpu_offload_bytes_per_engine(parse("gpu")) == 120_000_000_000  # 480e9 / 4 local DP engines


def test_tpu_hand_worked():
    """A 2x2x4 slice: 16 chips x 2 TensorCores = 32 devices of 96 GiB (103,079,215,104 B).
    usable = x 0.85 = 87,617,332,838.4; weights = 1.56e12 / 32 = 48.75e9; KV pool = 38,867,332,838.4 B.
    TP=32 replicates the MLA latent on every device, so one pool per replica.
    HBM tokens = 38,867,332,838.4 / 59,520 = 653,012; ratio 2 -> 1,306,024 in host DRAM
    (8 devices x 2 x 38.87e9 = 579 GiB per host, under 90% of ~800 GiB; cpu_bytes_to_use = 2 x 32 x pool).
    lruCapacityPerServer = 1,959,036 // 1 leader // 1,024-token blocks = 1,913."""
    c = capacity.serving_capacity(parse("tpu"))
    assert c.weight_bytes_per_device == pytest.approx(48.75e9)
    assert c.kv_pool_bytes_per_device == pytest.approx(38_867_332_838.4)
    assert (c.hbm_tokens, c.host_tokens) == (653_012, 1_306_024)
    assert c.host_bytes_per_node / 2**30 == pytest.approx(579.17, abs=0.01)
    assert c.lru_capacity_per_server == 1_913
    assert capacity.tpu_offload_bytes_per_engine(parse("tpu")) == int(2 * 38_867_332_838.4 * 32)


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
    # 2-node groups at 74%: 8 GPUs hold 195e9 B of weights each, leaving 11.46e9 B per engine = 213,933 tokens of
    # 53,568 B, less than one 1,048,576-token sequence (56.2 GB), although the group as a whole holds 1.7M tokens.
    ("gpu", {"gpu__prefillNodesPerGroup": 2, "gpu__decodeNodesPerGroup": 2, "gpu__gpuMemoryPercent": 74},
     "kimi-k3-1:gpu.decodeNodesPerGroup = 2: one sequence of 1,048,576 tokens needs 56.2 GB of KV cache but one "
     "engine's pool holds 11.5 GB (213,933 tokens); lower it or change gpu.decodeNodesPerGroup or "
     "gpu.gpuMemoryPercent"),
    # 60%: pool 13.1e9 B holds 220,052 tokens of 59,520 B, less than one 491,520-token sequence (29.3 GB).
    ("tpu", {"tpu__memFractionPercent": 60},
     "kimi-k3-1:tpu.memFractionPercent = 60: one sequence of 491,520 tokens needs 29.3 GB of KV cache but one "
     "engine's pool holds 13.1 GB (220,052 tokens); lower it or change tpu.topology or tpu.memFractionPercent"),
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

"""The engine-effective KV block: each engine's rule (components/plan/kvblocks.py) on hand-worked figures, its fixed
point
(started with the block it computed, the engine keeps it), and one value flowing to the engines' flags, the router's
prefix model, lruCapacityPerServer and the capacity model, moving together when the model's geometry moves."""

from __future__ import annotations

import pytest

from components.config import ConfigError
from components.plan import capacity, engines, kvblocks, prefixcache
from components.router import router
from tests import engine_facts as facts
from tests.config.test_config import parse
from tests.serving.test_modelservers import engine_scripts


def test_gpu_rule_hand_worked():
    """vLLM 0.33.0 `_align_hybrid_block_size`, Kimi K3 geometry at TP=1, fp8 MLA cache:
    attention page per token = (512 + 64) x 1 B = 576 B;
    KDA state = conv 3 x 96 x 128 = 36,864 channels x (4 - 1) x 2 B = 221,184 B
              + recurrent 96 x 128 x 128 x 4 B = 6,291,456 B  -> 6,512,640 B;
    block = 128 x ceil(6,512,640 / (128 x 576)) = 128 x 89 = 11,392 tokens (the issue's figure)."""
    rule = kvblocks.gpu_rule(parse("gpu"))
    assert (rule.attention_bytes_per_token, rule.state_bytes, rule.block_tokens) == (576, 6_512_640, 11_392)
    assert rule.page_bytes >= rule.state_bytes  # one page holds one KDA layer's state
    assert rule.bytes_per_token == 93 * 576


def test_gpu_rule_follows_tp_kv_dtype_state_dtype_and_speculation():
    """TP=2 halves the state: 128 x ceil(3,256,320 / 73,728) = 5,760. bf16 KV doubles the page per token:
    128 x ceil(6,512,640 / 147,456) = 5,760. A bf16 recurrent state: 221,184 + 3,145,728 = 3,366,912 B ->
    128 x 46 = 5,888. MTP with 3 draft tokens widens the conv state to (3 + 3) taps: 442,368 + 6,291,456 B
    -> 128 x ceil(91.3) = 11,776."""
    assert kvblocks.gpu_rule(parse("gpu", gpu__tensorParallel="2")).block_tokens == 5_760
    assert kvblocks.gpu_rule(parse("gpu", model__kvCacheDtype="bf16")).block_tokens == 5_760
    assert kvblocks.gpu_rule(parse("gpu", model__kdaStateDtype="bfloat16")).block_tokens == 5_888
    assert kvblocks.gpu_rule(parse("gpu", model__speculative="mtp")).block_tokens == 11_776


def test_tpu_rule_hand_worked():
    """vllm-torchtpu-core 0.29.0, unified pool, Pallas MLA at TP=32 (3 KDA heads per rank), fp8:
    pool row = 4 tokens x align(576, 128) = 640 B -> 2,560 B;
    recurrent 3 x 128 x 128 x 4 B = 196,608 B -> ceil(/2,560) = 77 rows; conv (4 - 1) x 1,152 x 2 B = 6,912 B ->
    4 rows (next power of two of 2.7); state fit = 81 rows x 4 = 324 tokens.
    Page-table floor: 1024*1024 // 2 // 256 // 4 = 512 pages per request; ceil(491,520 / 512) = 960 -> 1,024.
    block = max(324, 128, 1,024) = 1,024. At 131,072 tokens the floor is 256, so the state fit wins: 324."""
    rule = kvblocks.tpu_rule(parse("tpu"))
    assert (rule.attention_bytes_per_token, rule.state_bytes, rule.block_tokens) == (640, 6_912 + 196_608, 1_024)
    assert kvblocks.tpu_min_page_tokens(parse("tpu")) == 1_024
    short = kvblocks.tpu_rule(parse("tpu", model__contextLength="131072"))
    assert short.block_tokens == 324 and short.page_bytes >= short.state_bytes


@pytest.mark.parametrize("stack,changes", [("gpu", {}), ("gpu", {"gpu__tensorParallel": "4"}), ("tpu", {}),
                                           ("tpu", {"model__contextLength": "131072"}),
                                           ("gpu", {"model__kvCacheDtype": "bf16"})])
def test_the_rule_is_a_fixed_point(stack, changes):
    """Started with the block it computed (what the commands pass), each engine keeps it."""
    cfg = parse(stack, **changes)
    rule = kvblocks.gpu_rule if stack == "gpu" else kvblocks.tpu_rule
    block = rule(cfg).block_tokens
    assert rule(cfg, requested=block).block_tokens == block


@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_one_block_size_in_engines_router_capacity_and_summary(plans, stack):
    """What the plan renders: every engine command, the router's prefix model and the summary carry the block the
    engine's rule gives for the committed stack."""
    from tests.router.test_router import epp_config

    plan, cfg = plans[stack], parse(stack)
    block = kvblocks.block_rule(cfg).block_tokens
    assert {dict(facts.split_flags(argv))["--block-size"] for _, argv in engine_scripts(plan)} == {str(block)}
    c = capacity.serving_capacity(cfg)
    [producer] = [p for p in epp_config(plan)["plugins"] if p["type"] == "approx-prefix-cache-producer"]
    params = producer["parameters"]
    unit = engines.prefix_match_unit(cfg)  # the router hashes where the engines' hits land, inside the block
    assert params["blockSizeTokens"] == unit and c.block_tokens == block and block % unit == 0
    assert params["lruCapacityPerServer"] == prefixcache.lru_capacity_per_server(cfg)
    assert params["maxPrefixBlocksToMatch"] == -(-cfg.context_length // unit)
    assert f"engine-effective KV block: {block} tokens" in plan.summary
    assert f"lruCapacityPerServer {params['lruCapacityPerServer']:,} blocks of {unit} tokens" in plan.summary


@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_kda_heads_move_block_router_and_capacity_together(stack):
    """64 KDA heads instead of K3's 96: a smaller state, so a smaller block (GPU: 128 x ceil(4,341,760 / 73,728)
    = 7,552), and the router's block, its LRU capacity and the capacity model's unit follow."""
    before, after = parse(stack), parse(stack, model__kdaHeads="64")
    figures = []
    for cfg in (before, after):
        c = capacity.serving_capacity(cfg)
        producer = router.prefix_producer(cfg, c)["parameters"]
        rule = kvblocks.block_rule(cfg)
        figures.append((rule.block_tokens, producer["blockSizeTokens"], producer["lruCapacityPerServer"],
                        c.block_tokens, c.blocks_per_engine, prefixcache.lru_capacity_per_server(cfg)))
        assert producer["blockSizeTokens"] == engines.prefix_match_unit(cfg) and c.block_tokens == rule.block_tokens
        flags = dict(facts.split_flags(list(engines.vllm_command(cfg, "prefill").argv if stack == "gpu"
                                            else engines.tpu_command(cfg, "leader").argv)))
        assert flags["--block-size"] == str(rule.block_tokens)
    (b0, r0, l0, c0, h0, x0), (b1, r1, l1, c1, h1, x1) = figures
    if stack == "gpu":
        assert (b0, b1) == (11_392, 7_552)
        assert l1 == x1 and h1 != h0 and (r0, r1) == (128, 128)
    else:  # the TPU block is held at the page-table floor at 480K; the state share per rank shrinks with it
        assert b1 <= b0
    assert c1 == b1 and b1 % r1 == 0


def test_kda_heads_that_do_not_split_over_tp_are_refused_with_one_line():
    """vLLM divides the KDA heads by the TP size (`divide` in kda_state_shape; TPU: num_heads // tp)."""
    with pytest.raises(ConfigError) as info:
        engines.check_engine(parse("tpu", model__kdaHeads="48"))
    assert str(info.value) == ("kimi-k3-1:model.kdaHeads = 48: the engines split KDA heads evenly over the 32 "
                               "tensor-parallel ranks (tpu.tensorParallel); use a multiple of 32")

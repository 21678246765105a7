"""The session replay (components/plan/replay.py) with the vLLM 0.29.0 core vLLM-TorchTPU 0.29.0 ships as each TPU
slice's prefix cache (its own Scheduler and KVCacheManager, tests/engine_replay.py), on the pool the plan sizes: one
MLA group and three KDA groups of 24 layers in 1,024-token blocks of 655,360-byte pages, 1,186 usable blocks
(components/plan/capacity.py; the page rule is tests/engine_tpu's and components/plan/kvblocks.py's).

What differs from the GPU tier: vLLM 0.29.0 keeps fewer KDA states than vLLM 0.33.0's rule, which the replay's
RuleEngine restates (a prompt of a whole number of blocks keeps no state at its replay boundary here), so on TPU the
engine's own manager is the figure and the rule is printed beside it, not held equal."""

from __future__ import annotations

import json

import pytest

from components.plan import capacity, replay
from tests.engine_replay import VllmEngine, WithHostTier
from tests.engine_support import ROOT, record, stack_config

ON_BEST, HITS = 0.95, 0.90


def _engines(cfg, choice: replay.RoutingChoice, tmp_path):
    """A factory of TPU engines: vLLM 0.29.0's Scheduler over a KVCacheConfig of the plan's groups, block and pool.
    The scheduler reads only the context length and batch limits of the model config, so a placeholder
    config.json stands in for the model (vLLM 0.29.0 does not register K3's text config; the TPU plugin does, and it
    needs the torch_tpu runtime to import)."""
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, VllmConfig
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MambaSpec, MLAAttentionSpec

    from components.facts import contract

    c = capacity.serving_capacity(cfg)
    g, block = c.groups, c.block_tokens
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 1000,
        "max_position_embeddings": cfg.context_length, "torch_dtype": "bfloat16"}))
    vllm_config = VllmConfig(
        model_config=ModelConfig(model=str(tmp_path), skip_tokenizer_init=True, max_model_len=cfg.context_length),
        cache_config=CacheConfig(block_size=block, enable_prefix_caching=True, mamba_cache_mode="align",
                                 prefix_cache_retention_interval=choice.retention,
                                 prefix_match_unit=None if choice.hash_unit == block else choice.hash_unit),
        device_config=DeviceConfig(device="cpu"))
    vllm_config.scheduler_config.max_num_batched_tokens = contract.PREFILL_CHUNK_TOKENS
    mla = MLAAttentionSpec(block_size=block, num_kv_heads=1, head_size=cfg.model.mlaLatentDim, dtype=torch.uint8,
                           page_size_padded=g.page_bytes)
    heads = cfg.model.kdaHeads // (cfg.tpu.chips_per_slice * 2)
    kda = MambaSpec(block_size=block, page_size_padded=g.page_bytes, mamba_cache_mode="align",
                    shapes=((cfg.model.kdaConvKernel - 1, 3 * heads * cfg.model.kdaHeadDim),
                            (heads, cfg.model.kdaHeadDim, cfg.model.kdaHeadDim)),
                    dtypes=(torch.bfloat16, torch.float32), mamba_type=MambaAttentionBackendEnum.GDN_ATTN)
    assert mla.page_size_bytes == kda.page_size_bytes == g.page_bytes
    groups = [KVCacheGroupSpec([f"mla.{i}" for i in range(g.group_size)], mla)]
    groups += [KVCacheGroupSpec([f"kda{k}.{i}" for i in range(g.group_size)], kda) for k in range(g.state_groups)]
    config = KVCacheConfig(num_blocks=c.blocks_per_engine + 1, kv_cache_tensors=[], kv_cache_groups=groups)
    return lambda _i: VllmEngine(vllm_config, config, computes_output=True)


@pytest.mark.parametrize("shape_name", ["benchmark", "agentic"])
def test_the_rendered_routing_meets_the_bar_on_the_engines(tmp_path, shape_name):
    """The committed benchmark and the agentic shape at the benchmark's concurrency, through the router's scoring (the
    rendered lruCapacityPerServer and peakPrefillThroughput) and one released manager per slice with the slice's
    host-DRAM tier beside it (tests/engine_replay.py WithHostTier: two slices keep 18 agentic sessions in HBM, 42 with
    host DRAM, docs/capacity.md), under the routing the stack renders (a 2 s TTFT penalty); the former (18 s) and the
    rule's figures are printed beside them."""
    cfg = stack_config("tpu")
    shape = next(s for s in replay.stack_shapes(cfg) if s.name == shape_name)
    figures = {}
    for which in ("former", "rendered"):
        choice = getattr(replay, f"{which}_choice")(cfg)
        make = _engines(cfg, choice, tmp_path)
        deployment = replay.deployment_for(cfg, choice)
        result = replay.replay(deployment, shape, [WithHostTier(make(i), deployment.engine)
                                                   for i in range(deployment.engines)])
        rule = replay.replay(deployment, shape, [replay.RuleEngine(deployment.engine)
                                                 for _ in range(deployment.engines)])
        figures[which] = (result.on_best_share, result.hit_share)
        record(f"TPU replay {shape_name} ({which}: TTFT penalty {choice.penalty_ms:.0f} ms): "
               f"{result.on_best_share:.1%} of turns 2..N on the best slice, {result.hit_share:.1%} of ideal hits, "
               f"{result.host_share:.1%} of them from host DRAM (vLLM-TorchTPU 0.29.0's manager, the host tier by "
               f"rule; the rule alone: {rule.on_best_share:.1%}, {rule.hit_share:.1%})")
    on_best, hits = figures["rendered"]
    assert on_best >= ON_BEST and hits >= HITS, figures
    cell = " | ".join(f"{a:.1%} / {b:.1%}".replace("%", " %") for a, b in (figures["former"], figures["rendered"]))
    row = f"| TPU (vLLM-TorchTPU 0.29.0 KVCacheManager x 2, host tier by rule) | {shape_name} | {cell} |"
    assert row in (ROOT / "docs" / "capacity.md").read_text(), f"docs/capacity.md lacks {row}"


def test_the_rule_engine_is_the_engines_manager(tmp_path):
    """Turn by turn, the replay's RuleEngine (with vLLM 0.29.0's chunk-end states, replay.EngineSettings
    .chunk_end_states) gives the same hit, the same best slice and so the same routing as the released manager: the
    benchmark's sessions sharing the 32K system prompt, and sessions that overflow a slice's pool with and without a
    shared prefix."""
    from dataclasses import replace

    cfg = stack_config("tpu")
    choice = replay.rendered_choice(cfg)
    make = _engines(cfg, choice, tmp_path)
    deployment = replay.deployment_for(cfg, choice, host=False)
    bench = next(s for s in replay.stack_shapes(cfg) if s.name == "benchmark")
    cases = [replace(bench, sessions=16, concurrency=8, turns=4),
             replay.Shape("overflow", 12, 4, 4, 0, False, 300_000, 2048, 512),
             replay.Shape("overflow-shared", 16, 8, 4, 32768, True, 150_000, 2048, 512)]
    for shape in cases:
        engine = replay.replay(deployment, shape, [make(i) for i in range(deployment.engines)])
        rule = replay.replay(deployment, shape, [replay.RuleEngine(deployment.engine)
                                                 for _ in range(deployment.engines)])
        assert [(r.engine, r.hit, r.best) for r in engine.records] == \
               [(r.engine, r.hit, r.best) for r in rule.records], shape.name

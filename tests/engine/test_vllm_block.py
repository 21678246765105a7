"""The GPU block from vLLM 0.33.0's released Platform._align_hybrid_block_size itself (vllm/platforms/interface.py),
on a VllmConfig of the stack's flags, against components/kvblocks.py gpu_rule."""

from __future__ import annotations

import json
import sys
import types

from components import contract, kvblocks


def _stand_in_for_flashinfer() -> None:
    """FlashInfer (CUDA JIT sources, NVML) is not in .venv-engines; its MLA backend class imports two kernel entry
    points at module level and the block rule reads only the class's static kernel block sizes, so empty stand-ins
    for those names let the released class import. Nothing calls them."""
    for name, attrs in (("flashinfer", ()), ("flashinfer.decode", ("trtllm_batch_decode_with_kv_cache_mla",)),
                        ("flashinfer.utils", ("get_device_sm_count", "get_trtllm_gen_multi_ctas_kv_counter_bytes"))):
        if name not in sys.modules:
            module = types.ModuleType(name)
            for attr in attrs:
                setattr(module, attr, None)
            sys.modules[name] = module


def test_the_released_hybrid_alignment_gives_the_plans_block(gpu_cfg, tmp_path):
    """With the MLA backend a GB300 gets (`_get_backend_priorities` in vllm/platforms/cuda.py lists FLASHINFER_MLA
    first for capability major 10; the CUDA platform class needs libcuda, so this device query is the one thing named
    here), the released rule raises --block-size until a page holds a KDA state and pads the state page to it."""
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, VllmConfig
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    m, g = gpu_cfg.model, gpu_cfg.gpu
    total = m.kdaLayers + m.mlaLayers
    full = [*range(4, total, 4)][: m.mlaLayers - 1] + [total]  # K3's layout: every 4th layer and the last
    text = {"model_type": "kimi_linear", "torch_dtype": "bfloat16", "num_hidden_layers": total, "hidden_size": 7168,
            "num_attention_heads": 96, "vocab_size": 163840, "q_lora_rank": 1536,
            "kv_lora_rank": m.mlaLatentDim - 64, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
            "num_experts": 896, "num_experts_per_token": 8, "moe_intermediate_size": 1536,
            "max_position_embeddings": 1_048_576,
            "linear_attn_config": {"full_attn_layers": full,
                                   "kda_layers": [i for i in range(1, total + 1) if i not in full],
                                   "head_dim": m.kdaHeadDim, "num_heads": m.kdaHeads,
                                   "short_conv_kernel_size": m.kdaConvKernel}}
    (tmp_path / "config.json").write_text(json.dumps({"architectures": [m.architecture], "model_type": "kimi_k3",
                                                      "torch_dtype": "bfloat16", "text_config": text}))
    vllm_config = VllmConfig(
        model_config=ModelConfig(model=str(tmp_path), skip_tokenizer_init=True, max_model_len=gpu_cfg.context_length),
        cache_config=CacheConfig(block_size=contract.KV_BLOCK_TOKENS,
                                 cache_dtype={"fp8": "fp8", "bf16": "bfloat16"}[m.kvCacheDtype],
                                 mamba_cache_mode="align", mamba_ssm_cache_dtype=m.kdaStateDtype,
                                 enable_prefix_caching=True),
        parallel_config=ParallelConfig(tensor_parallel_size=g.tensorParallel,
                                       data_parallel_size=g.prefillNodesPerGroup * g.data_parallel_local,
                                       enable_expert_parallel=True),
        device_config=DeviceConfig(device="cuda"))
    _stand_in_for_flashinfer()
    Platform._align_hybrid_block_size(vllm_config, AttentionBackendEnum.FLASHINFER_MLA.get_class())
    rule = kvblocks.gpu_rule(gpu_cfg)
    cache = vllm_config.cache_config
    assert cache.block_size == rule.block_tokens == 11_392
    assert cache.mamba_block_size == rule.block_tokens
    assert cache.mamba_page_size_padded == rule.page_bytes

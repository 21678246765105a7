"""The GPU block from vLLM 0.33.0's released Platform._align_hybrid_block_size itself (vllm/platforms/interface.py),
on a VllmConfig of the stack's flags, against components/plan/kvblocks.py gpu_rule."""

from __future__ import annotations

from components.facts import contract
from components.plan import kvblocks
from tests.engine.conftest import stand_in_for_flashinfer, vllm_config_for
from tests.engine_support import record


def test_the_released_hybrid_alignment_gives_the_plans_block(gpu_cfg, tmp_path):
    """With the MLA backend a GB300 gets (`_get_backend_priorities` in vllm/platforms/cuda.py lists FLASHINFER_MLA
    first for capability major 10; the CUDA platform class needs libcuda, so this device query is the one thing named
    here), the released rule raises --block-size until a page holds a KDA state and pads the state page to it."""
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    vllm_config = vllm_config_for(gpu_cfg, tmp_path)
    stand_in_for_flashinfer()
    Platform._align_hybrid_block_size(vllm_config, AttentionBackendEnum.FLASHINFER_MLA.get_class())
    rule = kvblocks.gpu_rule(gpu_cfg)
    cache = vllm_config.cache_config
    assert cache.block_size == rule.block_tokens == 11_392
    assert cache.mamba_block_size == rule.block_tokens
    assert cache.mamba_page_size_padded == rule.page_bytes
    record(f"GPU block (Platform._align_hybrid_block_size, --block-size {contract.KV_BLOCK_TOKENS} in): engine "
           f"{cache.block_size:,} tokens == plan {rule.block_tokens:,} tokens; padded KDA page engine "
           f"{cache.mamba_page_size_padded:,} B == plan {rule.page_bytes:,} B")

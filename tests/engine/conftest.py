"""The engine-code tier: runs inside .venv-engines (requirements-engines.txt), where the pinned vLLM imports on the
CPU. The project's own modules come from this checkout; the stack configs are the fixture stacks the main suite
renders (tests/stacks/), read into the same typed config the program validates."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# Loopback only (HF_HUB_OFFLINE), the fixture stacks, skip-or-fail, the printed figures: shared with tests/engine_tpu.
from tests.engine_support import engines_stay_offline, skip_or_fail, stack_config, terminal_summary  # noqa: E402, F401

engines_stay_offline()


def _require_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        skip_or_fail("vllm is not importable here: run the tier with .venv-engines/bin/python (`make engine-tests`; "
                     "requirements-engines.txt)")


@pytest.fixture(scope="session", autouse=True)
def engine_importable() -> None:
    _require_vllm()


@pytest.fixture(scope="session")
def gpu_cfg():
    return stack_config("gpu")


def stand_in_for_flashinfer() -> None:
    """FlashInfer (CUDA JIT sources, NVML) is not in .venv-engines; its MLA backend class imports two kernel entry
    points at module level and the KV-cache code reads only the class's static kernel block sizes and layouts, so
    empty stand-ins for those names let the released class import. Nothing calls them."""
    for name, attrs in (("flashinfer", ()), ("flashinfer.decode", ("trtllm_batch_decode_with_kv_cache_mla",)),
                        ("flashinfer.utils", ("get_device_sm_count", "get_trtllm_gen_multi_ctas_kv_counter_bytes"))):
        if name not in sys.modules:
            module = types.ModuleType(name)
            for attr in attrs:
                setattr(module, attr, None)
            sys.modules[name] = module


def kimi_k3_layer_kinds(cfg) -> list[str]:
    """Layer kinds in the Kimi K3 order (every 4th layer and the last are MLA), as the stack's geometry sets them."""
    m = cfg.model
    total = m.kdaLayers + m.mlaLayers
    full = set([*range(4, total, 4)][: m.mlaLayers - 1] + [total])
    return ["mla" if i in full else "kda" for i in range(1, total + 1)]


def write_model_config(cfg, path: Path) -> Path:
    """A Kimi K3 config.json in `path` built from the stack's geometry (K3's published values for everything the plan
    does not model); returns `path`."""
    m = cfg.model
    kinds = kimi_k3_layer_kinds(cfg)
    full = [i for i, kind in enumerate(kinds, 1) if kind == "mla"]
    text = {"model_type": "kimi_linear", "torch_dtype": "bfloat16", "num_hidden_layers": len(kinds),
            "hidden_size": 7168, "num_attention_heads": 96, "vocab_size": 163840, "q_lora_rank": 1536,
            "kv_lora_rank": m.mlaLatentDim - 64, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
            "num_experts": 896, "num_experts_per_token": 8, "moe_intermediate_size": 1536,
            "max_position_embeddings": 1_048_576,
            "linear_attn_config": {"full_attn_layers": full,
                                   "kda_layers": [i for i in range(1, len(kinds) + 1) if i not in full],
                                   "head_dim": m.kdaHeadDim, "num_heads": m.kdaHeads,
                                   "short_conv_kernel_size": m.kdaConvKernel, "gate_lower_bound": -5.0,
                                   "use_full_rank_gate": True}}
    (path / "config.json").write_text(json.dumps({"architectures": [m.architecture], "model_type": "kimi_k3",
                                                      "torch_dtype": "bfloat16", "text_config": text}))
    return path


def vllm_config_for(cfg, tmp_path, role: str = "prefill"):
    """A VllmConfig of the stack's GPU flags (components/plan/engines.py vllm_command) over write_model_config's
    config.json."""
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, VllmConfig

    from components.facts import contract
    from components.plan.parallel import layout

    m, g = cfg.model, cfg.gpu
    write_model_config(cfg, tmp_path)
    config = VllmConfig(
        model_config=ModelConfig(model=str(tmp_path), skip_tokenizer_init=True, max_model_len=cfg.context_length),
        cache_config=CacheConfig(block_size=contract.KV_BLOCK_TOKENS,
                                 cache_dtype={"fp8": "fp8", "bf16": "bfloat16"}[m.kvCacheDtype],
                                 mamba_cache_mode="align", mamba_ssm_cache_dtype=m.kdaStateDtype,
                                 enable_prefix_caching=True),
        parallel_config=ParallelConfig(tensor_parallel_size=g.tensorParallel,
                                       data_parallel_size=layout(cfg).role(role).engines,
                                       enable_expert_parallel=True),
        device_config=DeviceConfig(device="cuda"))
    # `--enable-hybrid-kv-cache-manager` (components/facts/versions.py VLLM.hybrid_kv_flag): VllmConfig turns the
    # manager off
    # when the platform reports no hybrid KV cache support (vllm/config/vllm.py, `support_hybrid_kv_cache`), which the
    # CUDA platform does and the CPU-only placeholder platform here does not: the one device answer supplied.
    config.scheduler_config.disable_hybrid_kv_cache_manager = False
    return config


def pytest_terminal_summary(terminalreporter):
    terminal_summary(terminalreporter, "GPU figures from vLLM 0.33.0's own functions (engine == plan)")

"""vLLM 0.33.0's own functions on the GPU stack's values, against what the plan computes at plan time
(components/plan/kvblocks.py, components/plan/loading.py): the restatements the plan needs, proven equal to the
engine."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from components.plan import engines, kvblocks, loading
from tests.engine_support import record

KV_TORCH_DTYPE = {"fp8": torch.float8_e4m3fn, "bf16": torch.bfloat16}
STATE_DTYPE = {"float32": "float32", "bfloat16": "bfloat16"}


def _kda_spec(cfg):
    """vLLM's KDA state for one layer on one rank: MambaStateShapeCalculator.kda_state_shape and
    MambaStateDtypeCalculator.kda_state_dtype (vllm/model_executor/layers/mamba/mamba_utils.py) in a MambaSpec
    (vllm/v1/kv_cache_interface.py), as the KDA layer builds it (vllm/models/kimi_k3/nvidia/kda.py)."""
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator, MambaStateShapeCalculator
    from vllm.v1.kv_cache_interface import MambaSpec

    m = cfg.model
    spec_tokens = m.speculativeTokens if m.speculative != "off" else 0
    shapes = MambaStateShapeCalculator.kda_state_shape(cfg.gpu.tensorParallel, m.kdaHeads, m.kdaHeadDim,
                                                       conv_kernel_size=m.kdaConvKernel, num_spec=spec_tokens)
    dtypes = MambaStateDtypeCalculator.kda_state_dtype(torch.bfloat16, "auto", STATE_DTYPE[m.kdaStateDtype])
    return MambaSpec(block_size=1, shapes=shapes, dtypes=dtypes)


def _mla_page_per_token(cfg) -> int:
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    return MLAAttentionSpec(block_size=1, num_kv_heads=1, head_size=cfg.model.mlaLatentDim,
                            dtype=KV_TORCH_DTYPE[cfg.model.kvCacheDtype]).page_size_bytes


def test_the_kda_state_is_the_engines(gpu_cfg):
    rule = kvblocks.gpu_rule(gpu_cfg)
    spec = _kda_spec(gpu_cfg)
    assert spec.page_size_bytes == rule.state_bytes == 6_512_640
    record(f"KDA state page per GPU rank (MambaSpec.page_size_bytes): engine {spec.page_size_bytes:,} B == plan "
           f"{rule.state_bytes:,} B")


def test_the_mla_page_is_the_engines(gpu_cfg):
    engine, plan = _mla_page_per_token(gpu_cfg), kvblocks.gpu_rule(gpu_cfg).attention_bytes_per_token
    assert engine == plan == 576
    record(f"MLA page per token (MLAAttentionSpec.page_size_bytes): engine {engine} B == plan {plan} B")


def test_the_hybrid_block_is_the_engines_alignment_of_its_own_pages(gpu_cfg):
    """_align_hybrid_block_size (vllm/platforms/interface.py): the attention block rises in steps of the MLA
    alignment until one page holds a KDA state. The pages come from the engine's specs above; the step and the
    ceiling are the released function's (vllm.utils.math_utils.cdiv)."""
    from vllm.utils.math_utils import cdiv

    rule = kvblocks.gpu_rule(gpu_cfg)
    align = max(kvblocks.GPU_MLA_BLOCK_ALIGNMENT, rule.requested_tokens)
    block = align * cdiv(_kda_spec(gpu_cfg).page_size_bytes, align * _mla_page_per_token(gpu_cfg))
    assert block == rule.block_tokens == 11_392


def _names(kind: str, layer: int, expert: int) -> list[str]:
    """Tensor names in the Kimi K3 checkpoint's shape for one routed expert: the filter keys on `.experts.<id>.`
    and on the suffix (vllm/model_executor/model_loader/ep_weight_filter.py)."""
    base = f"language_model.model.layers.{layer}.mlp.experts.{expert}"
    suffix = ".weight" if kind == "expert" else ".weight_scale"
    return [f"{base}.{proj}{suffix}" for proj in ("w1", "w2", "w3")]


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_bytes_read_per_gpu_rank_are_the_filters(gpu_cfg, role):
    """For the busiest EP rank (the largest linear share), vLLM's filter keeps this rank's expert weights and every
    expert's scales (it never skips scale tensors); dense tensors are kept by every rank. The plan's rank_bytes
    must be what the filter keeps."""
    from vllm.model_executor.model_loader.ep_weight_filter import compute_local_expert_ids, should_skip_weight

    [reads] = [r for r in loading.replica_reads(gpu_cfg) if r.role == role]
    ep = reads.expert_parallel
    local = compute_local_expert_ids(loading.ROUTED_EXPERTS, ep, 0)
    assert len(local) == math.ceil(loading.ROUTED_EXPERTS / ep)
    kept = {}
    for kind in ("expert", "expert_scale"):
        names = [name for expert in range(loading.ROUTED_EXPERTS) for name in _names(kind, 1, expert)]
        kept[kind] = sum(not should_skip_weight(name, local) for name in names) / len(names)
    assert kept["expert_scale"] == 1.0  # scales of every expert are read
    assert kept["expert"] == len(local) / loading.ROUTED_EXPERTS
    assert set(loading.GPU_LOADER.filtered_kinds) == {k for k, share in kept.items() if share < 1}
    engine_rank_bytes = (loading.layout_bytes("whole") + loading.layout_bytes("expert_scale")
                         + loading.layout_bytes("expert") * kept["expert"])
    assert reads.rank_bytes == int(loading.layout_bytes("expert") * kept["expert"]) + loading.layout_bytes(
        "whole") + loading.layout_bytes("expert_scale")
    assert abs(reads.rank_bytes - engine_rank_bytes) <= 1
    # A node's ranks share one page cache (INSTANTTENSOR_BACKEND=BUFFERED): what the node reads is the union of
    # what its ranks keep, the experts of each local rank once and everything else once.
    node_experts = set().union(*(compute_local_expert_ids(loading.ROUTED_EXPERTS, ep, rank)
                                 for rank in range(reads.ranks_per_node)))
    engine_node_bytes = (loading.layout_bytes("whole") + loading.layout_bytes("expert_scale")
                         + loading.layout_bytes("expert") * len(node_experts) / loading.ROUTED_EXPERTS)
    assert abs(reads.node_bytes - engine_node_bytes) <= reads.ranks_per_node
    record(f"GPU {role} rank (EP {ep}, {reads.ranks_per_node} ranks/node), should_skip_weight: keeps "
           f"{len(local)}/{loading.ROUTED_EXPERTS} experts' weights and every expert's scales; engine "
           f"{engine_rank_bytes / 1e9:,.1f} GB read and kept per rank (InstantTensor reads what the filter keeps), "
           f"{engine_node_bytes / 1e9:,.1f} GB per node == plan "
           f"{reads.rank_bytes / 1e9:,.1f} GB per rank, {reads.node_bytes / 1e9:,.1f} GB per node")


def test_the_model_config_loads_the_stacks_geometry(gpu_cfg, tmp_path):
    """vllm.config.ModelConfig reads a Kimi K3 config.json built from the plan's geometry as the family's hybrid MLA
    model with the head size the plan's MLA page assumes."""
    import json

    from vllm.config import ModelConfig

    m = gpu_cfg.model
    text = {"model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"], "hidden_size": 7168,
            "num_hidden_layers": m.kdaLayers + m.mlaLayers, "num_attention_heads": 96, "num_key_value_heads": 96,
            "kv_lora_rank": m.mlaLatentDim - 64, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
            "v_head_dim": 128, "q_lora_rank": 1536, "vocab_size": 163840, "max_position_embeddings": 1048576,
            "intermediate_size": 33792, "moe_intermediate_size": 3072, "num_experts": loading.ROUTED_EXPERTS,
            "num_experts_per_token": 8, "torch_dtype": "bfloat16",
            "linear_attn_config": {"num_heads": m.kdaHeads, "head_dim": m.kdaHeadDim,
                                   "short_conv_kernel_size": m.kdaConvKernel,
                                   "kda_layers": list(range(1, m.kdaLayers + 1)),
                                   "full_attn_layers": list(range(m.kdaLayers + 1, m.kdaLayers + m.mlaLayers + 1))}}
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "kimi_k3", "architectures": [m.architecture], "text_config": text, "torch_dtype": "bfloat16"}))
    config = ModelConfig(model=str(tmp_path), skip_tokenizer_init=True, max_model_len=gpu_cfg.context_length)
    assert config.architectures == [m.architecture]
    assert config.use_mla and config.get_head_size() == m.mlaLatentDim


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_shared_experts_held_per_tp_rank_are_the_models(gpu_cfg, tp, monkeypatch):
    """The released `KimiMLP` (vllm/models/kimi_k3/nvidia/model.py), built on the meta device as one TP rank of `tp`
    with the sequence parallelism the stack's flags give it (EP + MegaMoE: on for TP > 1) and MegaMoE's sharding
    eligibility, holds what the plan counts for the dense MLP and shared experts ("sp_replicated"): all of it under
    sequence parallelism, since VLLM_KIMI_K3_SHARD_SP_SHARED_EXPERT defaults to off. The TP world size and rank are
    the only things supplied (no process group on this machine)."""
    import vllm.model_executor.layers.linear as linear
    import vllm.model_executor.parameter as parameter
    import vllm.models.kimi_k3.nvidia.model as model
    from vllm.config import DeviceConfig, KernelConfig, ParallelConfig, VllmConfig, set_current_vllm_config

    from components.plan import capacity
    from tests.engine.conftest import stack_config

    cfg = stack_config("gpu", **{"gpu.tensorParallel": str(tp)})
    for module in (linear, parameter, model):
        monkeypatch.setattr(module, "get_tensor_model_parallel_world_size", lambda: tp, raising=False)
        monkeypatch.setattr(module, "get_tensor_model_parallel_rank", lambda: 0, raising=False)
    vllm_config = VllmConfig(device_config=DeviceConfig(device="cuda"),
                             parallel_config=ParallelConfig(tensor_parallel_size=tp, enable_expert_parallel=True),
                             kernel_config=KernelConfig(moe_backend=engines.GPU_MOE_BACKEND))
    hidden, width = 7168, 6144  # two shared experts of K3 (moe_intermediate_size 3072 x num_shared_experts 2)
    with set_current_vllm_config(vllm_config), torch.device("meta"):
        mlp = model.KimiMLP(hidden, width, "silu", use_sequence_parallel=capacity.sequence_parallel(cfg),
                            can_shard_sequence_parallel=model.can_shard_sequence_parallel_shared_expert(vllm_config))
    held = sum(p.numel() for p in mlp.parameters())
    whole = 3 * hidden * width
    assert held == (whole if capacity.sequence_parallel(cfg) else whole // tp)
    share = capacity.dense_bytes_per_device(cfg, tp) - loading.layout_bytes("whole", "split") / tp \
        - loading.layout_bytes("whole", "replicated")
    assert share == pytest.approx(loading.layout_bytes("whole", "sp_replicated") * held / whole)


def test_vllm_reads_its_cache_root_from_the_pods_variable(monkeypatch):
    """components/plan/engines.py `cache_env` points VLLM_CACHE_ROOT at the cache bucket's mount: vLLM 0.33.0 takes its
    cache root (and DeepGEMM's JIT cache under it, vllm/utils/deep_gemm.py) from that variable."""
    import vllm.envs as envs

    from components.plan import engines
    from tests.engine_support import stack_config

    root = engines.cache_env(stack_config("gpu"))["VLLM_CACHE_ROOT"]
    monkeypatch.setenv("VLLM_CACHE_ROOT", root)
    assert envs.VLLM_CACHE_ROOT == root
    source = (Path(envs.__file__).parent / "utils" / "deep_gemm.py").read_text()
    assert 'os.path.join(\n            envs.VLLM_CACHE_ROOT, "deep_gemm"' in source

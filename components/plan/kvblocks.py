"""The KV block size each engine really runs this model with, computed once from the engine's own rule.

Both engines treat the Kimi K3 family as a hybrid (KDA recurrent layers + MLA layers) and raise the attention
block until one block's page can hold a KDA layer's state, so the `--block-size` a user asks for is only a
floor. Everything that counts blocks (the router's prefix model, `lruCapacityPerServer`, the capacity model and
the plan summary) takes the value from here, and the engines are started with it so their logs agree.

Each rule below re-states the pinned release's arithmetic (sources cited per step) for the configured geometry,
KV dtype and state dtype; tests/plan/test_kvblocks.py checks it against worked examples and the fixed point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import ConfigError, StackConfig
from ..facts import contract
from . import parallel

VLLM_033 = "https://github.com/vllm-project/vllm/blob/v0.33.0"
TORCHTPU_029 = "https://github.com/vllm-project/vllm-torchtpu/blob/v0.29.0"
"""Sources of the rules: vLLM 0.33.0 (GPU) and vllm-torchtpu-core 0.29.0 (TPU platform plugin), as released on
PyPI (`pip download --no-deps vllm==0.33.0`, `vllm-torchtpu-core==0.29.0`; paths and lines inside the wheels):
GPU vllm/platforms/interface.py L940-1139 (`_align_hybrid_block_size`; the 128 floor L1088, the formula L1098),
vllm/model_executor/layers/mamba/mamba_utils.py L133 (`kda_state_dtype`) and L296 (`kda_state_shape`);
TPU vllm_torchtpu/platforms/tpu_block_size_utils.py L338-466 (`_derive_tpu_block_slot_config`, the state fit L379),
vllm_torchtpu/gdn_pool_layout.py L121-146 (`derive_pooled_gdn_state_layout`), vllm_torchtpu/layers/adapter/
attention.py L184-199 (`get_tpu_min_page_size`), vllm_torchtpu/models/vllm/kimi_k3/model.py L413-430 (state
shapes) and kimi_k3/attention.py L60-74 (state dtypes)."""

BF16_BYTES = 2
FP32_BYTES = 4
KV_DTYPE_BYTES = {"fp8": 1, "bf16": 2}
STATE_DTYPE_BYTES = {"float32": FP32_BYTES, "bfloat16": BF16_BYTES}

GPU_MLA_BLOCK_ALIGNMENT = 128
"""vLLM 0.33.0 makes a hybrid MLA model's block a multiple of 128 (TRTLLM/FlashInfer MLA decode kernels;
vllm/platforms/interface.py `_align_hybrid_block_size`, `if model_config.use_mla: ... max(..., 128)`). The MLA
backends' smallest kernel blocks (32, 64 or 128) all divide it, so the backend alignment step adds nothing."""

TPU_MAX_NUM_SEQS = 256
"""`--max-num-seqs` on TPU: vLLM 0.29.0's default when the platform reports no device memory, which
`TpuPlatform.get_device_total_memory` never does (vllm/engine/arg_utils.py `get_batch_defaults`). Passed
explicitly because the TPU block rule's page-table floor depends on it."""
TPU_MLA_LANE = 128
"""The TPU MLA v2 cache pads the latent width to 128 lanes (vllm_torchtpu/kernels/mla/v2/kernel.py
`get_kv_cache_shape`: `unsigned_align_to(kv_dim, 128)`)."""


@dataclass(frozen=True)
class BlockRule:
    """The engine-effective block of one track, with what it was computed from."""

    engine: str
    requested_tokens: int
    """The floor asked for (contract.KV_BLOCK_TOKENS)."""
    block_tokens: int
    """What the engine runs with, and so `--block-size`, `blockSizeTokens` and the capacity model's unit."""
    attention_bytes_per_token: int
    """One MLA layer's page bytes per token on one rank, as the engine lays the page out (padding included)."""
    state_bytes: int
    """One KDA layer's state on one rank (conv + recurrent) as the engine sizes it."""
    paged_layers: int
    """Layers holding one page per cached block: with prefix caching in `align` mode every KDA layer keeps a state
    page at each block boundary, padded to the attention page, beside each MLA layer's page."""
    steps: tuple[str, ...]
    """The derivation, one step per line, each naming its source."""
    state_bytes_per_sequence: int = 0
    """KDA state held once per sequence outside the pages (an engine that does not page states per block)."""

    @property
    def page_bytes(self) -> int:
        """One layer's page for one block on one rank."""
        return self.block_tokens * self.attention_bytes_per_token

    @property
    def bytes_per_token(self) -> int:
        """HBM (and offload) bytes one cached token costs on one rank, over all paged layers."""
        return self.paged_layers * self.attention_bytes_per_token


def _check_heads(cfg: StackConfig, tp: int, tp_key: str) -> None:
    """Each rank holds model.kdaHeads / TP heads. The error names the key the user changed: the head count when it
    differs from the model's, else the track's parallelism (on TPU that follows tpu.topology)."""
    heads = cfg.model.kdaHeads
    if not heads % tp:
        return
    if "kdaHeads" in cfg.model.changed():
        raise ConfigError("model.kdaHeads", heads, f"the engines split KDA heads evenly over the {tp} tensor-"
                                                   f"parallel ranks ({tp_key}); use a multiple of {tp}")
    if tp_key.startswith("tpu."):
        field = cfg.tpu.blame("topology", "tensorParallel")
        key, value = cfg.tpu.key(field), getattr(cfg.tpu, field)
    else:
        key, value = tp_key, tp
    raise ConfigError(key, value, f"the engines split the model's {heads} KDA heads (model.kdaHeads) evenly over the "
                                  f"tensor-parallel ranks, and {tp} ({tp_key}) does not divide {heads}")


def gpu_rule(cfg: StackConfig, requested: int = contract.KV_BLOCK_TOKENS) -> BlockRule:
    """vLLM 0.33.0 `Platform._align_hybrid_block_size` (vllm/platforms/interface.py), for one data-parallel engine
    of `gpu.tensorParallel` ranks."""
    m, tp = cfg.model, parallel.layout(cfg).tensor_parallel
    _check_heads(cfg, tp, "gpu.tensorParallel")
    attn = m.mlaLatentDim * KV_DTYPE_BYTES[m.kvCacheDtype]
    spec = m.speculativeTokens if m.speculative != "off" else 0
    conv_dim = 3 * m.kdaHeads * m.kdaHeadDim // tp
    conv = conv_dim * (m.kdaConvKernel - 1 + spec) * BF16_BYTES
    recurrent = (m.kdaHeads // tp) * m.kdaHeadDim * m.kdaHeadDim * STATE_DTYPE_BYTES[m.kdaStateDtype]
    state = conv + recurrent
    align = max(GPU_MLA_BLOCK_ALIGNMENT, requested)
    block = align * math.ceil(state / (align * attn))
    block = max(block, requested)
    steps = (
        f"attention page per token = (kv_lora_rank + qk_rope_head_dim) {m.mlaLatentDim} x "
        f"{KV_DTYPE_BYTES[m.kvCacheDtype]}"
        f" B ({m.kvCacheDtype}) = {attn} B (MLAAttentionSpec, vllm/v1/kv_cache_interface.py)",
        f"KDA state per rank = conv {conv_dim} x ({m.kdaConvKernel} - 1{f' + {spec}' if spec else ''}) x 2 B (bf16) + "
        f"recurrent {m.kdaHeads // tp} x {m.kdaHeadDim} x {m.kdaHeadDim} x {STATE_DTYPE_BYTES[m.kdaStateDtype]} B "
        f"({m.kdaStateDtype}) = {state:,} B (MambaStateShapeCalculator.kda_state_shape, "
        f"MambaStateDtypeCalculator.kda_state_dtype, vllm/model_executor/layers/mamba/mamba_utils.py)",
        f"alignment = max(128 for hybrid MLA, --block-size {requested}) = {align} "
        f"(vllm/platforms/interface.py _align_hybrid_block_size)",
        f"block = {align} x ceil({state:,} / ({align} x {attn})) = {block} tokens",
    )
    return BlockRule("vllm", requested, block, attn, state, m.mlaLayers + m.kdaLayers, steps)


def tpu_min_page_tokens(cfg: StackConfig) -> int:
    """SMEM page-table floor: next power of two of ceil(max_model_len / (1024 * 1024 // 2 // max_num_seqs // 4))
    (vllm_torchtpu/layers/adapter/attention.py `get_tpu_min_page_size`)."""
    per_request = 1024 * 1024 // 2 // TPU_MAX_NUM_SEQS // 4
    pages = -(-cfg.context_length // per_request)
    return 1 << (pages - 1).bit_length()


def tpu_rule(cfg: StackConfig, requested: int = contract.KV_BLOCK_TOKENS) -> BlockRule:
    """vllm-torchtpu-core 0.29.0 `update_tpu_block_size_and_slot_config` with the unified block pool, which Kimi K3
    gets by default (vllm_torchtpu/platforms/tpu_block_size_utils.py `_derive_tpu_block_slot_config`;
    vllm_torchtpu/gdn_pool_layout.py POOLED_GDN_ARCHITECTURES), behind the Pallas MLA backend
    (`PallasMLAttentionBackend`, vllm_torchtpu/layers/adapter/attention.py)."""
    m, tp = cfg.model, parallel.layout(cfg).tensor_parallel
    _check_heads(cfg, tp, "tpu.tensorParallel")
    kv_bytes = KV_DTYPE_BYTES[m.kvCacheDtype]
    packing = 4 // kv_bytes  # 32-bit rows: fp8 packs 4 tokens, bf16 2 (kernels/mla/sparse/kernel.py get_dtype_packing)
    width = -(-m.mlaLatentDim // TPU_MLA_LANE) * TPU_MLA_LANE
    row_bytes = packing * width * kv_bytes  # one pool row holds `packing` tokens
    local = m.kdaHeads // tp
    # Conv is pooled in bf16 whatever its declared dtype; the recurrent state keeps the model's dtype, which
    # vLLM 0.29.0's kda_state_dtype fixes at float32 (gdn_pool_layout.py pooled_gdn_state_dtypes;
    # vllm/model_executor/layers/mamba/mamba_utils.py).
    conv = (m.kdaConvKernel - 1) * 3 * local * m.kdaHeadDim * BF16_BYTES
    recurrent = local * m.kdaHeadDim * m.kdaHeadDim * FP32_BYTES
    ssm_rows = -(-recurrent // row_bytes)
    conv_rows = 1
    while conv_rows * row_bytes < conv:
        conv_rows *= 2  # derive_pooled_gdn_state_layout
    fit = (ssm_rows + conv_rows) * packing
    floor = tpu_min_page_tokens(cfg)
    block = max(fit, requested, floor)
    block = -(-block // packing) * packing
    steps = (
        f"MLA pool row = {packing} tokens x align({m.mlaLatentDim}, 128) = {width} x {kv_bytes} B ({m.kvCacheDtype}) "
        f"= {row_bytes} B (PallasMLAttentionBackend.get_kv_cache_shape, kernels/mla/v2/kernel.py)",
        f"KDA state per rank ({local} heads): recurrent {local} x {m.kdaHeadDim} x {m.kdaHeadDim} x 4 B = "
        f"{recurrent:,} B -> {ssm_rows} rows; conv ({m.kdaConvKernel} - 1) x {3 * local * m.kdaHeadDim} x 2 B = "
        f"{conv:,} B -> {conv_rows} rows (next power of two) (gdn_pool_layout.py derive_pooled_gdn_state_layout)",
        f"state fit = ({ssm_rows} + {conv_rows}) rows x {packing} = {fit} tokens",
        f"page-table floor at {cfg.context_length:,} tokens and --max-num-seqs {TPU_MAX_NUM_SEQS} = {floor} "
        f"(get_tpu_min_page_size)",
        f"block = max({fit}, --block-size {requested}, {floor}) rounded to {packing} = {block} tokens",
    )
    return BlockRule("vllm-torchtpu", requested, block, width * kv_bytes, conv + recurrent,
                     m.mlaLayers + m.kdaLayers, steps)


def unreleased_rule(cfg: StackConfig, requested: int = contract.KV_BLOCK_TOKENS) -> BlockRule:
    """SGLang-TorchTPU has no release to read a rule from: the page size asked for is assumed to stand, MLA pages
    hold the tokens and each sequence keeps one KDA state per layer (as SGLang's hybrid pools do on CUDA)."""
    m, tp = cfg.model, parallel.layout(cfg).tensor_parallel
    _check_heads(cfg, tp, "tpu.tensorParallel")
    attn = m.mlaLatentDim * KV_DTYPE_BYTES[m.kvCacheDtype]
    local = m.kdaHeads // tp
    state = (local * m.kdaHeadDim * m.kdaHeadDim * FP32_BYTES
             + 3 * local * m.kdaHeadDim * (m.kdaConvKernel - 1) * BF16_BYTES)
    steps = (f"ASSUMPTION (no SGLang-TorchTPU release to read): --page-size {requested} stands",)
    return BlockRule("sglang-torchtpu", requested, requested, attn, state, m.mlaLayers, steps,
                     state_bytes_per_sequence=m.kdaLayers * state)


def block_rule(cfg: StackConfig) -> BlockRule:
    """The rule of the engine this stack runs."""
    if cfg.track == "gpu":
        return gpu_rule(cfg)
    return tpu_rule(cfg) if cfg.tpu.engine == "vllm-torchtpu" else unreleased_rule(cfg)

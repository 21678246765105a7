"""The GPU engine's KV pool from vLLM 0.33.0's own KV-cache planning, fed the plan's bytes per device, against
components/plan/capacity.py: blocks per engine, blocks one full-context request holds, and the requests the engine
admits.

The path is the engine core's (vllm/v1/engine/core.py `_initialize_kv_caches`): each layer's `get_kv_cache_spec`,
`resolve_kv_cache_layout`, `get_global_kv_cache_groups`, `get_kv_cache_configs`, then the capacity it logs
(vllm/v1/core/kv_cache_utils.py `get_kv_cache_capacity`, "Maximum concurrency for N tokens per request"). Only
what the engine would ask the device is supplied here: the memory profile (`determine_available_memory`, replaced by
the plan's KV pool per device) and the compute capability of a GB300 (SM 10.3), which picks the KDA prefill kernel.
The layer classes are the released ones with their constructors skipped (they build CUDA streams and weights); the
attributes set are the ones those constructors derive from the config."""

from __future__ import annotations

import math

import pytest

from components.plan import capacity, kvblocks
from tests.engine.conftest import kimi_k3_layer_kinds, stack_config, stand_in_for_flashinfer, vllm_config_for
from tests.engine_support import record

GB300 = (10, 3)
"""Compute capability of a GB300 (Blackwell Ultra, sm_103)."""


class _Gb300:
    """The device queries the KDA layer makes (vllm/models/kimi_k3/nvidia/kda.py `is_flashkda_supported`)."""

    @staticmethod
    def is_cuda() -> bool:
        return True

    @staticmethod
    def get_device_capability(device_id: int = 0):
        from vllm.platforms.interface import DeviceCapability

        return DeviceCapability(*GB300)

    @staticmethod
    def is_device_capability_family(family: int, device_id: int = 0) -> bool:
        return GB300[0] * 10 == family

    @staticmethod
    def is_device_capability(capability, device_id: int = 0) -> bool:
        return GB300[0] * 10 + GB300[1] == capability


def _specs(cfg, vllm_config, monkeypatch) -> tuple[dict, object]:
    """{layer name: KVCacheSpec} as the released layers return it on one rank."""
    from torch import nn
    from vllm.models.kimi_k3.nvidia import kda
    from vllm.models.kimi_k3.nvidia.mla import MultiHeadLatentAttention

    monkeypatch.setattr(kda, "current_platform", _Gb300)
    text = vllm_config.model_config.hf_text_config
    linear = text.linear_attn_config

    class Kda(kda.KimiK3DeltaAttention):
        def __init__(self):  # what GatedDeltaNetAttention.__init__ and KimiK3DeltaAttention.__init__ set
            nn.Module.__init__(self)
            self.model_config, self.cache_config = vllm_config.model_config, vllm_config.cache_config
            self.speculative_config = vllm_config.speculative_config
            self.num_spec = self.speculative_config.num_speculative_tokens if self.speculative_config else 0
            self.tp_size = vllm_config.parallel_config.tensor_parallel_size
            self.num_heads, self.head_dim = linear["num_heads"], linear["head_dim"]
            self.conv_size = linear["short_conv_kernel_size"]
            self.gate_lower_bound = linear.get("gate_lower_bound")
            self.kda_prefill_backend = kda.resolve_kda_prefill_backend(
                "auto", self.head_dim, self.model_config.dtype, self.get_state_dtype()[1], self.gate_lower_bound)

    class Mla(MultiHeadLatentAttention):
        def __init__(self):  # what MultiHeadLatentAttention.__init__ sets
            nn.Module.__init__(self)
            self.head_size = text.kv_lora_rank + text.qk_rope_head_dim
            self.kv_cache_dtype = vllm_config.cache_config.cache_dtype
            self.non_causal_multi_token_decode = False

    kda_layer, mla_layer = Kda(), Mla()
    assert kda_layer.kda_prefill_backend == "flashkda"  # what a GB300 runs
    layers = {"kda": kda_layer, "mla": mla_layer}
    return {f"model.layers.{i}.self_attn": layers[kind].get_kv_cache_spec(vllm_config)
            for i, kind in enumerate(kimi_k3_layer_kinds(cfg))}, kda_layer



def _engine_specs(cfg, tmp_path, monkeypatch, role: str = "prefill"):
    """(VllmConfig, {layer: KVCacheSpec}, global KV cache groups) of one data-parallel engine, as the engine core
    holds them before it sizes its pool."""
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups

    vllm_config = vllm_config_for(cfg, tmp_path, role)
    stand_in_for_flashinfer()
    mla_backend = AttentionBackendEnum.FLASHINFER_MLA.get_class()
    Platform._align_hybrid_block_size(vllm_config, mla_backend)
    specs, kda_layer = _specs(cfg, vllm_config, monkeypatch)
    resolve_kv_cache_layout(vllm_config, [[layout.name for layout in get_supported_kv_cache_layouts(
        [mla_backend, kda_layer.get_attn_backend()])]], list(specs.values()))
    return vllm_config, specs, get_global_kv_cache_groups(vllm_config, [specs])


def _engine_pool(cfg, tmp_path, monkeypatch, role: str = "prefill"):
    """(KVCacheConfig, the capacity the engine logs, the plan's replica capacity) for one data-parallel engine."""
    from vllm.v1.core.kv_cache_planning import get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity

    vllm_config, specs, groups = _engine_specs(cfg, tmp_path, monkeypatch, role)
    plan = capacity.serving_capacity(cfg) if role == "prefill" else capacity.decode_capacity(cfg)
    [config] = get_kv_cache_configs(vllm_config, [specs], [int(plan.kv_pool_bytes_per_device)], groups)
    ENGINES[id(config)] = vllm_config
    return config, get_kv_cache_capacity(vllm_config, config), plan


ENGINES: dict[int, object] = {}
"""The VllmConfig each KVCacheConfig above was planned with."""


def test_the_engines_groups_are_the_plans(gpu_cfg, tmp_path, monkeypatch):
    """24 MLA + 69 KDA layers: 1 MLA group and 3 KDA groups of 24 (one padded), one block id costing 24 pages."""
    config, _, plan = _engine_pool(gpu_cfg, tmp_path, monkeypatch)
    from vllm.v1.kv_cache_interface import MambaSpec, MLAAttentionSpec

    kinds = [type(g.kv_cache_spec) for g in config.kv_cache_groups]
    assert kinds.count(MLAAttentionSpec) == plan.groups.attention_groups == 1
    assert kinds.count(MambaSpec) == plan.groups.state_groups == 3
    assert max(len(g.layer_names) for g in config.kv_cache_groups) == plan.groups.group_size == 24
    assert {g.kv_cache_spec.page_size_bytes for g in config.kv_cache_groups} == {plan.groups.page_bytes}
    assert config.kv_cache_tensors[0].size // config.num_blocks == plan.groups.bytes_per_block


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_blocks_and_admitted_requests_are_the_engines(gpu_cfg, tmp_path, monkeypatch, role):
    """The plan's usable blocks are the engine's `num_blocks` less the null block the BlockPool keeps; a full-context
    request holds what `get_max_concurrency_for_kv_cache_config` counts per group (93 MLA blocks + 3 KDA groups x
    (2 align-mode states + 1 FlashKDA prefill checkpoint)); the requests admitted are the usable blocks over that,
    which is the whole part of the concurrency the engine logs."""
    config, (tokens, concurrency), plan = _engine_pool(gpu_cfg, tmp_path, monkeypatch, role)
    per_request = round(config.num_blocks / concurrency)
    assert config.num_blocks - 1 == plan.blocks_per_engine == 222
    assert per_request == plan.blocks_per_sequence == 102
    assert math.floor(concurrency) == plan.sequences_per_engine == (config.num_blocks - 1) // per_request == 2
    assert plan.sequences == plan.kv_groups * plan.sequences_per_engine == 32


@pytest.mark.parametrize("changes", [{"model.kvCacheDtype": "bf16"}, {"model.contextLength": "262144"},
                                     {"gpu.tensorParallel": "2"}, {"gpu.gpuMemoryPercent": "95"}])
def test_the_engine_follows_a_changed_stack(tmp_path, monkeypatch, changes):
    """The same equalities on stacks the tests change: KV dtype, context, TP, the memory share."""
    cfg = stack_config("gpu", **changes)
    config, (_, concurrency), plan = _engine_pool(cfg, tmp_path, monkeypatch)
    assert config.num_blocks - 1 == plan.blocks_per_engine
    assert round(config.num_blocks / concurrency) == plan.blocks_per_sequence
    assert math.floor(concurrency) == plan.sequences_per_engine
    assert config.kv_cache_groups[0].kv_cache_spec.block_size == kvblocks.gpu_rule(cfg).block_tokens



@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_max_num_seqs_is_what_the_engines_block_manager_admits(gpu_cfg, tmp_path, monkeypatch, role):
    """The released KVCacheManager (vllm/v1/core/kv_cache_manager.py, built as the scheduler builds it) on the
    engine's own KVCacheConfig admits one-token requests until `allocate_slots` finds no blocks (each takes one block
    in each of the 4 groups: 222 // 4): that count is the `--max-num-seqs` the plan passes
    (capacity.max_running_requests), so no larger batch can ever form."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.request import Request

    from components.plan import engines

    config, _, plan = _engine_pool(gpu_cfg, tmp_path, monkeypatch, role)
    block = kvblocks.gpu_rule(gpu_cfg).block_tokens
    manager = KVCacheManager(kv_cache_config=config, max_model_len=gpu_cfg.context_length,
                             scheduler_block_size=block, hash_block_size=block, enable_caching=True)
    admitted = 0
    while admitted <= plan.blocks_per_engine:
        request = Request(str(admitted), [admitted + 1], SamplingParams(max_tokens=1), None)
        if manager.allocate_slots(request, 1) is None:
            break
        admitted += 1
    flags = engines.vllm_batch_flags(gpu_cfg, role)
    assert admitted == plan.max_running == int(flags[flags.index("--max-num-seqs") + 1]) == 55


@pytest.mark.parametrize("changes", [{}, {"gpu.tensorParallel": "2"}, {"model.contextLength": "262144"}])
def test_the_host_tier_is_the_engines(tmp_path, monkeypatch, changes):
    """The OffloadingConnector's CPU tier as vLLM sizes it from the stack's `cpu_bytes_to_use` and the engine's own
    KVCacheConfig (offloading/config.py `build_offloading_config`, kv_offload/cpu/spec.py `CPUOffloadingSpec`): its
    chunk count and the tokens it holds at max_model_len (the figure behind its "CPU KV cache size") are the plan's
    (capacity.host_tier_chunks_per_engine, host_tier_tokens_per_engine). The page size is this machine's."""
    import mmap

    from vllm.config import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import build_offloading_config
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    from components.plan import engines

    cfg = stack_config("gpu", **changes)
    config, _, plan = _engine_pool(cfg, tmp_path, monkeypatch)
    vllm_config = ENGINES.pop(id(config))
    offload = engines.vllm_kv_transfer(cfg, "prefill")["kv_connector_extra_config"]["connectors"][1]
    vllm_config.kv_transfer_config = KVTransferConfig(kv_connector=offload["kv_connector"], kv_role="kv_both",
                                                      kv_connector_extra_config=offload["kv_connector_extra_config"])
    spec = CPUOffloadingSpec(build_offloading_config(vllm_config, config))
    monkeypatch.setattr(capacity, "OFFLOAD_PAGE_BYTES", mmap.PAGESIZE)
    assert spec.num_chunks == capacity.host_tier_chunks_per_engine(cfg)
    assert spec.cpu_info.cpu_kv_cache_size_tokens == capacity.host_tier_tokens_per_engine(cfg)
    assert plan.host_tokens == plan.kv_groups * spec.cpu_info.cpu_kv_cache_size_tokens


@pytest.mark.parametrize("role", ["decode"])
def test_full_cuda_graphs_accept_max_num_seqs_on_the_engines_blocks(gpu_cfg, tmp_path, monkeypatch, role):
    """docs/engine-preconditions.md GPU-BATCH-2, run: after the KV cache is allocated the model runner resolves the
    graph mode from each group's attention backend (vllm/v1/worker/gpu_model_runner.py
    `_check_and_update_cudagraph_mode`) and, with full graphs on a model with Mamba-type layers, refuses a
    `max_num_seqs` above the engine's blocks (vllm/config/compilation.py `resolve_cudagraph_mode_and_sizes`). The
    pods' --max-num-seqs passes on the engine's own KVCacheConfig; one request past its blocks is refused."""
    from vllm.config import CUDAGraphMode
    from vllm.models.kimi_k3.nvidia.kda import KimiK3KDAAttentionBackend
    from vllm.v1.attention.backend import AttentionCGSupport
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.kv_cache_interface import MambaSpec

    from components.plan import engines

    config, _, _ = _engine_pool(gpu_cfg, tmp_path, monkeypatch, role)
    vllm_config = ENGINES[id(config)]
    mla = AttentionBackendEnum.FLASHINFER_MLA.get_class()
    support, name = AttentionCGSupport.ALWAYS, None
    for group in config.kv_cache_groups:
        backend = KimiK3KDAAttentionBackend if isinstance(group.kv_cache_spec, MambaSpec) else mla
        cg = backend.get_builder_cls().get_cudagraph_support(vllm_config, group.kv_cache_spec)
        if cg.value < support.value:
            support, name = cg, backend.__name__
    flags = engines.vllm_batch_flags(gpu_cfg, role)
    seqs = int(flags[flags.index("--max-num-seqs") + 1])

    def resolve(max_num_reqs: int):
        compilation = vllm_config.compilation_config
        compilation.cudagraph_mode = CUDAGraphMode.FULL_DECODE_ONLY  # decode's (engines.DECODE_COMPILATION)
        compilation.cudagraph_capture_sizes, compilation.max_cudagraph_capture_size = [1, 2, 4, 8], 8
        return compilation.resolve_cudagraph_mode_and_sizes(support, name, 1, kv_cache_config=config,
                                                            max_num_reqs=max_num_reqs)

    assert resolve(seqs).has_full_cudagraphs(), (support, name)
    with pytest.raises(ValueError, match="exceeds available Mamba cache blocks"):
        resolve(config.num_blocks + 1)


def _least_pool_the_engine_starts_with(cfg, tmp_path, monkeypatch, role: str) -> int:
    """Bisect the KV pool per device (bytes) between nothing and the GPU's whole HBM, neither the plan's figure, for
    the least that vLLM's planner accepts: below it `get_kv_cache_configs` raises "To serve at least one request with
    the model's max seq len" (vllm/v1/core/kv_cache_planning.py `_check_enough_kv_cache_memory`), and the engine
    core stops at start."""
    from vllm.v1.core.kv_cache_planning import get_kv_cache_configs

    vllm_config, specs, groups = _engine_specs(cfg, tmp_path, monkeypatch, role)

    def starts(pool: int) -> bool:
        try:
            get_kv_cache_configs(vllm_config, [specs], [pool], groups)
        except ValueError as error:
            assert "at least one request" in str(error) or "No available memory" in str(error), error
            return False
        return True

    low, high = 0, int(cfg.gpu.spec.hbm_gb_per_gpu * 1e9)
    assert not starts(low) and starts(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if starts(middle) else (middle, high)
    return high


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_the_least_pool_the_engine_starts_with_is_the_plans_margin(gpu_cfg, tmp_path, monkeypatch, role):
    """docs/engine-preconditions.md GPU-KVFIT-1, run: the least pool vLLM 0.33.0 starts with, found by its own
    planner on pools the plan did not choose, is the plan's one-request pool (capacity.one_request_pool_bytes); the
    non-weight memory the engine may take before it refuses to start is what is left of the usable HBM after the
    weights and that pool, and the plan's assumption stays under it."""
    least = _least_pool_the_engine_starts_with(gpu_cfg, tmp_path, monkeypatch, role)
    plan = capacity.serving_capacity(gpu_cfg) if role == "prefill" else capacity.decode_capacity(gpu_cfg)
    assert least == plan.one_request_pool_bytes
    ceiling = plan.usable_bytes_per_device - plan.weights.total - least
    assert ceiling == plan.start_ceiling_non_weight_bytes
    assert plan.non_weight_bytes_per_device < ceiling
    record(f"{role}: vLLM's planner starts on >= {least / 1e9:.2f} GB of KV per GPU (bisected) == plan "
           f"one_request_pool_bytes; starts while non-weight memory stays under {ceiling / 1e9:.1f} GB per GPU "
           f"(plan assumes {plan.non_weight_bytes_per_device / 1e9:.0f})")


@pytest.mark.parametrize("changes", [{"gpu.tensorParallel": "2"}, {"model.contextLength": "262144"}])
def test_the_least_pool_follows_a_changed_stack(tmp_path, monkeypatch, changes):
    """The same equality where TP splits the KDA heads or a shorter context needs fewer MLA blocks."""
    cfg = stack_config("gpu", **changes)
    assert _least_pool_the_engine_starts_with(cfg, tmp_path, monkeypatch, "prefill") == \
        capacity.serving_capacity(cfg).one_request_pool_bytes

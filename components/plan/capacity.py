"""Sizing computed from the config and the catalog, used by components and the plan summary.

Weight staging and loading (docs/weights.md has the formulas): the bytes each rank reads, the load time and
the Hyperdisk ML throughput come from components.plan.loading; the staging Job's expected time is
components.plan.staging.staging_model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import ConfigError, StackConfig
from ..facts import catalog
from . import kvblocks, loading, parallel

MIB = loading.MIB


def serving_slices(cfg: StackConfig) -> int:
    """Serving units of the stack: GPU slices (one NVL72 rack each) or TPU slices."""
    return cfg.gpu.slices if cfg.track == "gpu" else cfg.tpu.slices


def replicas_per_slice(cfg: StackConfig) -> int:
    """Engine replicas (each loads its share of the checkpoint) in one serving unit."""
    return cfg.gpu.prefillGroups + cfg.gpu.decodeGroups if cfg.track == "gpu" else 1


@dataclass(frozen=True)
class WeightStaging:
    reader_nodes: int
    throughput_mibps: int
    volume_gib: int
    checkpoint_bytes: int
    load_s: float
    """Every replica loading at once (components.plan.loading.LoadModel.load_s)."""
    hydration_s: float
    """Lower bound for writing one copy into the volume (components.plan.loading.hydration_s)."""


def weight_staging(cfg: StackConfig) -> WeightStaging:
    model = loading.load_model(cfg)
    return WeightStaging(
        reader_nodes=model.readers,
        throughput_mibps=model.throughput_mibps,
        volume_gib=cfg.storage.volumeSizeGi,
        checkpoint_bytes=catalog.KIMI.checkpoint_bytes,
        load_s=model.load_s,
        hydration_s=loading.hydration_s(cfg),
    )


# --------------------------------------------------------------------------- weights held
@dataclass(frozen=True)
class HeldWeights:
    """Checkpoint bytes one device keeps after loading, from the tensor layout (components/plan/loading.py) and the
    sharding the engine applies: each non-expert tensor as the model lays it over the engine's TP ranks (all of it
    at TP=1, since every data-parallel engine runs its own copy; at TP > 1 only the column/row/vocab-parallel ones
    split, loading.TensorGroup.tp), and one EP rank's routed experts with their scales (vLLM 0.33.0 reads every
    expert's scales but `FusedMoE.weight_loader` keeps only the local experts' parameters,
    vllm/model_executor/layers/fused_moe/layer.py `_map_global_expert_id_to_local_expert_id`; TorchTPU's filter
    does not even read them)."""

    tensor_parallel: int
    expert_parallel: int
    dense: float
    experts: float
    scales: float

    @property
    def total(self) -> float:
        return self.dense + self.experts + self.scales


def sequence_parallel(cfg: StackConfig) -> bool:
    """vLLM 0.33.0's Kimi K3 runs sequence parallel when PP = 1, expert parallelism is on, TP > 1 and MegaMoE or
    DP > 1 (vllm/models/kimi_k3/nvidia/model.py L708-714); the GPU command always enables EP and MegaMoE
    (components/plan/engines.py), so it is on whenever gpu.tensorParallel > 1."""
    return cfg.track == "gpu" and parallel.layout(cfg).tensor_parallel > 1


def dense_bytes_per_device(cfg: StackConfig, tp: int) -> float:
    """Non-expert bytes one TP rank holds. GPU: split tensors / TP + replicated ones whole + the dense MLP and shared
    experts whole under sequence parallelism (else / TP). TPU ASSUMPTION (vLLM-TorchTPU's K3 sharding not read):
    every non-expert tensor splits over TP; the non-weight figure is calibrated on the same rule
    (tpu_non_weight_bytes), so the KV pool does not depend on it."""
    if cfg.track != "gpu":
        return loading.layout_bytes("whole") / tp
    mlp = loading.layout_bytes("whole", "sp_replicated")
    return (loading.layout_bytes("whole", "split") / tp + loading.layout_bytes("whole", "replicated")
            + (mlp if sequence_parallel(cfg) else mlp / tp))


def weights_held_per_device(cfg: StackConfig, role: str = "prefill") -> HeldWeights:
    """Bytes of weights each device of a `role` replica holds (GPU: `prefill` or `decode` group; TPU: the slice)."""
    replica = parallel.layout(cfg).role(role)
    tp, ep = replica.tensor_parallel, replica.expert_parallel
    share = math.ceil(loading.ROUTED_EXPERTS / ep) / loading.ROUTED_EXPERTS  # linear placement: the largest share
    return HeldWeights(tp, ep, dense_bytes_per_device(cfg, tp), loading.layout_bytes("expert") * share,
                       loading.layout_bytes("expert_scale") * share)


# --------------------------------------------------------------------------- non-weight HBM
GPU_NON_WEIGHT_BYTES = {"activations": 6e9, "cuda graphs": 2e9, "DeepEP/NVSHMEM and NCCL buffers": 4e9}
"""ASSUMPTION (not measured, not published for this model): what vLLM 0.33.0 subtracts from
`--gpu-memory-utilization` x HBM besides weights before sizing the KV cache: the profiled activation peak, the
CUDA-graph estimate and non-torch allocations (`available_kv_cache_memory_bytes = requested_memory -
non_kv_cache_memory - cudagraph_memory_estimate`, vllm/v1/worker/gpu_worker.py L753). Replace with the engine's
log line "Available KV cache memory" once measured."""
TPU_NIGHTLY_MEMORY_FRACTION = 0.70
TPU_NIGHTLY_KV_BYTES = 3 * 2**30
"""vLLM-TorchTPU's Kimi K3 nightly on a v7x-32 slice (TP=32 with EP): "gpu-memory-utilization 0.85 (0.7 leaves
~3 GiB/rank of KV ...)" (github.com/kowalski-4831/vllm-torchtpu scripts/vllm/benchmarking/configs/
kimi-k3-tp32-ep-agentx.sh at ca556ca)."""


def tpu_non_weight_bytes() -> float:
    """Non-weight HBM per TPU rank implied by the nightly: 0.70 x 96 GiB - its weights per rank (TP = EP = 32) -
    ~3 GiB of KV, about 19 GiB (compilation buffers, activations, collectives)."""
    hbm = catalog.IRONWOOD.hbm_gib_per_chip * 2**30 / catalog.IRONWOOD.tensorcores_per_chip
    share = math.ceil(loading.ROUTED_EXPERTS / 32) / loading.ROUTED_EXPERTS
    weights = (loading.layout_bytes("whole") / 32
               + (loading.layout_bytes("expert") + loading.layout_bytes("expert_scale")) * share)
    return TPU_NIGHTLY_MEMORY_FRACTION * hbm - weights - TPU_NIGHTLY_KV_BYTES


def non_weight_bytes(cfg: StackConfig) -> float:
    return sum(GPU_NON_WEIGHT_BYTES.values()) if cfg.track == "gpu" else tpu_non_weight_bytes()


# --------------------------------------------------------------------------- the engine's block pool
@dataclass(frozen=True)
class KvCacheGroups:
    """vLLM's grouping of a hybrid model's layers into KV cache groups of equal size
    (vllm/v1/core/kv_cache_planning.py `_get_kv_cache_groups_uniform_page_size`): group size = the smallest layer
    count of a type, or the largest when it is under 1.5 x the smallest; each type padded to whole groups. One
    block id of the shared pool costs `group_size` pages (`get_kv_cache_config_from_groups`: num_blocks =
    available_memory // bytes_per_block)."""

    group_size: int
    attention_groups: int
    state_groups: int
    page_bytes: int
    state_blocks_per_request: int
    """Blocks a running request holds in each KDA group in `align` mode: 2 + num_speculative_blocks +
    num_prefill_checkpoint_blocks (vllm/v1/kv_cache_interface.py MambaSpec.max_memory_usage_bytes;
    single_type_kv_cache_manager.py MambaManager frees the state block of two steps ago; the checkpoint block:
    kda_prefill_checkpoint_blocks)."""

    @property
    def bytes_per_block(self) -> int:
        return self.group_size * self.page_bytes

    @property
    def groups(self) -> int:
        return self.attention_groups + self.state_groups


FLASHKDA_HEAD_DIM = 128
"""vLLM 0.33.0 runs Kimi K3's KDA prefill with FlashKDA on a GB300 or GB200 (`resolve_kda_prefill_backend` with the
default "auto": `is_flashkda_supported` needs CUDA capability 9, 10 or 12, head_dim 128, bf16 activations, a bf16 or
fp32 recurrent state and K3's bounded gate, vllm/models/kimi_k3/nvidia/kda.py L363-379, L486-520)."""


def kda_prefill_checkpoint_blocks(cfg: StackConfig) -> int:
    """State blocks a request holds per KDA group for the prefill checkpoint: the K3 KDA layer's spec sets
    `num_prefill_checkpoint_blocks = int(alignment is not None)`, and the alignment is 16 for FlashKDA, None for the
    other kernels (vllm/models/kimi_k3/nvidia/kda.py L901-909, vllm/model_executor/layers/mamba/kda_checkpoint.py
    L9-10). GPU only: vLLM-TorchTPU pages its KDA states by its own layout (components/plan/kvblocks.py)."""
    return int(cfg.track == "gpu" and cfg.model.kdaHeadDim == FLASHKDA_HEAD_DIM)


def kv_cache_groups(cfg: StackConfig) -> KvCacheGroups:
    m = cfg.model
    rule = kvblocks.block_rule(cfg)
    smallest, largest = min(m.mlaLayers, m.kdaLayers), max(m.mlaLayers, m.kdaLayers)
    size = largest if largest < smallest * 1.5 else smallest
    spec = m.speculativeTokens if m.speculative != "off" else 0
    return KvCacheGroups(size, -(-m.mlaLayers // size), -(-m.kdaLayers // size), rule.page_bytes,
                         2 + spec + kda_prefill_checkpoint_blocks(cfg))


def engine_blocks(cfg: StackConfig, pool_bytes: float) -> int:
    """Usable blocks of one engine's pool (the BlockPool keeps one null block back)."""
    return max(int(pool_bytes) // kv_cache_groups(cfg).bytes_per_block - 1, 0)


def blocks_per_sequence(cfg: StackConfig, tokens: int) -> int:
    """Blocks one running request of `tokens` holds: every MLA group a block per `block_tokens`, every KDA group
    only its align-mode state blocks (`HybridKVCacheCoordinator` sums the groups' `get_num_blocks_to_allocate`)."""
    g = kv_cache_groups(cfg)
    return g.attention_groups * -(-tokens // kvblocks.block_rule(cfg).block_tokens) \
        + g.state_groups * g.state_blocks_per_request


def max_running_requests(cfg: StackConfig, pool_bytes: float) -> int:
    """Requests one engine can run at once by its block accounting, each at its smallest: a request within its first
    block holds one block in every KV cache group (the align-mode KDA groups reach their 2 + spec + checkpoint
    blocks only past block boundaries; tests/engine/test_vllm_kv_cache.py counts it with the released
    KVCacheManager). The scheduler admits a request only when
    `KVCacheManager.allocate_slots` finds its blocks (vllm/v1/core/sched/scheduler.py), so a `--max-num-seqs` above
    this is never reached and only makes the engine capture CUDA graphs for batches it cannot form. The GPU
    command passes it as `--max-num-seqs` (vLLM 0.33.0 defaults to 1,024 on a >= 160 GiB GPU,
    vllm/engine/arg_utils.py `get_batch_defaults`)."""
    return engine_blocks(cfg, pool_bytes) // kv_cache_groups(cfg).groups


def decode_query_tokens(cfg: StackConfig) -> int:
    """Tokens one request adds to a decode step: 1 + the speculative tokens (`uniform_decode_query_len`)."""
    return 1 + (cfg.model.speculativeTokens if cfg.model.speculative != "off" else 0)


def sequences_that_fit(cfg: StackConfig, pool_bytes: float) -> int:
    """Full-context requests one engine admits at once, by its own block accounting."""
    return engine_blocks(cfg, pool_bytes) // blocks_per_sequence(cfg, cfg.context_length)


def cached_bytes_per_token(cfg: StackConfig) -> float:
    """Bytes a cached prefix token costs on one rank: with dense align-mode retention every block boundary keeps a
    block in every group (MLA pages and KDA state snapshots), padding layers included."""
    g = kv_cache_groups(cfg)
    return g.groups * g.bytes_per_block / kvblocks.block_rule(cfg).block_tokens


# --------------------------------------------------------------------------- KV capacity
TPU_HOST_RAM_SHARE = 0.9
"""Share of the usable host RAM (seed: ~800 GiB per node) the host-DRAM KV tier may take."""


@dataclass(frozen=True)
class ServingCapacity:
    """KV capacity of one serving replica (a GPU prefill or decode group, or a TPU slice) and what the router needs,
    in the engine-effective block (components/plan/kvblocks.py) and the engine's own block accounting."""

    role: str
    devices_per_replica: int
    hbm_bytes_per_device: int
    usable_bytes_per_device: float
    weights: HeldWeights
    non_weight_bytes_per_device: float
    kv_pool_bytes_per_device: float
    kv_groups: int
    """Independent KV pools per replica: data-parallel engines (GPU) or one engine per slice (TPU); MLA's
    latent cache is replicated across the TP ranks of one engine."""
    rule: kvblocks.BlockRule
    groups: KvCacheGroups
    context_length: int
    blocks_per_engine: int
    sequences_per_engine: int
    max_running: int
    """Requests one engine runs at once at most (max_running_requests); GPU `--max-num-seqs`."""
    host_tokens: int
    """vLLM's own count of its CPU tier at the served context (host_tier_tokens_per_engine, what the engine logs); the
    prefix tokens either tier keeps depend on the session shape (shape_capacity)."""
    host_bytes_per_node: float
    endpoints_per_replica: int

    @property
    def weight_bytes_per_device(self) -> float:
        return self.weights.total

    @property
    def block_tokens(self) -> int:
        return self.rule.block_tokens

    @property
    def bytes_per_token(self) -> float:
        """One rank's bytes per cached prefix token over every KV cache group."""
        return self.groups.groups * self.groups.bytes_per_block / self.block_tokens

    @property
    def sequences(self) -> int:
        """Full-context requests the replica admits in HBM at once."""
        return self.kv_groups * self.sequences_per_engine

    @property
    def blocks_per_sequence(self) -> int:
        g = self.groups
        return g.attention_groups * -(-self.context_length // self.block_tokens) \
            + g.state_groups * g.state_blocks_per_request

    @property
    def non_weight_ceiling_bytes(self) -> float:
        """Non-weight HBM per device above which one engine admits one full-context request fewer: what is left after
        the weights less the blocks `sequences_per_engine` requests hold (and the null block)."""
        held = (self.sequences_per_engine * self.blocks_per_sequence + 1) * self.groups.bytes_per_block
        return self.usable_bytes_per_device - self.weights.total - held

    @property
    def one_request_pool_bytes(self) -> int:
        """The least KV pool per device the engine starts with: vLLM refuses to start unless its usable blocks (the
        pool less the null block) hold one request at `--max-model-len` (vLLM 0.33.0
        vllm/v1/core/kv_cache_planning.py `get_kv_cache_configs` -> `_check_enough_kv_cache_memory`, "To serve at
        least one request with the model's max seq len"; the same check in vLLM 0.29.0's kv_cache_utils.py, which
        vLLM-TorchTPU runs). tests/engine/test_vllm_kv_cache.py bisects it with the engine's planner."""
        return (self.blocks_per_sequence + 1) * self.groups.bytes_per_block

    @property
    def start_ceiling_non_weight_bytes(self) -> float:
        """Non-weight memory per device above which the engine does not start at all (docs/engine-preconditions.md
        GPU-KVFIT-1): usable HBM less the weights less `one_request_pool_bytes`."""
        return self.usable_bytes_per_device - self.weights.total - self.one_request_pool_bytes


def serving_capacity(cfg: StackConfig) -> ServingCapacity:
    """Capacity of one serving replica (on GPU, a prefill group, which the router's prefix model sizes).

    Raises ConfigError naming the keys to change when the weights or one full-length sequence do not fit
    any replica, decode groups included."""
    if cfg.track == "gpu":
        _replica_capacity(cfg, "decode")
    return _replica_capacity(cfg, "prefill")


def decode_capacity(cfg: StackConfig) -> ServingCapacity:
    """A GPU decode group (where a session lives while it generates); the slice on TPU."""
    return _replica_capacity(cfg, "decode" if cfg.track == "gpu" else "prefill")


def _replica_capacity(cfg: StackConfig, role: str) -> ServingCapacity:
    if cfg.track == "gpu":
        gpu, replica = cfg.gpu, parallel.layout(cfg).role(role)
        devices = replica.devices
        hbm = int(gpu.spec.hbm_gb_per_gpu * 1e9)
        usable = hbm * gpu.gpuMemoryPercent / 100
        kv_groups = replica.engines
        host_per_node = gpu.spec.host_memory_gb * 1e9 * gpu.hostOffloadPercent / 100
        endpoints = kv_groups  # one router endpoint per engine (components/plan/engines.py vllm_engine_ports)
        size_keys = f"gpu.{role}NodesPerGroup or gpu.gpuMemoryPercent"
    else:
        tpu = cfg.tpu
        role = "slice"
        devices = tpu.chips_per_slice * catalog.IRONWOOD.tensorcores_per_chip
        hbm = catalog.IRONWOOD.hbm_gib_per_chip * 2**30 // catalog.IRONWOOD.tensorcores_per_chip
        usable = hbm * tpu.memFractionPercent / 100
        # The slice's engines: one whose TP spans every TensorCore, or the data-parallel engines of
        # tpu.launch=dp-across-hosts, each with its own pool (components/plan/parallel.py).
        kv_groups = parallel.layout(cfg).role("slice").engines
        endpoints = 1  # the router targets only the leader of each replica (its one API server)
        size_keys = "tpu.topology or tpu.memFractionPercent"
    weights = weights_held_per_device(cfg, "decode" if role == "decode" else "prefill")
    other = non_weight_bytes(cfg)
    pool = usable - weights.total - other
    rule = kvblocks.block_rule(cfg)
    groups = kv_cache_groups(cfg)
    context = cfg.context_length
    if pool <= 0:
        keys = size_keys.split(" or ")
        key = next((k for k in keys if k.split(".")[1] in getattr(cfg, k.split(".")[0]).changed()), keys[0])
        raise ConfigError(key, getattr(getattr(cfg, key.split(".")[0]), key.split(".")[1]),
                          f"weights need {weights.total / 1e9:.0f} GB per device and the engine "
                          f"{other / 1e9:.0f} GB more, of {usable / 1e9:.0f} GB usable HBM; more devices per "
                          f"replica are needed ({size_keys})")
    blocks = engine_blocks(cfg, pool)
    per_sequence = blocks_per_sequence(cfg, context)
    if blocks < per_sequence:
        key, value = _blame(cfg, size_keys)
        raise ConfigError(key, value,
                          f"one sequence of {context:,} tokens needs {per_sequence:,} KV blocks "
                          f"({per_sequence * groups.bytes_per_block / 1e9:.1f} GB) but one engine's pool holds "
                          f"{blocks:,} ({pool / 1e9:.1f} GB); lower it or change {size_keys}")
    if cfg.track == "gpu":
        host_tokens = kv_groups * host_tier_tokens_per_engine(cfg)
    else:
        host_tokens = kv_groups * (blocks // groups.groups) * rule.block_tokens * cfg.tpu.hicacheRatio
        devices_per_host = catalog.IRONWOOD.chips_per_host * catalog.IRONWOOD.tensorcores_per_chip
        host_per_node = cfg.tpu.hicacheRatio * pool * devices_per_host
        limit = catalog.IRONWOOD.usable_host_memory_gib * 2**30 * TPU_HOST_RAM_SHARE
        if host_per_node > limit:
            field = cfg.tpu.blame("hicacheRatio", "topology", "memFractionPercent")
            raise ConfigError(f"tpu.{field}", getattr(cfg.tpu, field),
                              f"the host pool (tpu.hicacheRatio {cfg.tpu.hicacheRatio} x the HBM KV pool) would take "
                              f"{host_per_node / 2**30:.0f} GiB per node, over "
                              f"{limit / 2**30:.0f} GiB of the ~{catalog.IRONWOOD.usable_host_memory_gib} GiB usable; "
                              f"lower tpu.hicacheRatio")
    return ServingCapacity(
        role=role, devices_per_replica=devices, hbm_bytes_per_device=hbm, usable_bytes_per_device=usable,
        weights=weights, non_weight_bytes_per_device=other, kv_pool_bytes_per_device=pool, kv_groups=kv_groups,
        rule=rule, groups=groups, context_length=context, blocks_per_engine=blocks,
        sequences_per_engine=blocks // per_sequence, max_running=max_running_requests(cfg, pool),
        host_tokens=host_tokens,
        host_bytes_per_node=host_per_node, endpoints_per_replica=endpoints,
    )


KV_GEOMETRY_FIELDS = ("mlaLatentDim", "kdaHeads", "kdaHeadDim", "kdaConvKernel", "kdaLayers", "mlaLayers",
                      "kvCacheDtype", "kdaStateDtype")
"""model.* keys that set the bytes a cached token or a KDA state costs."""


def _blame(cfg: StackConfig, size_keys: str) -> tuple[str, object]:
    """The key a KV-fit error names: a cache geometry key set away from its default (Kimi K3's published value),
    else model.contextLength if the user set it, else the first sizing key they changed (model.contextLength when
    none)."""
    changed = cfg.model.changed()
    for field in KV_GEOMETRY_FIELDS:
        if field in changed:
            return f"model.{field}", getattr(cfg.model, field)
    if cfg.model.contextLength is None:
        for key in size_keys.split(" or "):
            section, field = key.split(".")
            if field in getattr(cfg, section).changed():
                return key, getattr(getattr(cfg, section), field)
    return "model.contextLength", cfg.context_length


def cpu_offload_bytes_per_engine(cfg: StackConfig) -> int:
    """vLLM OffloadingConnector `cpu_bytes_to_use`: one instance per local DP engine
    (https://github.com/llm-d/llm-d/blob/3cfabd6/guides/pd-disaggregation/README.multi-tier.md)."""
    host = cfg.gpu.spec.host_memory_gb * 1e9 * cfg.gpu.hostOffloadPercent / 100
    return int(host // parallel.layout(cfg).engines_per_node)


OFFLOAD_PAGE_BYTES = 65536
"""ASSUMPTION: the page size (mmap.PAGESIZE) of the GB300 nodes' arm64 kernel, which vLLM's CPU tier rounds each
chunk up to (vllm/v1/kv_offload/cpu/shared_offload_region.py `BLOCK_SIZE_ALIGNMENT`); 64 KiB is the largest arm64
page. At the committed stack 4 KiB pages give the same chunk count."""


def host_tier_chunks_per_engine(cfg: StackConfig) -> int:
    """Chunks one engine's CPU tier holds: `cpu_bytes_to_use` // (one block id's bytes x the engine's TP workers,
    rounded up to the page), one block per chunk (vllm/v1/kv_offload/cpu/spec.py `CPUOffloadingSpec.__init__`;
    the block id's bytes are the pool's 24 pages, offloading/config.py `worker_kv_bytes_per_block`)."""
    chunk = kv_cache_groups(cfg).bytes_per_block * parallel.layout(cfg).tensor_parallel
    chunk = -(-chunk // OFFLOAD_PAGE_BYTES) * OFFLOAD_PAGE_BYTES
    return cpu_offload_bytes_per_engine(cfg) // chunk


def host_tier_tokens_per_engine(cfg: StackConfig) -> int:
    """Tokens one engine's CPU tier holds for requests of the served context, by vLLM's own count
    (vllm/v1/kv_offload/cpu/common.py `_kv_cache_size_tokens`): a request takes one chunk per block in each MLA group
    but only one in each KDA group, whose offload window is a single state (offloading/config.py
    `get_sliding_window_size_in_chunks`: "Mamba depends on a single state"). The HBM prefix cache keeps a state
    block at every boundary; the CPU tier keeps the last one."""
    g, block, context = kv_cache_groups(cfg), kvblocks.block_rule(cfg).block_tokens, cfg.context_length
    per_request = g.attention_groups * -(-context // block) + g.state_groups
    return host_tier_chunks_per_engine(cfg) * context // per_request


# --------------------------------------------------------------------------- per slice
@dataclass(frozen=True)
class SliceCapacity:
    """What one serving unit holds, and the stack's total over `slices` of them."""

    slices: int
    replicas: int
    """Engine replicas per slice (GPU: prefill + decode groups; TPU: 1)."""
    sessions_hbm: int
    """Full-length sessions (served context) the slice's serving KV holds in HBM: decode groups on GPU (where a
    session lives while it generates), the replica on TPU."""
    sessions_host: int
    """The same in host DRAM (the offload tier)."""
    prefix_sessions_hbm: int
    prefix_sessions_host: int
    """GPU: full-length prefixes the prefill groups keep cached in HBM / host DRAM (0 on TPU: same engine)."""


def _sessions(c: ServingCapacity) -> tuple[int, int]:
    """(HBM, host) full-length sequences of one replica: a sequence lives in one engine's pool."""
    return c.sequences, c.kv_groups * (c.host_tokens // c.kv_groups // c.context_length)


def slice_capacity(cfg: StackConfig) -> SliceCapacity:
    prefill = serving_capacity(cfg)
    if cfg.track == "gpu":
        decode_hbm, decode_host = _sessions(_replica_capacity(cfg, "decode"))
        prefill_hbm, prefill_host = _sessions(prefill)
        g = cfg.gpu
        return SliceCapacity(g.slices, replicas_per_slice(cfg), g.decodeGroups * decode_hbm,
                             g.decodeGroups * decode_host, g.prefillGroups * prefill_hbm,
                             g.prefillGroups * prefill_host)
    hbm, host = _sessions(prefill)
    return SliceCapacity(cfg.tpu.slices, 1, hbm, host, 0, 0)


def tpu_offload_bytes_per_engine(cfg: StackConfig) -> int:
    """TPURaidenOffloadingConnector `cpu_bytes_to_use` of one engine: tpu.hicacheRatio x its HBM KV pool over its
    ranks, the TP ranks of one engine (vLLM's offloading spec divides the bytes by every worker's share of a block,
    https://github.com/vllm-project/vllm/blob/v0.29.0/vllm/v1/kv_offload/cpu/spec.py)."""
    c = serving_capacity(cfg)
    return int(cfg.tpu.hicacheRatio * c.kv_pool_bytes_per_device * parallel.layout(cfg).tensor_parallel)


# --------------------------------------------------------------------------- the router's prefill rate
ROUTER_DEFAULT_TOKENS_PER_S = 15928
"""The affinity filter's built-in `peakPrefillThroughput`: "calibrated for Qwen 32B on 2x H100 80GB (TP=2) with vLLM
0.19, measured as the prefill throughput of a single unloaded chunk of `max_num_batched_tokens` (8192) tokens"
(llm-d-router v0.10.0 pkg/epp/framework/plugins/scheduling/filter/prefixcacheaffinity/README.md L80-84,
plugin.go L93-101)."""
ROUTER_DEFAULT_PARAMS = 32.8e9
"""ASSUMPTION: "Qwen 32B" is Qwen3-32B, 32.8B parameters (https://huggingface.co/Qwen/Qwen3-32B model card)."""
ROUTER_DEFAULT_TFLOPS = 2 * 989.4
"""2 x H100 SXM, BF16 dense 989.4 TFLOPS each (NVIDIA's 1,979 "with sparsity", halved;
https://glennklockwood.com/garden/processors/h100)."""


def endpoint_bf16_tflops(cfg: StackConfig) -> float:
    """Peak BF16 compute behind one router endpoint once every endpoint is busy: GPU, the GPUs of one data-parallel
    engine (`gpu.tensorParallel`; with expert parallelism the group's engines share the experts, so a loaded
    group gives each engine its own GPUs' worth); TPU, the slice's chips (one engine per slice)."""
    if cfg.track == "gpu":
        return cfg.gpu.spec.bf16_dense_tflops_per_gpu * parallel.layout(cfg).tensor_parallel
    return catalog.IRONWOOD.bf16_tflops_per_chip * cfg.tpu.chips_per_slice


def rule_prefill_throughput(cfg: StackConfig) -> int:
    """`peakPrefillThroughput` (tokens/s per endpoint: TTFT_ms = in-flight tokens / it x 1000, prefixcacheaffinity/
    plugin.go L82-86) for this model and endpoint, from the filter's own calibration point carried over at the same
    utilization: 15,928 tokens/s x (this endpoint's BF16 peak / 2 x H100's) x (Qwen 32B's parameters / Kimi K3.1
    Pro's active parameters, catalog.KIMI.active_params), prefill costing 2 FLOPs per active parameter per token in
    both. Attention over long prompts (24 MLA layers) and the FP4/FP8 kernels K3 runs are outside the rule: a
    calibration (`router.calibrate`) replaces it."""
    scale = endpoint_bf16_tflops(cfg) / ROUTER_DEFAULT_TFLOPS * ROUTER_DEFAULT_PARAMS / catalog.KIMI.active_params
    return round(ROUTER_DEFAULT_TOKENS_PER_S * scale)


def peak_prefill_throughput(cfg: StackConfig) -> int:
    """What the router renders and the replay and autoscaling models assume: `router.peakPrefillThroughput` when set
    (a calibration), else the rule."""
    return cfg.router.peakPrefillThroughput or rule_prefill_throughput(cfg)

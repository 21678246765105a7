"""Sizing computed from the config and the catalog, used by components and the plan summary.

Weight staging and loading (docs/weights.md has the formulas): the bytes each rank reads, the load time and
the Hyperdisk ML throughput come from components.loading; the staging Job's expected time is
components.staging.staging_model.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import catalog, kvblocks, loading
from .config import ConfigError, StackConfig

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
    """Every replica loading at once (components.loading.LoadModel.load_s)."""
    hydration_s: float
    """Lower bound for writing one copy into the volume (components.loading.hydration_s)."""


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


# --------------------------------------------------------------------------- KV capacity
TPU_HOST_RAM_SHARE = 0.9
"""Share of the usable host RAM (seed: ~800 GiB per node) the host-DRAM KV tier may take."""


@dataclass(frozen=True)
class ServingCapacity:
    """KV capacity of one serving replica (a GPU prefill group, or a TPU slice) and what the router needs.

    The unit is the engine-effective block (components/kvblocks.py): every cached block keeps one page per MLA
    layer and, with prefix caching in `align` mode, one KDA state page per KDA layer padded to the same size."""

    devices_per_replica: int
    hbm_bytes_per_device: int
    weight_bytes_per_device: float
    kv_pool_bytes_per_device: float
    kv_groups: int
    """Independent KV pools per replica: data-parallel engines (GPU) or one engine per slice (TPU); MLA's
    latent cache is replicated across the TP ranks of one engine."""
    rule: kvblocks.BlockRule
    context_length: int
    hbm_tokens: int
    host_tokens: int
    host_bytes_per_node: float
    endpoints_per_replica: int

    @property
    def block_tokens(self) -> int:
        return self.rule.block_tokens

    @property
    def bytes_per_token(self) -> float:
        """One rank's bytes per cached token: its paged layers, plus any per-sequence state spread over a
        full-length sequence."""
        return self.rule.bytes_per_token + self.rule.state_bytes_per_sequence / self.context_length

    @property
    def lru_capacity_per_server(self) -> int:
        """`approx-prefix-cache-producer` capacity: engine blocks per endpoint across HBM and host DRAM
        (https://github.com/llm-d/llm-d-router/blob/v0.10.0/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/plugin.go)."""
        return (self.hbm_tokens + self.host_tokens) // self.endpoints_per_replica // self.block_tokens


def serving_capacity(cfg: StackConfig) -> ServingCapacity:
    """Capacity of one serving replica (on GPU, a prefill group, which the router's prefix model sizes).

    Raises ConfigError naming the keys to change when the weights or one full-length sequence do not fit
    any replica, decode groups included."""
    if cfg.track == "gpu":
        _replica_capacity(cfg, "decode")
    return _replica_capacity(cfg, "prefill")


def _replica_capacity(cfg: StackConfig, role: str) -> ServingCapacity:
    checkpoint = catalog.KIMI.checkpoint_bytes
    if cfg.track == "gpu":
        gpu = cfg.gpu
        nodes = gpu.prefillNodesPerGroup if role == "prefill" else gpu.decodeNodesPerGroup
        devices = nodes * gpu.spec.gpus_per_node
        hbm = int(gpu.spec.hbm_gb_per_gpu * 1e9)
        usable = hbm * gpu.gpuMemoryPercent / 100
        kv_groups = devices // gpu.tensorParallel
        host_per_node = gpu.spec.host_memory_gb * 1e9 * gpu.hostOffloadPercent / 100
        endpoints = nodes
        size_keys = f"gpu.{role}NodesPerGroup or gpu.gpuMemoryPercent"
    else:
        tpu = cfg.tpu
        devices = tpu.chips_per_slice * catalog.IRONWOOD.tensorcores_per_chip
        hbm = catalog.IRONWOOD.hbm_gib_per_chip * 2**30 // catalog.IRONWOOD.tensorcores_per_chip
        usable = hbm * tpu.memFractionPercent / 100
        kv_groups = 1  # one engine per slice: attention TP spans every TensorCore
        endpoints = 1  # the router targets only the leader of each replica
        size_keys = "tpu.topology or tpu.memFractionPercent"
    # Experts shard over every device (EP = all GPUs of a group / the slice's EP x TP); non-expert weights are
    # whole in every GPU data-parallel engine (split only over its TP ranks), and TP-sharded on TPU.
    replicated = cfg.model.replicatedWeightsGB * 1e9 if cfg.track == "gpu" else 0.0
    weights = (checkpoint - replicated) / devices + replicated / (cfg.gpu.tensorParallel if cfg.track == "gpu" else 1)
    pool = usable - weights
    rule = kvblocks.block_rule(cfg)
    context = cfg.context_length
    if pool <= 0:
        key = size_keys.split(" ")[0]
        raise ConfigError(key, getattr(getattr(cfg, key.split(".")[0]), key.split(".")[1]),
                          f"weights need {weights / 1e9:.0f} GB per device of {usable / 1e9:.0f} GB usable HBM; "
                          f"more devices per replica are needed ({size_keys})")
    per_token = rule.bytes_per_token + rule.state_bytes_per_sequence / context
    hbm_tokens = int(kv_groups * pool / per_token)
    engine_tokens = int(pool / per_token)  # a sequence lives in one engine's pool (per rank: MLA replicated over TP)
    if engine_tokens < context:
        key, value = _blame(cfg, size_keys)
        raise ConfigError(key, value,
                          f"one sequence of {context:,} tokens needs {context * per_token / 1e9:.1f} GB of KV cache "
                          f"but one engine's pool holds {pool / 1e9:.1f} GB ({engine_tokens:,} tokens); lower it or "
                          f"change {size_keys}")
    if cfg.track == "gpu":
        host_tokens = int(nodes * host_per_node / (per_token * cfg.gpu.tensorParallel))
    else:
        host_tokens = hbm_tokens * cfg.tpu.hicacheRatio
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
        devices_per_replica=devices, hbm_bytes_per_device=hbm, weight_bytes_per_device=weights,
        kv_pool_bytes_per_device=pool, kv_groups=kv_groups, rule=rule, context_length=context, hbm_tokens=hbm_tokens,
        host_tokens=host_tokens, host_bytes_per_node=host_per_node, endpoints_per_replica=endpoints,
    )


def _blame(cfg: StackConfig, size_keys: str) -> tuple[str, object]:
    """The key a KV-fit error names: model.contextLength if the user set it, else the first sizing key they
    changed (model.contextLength when none)."""
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
    return int(host // cfg.gpu.data_parallel_local)


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
    per_engine = int(c.kv_pool_bytes_per_device / c.bytes_per_token) // c.context_length
    return c.kv_groups * per_engine, c.host_tokens // c.context_length


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
    """TPURaidenOffloadingConnector `cpu_bytes_to_use` of one slice's engine: tpu.hicacheRatio x its HBM KV pool over
    every rank (vLLM's offloading spec divides the bytes by every worker's share of a block,
    https://github.com/vllm-project/vllm/blob/v0.29.0/vllm/v1/kv_offload/cpu/spec.py)."""
    c = serving_capacity(cfg)
    return int(cfg.tpu.hicacheRatio * c.kv_pool_bytes_per_device * c.devices_per_replica)

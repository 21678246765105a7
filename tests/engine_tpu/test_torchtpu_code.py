"""vLLM-TorchTPU 0.29.0's own functions on the TPU stack's values, against what the plan computes at plan time
(components/plan/loading.py, components/plan/engines.py): the expert-weight filter and byte-range prefetch that
decide what each
TPU rank reads and keeps, and the Raiden offloading spec reading the `kv_connector_extra_config` the pods pass."""

from __future__ import annotations

import importlib.metadata
import json
import re
import struct
from pathlib import Path

import pytest

from components.facts.versions import VLLM_TORCHTPU
from components.plan import engines, kvblocks, loading, prefixcache
from tests.engine_support import ROOT, record

LOCK = ROOT / "components" / "locks" / "vllm-torchtpu.txt"
WHEELS = ROOT / "requirements-engines-tpu-wheels.txt"
REQUIREMENTS = ROOT / "requirements-engines-tpu.txt"
NOT_THE_LOCKS = {"networkx": "the lock's 3.7 needs Python 3.12", "torch": "the lock's is a cp312 URL (below)",
                 "pytest": "runs the tier", "iniconfig": "pytest's", "pluggy": "pytest's"}


def _pins(text: str) -> dict[str, str]:
    """`name==version --hash=...` entries of a pip requirements file, backslash continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    entry = re.compile(r"^([A-Za-z0-9_.\-]+)==\S+(?:\s+--hash=\S+)*", re.M)
    return {m[1].lower(): m[0].strip() for m in entry.finditer(joined)}


def test_the_tier_runs_the_pinned_release_from_the_pods_lock():
    """The two wheels come from the pods' own hash-pinned lock, and the torch the tier runs is the version it pins."""
    lock, wheels = _pins(LOCK.read_text()), _pins(WHEELS.read_text())
    assert set(wheels) == {"vllm-torchtpu", "vllm-torchtpu-core"}
    for name, entry in wheels.items():
        assert entry == lock[name], f"{WHEELS.name}: {name} differs from {LOCK.relative_to(ROOT)}"
    norm = lambda name: re.sub(r"[-_.]+", "-", name.lower())  # noqa: E731
    locked = {norm(k): v for k, v in lock.items()}
    for name, entry in _pins(REQUIREMENTS.read_text()).items():
        if norm(name) not in NOT_THE_LOCKS:
            pin = entry.split()[0]
            assert locked.get(norm(name), "").split()[0:1] == [pin], f"{REQUIREMENTS.name}: {pin} is not the lock's"
    assert importlib.metadata.version("vllm-torchtpu") == VLLM_TORCHTPU.version
    assert importlib.metadata.version("vllm-torchtpu-core") == VLLM_TORCHTPU.core_version
    import torch
    import vllm

    assert vllm.__version__ == VLLM_TORCHTPU.version
    # The pods' lock takes the CPU build of torch for cp312 from the PyTorch index (`torch @ .../torch-2.13.0%2Bcpu-
    # cp312-...whl`); the tier runs that build's version for cp311 (requirements-engines-tpu.txt says why).
    [pinned] = re.findall(r"^torch @ \S+/torch-(\d+\.\d+\.\d+)%2Bcpu-cp312", LOCK.read_text(), re.M)
    assert torch.__version__ == f"{pinned}+cpu"


# --------------------------------------------------------------------------- weights read and kept per rank
EXPERT_TENSORS = {
    # (projection, suffix) -> bytes: the released checkpoint's MXFP4 experts under their compressed-tensors names
    # (vllm_torchtpu/model_loader_patches.py module docstring: `.weight_packed` / `.weight_scale`), two 4-bit codes
    # per byte, one E8M0 scale byte per 32 values (components/plan/loading.py KIMI_K3_TENSORS).
    ("w1", "weight_packed"): 3072 * 1792, ("w3", "weight_packed"): 3072 * 1792, ("w2", "weight_packed"): 3584 * 1536,
    ("w1", "weight_scale"): 3072 * 112, ("w3", "weight_scale"): 3072 * 112, ("w2", "weight_scale"): 3584 * 96,
}
KIND = {"weight_packed": "expert", "weight_scale": "expert_scale"}


def _safetensors_header(path: Path, tensors: list[tuple[str, int]]) -> Path:
    """A safetensors file's header (8-byte length, JSON with each tensor's data_offsets) and no tensor data:
    `_local_tensor_ranges` reads only the header to choose the byte ranges a rank prefetches."""
    header, offset = {}, 0
    for name, size in tensors:
        header[name] = {"dtype": "U8", "shape": [size], "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob)
    return path


def _checkpoint(tmp_path: Path) -> tuple[Path, Path, int]:
    """One MoE layer's routed experts (every MoE layer holds the same 896 x 6 tensors) and every tensor that is not a
    routed expert, in the plan's checkpoint layout; returns the files and how many MoE layers the expert file stands
    for."""
    groups = {kind: [g for g in loading.KIMI_K3_TENSORS if g.kind == kind] for kind in ("expert", "expert_scale")}
    for kind, [group] in groups.items():  # the per-projection shapes above are the plan's tensor groups
        listed = sum(size for (_, suffix), size in EXPERT_TENSORS.items() if KIND[suffix] == kind)
        assert listed == group.elements * group.bytes_per_element
    [group] = groups["expert"]
    moe_layers = group.count // loading.ROUTED_EXPERTS
    experts = _safetensors_header(tmp_path / "experts.safetensors", [
        (f"language_model.model.layers.1.mlp.experts.{e}.{proj}.{suffix}", size)
        for e in range(loading.ROUTED_EXPERTS) for (proj, suffix), size in EXPERT_TENSORS.items()])
    dense = _safetensors_header(tmp_path / "dense.safetensors", [
        (f"language_model.model.dense.{i}.{j}.weight", int(g.elements * g.bytes_per_element))
        for i, g in enumerate(loading.KIMI_K3_TENSORS) if g.kind == "whole" for j in range(g.count)])
    return experts, dense, moe_layers


def _span(ranges: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in ranges)


def test_bytes_read_and_kept_per_tpu_rank_are_the_filters(tpu_cfg, tmp_path):
    """With the pods' `--enable-ep-weight-filter --safetensors-load-strategy prefetch`, TorchTPU's loader patch
    (`patch_default_loader_ep_weight_filter`) widens vLLM's filter to the packed weights and scales of other ranks'
    experts, and its prefetch reads only the byte ranges `_local_tensor_ranges` picks for the rank's kept tensors;
    the ranks of a host share those pages. Every rank's expert ids are vLLM's `compute_local_expert_ids` with
    ep_size = dp x pcp x tp and the pods' TP (no data parallelism inside a slice)."""
    from vllm.model_executor.model_loader import default_loader, ep_weight_filter, weight_utils
    from vllm_torchtpu import model_loader_patches as patches

    argv = engines.vllm_torchtpu_command(tpu_cfg, "leader").argv
    for flag in loading.TPU_LOADER.argv:
        assert flag in argv
    assert "--data-parallel-size" not in argv
    ep = int(argv[argv.index("--tensor-parallel-size") + 1])

    patches.patch_default_loader_ep_weight_filter()
    assert weight_utils.should_skip_weight is patches._should_skip_weight_tpu
    assert ep_weight_filter.should_skip_weight is patches._should_skip_weight_tpu

    experts, dense, moe_layers = _checkpoint(tmp_path)
    [reads] = loading.replica_reads(tpu_cfg)
    assert reads.expert_parallel == ep
    local = [default_loader.compute_local_expert_ids(loading.ROUTED_EXPERTS, ep, rank, placement="linear")
             for rank in range(ep)]
    per_rank = [_span(patches._local_tensor_ranges(str(dense), ids))
                + moe_layers * _span(patches._local_tensor_ranges(str(experts), ids)) for ids in local]
    # The busiest rank is the one the plan sizes for (the largest linear share).
    engine_rank = max(per_rank)
    kept = {kind: sum(not weight_utils.should_skip_weight(
        f"language_model.model.layers.1.mlp.experts.{e}.{proj}.{suffix}", local[0])
        for e in range(loading.ROUTED_EXPERTS) for (proj, suffix) in EXPERT_TENSORS if KIND[suffix] == kind)
        for kind in KIND.values()}
    share = len(local[0]) / loading.ROUTED_EXPERTS
    assert kept == {kind: 3 * len(local[0]) for kind in KIND.values()}  # w1, w2, w3 of its own experts only
    assert set(loading.TPU_LOADER.filtered_kinds) == set(KIND.values())
    assert abs(engine_rank - reads.rank_bytes) <= 1

    # One host's ranks (TP ranks host x ranks_per_node ...) read the union of their ranges once.
    node_ranges = {path: sorted({r for ids in local[: reads.ranks_per_node]
                                 for r in patches._local_tensor_ranges(str(path), ids)}) for path in (dense, experts)}
    engine_node = _span(node_ranges[dense]) + moe_layers * _span(node_ranges[experts])
    assert abs(engine_node - reads.node_bytes) <= reads.ranks_per_node
    record(f"TPU rank (EP {ep}, {reads.ranks_per_node} ranks/node), _should_skip_weight_tpu + _local_tensor_ranges: "
           f"keeps {len(local[0])}/{loading.ROUTED_EXPERTS} experts' packed weights and scales ({share:.4f}); engine "
           f"{engine_rank / 1e9:,.1f} GB read and kept per rank, {engine_node / 1e9:,.1f} GB per node == plan "
           f"{reads.rank_bytes / 1e9:,.1f} GB per rank, {reads.node_bytes / 1e9:,.1f} GB per node")


# --------------------------------------------------------------------------- Raiden host-DRAM offload
def _k3_config_dir(cfg, tmp_path: Path) -> str:
    """A Kimi K3 config.json with the plan's geometry (the layout the GPU tier's block test uses)."""
    m = cfg.model
    total = m.kdaLayers + m.mlaLayers
    full = [*range(4, total, 4)][: m.mlaLayers - 1] + [total]
    text = {"model_type": "kimi_linear", "torch_dtype": "bfloat16", "num_hidden_layers": total, "hidden_size": 7168,
            "num_attention_heads": 96, "vocab_size": 163840, "q_lora_rank": 1536,
            "kv_lora_rank": m.mlaLatentDim - 64, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
            "num_experts": loading.ROUTED_EXPERTS, "num_experts_per_token": 8, "moe_intermediate_size": 1536,
            "max_position_embeddings": 1_048_576,
            "linear_attn_config": {"full_attn_layers": full,
                                   "kda_layers": [i for i in range(1, total + 1) if i not in full],
                                   "head_dim": m.kdaHeadDim, "num_heads": m.kdaHeads,
                                   "short_conv_kernel_size": m.kdaConvKernel}}
    (tmp_path / "config.json").write_text(json.dumps({"architectures": [m.architecture], "model_type": "kimi_k3",
                                                      "torch_dtype": "bfloat16", "text_config": text}))
    return str(tmp_path), full


LEADER = "192.0.2.10"
"""What the pod script's `getent hosts` puts in ${LEADER_IP} (a documentation address: nothing dials it here)."""


@pytest.mark.parametrize("rank", ["leader", "worker"])
def test_raiden_reads_the_leaders_address_port_and_pool_from_the_pods_config(tpu_cfg, tmp_path, monkeypatch, rank):
    """`TPURaidenStoreOffloadingSpec.__init__` (vllm_torchtpu/offload/raiden_store.py) on vLLM 0.29.0's own
    `KVTransferConfig` of the JSON each rank's command passes and `build_offloading_config` over a hybrid KV-cache
    config of the plan's TPU block: the controller address every rank dials is the leader's, on the port the leader
    pod declares, and `cpu_bytes_to_use` buys at least one offloaded block. The one stand-in is the TPU kernel
    geometry (`resolve_kernel_geometry` asks the Pallas MLA backend, which needs JAX 0.11.2 and torch_tpu: CPython
    3.12 only), given as one kernel block per scheduler block; the extra-config reading runs as released."""
    import torch
    from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig, ParallelConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import build_offloading_config
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheTensor
    from vllm_torchtpu.offload import raiden_store

    command = engines.vllm_torchtpu_command(tpu_cfg, rank)
    argv = command.argv
    assert argv[argv.index("--master-addr") + 1] == engines.LEADER_IP
    kv_json = argv[argv.index("--kv-transfer-config") + 1].replace(engines.LEADER_IP, LEADER)
    rule = kvblocks.tpu_rule(tpu_cfg)
    block = int(argv[argv.index("--block-size") + 1])
    assert block == rule.block_tokens
    model_dir, full = _k3_config_dir(tpu_cfg, tmp_path)
    vllm_config = VllmConfig(
        model_config=ModelConfig(model=model_dir, skip_tokenizer_init=True, max_model_len=tpu_cfg.context_length),
        cache_config=CacheConfig(block_size=block, cache_dtype=argv[argv.index("--kv-cache-dtype") + 1],
                                 mamba_cache_mode="align", enable_prefix_caching=True),
        parallel_config=ParallelConfig(tensor_parallel_size=int(argv[argv.index("--tensor-parallel-size") + 1]),
                                       enable_expert_parallel=True),
        kv_transfer_config=KVTransferConfig(**json.loads(kv_json)), device_config=DeviceConfig(device="cpu"))
    assert vllm_config.model_config.is_hybrid

    # The slice's pool as the scheduler groups it (one MLA and three KDA groups of 24 layers, a block id one page of
    # each of 24 layers: tests/engine_tpu/test_torchtpu_replay.py `_engines`, the grouping vLLM's own planner makes
    # of K3 in tests/engine/test_vllm_kv_cache.py), in one allocation whose size vLLM 0.29.0's planner sets to the
    # largest group's bytes per block x the blocks (vllm/v1/core/kv_cache_utils.py `get_kv_cache_config_from_groups`,
    # `_get_kv_cache_bytes_per_block`).
    from vllm.v1.core.kv_cache_utils import _get_kv_cache_bytes_per_block

    from components.plan import replay
    from tests.engine_tpu.test_torchtpu_replay import _engines

    (tmp_path / "pool").mkdir()
    groups = _engines(tpu_cfg, replay.rendered_choice(tpu_cfg), tmp_path / "pool")(0).scheduler.kv_cache_config \
        .kv_cache_groups
    page = groups[0].kv_cache_spec.page_size_bytes
    num_blocks = 1000
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[KVCacheTensor(size=num_blocks * _get_kv_cache_bytes_per_block(groups),
                                        layers=[name for group in groups for name in group.layer_names],
                                        layer_stride=num_blocks * page, block_stride=page)],
        kv_cache_groups=groups)
    offloading = build_offloading_config(vllm_config, kv_cache_config)
    monkeypatch.setattr(raiden_store, "resolve_kernel_geometry", lambda *_: (block, (1,), torch.uint8, block))
    spec = raiden_store.TPURaidenStoreOffloadingSpec(offloading, vllm_config, kv_cache_config)

    # What get_worker() makes every rank dial: f"{store_server_ip or '127.0.0.1'}:{raiden_controller_port}".
    assert spec.store_server_ip == LEADER
    assert spec.raiden_controller_port == engines.RAIDEN_CONTROLLER_PORT
    extra = engines.tpu_kv_transfer(tpu_cfg)["kv_connector_extra_config"]
    assert set(extra) == {"cpu_bytes_to_use", "store_server_ip", "raiden_controller_port"}
    assert spec.world_size == tpu_cfg.tpu.tensorParallel
    per_block_all_ranks = offloading.worker_kv_bytes_per_block * spec.world_size
    assert offloading.worker_kv_bytes_per_block == page * len(groups[0].layer_names)
    assert spec.offload_logical_blocks_capacity == extra["cpu_bytes_to_use"] // per_block_all_ranks >= 1
    assert spec.offload_logical_blocks_capacity == prefixcache.host_chunks_per_engine(tpu_cfg)
    if rank == "worker":
        record(f"TPU Raiden (TPURaidenStoreOffloadingSpec on the pods' kv_connector_extra_config "
               f"{sorted(extra)}): every rank dials {spec.store_server_ip}:{spec.raiden_controller_port} (the "
               f"leader's address, port {engines.RAIDEN_CONTROLLER_PORT} the leader declares); cpu_bytes_to_use "
               f"{extra['cpu_bytes_to_use']:,} B = {spec.offload_logical_blocks_capacity:,} offloaded blocks of "
               f"{per_block_all_ranks:,} B over {spec.world_size} ranks (block {block:,} tokens == plan "
               f"{rule.block_tokens:,})")


def test_torchtpu_reads_its_compilation_cache_from_the_pods_variable(monkeypatch):
    """components/plan/engines.py `cache_env` sets TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT on the TPU engine:
    vLLM-TorchTPU 0.29.0 reads it (vllm_torchtpu/envs.py) and hands it to TorchTPU's on-disk cache
    (vllm_torchtpu/env_override.py)."""
    import vllm_torchtpu.envs as envs

    from components.plan import engines
    from tests.engine_support import stack_config

    root = engines.cache_env(stack_config("tpu"))["TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"]
    monkeypatch.setenv("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT", root)
    assert envs.TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT == root
    override = (Path(envs.__file__).parent / "env_override.py").read_text()
    handed = '"TORCH_TPU_INTERNAL_TIER3_COMPILATION_CACHE_ROOT",\n        envs.TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT'
    assert handed in override

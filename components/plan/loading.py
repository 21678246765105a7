"""Weight loading at start-up: what each rank, node and replica reads from the checkpoint, how fast the
chosen loader reads it, and what that makes the Hyperdisk ML throughput, the load time and every startup
probe. One place, so the plan summary, the pod specs and docs/weights.md show the same figures.

Bytes read follow each engine's own expert-weight filter rule (`--enable-ep-weight-filter`):
- vLLM 0.33.0 (GPU): `should_skip_weight` skips a non-local expert's `.weight` / `.weight_packed` tensors but
  keeps every expert's scales ("Scale tensors are tiny and some backends need them from ALL experts"),
  `vllm/model_executor/model_loader/ep_weight_filter.py`; ep_size = dp x pcp x tp
  (`default_loader.py` `_init_ep_weight_filter`).
- vLLM-TorchTPU 0.29.0 (TPU): `model_loader_patches.py` widens the filter to `.weight_scale` and `.scale`
  ("at 896 experts the scales alone are ~85 GB per rank") and makes `prefetch` read only the byte ranges of
  the tensors a rank keeps, "ranks on one host share those pages" (`_start_ep_range_prefetch`).
Everything that is not a routed expert (attention, dense MLP, shared experts, router, norms, embeddings) is
read whole by every rank.

Load time = bytes per node / min(volume throughput / reader nodes, per-node read limit, loader rate x ranks).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from ..config import StackConfig
from ..facts import catalog
from . import parallel

MIB = 2**20
THROUGHPUT_STEP_MIBPS = 512
"""Throughput is rounded up to a multiple of this, to keep the figure readable."""


# --------------------------------------------------------------------------- checkpoint layout
@dataclass(frozen=True)
class TensorGroup:
    """Tensors of one kind in the released checkpoint: elements of one tensor x how many there are."""

    elements: int
    count: int
    kind: str
    """"expert" (a routed expert's weight), "expert_scale" (its MXFP4 scales) or "whole" (held by every rank)."""
    bytes_per_element: float
    tp: str = "split"
    """How vLLM 0.33.0's Kimi K3 model (vllm/models/kimi_k3/nvidia/) lays a "whole" tensor over the TP ranks of one
    engine: "split" (column/row/vocab-parallel: 1/TP each), "replicated" (every TP rank holds all of it:
    `ReplicatedLinear`, `disable_tp=True`, norms) or "sp_replicated" (the dense MLP and shared experts, `KimiMLP`:
    replicated when the model runs sequence parallel, which it does whenever TP > 1 with expert parallelism and
    MegaMoE or DP > 1, model.py `use_sequence_parallel` L708-714, unless `VLLM_KIMI_K3_SHARD_SP_SHARED_EXPERT=1`,
    default 0, model.py L142-160, L230-258, vllm/envs.py)."""


_H, _V = 7168, 163840
_KDA, _MLA, _MOE = 69, 24, 92
_EXPERTS = 896 * _MOE
KIMI_K3_TENSORS: tuple[TensorGroup, ...] = (
    # Routed experts, MXFP4: two 4-bit codes per byte, one E8M0 scale byte per 32 values (w1, w3: [3072, 1792]
    # packed + [3072, 112] scales; w2: [3584, 1536] + [3584, 96]); 92 MoE layers x 896 experts.
    TensorGroup(2 * 3072 * 1792 + 3584 * 1536, _EXPERTS, "expert", 1),
    TensorGroup(2 * 3072 * 112 + 3584 * 96, _EXPERTS, "expert_scale", 1),
    # Held whole, bf16: embeddings and head (VocabParallelEmbedding, ParallelLMHead), norms and attention-residual
    # projections (ReplicatedLinear, model.py L808-820), the dense MLP of layer 0 (KimiMLP).
    TensorGroup(2 * _V * _H, 1, "whole", 2),
    TensorGroup(3 * _H + 93 * 6 * _H, 1, "whole", 2, "replicated"),
    TensorGroup(3 * 33792 * _H, 1, "whole", 2, "sp_replicated"),
    # KDA layers: q/k/v projections and short convolutions, gates, A_log, dt_bias, norms (head-sharded,
    # kda.py L640-690); the f_a gate's 128 rows are the one replicated shard of the merged input projection
    # (kda.py `_KimiGDNMergedColumnParallelLinear`, `replicated_shard_id`).
    TensorGroup(3 * 12288 * _H + 3 * 12288 * 4 + 128 + 12288 + 12288 * 128 + 96 * _H + 128, _KDA, "whole", 2),
    TensorGroup(128 * _H, _KDA, "whole", 2, "replicated"),
    # MLA layers: q_b and kv_b (ColumnParallelLinear); q_a, kv_a (512 + 64 rope) and their norms replicated
    # ("The latent Q and KV shards are replicated across TP ranks", mla.py L226-275).
    TensorGroup(18432 * 1536 + 24576 * 512, _MLA, "whole", 2),
    TensorGroup(1536 * _H + 1536 + 576 * _H + 512, _MLA, "whole", 2, "replicated"),
    # Output gate and o_proj of all 93 attention layers (column- / row-parallel).
    TensorGroup(2 * 12288 * _H, 93, "whole", 2),
    # MoE layers: router and its bias (GateLinear), latent down/up projections and norm (ReplicatedLinear,
    # model.py L472-500), two shared experts 6144 wide (KimiMLP).
    TensorGroup(896 * _H + 896 + 2 * 3584 * _H + 3584, _MOE, "whole", 2, "replicated"),
    TensorGroup(3 * 6144 * _H, _MOE, "whole", 2, "sp_replicated"),
)
"""Every text tensor of the released Kimi K3 checkpoint (497,052 tensors over 96 shards), shapes and counts as
transcribed from `HfApi.get_safetensors_metadata("moonshotai/Kimi-K3")` in vllm-project/tpu-inference
`tests/models/jax/test_kimi_k3_real_shapes.py` (RELEASED_TENSORS, commit 0860a9c). Non-expert tensors are taken
as bf16: the sum is 1.5599e12 bytes, the 1.56 TB the launch post gives for K3.1 Pro and the "1561 GB
checkpoint" of vLLM-TorchTPU's K3 nightly (github.com/kowalski-4831/vllm-torchtpu
scripts/vllm/benchmarking/configs/kimi-k3-tp32-ep.sh). Assumption: K3.1 Pro has K3's tensor layout (the
staged revision's config.json is checked against the geometry at `pulumi up`)."""
ROUTED_EXPERTS = 896


def layout_bytes(kind: str, tp: str | None = None) -> int:
    """Checkpoint bytes of one kind (and, given `tp`, only the "whole" tensors vLLM lays over TP that way)."""
    return int(sum(g.elements * g.count * g.bytes_per_element for g in KIMI_K3_TENSORS
                   if g.kind == kind and tp in (None, g.tp)))


def checkpoint_bytes() -> int:
    return sum(layout_bytes(kind) for kind in ("expert", "expert_scale", "whole"))


# --------------------------------------------------------------------------- loaders
@dataclass(frozen=True)
class Loader:
    """How one engine release reads the checkpoint, and the measured rate it was chosen for."""

    engine: str
    load_format: str
    argv: tuple[str, ...]
    """Flags added to the engine's command line (checked against the engine's parser in the tests)."""
    env: tuple[tuple[str, str], ...]
    """Environment the loader reads."""
    filtered_kinds: tuple[str, ...]
    """Checkpoint tensor kinds the engine's expert-weight filter skips for experts another rank owns."""
    shares_page_cache: bool
    """Whether ranks on one node read the tensors they all hold once (buffered reads into the page cache)."""
    rank_bytes_per_s: float
    rate_source: str


GPU_LOADER = Loader(
    engine="vLLM 0.33.0", load_format="instanttensor",
    # InstantTensor is a hard dependency of vllm 0.33.0 (its METADATA: Requires-Dist instanttensor>=0.2.2), and
    # its iterator honours the filter (`instanttensor_weights_iterator(..., local_expert_ids=...)`,
    # weight_utils.py). runai_streamer and fastsafetensors ignore the filter in 0.33.0 (every rank streams the
    # whole 1.56 TB), and `prefetch` reads whole files; the default lazy mmap reader is single-stream.
    argv=("--enable-ep-weight-filter", "--load-format", "instanttensor"),
    # Buffered reads instead of its default direct I/O, so the 4 engines of a pod read the 198 GB they all hold
    # (dense weights and every expert's scales) once per node: `BUFFERED` expands to io_uring buffered reads,
    # then mmap (instanttensor 0.2.2 `_impl.py` `BackendPolicy`, `env_backend`).
    env=(("INSTANTTENSOR_BACKEND", "BUFFERED"),),
    filtered_kinds=("expert",),
    shares_page_cache=True,
    rank_bytes_per_s=35e9,
    rate_source="InstantTensor on one H200, Qwen3-30B-A3B: 35 GB/s (safetensors default: 1.1 GB/s), "
                "https://docs.vllm.ai/en/latest/models/extensions/instanttensor/",
)
PREFETCH_THREADS = 16
"""Reader threads per TPU rank, the concurrency NVIDIA ran Run:ai's streamer with for a Kimi checkpoint
(ai-dynamo/dynamo docs/kubernetes/fast-model-loading.md, RUNAI_STREAMER_CONCURRENCY=16)."""
TPU_LOADER = Loader(
    engine="vLLM-TorchTPU 0.29.0", load_format="safetensors",
    # TorchTPU's prefetch patch reads only this rank's ranges with N threads of 16 MiB preads into the page
    # cache, so ranks on one host share the dense pages; its patched Run:ai path (the nightly's gs:// loader)
    # streams into each rank's own buffer and so reads the dense 113 GB once per rank.
    argv=("--enable-ep-weight-filter", "--load-format", "safetensors", "--safetensors-load-strategy", "prefetch",
          "--safetensors-prefetch-num-threads", str(PREFETCH_THREADS)),
    env=(),
    filtered_kinds=("expert", "expert_scale"),
    shares_page_cache=True,
    rank_bytes_per_s=1.6e9,
    rate_source="one cache-bypassed reader of 16 MiB blocks: ~1.6 GB/s (ai-dynamo/dynamo "
                "docs/kubernetes/fast-model-loading.md); taken as a floor for a rank's 16 such threads",
)


def loader(cfg: StackConfig) -> Loader:
    return GPU_LOADER if cfg.track == "gpu" else TPU_LOADER


# --------------------------------------------------------------------------- bytes read
@dataclass(frozen=True)
class ReplicaReads:
    """One kind of replica (a GPU prefill or decode group, a TPU slice) and what its nodes read."""

    role: str
    replicas: int
    nodes_per_replica: int
    ranks_per_node: int
    expert_parallel: int
    rank_bytes: int
    node_bytes: int


def _reads(ld: Loader, role: str, replicas: int, nodes: int, ranks_per_node: int, ep: int) -> ReplicaReads:
    sharded = sum(layout_bytes(k) for k in ld.filtered_kinds)
    whole = checkpoint_bytes() - sharded
    own_share = math.ceil(ROUTED_EXPERTS / ep) / ROUTED_EXPERTS  # linear placement: the largest share
    rank = int(sharded * own_share) + whole
    node = rank * ranks_per_node - (whole * (ranks_per_node - 1) if ld.shares_page_cache else 0)
    return ReplicaReads(role, replicas, nodes, ranks_per_node, ep, rank, node)


def replica_reads(cfg: StackConfig) -> list[ReplicaReads]:
    ld = loader(cfg)
    lay = parallel.layout(cfg)
    if lay.track == "gpu":
        # Every slice's groups read at once; per pod, its data-parallel engines.
        return [_reads(ld, r.role, r.groups * lay.slices, r.nodes, r.engines_per_node, r.expert_parallel)
                for r in lay.roles]
    [r] = lay.roles
    # vLLM's ep_size = dp x pcp x tp with one data-parallel engine per slice.
    return [_reads(ld, "slice", lay.slices, r.nodes, r.devices_per_node, r.expert_parallel)]


def reader_nodes(cfg: StackConfig) -> int:
    """Nodes that mount the volume and read at start-up (scales with slices or groups)."""
    return sum(r.replicas * r.nodes_per_replica for r in replica_reads(cfg))


# --------------------------------------------------------------------------- load time
def node_read_limit_mibps(cfg: StackConfig) -> int:
    return cfg.storage.nodeReadMiBps or catalog.HYPERDISK_PER_VM_READ_MIBPS


@dataclass(frozen=True)
class LoadModel:
    reads: tuple[ReplicaReads, ...]
    readers: int
    throughput_mibps: int
    node_limit_mibps: int
    loader: Loader

    def terms(self, r: ReplicaReads) -> dict[str, float]:
        """Per-node read rate each bound allows, bytes/s."""
        # On a tie the node's own limit is named: more volume throughput would not help.
        return {"per-node read limit": self.node_limit_mibps * MIB,
                "loader rate": self.loader.rank_bytes_per_s * r.ranks_per_node,
                "volume throughput / readers": self.throughput_mibps * MIB / self.readers}

    def limit(self, r: ReplicaReads) -> tuple[str, float]:
        return min(self.terms(r).items(), key=lambda kv: kv[1])

    def seconds(self, r: ReplicaReads) -> float:
        return r.node_bytes / self.limit(r)[1]

    @property
    def slowest(self) -> ReplicaReads:
        return max(self.reads, key=self.seconds)

    @property
    def load_s(self) -> float:
        """Every replica loading at once, from the volume's attach to the last byte of the slowest node."""
        return self.seconds(self.slowest)

    @property
    def limiting_term(self) -> str:
        return self.limit(self.slowest)[0]

    @property
    def volume_bytes(self) -> int:
        """Everything all readers take from the volume at start-up."""
        return sum(r.replicas * r.nodes_per_replica * r.node_bytes for r in self.reads)


def knee_throughput_mibps(cfg: StackConfig) -> int:
    """The throughput above which the volume no longer limits any node (the per-node limit or the loader
    does): buying more only costs, buying less leaves every accelerator idle longer. Rounded up, within
    Hyperdisk ML's range."""
    ld = loader(cfg)
    node_rate = min(node_read_limit_mibps(cfg) * MIB,
                    min(ld.rank_bytes_per_s * r.ranks_per_node for r in replica_reads(cfg)))
    needed = reader_nodes(cfg) * node_rate / MIB
    rounded = math.ceil(needed / THROUGHPUT_STEP_MIBPS) * THROUGHPUT_STEP_MIBPS
    return min(catalog.HYPERDISK_ML_MAX_MIBPS, max(catalog.HYPERDISK_ML_MIN_MIBPS, rounded))


def throughput_mibps(cfg: StackConfig) -> int:
    return cfg.storage.throughputMiBps or knee_throughput_mibps(cfg)


def load_model(cfg: StackConfig) -> LoadModel:
    return LoadModel(tuple(replica_reads(cfg)), reader_nodes(cfg), throughput_mibps(cfg),
                     node_read_limit_mibps(cfg), loader(cfg))


def hydration_s(cfg: StackConfig) -> float:
    """The populator's one transfer Job writes one copy: at most the volume's throughput and one node's limit
    (its speed is not published: this is a lower bound)."""
    rate = min(throughput_mibps(cfg), node_read_limit_mibps(cfg)) * MIB
    return checkpoint_bytes() / rate


# --------------------------------------------------------------------------- probes and waits
PROBE_MARGIN = 2.0
"""Startup budget = this x (modelled load + engine start): the per-node read limit is an assumption, and a
startup probe that gives up restarts the whole group (RecreateGroupOnPodRestart)."""
UPSTREAM_STARTUP_S = {"gpu": 2700}
"""The startup probe llm-d gives its GB200 NVL72 wide-EP engines, prefill and decode alike: failureThreshold 2700 at
periodSeconds 1 (https://github.com/llm-d/llm-d/blob/6b047cf/guides/models/deepseek-v4/modelserver/gpu/vllm/base/
disaggregatedset.yaml; the DeepSeek-R1 GB200 and DisaggregatedSet overlays use the same). Their weights come from a
node-local cache, so all of it is engine start; this track's budget is never below it (ENGINE_START_S)."""
ENGINE_START_S = {"gpu": int(math.ceil(UPSTREAM_STARTUP_S["gpu"] / PROBE_MARGIN / 60) * 60), "tpu": 1800}
"""Assumption: an engine's start besides reading weights (process and NCCL/ICI set-up, kernel JIT, CUDA-graph
capture or XLA compilation). Not published for these models. GPU: upstream's whole GB200 startup budget over the
margin, so the budget with any load is at least upstream's (UPSTREAM_STARTUP_S); vLLM-TorchTPU's K3 nightly waits up
to 240 minutes for a gs:// stream plus a cold compile (kimi-k3-tp32-ep.sh SERVER_READY_WAIT_MIN)."""
COLD_COMPILE_S = {"gpu": 600, "tpu": 1200}
"""ASSUMPTION (no figure is published for these models): the part of ENGINE_START_S an empty compile cache costs.
GPU: the JIT builds of DeepGEMM's MegaMoE and GEMM kernels, FlashInfer's MLA kernels and the Triton KDA kernels with
their autotuning (prefill runs eager and decode compiles nothing with torch.compile: components/plan/engines.py
vllm_role_flags; decode's CUDA graphs are captured on every start and stay in the warm start). TPU: TorchTPU's
compilation of the engine's buckets. A warm start finds them in the stack's cache bucket
(components/serving/compilecache.py)."""
PROBE_PERIOD_S = 10
IMAGE_PULL_S = 600
"""Assumption: pulling the engine image onto a fresh node (tens of GB; not measured here)."""


TPU_ENGINE_LOCK = Path(__file__).resolve().parents[1] / "locks" / "vllm-torchtpu.txt"
LOCK_SIZE_LINE = re.compile(r"^# download: ([0-9]+) bytes in ([0-9]+) files", re.M)
"""The lock's size line (tools/preview/lock_tpu_engine.py writes it from the index's file sizes)."""


def lock_download_bytes(text: str | None = None) -> int:
    """Bytes of the wheels the TPU engine image is built from: the lock's own size line."""
    found = LOCK_SIZE_LINE.search(TPU_ENGINE_LOCK.read_text() if text is None else text)
    if found is None:
        raise ValueError(f"{TPU_ENGINE_LOCK.name} has no '# download: N bytes' line: regenerate it "
                         "(python -m tools lock-tpu-engine)")
    return int(found[1])


BASE_IMAGE_BYTES = 45e6
"""ASSUMPTION: the compressed layers of python:3.12-slim for linux/amd64 (tens of MB; not read here)."""
LAYER_BYTES_PER_WHEEL_BYTE = 1.0
"""ASSUMPTION: the image layer of the installed wheels compresses to about the wheels' own (deflated) bytes."""
BUILD_FIXED_S = 180
"""ASSUMPTION: a Cloud Build run besides the install: worker start, source upload, base pull, push handshake."""
BUILD_BYTES_PER_S = 100e6
"""ASSUMPTION: the build worker's download from the public index and its push to Artifact Registry."""
UNPACK_BYTES_PER_S = 200e6
"""ASSUMPTION: pip unpacking the wheels (build), and the kubelet unpacking the layers (pull)."""
NODE_PULL_BYTES_PER_S = 100e6
"""ASSUMPTION: one node's pull from Artifact Registry in the same region, the 8 hosts of two slices at once (each
pulls its own copy; no published per-node figure)."""
PULL_SPREAD = 0.5
"""ASSUMPTION: the slowest host of a slice finishes its pull up to this fraction of the pull later than the fastest."""
TPU_RENDEZVOUS_TIMEOUT_S = 300
"""vLLM-TorchTPU's host rendezvous waits this long for every host (vllm_torchtpu/distributed/tpu_mp_multihost.py:66
`_RENDEZVOUS_TIMEOUT_S`, a constant no variable changes, used at :98 and :110); a host later than that fails its
pod and RecreateGroupOnPodRestart starts the whole group again."""


@dataclass(frozen=True)
class EngineImage:
    """The TPU engine image the stack builds: its size, the build, and each pod's start cost (the pull onto a fresh
    node) with the start skew it leaves between a slice's hosts."""

    wheel_bytes: float
    image_bytes: float
    build_s: float
    pull_s: float
    skew_s: float


def builds_engine_image(cfg: StackConfig) -> bool:
    return cfg.track == "tpu" and cfg.tpu.engine == "vllm-torchtpu"


def engine_image(cfg: StackConfig, wheel_bytes: float | None = None) -> EngineImage | None:
    """Figures of the TPU engine image (None where the stack builds none), from the lock's size."""
    if not builds_engine_image(cfg):
        return None
    wheels = lock_download_bytes() if wheel_bytes is None else wheel_bytes
    image = BASE_IMAGE_BYTES + LAYER_BYTES_PER_WHEEL_BYTE * wheels
    build = BUILD_FIXED_S + wheels / BUILD_BYTES_PER_S + wheels / UNPACK_BYTES_PER_S + image / BUILD_BYTES_PER_S
    pull = image / NODE_PULL_BYTES_PER_S + image / UNPACK_BYTES_PER_S
    return EngineImage(wheels, image, build, pull, PULL_SPREAD * pull)


def image_pull_s(cfg: StackConfig) -> float:
    """The engine image onto a fresh node: the TPU build's modelled pull, else the assumption `IMAGE_PULL_S`."""
    built = engine_image(cfg)
    return built.pull_s if built else IMAGE_PULL_S


@dataclass(frozen=True)
class GroupStart:
    """One serving group's start, from its pods' creation to serving: the first (cold caches) and a warm restart (a
    pod or group restart, or a group a scale-out adds once any group has started)."""

    pull_s: float
    load_s: float
    engine_cold_s: float
    engine_warm_s: float

    @property
    def first_s(self) -> float:
        return self.pull_s + self.load_s + self.engine_cold_s

    @property
    def warm_s(self) -> float:
        """The image is on the node already (the kubelet keeps it; the pre-pull DaemonSet holds it) and the compile
        caches are warm; the weights load again (each start reads its ranks' shares from the volume)."""
        return self.load_s + self.engine_warm_s


def group_start(cfg: StackConfig) -> GroupStart:
    start = ENGINE_START_S[cfg.track] + pod_start_s(cfg)
    return GroupStart(image_pull_s(cfg), load_model(cfg).load_s, start, start - COLD_COMPILE_S[cfg.track])


def pod_start_s(cfg: StackConfig) -> float:
    """What a pod's start adds to the startup probe's clock: the TPU leader's probe runs while the other hosts of
    its slice may still be pulling (a node that was replaced, or a cache the kubelet collected), and it waits in the
    host rendezvous for them; so the budget counts one full pull. GPU: 0 (one pod per node pulls before its own
    probe starts)."""
    built = engine_image(cfg)
    return built.pull_s if built else 0.0


# --------------------------------------------------------------------------- growing onto an existing volume
HDML_MODIFY_LAG_S = 20 * 60
"""Compute Engine: for Hyperdisk ML volumes a change of provisioned performance can take up to 20 minutes to take
effect (https://cloud.google.com/compute/docs/disks/modify-hyperdisks, its limitations). Until then every node
of a stack that just grew reads its share of the throughput the volume had."""
HDML_MODIFY_INTERVAL_S = 4 * 3600
"""Hyperdisk allows one update of its throughput every 4 hours; a more frequent change needs a new disk
(pulumi_gcp 10.2.0 `compute.Disk` `provisioned_throughput`, from the provider's docs). A second change within that
time fails at the CSI driver, so the claim never reaches the new class; `pulumi up` waits only for the claim's
`Bound` (components/weights/volume.py), so the serving set grows anyway and its added groups load at the old share."""


@dataclass(frozen=True)
class NodeRead:
    """What one reader node of a role takes from the volume and how fast it can, whatever the volume gives:
    the inputs of the load on a volume whose throughput is not the configured one (a stack grown in place)."""

    role: str
    node_bytes: int
    node_cap_bytes_per_s: float
    """min(per-node read limit, loader rate x ranks per node)."""


def node_reads(cfg: StackConfig) -> tuple[NodeRead, ...]:
    model = load_model(cfg)
    return tuple(NodeRead(r.role, r.node_bytes, min(v for k, v in model.terms(r).items()
                                                     if k != "volume throughput / readers"))
                 for r in model.reads)


def grown_load_s(reads: tuple[NodeRead, ...], readers: int, had_mibps: int, has_mibps: int,
                 lag_s: float = HDML_MODIFY_LAG_S) -> float:
    """The slowest node's load when the serving set grows onto a volume provisioned at `had_mibps` whose
    throughput is being raised to `has_mibps`: each of the `readers` nodes reads at its share of the old
    throughput for up to `lag_s` (the change taking effect), then at its share of the new one."""
    def seconds(r: NodeRead) -> float:
        old = min(r.node_cap_bytes_per_s, had_mibps * MIB / readers)
        new = min(r.node_cap_bytes_per_s, max(had_mibps, has_mibps) * MIB / readers)
        if r.node_bytes <= old * lag_s:
            return r.node_bytes / old
        return lag_s + (r.node_bytes - old * lag_s) / new
    return max(seconds(r) for r in reads)


def load_output(cfg: StackConfig) -> dict[str, object]:
    """The stack output `weightLoad`: what the volume was provisioned with and what its readers take, so the next
    plan of the same stack (tools diff against it) knows the throughput the existing volume really has."""
    return {"throughputMiBps": throughput_mibps(cfg), "readers": reader_nodes(cfg),
            "loadSeconds": round(load_model(cfg).load_s, 1), "startupBudgetSeconds": startup_budget_s(cfg),
            "startSecondsBesidesLoad": ENGINE_START_S[cfg.track] + round(pod_start_s(cfg), 1),
            "nodes": [{"role": r.role, "bytes": r.node_bytes, "capBytesPerSecond": r.node_cap_bytes_per_s}
                      for r in node_reads(cfg)]}


def reads_from_output(output: dict) -> tuple[NodeRead, ...]:
    return tuple(NodeRead(n["role"], int(n["bytes"]), float(n["capBytesPerSecond"])) for n in output["nodes"])


def startup_budget_terms(cfg: StackConfig) -> tuple[float, float]:
    """(fresh, grown) seconds the startup probe must allow: PROBE_MARGIN x (modelled load + engine start + the
    pod's start, pod_start_s) on a new volume; and, for groups a scale-up in place starts, the whole lag of the
    throughput change (reading nothing meanwhile: a bound, whatever the volume had) + the margin on the load at the
    new throughput + engine start + the pod's start."""
    load, rest = load_model(cfg).load_s, ENGINE_START_S[cfg.track] + pod_start_s(cfg)
    return PROBE_MARGIN * (load + rest), HDML_MODIFY_LAG_S + PROBE_MARGIN * load + rest


def startup_budget_s(cfg: StackConfig) -> int:
    """Seconds of startup probing before the kubelet restarts a loading engine, a whole number of periods: the
    larger of startup_budget_terms, so neither a first start nor a group that a scale-up in place starts while
    the volume's throughput is still being raised gives up mid-load. Independent of what the volume had, so a
    scale-up never changes the pod template (which would roll every group)."""
    raw = max(startup_budget_terms(cfg))
    return int(math.ceil(raw / PROBE_PERIOD_S) * PROBE_PERIOD_S)


def startup_failure_threshold(cfg: StackConfig) -> int:
    return startup_budget_s(cfg) // PROBE_PERIOD_S


def ready_timeout_s(cfg: StackConfig) -> int:
    """How long `pulumi up` waits for the serving sets: the image pull, then the startup budget, plus one
    more budget for a group that had to restart once."""
    return int(math.ceil(image_pull_s(cfg))) + 2 * startup_budget_s(cfg)


def hydration_timeout_s(cfg: StackConfig) -> int:
    """How long `pulumi up` waits for the claim to bind: the modelled copy with a wide margin, since the
    transfer Job's speed is not published."""
    return int(math.ceil(max(4 * hydration_s(cfg), 1800) / 60) * 60)

"""Model-server command lines, built as token lists so tests can check every flag against the engine's
real parser (tests/serving/test_modelservers.py) and every JSON key against the engine's config classes.

GPU: vLLM (pinned VLLM_VERSION), one `vllm serve` per LWS pod in llm-d's multi-port data-parallel form: each pod
runs GPUs/TP engines, each serving on its own port so the router addresses every engine (and its own prefix cache)
as one endpoint; the group forms one DP x EP domain (EP = TP x DP is derived by vLLM).
TPU: vLLM-TorchTPU (the pinned release), one engine per slice spread over its hosts with `--nnodes`; or, only
as an explicit choice, a user-supplied SGLang-TorchTPU build (unreleased).
The block size every command passes is the engine-effective one (components/plan/kvblocks.py).
No command publishes KV-cache events (`--kv-events-config`): at the pinned router only the precise prefix-cache
producer reads them, and the router predicts prefix hits without them (docs/capacity.md "Prefix routing");
tests/router/test_router.py fails if an engine publishes events no router plugin consumes, or the reverse.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Literal

from ..config import ConfigError, StackConfig
from ..facts import catalog, contract
from ..facts.versions import SGLANG_TORCHTPU_ARCHITECTURES, TCMALLOC_LIBRARY, VLLM, VLLM_TORCHTPU
from . import autoscaling, kvblocks, loading, parallel
from .capacity import cpu_offload_bytes_per_engine, decode_capacity, serving_capacity, tpu_offload_bytes_per_engine

Role = Literal["prefill", "decode"]

# Shell variables the pod script defines or LWS/Kubernetes inject
# (https://github.com/kubernetes-sigs/lws/blob/30f8f66/site/content/en/docs/reference/labels-annotations-and-environment-variables.md).
LEADER = "${LWS_LEADER_ADDRESS}"
WORKER_INDEX = "${LWS_WORKER_INDEX}"
POD_IP = "${POD_IP}"
START_RANK = "${START_RANK}"
LEADER_IP = "${LEADER_IP}"
"""The leader's pod address, resolved from LWS_LEADER_ADDRESS by the TPU pod script (tpu_launcher_preamble)."""

UNRELEASED_FLAG_VALUES = {
    # Seed-post values an SGLang-TorchTPU build would carry and no released SGLang accepts
    # (https://github.com/sgl-project/sglang/blob/v0.5.23/python/sglang/srt/server_args.py
    # choices): sparse-MLA attention on TPU and the raiden host-memory I/O backend.
    ("--attention-backend", "pallas_tpu_mla_sparse"),
    ("--hicache-io-backend", "raiden"),
}


@dataclass(frozen=True)
class Command:
    """`preamble` shell lines, then `exec` of `argv`; `argv` keeps shell variables as `${NAME}` tokens."""

    argv: tuple[str, ...]
    preamble: tuple[str, ...] = ()

    def script(self) -> str:
        return "\n".join(["set -eu", *self.preamble, "exec " + " ".join(_word(t) for t in self.argv)]) + "\n"


def _word(token: str) -> str:
    """Quote for bash, keeping `${VAR}` references expandable."""
    if "${" not in token:
        return shlex.quote(token)
    escaped = token.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
    return f'"{escaped}"'


def _json(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


ENGINE_PRIVACY_ENV = (
    ("VLLM_NO_USAGE_STATS", "1"),
    ("DO_NOT_TRACK", "1"),
    ("HF_HUB_OFFLINE", "1"),
)
"""What keeps an engine from calling out: vLLM's usage stats off (`is_usage_stats_enabled` is false once
VLLM_NO_USAGE_STATS=1 or VLLM_DO_NOT_TRACK, which falls back to DO_NOT_TRACK, is set: vllm/usage/usage_lib.py
L50-68 and vllm/envs.py L842-850 in vLLM 0.33.0; the same lines at vllm/envs.py L813-821 in the vLLM 0.29.0 that
vllm-torchtpu bundles, whose TPU worker reports at start, vllm_torchtpu/worker/tpu_worker.py L475), and the Hub off:
huggingface_hub reads HF_HUB_OFFLINE into `constants.HF_HUB_OFFLINE`, which vLLM passes as `local_files_only` to every
config and file lookup (vllm/transformers_utils/config.py L351, L830; repo_utils.py L83, L291, L352 in 0.33.0). The
engines load the model, its config and its tokenizer from the weights volume (`cfg.model.path`), so nothing at start
needs the Hub, and no engine pod carries the Hub token: only the staging Job that copies from the Hub does
(components/weights/staging.py). components/serving/modelservers.py `common_env` puts them on every engine container."""


# --------------------------------------------------------------------------- vLLM (GPU)
def vllm_port(role: Role) -> int:
    """Decode engines sit behind the routing sidecar, which takes the serving port
    (https://github.com/llm-d/llm-d-router/blob/v0.10.0/pkg/sidecar/proxy/options.go)."""
    return contract.DECODE_ENGINE_PORT if role == "decode" else contract.MODEL_SERVER_PORT


def engines_per_pod(cfg: StackConfig) -> int:
    """Router endpoints one serving pod holds: a GPU pod's data-parallel engines; one TPU leader."""
    return parallel.layout(cfg).engines_per_node if cfg.track == "gpu" else 1


def vllm_engine_ports(cfg: StackConfig, role: Role) -> list[int]:
    """One port per engine of a pod (contract.SUPERVISOR_PORT_OFFSET says how vLLM assigns them)."""
    return contract.engine_ports(vllm_port(role), engines_per_pod(cfg))


def vllm_supervisor_port(role: Role) -> int:
    """vLLM's DP supervisor: /health and /readyz over all the pod's engines (the probes' port)."""
    return vllm_port(role) + contract.SUPERVISOR_PORT_OFFSET


PREFIX_MATCH_UNIT = 128
"""`--prefix-match-unit` on GPU: prefix hits land on 128-token boundaries inside the 11,392-token block instead of on
whole blocks (vLLM 0.33.0 vllm/config/cache.py `prefix_match_unit`). It must divide every prefix-cacheable group's
block (vllm/v1/core/kv_cache_utils.py `resolve_kv_cache_block_sizes`), and 11,392 = 128 x 89 with 89 prime, so the
choices are 128 or a power of two below it; the router's floor is 64 (llm-d-router v0.10.0 approximateprefix/
plugin.go L52). NVIDIA Dynamo's GB300 Kimi K3 recipe runs its KV router at 128 too. The session replay measured it
against whole blocks (components/plan/replay.py, docs/capacity.md "Prefix routing")."""


def vllm_prefix_match_flags(cfg: StackConfig) -> list[str]:
    """The unit when it divides the engine block and is finer (a block it does not divide, e.g. after a geometry
    change, keeps vLLM's default: whole blocks)."""
    block = kvblocks.gpu_rule(cfg).block_tokens
    if block > PREFIX_MATCH_UNIT and block % PREFIX_MATCH_UNIT == 0:
        return ["--prefix-match-unit", str(PREFIX_MATCH_UNIT)]
    return []


def prefix_match_unit(cfg: StackConfig) -> int:
    """Where prefix hits land, and so the router's `blockSizeTokens`: the GPU unit, else the engine block."""
    flags = vllm_prefix_match_flags(cfg) if cfg.track == "gpu" else []
    return int(flags[1]) if flags else kvblocks.block_rule(cfg).block_tokens


def vllm_group_nodes(cfg: StackConfig, role: Role) -> int:
    return parallel.layout(cfg).role(role).nodes


def vllm_kv_transfer(cfg: StackConfig, role: Role) -> dict:
    """NIXL for P/D plus the CPU offload tier, paired by MultiConnector
    (https://github.com/llm-d/llm-d/blob/5e758d8/guides/models/nemotron-3-ultra/modelserver/gpu/vllm/base/patch-decode.yaml)."""
    return {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        # Recompute rather than fail a request whose KV could not be loaded (llm-d multi-tier guide).
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"connectors": [
            {"kv_connector": "NixlConnector", "kv_role": "kv_producer" if role == "prefill" else "kv_consumer"},
            {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
             "kv_connector_extra_config": {"cpu_bytes_to_use": cpu_offload_bytes_per_engine(cfg),
                                           "eviction_policy": "lru"}},
        ]},
    }


def render_flags(cfg: StackConfig, role: Role) -> list[str]:
    """What lets the router tokenize on the engine it routes to. vLLM 0.33.0 registers `/v1/completions/render` and
    `/v1/chat/completions/render` on `vllm serve` only with `--enable-scale-out`
    (https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/entrypoints/scale_out/factories.py L94-105,
    vllm/entrypoints/common/cli_args.py L216-221); the prefill engines serve the router's render Service
    (components/router/router.py RENDER_SERVICE)."""
    return ["--enable-scale-out"] if role == "prefill" else []


def vllm_speculative(cfg: StackConfig) -> dict | None:
    spec = cfg.model
    if spec.speculative == "mtp":
        return {"method": "mtp", "num_speculative_tokens": spec.speculativeTokens}
    if spec.speculative == "dflash":
        return {"method": "dflash", "model": spec.draftModelPath, "num_speculative_tokens": spec.speculativeTokens}
    return None


GPU_MOE_BACKEND = "deep_gemm_mega_moe"
"""Kimi K3's experts as one DeepGEMM MegaMoE launch that dispatches and combines over the EP group itself (vLLM 0.33.0
models/kimi_k3/nvidia/model.py:401-417, 516-540), as llm-d's GB200 DeepSeek-V4 pods run it
(https://github.com/llm-d/llm-d/blob/6b047cf/guides/models/deepseek-v4/modelserver/gpu/vllm/base/disaggregatedset.yaml).
DeepGEMM ships inside the released vLLM wheel for aarch64 (vllm/third_party/deep_gemm/__init__.py:91
get_symm_buffer_for_mega_moe), while DeepEP v2 is an image-level install (`deep_ep.ElasticBuffer`, NCCL >= 2.30.4 and
NCCL GIN: vllm/utils/import_utils.py:472-499, distributed/device_communicators/all2all.py:1046,1086-1100) no
evidence shows in the arm64 image (docs/seed-vs-reality.md). `--all2all-backend` stays at its default."""


def vllm_moe_backend(cfg: StackConfig, role: Role) -> str:
    """The role's `--moe-backend` (`gpu.prefillMoeBackend`, `gpu.decodeMoeBackend`; GPU_MOE_BACKEND by default)."""
    return cfg.gpu.prefillMoeBackend if role == "prefill" else cfg.gpu.decodeMoeBackend


UPSTREAM_GB200 = ("https://github.com/llm-d/llm-d/blob/6b047cfb1bece71ca1f95a83b11417a63d0c3369/guides/models/"
                  "deepseek-v4/modelserver/gpu/vllm/base/disaggregatedset.yaml")
"""llm-d's GB200 NVL72 P/D DisaggregatedSet (DeepSeek-V4, MegaMoE on both roles): the per-role engine settings below
follow it."""
DECODE_BATCHED_TOKENS = 512
"""Decode's `--max-num-batched-tokens`: llm-d's GB200 decode pods run `MAX_TOKENS` = 512 (UPSTREAM_GB200, decode env
`MAX_TOKENS`, "multiplied by the number of speculated tokens" with MTP). vLLM sizes from it the MegaMoE symmetric
buffer (vllm/model_executor/layers/fused_moe/deep_gemm_mega_moe.py:304, `max_num_tokens =
max_num_batched_tokens`), the memory profile's dummy batch and the warm-up; a decode step holds at most
`--max-num-seqs` x (1 + speculative tokens) tokens, so the default 16,384 only made the buffer and the profile
32 times larger than any step."""
DECODE_COMPILATION = {"cudagraph_mode": "FULL_DECODE_ONLY", "mode": 0}
"""Decode's `--compilation-config`, as UPSTREAM_GB200's decode pods: no torch.compile (`mode` 0 is
`CompilationMode.NONE`, vllm/config/compilation.py:41-43) and full CUDA graphs of uniform decode batches only, so a
restart spends no Inductor compile, and the graphs cover exactly the steps decode runs."""


def vllm_role_flags(cfg: StackConfig, role: Role) -> list[str]:
    """Each role as llm-d's GB200 pods run it (UPSTREAM_GB200). Prefill: the router's calibration chunk
    (contract.PREFILL_CHUNK_TOKENS) and `--enforce-eager` (prefill steps are long, graphs buy nothing, and nothing is
    compiled or captured at start). Decode: DECODE_BATCHED_TOKENS, raised to what a full batch of speculative steps
    needs, and DECODE_COMPILATION. Both: `--enable-cumem-allocator`, vLLM's cuMem-based allocator "to leverage
    advanced GPU memory allocation features such as multi-node NVLink support" (vllm/config/model.py:391-393),
    which both upstream roles pass beside the same MNNVL NIXL/UCX settings."""
    if role == "prefill":
        flags = ["--max-num-batched-tokens", str(contract.PREFILL_CHUNK_TOKENS), "--enforce-eager"]
    else:
        step = decode_capacity(cfg).max_running * (1 + (cfg.model.speculativeTokens
                                                         if cfg.model.speculative != "off" else 0))
        flags = ["--max-num-batched-tokens", str(max(DECODE_BATCHED_TOKENS, step)),
                 "--compilation-config", _json(DECODE_COMPILATION)]
    return [*flags, "--enable-cumem-allocator"]


GPU_DRIVER_MOUNT = "/usr/local/nvidia"
"""Where the GPU pods mount GKE's host driver install (components/serving/modelservers.py)."""
GPU_DRIVER_LIBS = f"{GPU_DRIVER_MOUNT}/lib64"
EXTEND_LIBRARY_PATH = f'export LD_LIBRARY_PATH="${{LD_LIBRARY_PATH:+${{LD_LIBRARY_PATH}}:}}{GPU_DRIVER_LIBS}"'
"""The image's own LD_LIBRARY_PATH first, GKE's driver libraries after it: a pod `env` entry would replace the image's
value (Kubernetes expands `$(VAR)` only from the container's own env list), and whatever of its libraries (NCCL among
them) the image puts on the path must stay ahead of the host's."""


def vllm_batch_flags(cfg: StackConfig, role: Role) -> list[str]:
    """`--max-num-seqs` = the requests one engine's KV pool can run at once (capacity.max_running_requests). The CUDA
    graph sizes stay vLLM 0.33.0's own: from this `max_num_seqs` it captures up to min(max_num_seqs x query len x 2,
    1,024 on Blackwell) tokens and adds the uniform decode batches, max_num_seqs x query len among them
    (vllm/config/vllm.py `_set_cudagraph_sizes`). A `--max-cudagraph-capture-size` of max_num_seqs x query len is
    not captured as such: it is rounded down to the grid's 1, 2, 4, then multiples of 8 (55 -> 48), so decode batches
    of 49-55 requests would run with no graph at all (tests/engine/test_vllm_engine_config.py)."""
    c = serving_capacity(cfg) if role == "prefill" else decode_capacity(cfg)
    return ["--max-num-seqs", str(c.max_running)]


def vllm_command(cfg: StackConfig, role: Role) -> Command:
    gpu, replica = cfg.gpu, parallel.layout(cfg).role(role)
    dp_local = replica.engines_per_node
    argv = [
        "vllm", "serve", cfg.model.path,
        "--served-model-name", catalog.KIMI.hf_id,
        "--trust-remote-code",
        "--port", str(vllm_port(role)),
        "--tensor-parallel-size", str(replica.tensor_parallel),
        "--data-parallel-size", str(replica.engines),
        "--data-parallel-size-local", str(dp_local),
        "--data-parallel-address", LEADER,
        "--data-parallel-rpc-port", str(contract.DATA_PARALLEL_RPC_PORT),
        "--data-parallel-start-rank", START_RANK,
        # One HTTP server per engine on --port + local rank, a supervisor for the pod's probes
        # (vllm/entrypoints/launchers/dp_supervisor.py); with --data-parallel-hybrid-lb one server fronted all of
        # them and picked an engine by load alone, so the router's prefix affinity reached the warm engine only
        # when it happened to be the first idle one (docs/capacity.md "Prefix routing").
        "--data-parallel-multi-port-external-lb",
        "--data-parallel-supervisor-port", str(vllm_supervisor_port(role)),
        "--enable-expert-parallel",
        # Each rank reads only its own experts, with a loader that honours that filter (components/plan/loading.py).
        *loading.GPU_LOADER.argv,
        "--moe-backend", vllm_moe_backend(cfg, role),
        "--kv-cache-dtype", {"fp8": "fp8", "bf16": "bfloat16"}[cfg.model.kvCacheDtype],
        "--mamba-ssm-cache-dtype", cfg.model.kdaStateDtype,
        # The engine-effective block: vLLM would raise a smaller one to this itself (components/plan/kvblocks.py).
        "--block-size", str(kvblocks.gpu_rule(cfg).block_tokens),
        # Prefix caching on the hybrid caches KDA states at block boundaries (vllm/config/cache.py
        # mamba_cache_mode); hits land on the finer unit.
        "--enable-prefix-caching",
        *vllm_prefix_match_flags(cfg),
        "--mamba-cache-mode", "align",
        "--max-model-len", str(cfg.context_length),
        *vllm_role_flags(cfg, role),
        *autoscaling.drain_flags(cfg),
        *vllm_batch_flags(cfg, role),
        "--gpu-memory-utilization", f"{gpu.gpuMemoryPercent / 100:.2f}",
        # The hybrid KV-cache manager keeps KDA state and MLA pages together, also for offloading
        # (https://github.com/llm-d/llm-d/blob/4bd65c4/guides/pd-disaggregation/modelserver/gpu/vllm/multi-tier/patch-prefill.yaml).
        VLLM.hybrid_kv_flag,
        "--kv-transfer-config", _json(vllm_kv_transfer(cfg, role)),
        *render_flags(cfg, role),
        "--reasoning-parser", "kimi_k3",
        "--tool-call-parser", "kimi_k3",
        "--enable-auto-tool-choice",
        "--disable-access-log-for-endpoints", "/health,/metrics",
    ]
    speculative = vllm_speculative(cfg)
    if speculative:
        argv += ["--speculative-config", _json(speculative)]
    preamble = (
        "find /dev/shm -mindepth 1 -delete 2>/dev/null || true",  # stale shm from a restart (llm-d issue #352)
        EXTEND_LIBRARY_PATH,
        f"START_RANK=$(( LWS_WORKER_INDEX * {dp_local} ))",
        # vLLM binds the NIXL side channel on this base + the global DP rank (nixl/base_scheduler.py,
        # data_parallel_index = data_parallel_rank in vllm/config/parallel.py): lowering the base by START_RANK keeps
        # every pod's engines on NIXL_SIDE_CHANNEL_PORT + local rank, the ports the pod declares.
        f"export VLLM_NIXL_SIDE_CHANNEL_PORT=$(( {contract.NIXL_SIDE_CHANNEL_PORT} - START_RANK ))",
    )
    return Command(tuple(argv), preamble)


# --------------------------------------------------------------------------- TPU
TpuRank = Literal["leader", "worker"]


def tpu_engine_type(cfg: StackConfig) -> str:
    """`llm-d.ai/engine-type` of the TPU pods: the engine family (vLLM semantics for the router and metrics)."""
    return "vllm" if cfg.tpu.engine == "vllm-torchtpu" else "sglang"


RAIDEN_CONTROLLER_PORT = 51515
"""The Raiden offload controller's port on the leader: vllm_torchtpu/offload/raiden_store.py:134
`_DEFAULT_CONTROLLER_PORT`, plus the local DP rank (0 here, :2304), set explicitly so the port the pod declares and
the port every rank dials are one value."""
RAIDEN_DEFAULT_REGISTRATION_TIMEOUT_S = 120
"""`RAIDEN_EXPECTED_WORKERS_TIMEOUT_S` default: the controller's KVCacheStore construction waits this long for every
rank to register (raiden_store.py:321-324; the variable is read by tpu-sync-torch's
tpu_sync/frameworks/torch/_tpu_raiden_torch_2_13_0.so)."""
HOST_POOL_FILL_BYTES_PER_S = 2e9
"""ASSUMPTION: how fast one host faults in and pins its share of the offload pool while its ranks register (each
rank's KVCacheManager allocates `host_blocks_to_allocate` before it registers, raiden_store.py:1687-1695); no
published figure."""


def raiden_registration_timeout_s(cfg: StackConfig) -> int:
    """The controller's wait for all ranks, sized to the slowest host: the default plus twice the time one host
    takes to fill its share of the pool, since a rank registers only once its host blocks exist."""
    replica = parallel.layout(cfg).role("slice")
    per_host = tpu_offload_bytes_per_engine(cfg) * replica.engines / replica.nodes
    return RAIDEN_DEFAULT_REGISTRATION_TIMEOUT_S + int(-(-2 * per_host // HOST_POOL_FILL_BYTES_PER_S))


def tpu_kv_transfer(cfg: StackConfig) -> dict:
    """Host-DRAM KV tier for the hybrid's MLA pages and KDA states, sized in bytes from the capacity model
    (https://github.com/vllm-project/vllm-torchtpu/blob/v0.29.0/vllm_torchtpu/offload/raiden_connector.py
    module docstring; `cpu_bytes_to_use` is required, vllm_torchtpu/offload/raiden_store.py:2186). Every rank of
    the slice reads the same config: the scheduler on the leader hosts the controller at `store_server_ip`, and
    each worker rank dials `store_server_ip:raiden_controller_port`, loopback when the key is unset
    (raiden_store.py:2255, :2375-2379), so it must name the leader's address on every host. With
    tpu.launch=dp-across-hosts every engine's scheduler runs on its own host (a headless host runs its DP ranks'
    engine cores), each hosting its controller on the base port + its local DP rank (raiden_store.py:2300-2306): the
    ranks dial their own host's address."""
    return {
        "kv_connector": "TPURaidenOffloadingConnector",
        "kv_connector_module_path": "vllm_torchtpu.offload.raiden_connector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": tpu_offload_bytes_per_engine(cfg),
                                      "store_server_ip": POD_IP if dp_across_hosts(cfg) else LEADER_IP,
                                      "raiden_controller_port": RAIDEN_CONTROLLER_PORT},
    }


def dp_across_hosts(cfg: StackConfig) -> bool:
    """tpu.launch=dp-across-hosts: the released GKE launcher's layout (MP_LAUNCHER)."""
    return cfg.track == "tpu" and cfg.tpu.launch == "dp-across-hosts"


DP_MASTER_PORTS = 5
"""With multi-host DP, vLLM-TorchTPU replaces vLLM's randomly picked DP-group ports by `--data-parallel-rpc-port` +
100 + i for i < 5 on every host (vllm_torchtpu/distributed/tpu_mp_multihost.py L217-229), the ports the leader
then binds for the DP process groups; the host rendezvous listens on the RPC port + 1 (L77-82, L240)."""


def tpu_launch_flags(cfg: StackConfig, rank: TpuRank) -> list[str]:
    """How the hosts of a slice join. tp-across-hosts: one engine, `--nnodes` hosts, this host's `--node-rank`, the
    leader's master address (the mp executor's path, prepare_mp_multihost_env). dp-across-hosts: as the released
    launcher (MP_LAUNCHER: its SERVE_ARGS, the head's `--api-server-count=1`, the headless hosts'
    `--data-parallel-start-rank`): every host names the leader's address and one RPC port, runs
    `--data-parallel-size-local` engines, and the workers run headless from their `--data-parallel-start-rank`; the
    leader keeps one API server (`--api-server-count 1`), which vLLM would otherwise raise to the DP size
    (vllm/entrypoints/cli/serve.py L104-125 in the 0.29.0 wheel)."""
    if not dp_across_hosts(cfg):
        return ["--nnodes", str(cfg.tpu.hosts_per_slice), "--node-rank", WORKER_INDEX,
                "--master-addr", LEADER_IP, "--master-port", str(contract.TPU_MASTER_PORT),
                *(["--headless"] if rank == "worker" else [])]
    replica = parallel.layout(cfg).role("slice")
    return ["--data-parallel-size", str(replica.engines),
            "--data-parallel-size-local", str(replica.engines_per_node),
            "--data-parallel-address", LEADER_IP,
            "--data-parallel-rpc-port", str(contract.TPU_MASTER_PORT),
            *(["--headless", "--data-parallel-start-rank", START_RANK] if rank == "worker"
              else ["--api-server-count", "1"])]


MP_LAUNCHER = ("https://github.com/kowalski-4831/vllm-torchtpu/blob/be9c868ee42f6e0186c833059f432c86a9014863/"
               ".buildkite/kubernetes/mp_multihost_entry.sh")
"""The engine's released mp multi-host launcher for GKE pods (the wheels ship none)."""
MP_LAUNCHER_ENV: tuple[tuple[str, str, int], ...] = (
    # (variable, value, line of MP_LAUNCHER): GKE's injected slice-member environment blanked, since
    # tpu_mp_multihost.py builds the slice from its own rendezvous; then the backend chosen.
    ("MEGASCALE_COORDINATOR_ADDRESS", "", 63),
    ("MEGASCALE_NUM_SLICES", "", 64),
    ("MEGASCALE_PORT", "", 65),
    ("MEGASCALE_SLICE_ID", "", 66),
    ("TPU_PROCESS_ADDRESSES", "", 67),
    ("TPU_PROCESS_PORT", "", 68),
    ("TPU_WORKER_HOSTNAMES", "", 69),
    ("TPU_MULTIHOST_BACKEND", "mp", 71),
    ("TPU_SKIP_MDS_QUERY", "1", 73),
)
HEAD_RESOLVE_RETRY_S = 5
HEAD_RESOLVE_S = 240
"""How long a host tries to resolve the head before its pod fails (MP_LAUNCHER lines 83-93: `getent hosts` every 5 s,
for 300 s). Shorter than the launcher's: a host that resolves the head at the last try still starts its engine within
loading.TPU_RENDEZVOUS_TIMEOUT_S of the others (240 + 5 < 300), rather than after the leader's store gave up
(docs/engine-preconditions.md TPU-MH-7)."""


def tpu_launcher_preamble() -> tuple[str, ...]:
    """The pod-side lines of the released launcher, in its order: no core dumps (line 76), the environment
    (MP_LAUNCHER_ENV), vLLM's own address from the pod IP (mp-multihost-slice.yaml beside the launcher:
    `export VLLM_HOST_IP`), then the head resolved to an address, since the leader binds its TCPStore there and
    every host must be handed the same value."""
    return (
        "ulimit -c 0",
        *(f"export {name}={shlex.quote(value)}" for name, value, _ in MP_LAUNCHER_ENV),
        f'export VLLM_HOST_IP="{POD_IP}"',
        f"deadline=$((SECONDS + {HEAD_RESOLVE_S})); LEADER_IP=''",
        'until [ -n "$LEADER_IP" ]; do\n'
        f'  LEADER_IP="$(getent hosts "{LEADER}" | awk \'{{print $1; exit}}\')"\n'
        '  [ -n "$LEADER_IP" ] && break\n'
        f'  [ "$SECONDS" -lt "$deadline" ] || '
        f'{{ echo "{LEADER} did not resolve within {HEAD_RESOLVE_S} s" >&2; exit 1; }}\n'
        f"  sleep {HEAD_RESOLVE_RETRY_S}\n"
        "done",
        f'echo "host {WORKER_INDEX}: master address {LEADER_IP}"',
    )


UNIFIED_BLOCK_POOL_ENV = "TPU_VLLM_ENABLE_UNIFIED_BLOCK_POOL"
"""vLLM-TorchTPU's unified block pool switch (vllm_torchtpu/envs.py L500-502): an explicit 0/1 wins, unset takes the
pool for the architectures in `POOLED_GDN_ARCHITECTURES`, Kimi K3 among them (vllm_torchtpu/gdn_pool_layout.py
L23-33, L66-79). Prefix caching and the Raiden offload on the hybrid both refuse to start without it
(docs/engine-preconditions.md TPU-PREFIX-1, TPU-RAIDEN-7), so the pods set it rather than lean on that list."""


def vllm_torchtpu_env(cfg: StackConfig) -> tuple[tuple[str, str], ...]:
    """The environment every vLLM-TorchTPU host's engine starts with (besides the pod's address and the privacy
    settings every engine gets, ENGINE_PRIVACY_ENV)."""
    return (
        (UNIFIED_BLOCK_POOL_ENV, "1"),
        # torch-tpu's allocator, preloaded as it asks (components/facts/versions.py TCMALLOC_LIBRARY).
        ("LD_PRELOAD", TCMALLOC_LIBRARY),
        # The API server waits this long for its engine core (vllm/v1/engine/core_client.py L650-670 in the bundled
        # vLLM 0.29.0; default 600 s, vllm/envs.py L796-798): the startup probe's budget, no less.
        ("VLLM_ENGINE_READY_TIMEOUT_S", str(loading.startup_budget_s(cfg))),
        # The leader's controller waits this long for all ranks of the slice (raiden_registration_timeout_s).
        ("RAIDEN_EXPECTED_WORKERS_TIMEOUT_S", str(raiden_registration_timeout_s(cfg))),
        ("USER", "llm-d"),
    )


K3_NIGHTLY = ("https://github.com/kowalski-4831/vllm-torchtpu/blob/ca556cac618562b7c0fb9bb72697edc78d336037/"
              ".buildkite/pipeline_k3_sweep.yml")
"""vLLM-TorchTPU's Kimi K3 runs on a v7x-32 slice: TP=32 with EP (scripts/vllm/benchmarking/configs/
kimi-k3-tp32-ep*.sh) through .buildkite/scripts/run_multihost.sh, whose backend defaults to Ray
(`BACKEND="${TPU_MULTIHOST_BACKEND:-ray}"`)."""


def tpu_launch_line(cfg: StackConfig) -> str:
    """The summary's statement of which released run the TPU launch follows, and where it departs from them."""
    replica = parallel.layout(cfg).role("slice")
    if not dp_across_hosts(cfg):
        return (f"TPU launch (tpu.launch=tp-across-hosts): one engine per slice, TP={replica.tensor_parallel} across "
                f"{replica.nodes} hosts with --nnodes and the mp backend (vllm_torchtpu/distributed/"
                "tpu_mp_multihost.py prepare_mp_multihost_env, real code in the wheel), a path no released run "
                "takes: the released GKE launcher runs data-parallel engines across hosts with TP inside each "
                f"({MP_LAUNCHER}), Kimi K3's own runs take TP=32 with Ray ({K3_NIGHTLY}); "
                "tpu.launch=dp-across-hosts with tpu.tensorParallel=8 switches to the launcher's layout")
    return (f"TPU launch (tpu.launch=dp-across-hosts): the released GKE launcher's layout ({MP_LAUNCHER}): "
            f"{replica.engines} engines per slice, {replica.engines_per_node} per host with TP="
            f"{replica.tensor_parallel} inside it, experts over all {replica.expert_parallel} ranks; one API server "
            "per slice balances its engines by load, so the router's prefix affinity reaches the slice, not the "
            "engine (the replay's TPU figures assume one engine per slice); vLLM-TorchTPU validated K3's unified pool "
            "at TP=32 (vllm_torchtpu/gdn_pool_layout.py L25-29) and the non-weight HBM per rank is the TP=32 "
            "nightly's (capacity.tpu_non_weight_bytes)")


def vllm_torchtpu_command(cfg: StackConfig, rank: TpuRank) -> Command:
    """One `vllm serve` per host of a slice, joined by `--nnodes` (the mp executor; or, with
    tpu.launch=dp-across-hosts, vLLM's multi-host DP as the released launcher runs it, tpu_launch_flags):
    vLLM-TorchTPU's multi-host path without a Ray cluster (vllm_torchtpu/distributed/tpu_mp_multihost.py); workers
    run `--headless`, only the leader
    serves HTTP (and the router's render calls: vLLM 0.29.0 registers `/v1/completions/render` on every `vllm serve`,
    vllm/entrypoints/launchers/api_server/routers.py L52-55 in the vllm-torchtpu 0.29.0 wheel). TP spans the slice's
    TensorCores and expert parallelism all of them, as the project's Kimi K3 nightly runs it (TP=32 + EP on a 4-host
    tpu7x-32 slice)."""
    tpu = cfg.tpu
    rule = kvblocks.tpu_rule(cfg)
    argv = [
        "vllm", "serve", cfg.model.path,
        "--served-model-name", catalog.KIMI.hf_id,
        "--trust-remote-code",
        "--port", str(contract.MODEL_SERVER_PORT),
        *tpu_launch_flags(cfg, rank),
        "--tensor-parallel-size", str(parallel.layout(cfg).tensor_parallel),
        "--enable-expert-parallel",
        # Each rank reads only its own experts' weights and scales; prefetch reads only its byte ranges into the
        # page cache, where the host's ranks share the dense weights (components/plan/loading.py).
        *loading.TPU_LOADER.argv,
        # Text only: the checkpoint's vision tower is not loaded (the post serves text).
        "--language-model-only",
        "--kv-cache-dtype", {"fp8": "fp8", "bf16": "bfloat16"}[cfg.model.kvCacheDtype],
        "--block-size", str(rule.block_tokens),
        "--max-model-len", str(cfg.context_length),
        "--max-num-seqs", str(kvblocks.TPU_MAX_NUM_SEQS),
        "--max-num-batched-tokens", str(contract.PREFILL_CHUNK_TOKENS),
        *autoscaling.drain_flags(cfg),
        "--gpu-memory-utilization", f"{tpu.memFractionPercent / 100:.2f}",
        # Prefix caching on the hybrid needs mamba_cache_mode=align and the unified block pool
        # (vllm_torchtpu/platforms/tpu_platform.py check_and_update_config).
        "--enable-prefix-caching",
        "--mamba-cache-mode", "align",
        "--kv-transfer-config", _json(tpu_kv_transfer(cfg)),
        "--reasoning-parser", "kimi_k3",
        "--tool-call-parser", "kimi_k3",
        "--enable-auto-tool-choice",
        "--disable-access-log-for-endpoints", "/health,/metrics",
    ]
    preamble = tpu_launcher_preamble()
    if dp_across_hosts(cfg):
        preamble += (f"START_RANK=$(( LWS_WORKER_INDEX * {parallel.layout(cfg).role('slice').engines_per_node} ))",)
    return Command(tuple(argv), preamble)


def sglang_command(cfg: StackConfig) -> Command:
    """An unreleased SGLang-TorchTPU build (tpu.engine=sglang-torchtpu): the seed's flags, one launch_server per pod;
    rank 0 serves HTTP (https://github.com/sgl-project/sglang/blob/v0.5.23/python/sglang/srt/entrypoints/engine.py)."""
    tpu = cfg.tpu
    argv = [
        "python3", "-m", "sglang.launch_server",
        "--model-path", cfg.model.path,
        "--served-model-name", catalog.KIMI.hf_id,
        "--trust-remote-code",
        "--host", "0.0.0.0",
        "--port", str(contract.MODEL_SERVER_PORT),
        "--nnodes", str(tpu.hosts_per_slice),
        "--node-rank", WORKER_INDEX,
        "--dist-init-addr", f"{LEADER}:{contract.SGLANG_DIST_INIT_PORT}",
        "--tp-size", str(parallel.layout(cfg).tensor_parallel),
        "--ep-size", str(tpu.expertParallel),
        "--kv-cache-dtype", {"fp8": "fp8_e4m3", "bf16": "bf16"}[cfg.model.kvCacheDtype],
        "--context-length", str(cfg.context_length),
        "--page-size", str(kvblocks.block_rule(cfg).block_tokens),
        "--chunked-prefill-size", str(contract.PREFILL_CHUNK_TOKENS),
        "--mem-fraction-static", f"{tpu.memFractionPercent / 100:.2f}",
        "--enable-hierarchical-cache",
        "--hicache-ratio", str(tpu.hicacheRatio),
        "--hicache-io-backend", "raiden",
        "--attention-backend", "pallas_tpu_mla_sparse",
        "--reasoning-parser", "kimi_k3",
        "--tool-call-parser", "kimi_k3",
        "--enable-metrics",
    ]
    return Command(tuple(argv))


def tpu_command(cfg: StackConfig, rank: TpuRank) -> Command:
    return vllm_torchtpu_command(cfg, rank) if cfg.tpu.engine == "vllm-torchtpu" else sglang_command(cfg)


# --------------------------------------------------------------------------- what the engines accept
def registered_architectures(cfg: StackConfig) -> tuple[str, frozenset[str]]:
    """(engine, architectures it can load on this track) for the engine the stack pins."""
    if cfg.track == "gpu":
        return f"vLLM {VLLM.version}", VLLM.architectures
    if cfg.tpu.engine == "vllm-torchtpu":
        return f"vLLM-TorchTPU {VLLM_TORCHTPU.version}", VLLM_TORCHTPU.architectures
    return "SGLang-TorchTPU (unreleased)", SGLANG_TORCHTPU_ARCHITECTURES


def check_architecture(architecture: str, engine: str, registered: frozenset[str]) -> None:
    """Refuse a checkpoint the engine's registry does not map to an implementation for this accelerator."""
    if architecture not in registered:
        raise ConfigError("model.architecture", architecture,
                          f"{engine} registers no such model for this track (it has {', '.join(sorted(registered))}); "
                          "serve a checkpoint it registers or pin another engine")


MTP_SOURCE = (f"https://github.com/vllm-project/vllm/blob/v{VLLM.version}/vllm/config/speculative.py "
              "(hf_config_override, kimi_k3: n_predict = text_config.num_nextn_predict_layers; then "
              "num_speculative_tokens % n_predict)")


def check_mtp(cfg: StackConfig) -> None:
    """`model.speculative: mtp` drafts with the checkpoint's own MTP layers: vLLM takes their count from
    text_config.num_nextn_predict_layers, which its KimiLinearConfig defaults to 0
    (vllm/transformers_utils/configs/kimi_linear.py), and with 0 the engine stops at start on
    `num_speculative_tokens % n_predict` (ZeroDivisionError, MTP_SOURCE); a token count above the layer count
    must be a multiple of it. tests/engine/test_vllm_engine_config.py runs that code."""
    m = cfg.model
    if m.speculative != "mtp":
        return
    if m.mtpLayers < 1:
        raise ConfigError("model.speculative", "mtp",
                          f"the checkpoint has no MTP layers (model.mtpLayers = {m.mtpLayers}, its config.json "
                          "text_config.num_nextn_predict_layers; vLLM divides by it at start): use off or dflash, "
                          "or set model.mtpLayers to the checkpoint's num_nextn_predict_layers if it is 1 or more")
    if m.speculativeTokens > m.mtpLayers and m.speculativeTokens % m.mtpLayers:
        raise ConfigError("model.speculativeTokens", m.speculativeTokens,
                          f"with model.speculative=mtp it must be at most model.mtpLayers ({m.mtpLayers}) or a "
                          f"multiple of it (vLLM reuses the MTP layers; {MTP_SOURCE})")


def check_engine(cfg: StackConfig) -> None:
    """What the pinned engine would refuse at start, refused before any resource exists (one ConfigError line)."""
    check_architecture(cfg.model.architecture, *registered_architectures(cfg))
    kvblocks.block_rule(cfg)  # KDA heads must split over the TP ranks
    if cfg.track != "tpu" or cfg.tpu.engine != "vllm-torchtpu":
        check_mtp(cfg)  # vLLM-TorchTPU refuses every drafter below
        return
    if cfg.model.speculative != "off":
        raise ConfigError("model.speculative", cfg.model.speculative,
                          f"vLLM-TorchTPU {VLLM_TORCHTPU.version} re-registers no Kimi K3 MTP drafter for TPU "
                          "(KimiK3MTPModel resolves to vllm.models.kimi_k3, which exports nothing on TPU); use off")
    if cfg.model.kdaStateDtype != "float32":
        raise ConfigError("model.kdaStateDtype", cfg.model.kdaStateDtype,
                          f"vLLM-TorchTPU {VLLM_TORCHTPU.version} keeps the KDA recurrent state in float32 whatever "
                          "--mamba-ssm-cache-dtype says (vllm_torchtpu/models/vllm/kimi_k3/attention.py "
                          "kda_state_dtype); use float32")
    if catalog.KIMI.routed_experts % cfg.tpu.tensorParallel:
        raise ConfigError("tpu.tensorParallel", cfg.tpu.tensorParallel,
                          f"--enable-expert-parallel splits the {catalog.KIMI.routed_experts} routed experts "
                          "over every TP rank; they must divide evenly")

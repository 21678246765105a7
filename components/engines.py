"""Model-server command lines, built as token lists so tests can check every flag against the engine's
real parser (tests/test_modelservers.py) and every JSON key against the engine's config classes.

GPU: vLLM (pinned VLLM_VERSION), one `vllm serve` per LWS pod in llm-d's data-parallel hybrid-LB form:
each pod runs GPUs/TP engines, the group forms one DP x EP domain (EP = TP x DP is derived by vLLM).
TPU: sglang-jax (SGLang's TPU engine) at the pinned commit, or the seed's day-0 SGLang-on-TPU build.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Literal

from . import catalog, contract, loading
from .capacity import cpu_offload_bytes_per_engine
from .config import StackConfig
from .versions import SGLANG_JAX, VLLM

Role = Literal["prefill", "decode"]

# Shell variables the pod script defines or LWS/Kubernetes inject
# (https://github.com/kubernetes-sigs/lws/blob/30f8f66/site/content/en/docs/reference/labels-annotations-and-environment-variables.md).
LEADER = "${LWS_LEADER_ADDRESS}"
WORKER_INDEX = "${LWS_WORKER_INDEX}"
POD_IP = "${POD_IP}"
START_RANK = "${START_RANK}"
KV_EVENTS_BASE = "${KV_EVENTS_BASE}"

DAY0_FLAG_VALUES = {
    # Seed-post values the day-0 SGLang TPU build carries and no listed SGLang release accepts
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


def kv_events_topic(model: str) -> str:
    """`kv@<pod ip>:<port>@<model>`: the router splits on '@'
    (https://github.com/llm-d/llm-d-router/blob/v0.10.0/pkg/kvevents/engineadapter/common.go)."""
    return f"{contract.KV_EVENTS_TOPIC_PREFIX}{POD_IP}:{contract.MODEL_SERVER_PORT}@{model}"


# --------------------------------------------------------------------------- vLLM (GPU)
def vllm_port(role: Role) -> int:
    """Decode engines sit behind the routing sidecar, which takes the serving port
    (https://github.com/llm-d/llm-d-router/blob/v0.10.0/pkg/sidecar/proxy/options.go)."""
    return contract.DECODE_ENGINE_PORT if role == "decode" else contract.MODEL_SERVER_PORT


def vllm_group_nodes(cfg: StackConfig, role: Role) -> int:
    return cfg.gpu.prefillNodesPerGroup if role == "prefill" else cfg.gpu.decodeNodesPerGroup


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


def vllm_kv_events(cfg: StackConfig) -> dict:
    # vLLM adds the global DP rank to the endpoint port; the script starts each pod at 5557 - START_RANK so its
    # engines publish on 5557.. (https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/distributed/kv_events.py
    # offset_endpoint_port).
    return {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{KV_EVENTS_BASE}",
            "topic": kv_events_topic(catalog.KIMI.hf_id)}


def vllm_speculative(cfg: StackConfig) -> dict | None:
    spec = cfg.model
    if spec.speculative == "mtp":
        return {"method": "mtp", "num_speculative_tokens": spec.speculativeTokens}
    if spec.speculative == "dflash":
        return {"method": "dflash", "model": spec.draftModelPath, "num_speculative_tokens": spec.speculativeTokens}
    return None


def vllm_command(cfg: StackConfig, role: Role) -> Command:
    gpu = cfg.gpu
    dp_local = gpu.data_parallel_local
    nodes = vllm_group_nodes(cfg, role)
    argv = [
        "vllm", "serve", cfg.model.path,
        "--served-model-name", catalog.KIMI.hf_id,
        "--trust-remote-code",
        "--port", str(vllm_port(role)),
        "--tensor-parallel-size", str(gpu.tensorParallel),
        "--data-parallel-size", str(nodes * dp_local),
        "--data-parallel-size-local", str(dp_local),
        "--data-parallel-address", LEADER,
        "--data-parallel-rpc-port", str(contract.DATA_PARALLEL_RPC_PORT),
        "--data-parallel-start-rank", START_RANK,
        "--data-parallel-hybrid-lb",
        "--enable-expert-parallel",
        # Each rank reads only its own experts, with a loader that honours that filter (components/loading.py).
        *loading.GPU_LOADER.argv,
        # llm-d: high-throughput kernels for prefill, low-latency for decode
        # (https://github.com/llm-d/llm-d/blob/3318b75/guides/wide-ep-lws/manifests/modelserver/base/decode.yaml).
        "--all2all-backend", "deepep_high_throughput" if role == "prefill" else "deepep_low_latency",
        "--kv-cache-dtype", {"fp8": "fp8", "bf16": "bfloat16"}[cfg.model.kvCacheDtype],
        "--block-size", str(contract.KV_BLOCK_TOKENS),
        "--max-model-len", str(cfg.context_length),
        *(["--max-num-batched-tokens", str(contract.PREFILL_CHUNK_TOKENS)] if role == "prefill" else []),
        "--gpu-memory-utilization", f"{gpu.gpuMemoryPercent / 100:.2f}",
        # The hybrid KV-cache manager keeps KDA state and MLA pages together, also for offloading
        # (https://github.com/llm-d/llm-d/blob/4bd65c4/guides/pd-disaggregation/modelserver/gpu/vllm/multi-tier/patch-prefill.yaml).
        VLLM.hybrid_kv_flag,
        "--kv-transfer-config", _json(vllm_kv_transfer(cfg, role)),
        "--kv-events-config", _json(vllm_kv_events(cfg)),
        "--reasoning-parser", "kimi_k3",
        "--tool-call-parser", "kimi_k2",
        "--enable-auto-tool-choice",
        "--disable-access-log-for-endpoints", "/health,/metrics",
    ]
    speculative = vllm_speculative(cfg)
    if speculative:
        argv += ["--speculative-config", _json(speculative)]
    preamble = (
        "find /dev/shm -mindepth 1 -delete 2>/dev/null || true",  # stale shm from a restart (llm-d issue #352)
        f"START_RANK=$(( LWS_WORKER_INDEX * {dp_local} ))",
        f"KV_EVENTS_BASE=$(( {contract.KV_EVENTS_PORT} - START_RANK ))",
    )
    return Command(tuple(argv), preamble)


# --------------------------------------------------------------------------- SGLang (TPU)
def sglang_speculative(cfg: StackConfig) -> list[str]:
    spec = cfg.model
    if spec.speculative == "off":
        return []
    # The model's own MTP head is SGLang's NEXTN without a draft path; drafters come from the weights volume.
    algorithm = {"mtp": "NEXTN", "nextn": "NEXTN", "dflash": "DFLASH"}[spec.speculative]
    argv = ["--speculative-algorithm", algorithm,
            "--speculative-num-steps", str(spec.speculativeTokens),
            "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(spec.speculativeTokens + 1)]
    if spec.speculative in ("nextn", "dflash"):
        argv += ["--speculative-draft-model-path", spec.draftModelPath]
    return argv


def sglang_command(cfg: StackConfig) -> Command:
    """One launch_server per pod; rank 0 serves HTTP, other ranks a health endpoint
    (https://github.com/sgl-project/sglang/blob/v0.5.23/python/sglang/srt/entrypoints/engine.py)."""
    tpu = cfg.tpu
    day0 = tpu.engineProfile == "day0"
    kv_events = {"publisher": "zmq", "endpoint": f"tcp://*:{contract.KV_EVENTS_PORT}",
                 "topic": kv_events_topic(catalog.KIMI.hf_id)}
    argv = [
        "python3", "-m", "sglang.launch_server" if day0 else "sgl_jax.launch_server",
        "--model-path", cfg.model.path,
        "--served-model-name", catalog.KIMI.hf_id,
        "--trust-remote-code",
        "--host", "0.0.0.0",
        "--port", str(contract.MODEL_SERVER_PORT),
        "--nnodes", str(tpu.hosts_per_slice),
        "--node-rank", WORKER_INDEX,
        "--dist-init-addr", f"{LEADER}:{contract.SGLANG_DIST_INIT_PORT}",
        # tp = every JAX device of the slice (2 TensorCores per chip); ep splits the 896 experts
        # (https://github.com/sgl-project/sglang-jax/blob/cddbf6f/python/sgl_jax/srt/server_args.py).
        "--tp-size", str(tpu.tensorParallel),
        "--ep-size", str(tpu.expertParallel),
        "--kv-cache-dtype", {"fp8": "fp8_e4m3", "bf16": "bf16"}[cfg.model.kvCacheDtype],
        "--context-length", str(cfg.context_length),
        "--page-size", str(contract.KV_BLOCK_TOKENS),
        "--chunked-prefill-size", str(contract.PREFILL_CHUNK_TOKENS),
        "--mem-fraction-static", f"{tpu.memFractionPercent / 100:.2f}",
    ]
    if day0:
        argv += [
            "--enable-hierarchical-cache",
            "--hicache-ratio", str(tpu.hicacheRatio),
            "--hicache-io-backend", "raiden",
            "--attention-backend", "pallas_tpu_mla_sparse",
            "--reasoning-parser", "kimi_k3",
            "--tool-call-parser", "kimi_k3",
        ]
    else:
        argv += [
            # sglang-jax has no --enable-hierarchical-cache: `--hicache-storage none` turns on the host tier
            # without a storage backend
            # (https://github.com/sgl-project/sglang-jax/blob/cddbf6f/python/sgl_jax/srt/server_args.py).
            "--hicache-storage", "none",
            "--hicache-ratio", str(tpu.hicacheRatio),
            "--hicache-write-policy", "write_through",
            # sglang-jax has no kimi_k3 parser; `kimi` is the Kimi reasoning parser it does ship
            # (https://github.com/sgl-project/sglang-jax/blob/cddbf6f/python/sgl_jax/srt/reasoning_parser.py).
            "--reasoning-parser", "kimi",
        ]
    argv += ["--enable-metrics", "--kv-events-config", _json(kv_events), *sglang_speculative(cfg)]
    preamble = () if day0 else SGLANG_JAX.install_commands
    return Command(tuple(argv), preamble)

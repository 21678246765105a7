"""vLLM 0.33.0's own port rules against the ports each GPU pod declares (components/facts/contract.py): the pod's script
(components/plan/engines.py vllm_command preamble, run here by bash with LWS's worker index) lowers each base by its
start rank, and the engine adds its global DP rank back."""

from __future__ import annotations

import os
import subprocess

from components.facts import contract
from components.plan import engines
from components.plan.parallel import layout


def _pod_ports(cfg, worker_index: int) -> dict[str, int]:
    """VLLM_NIXL_SIDE_CHANNEL_PORT and START_RANK as the generated pod script computes them."""
    preamble = [line for line in engines.vllm_command(cfg, "prefill").preamble
                if line.startswith(("START_RANK=", "export VLLM_NIXL_SIDE_CHANNEL_PORT="))]
    script = "\n".join(["set -eu", *preamble, 'echo "$VLLM_NIXL_SIDE_CHANNEL_PORT $START_RANK"'])
    out = subprocess.run(["bash", "-c", script], env={"LWS_WORKER_INDEX": str(worker_index), "PATH": os.defpath},
                         capture_output=True, text=True, timeout=30, check=True).stdout.split()
    return {"nixl_base": int(out[0]), "start_rank": int(out[1])}


def test_every_engine_binds_its_nixl_side_channel_on_a_port_its_pod_declares(gpu_cfg):
    """The NIXL scheduler binds envs.VLLM_NIXL_SIDE_CHANNEL_PORT + parallel_config.data_parallel_index
    (vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py); ParallelConfig derives the index from the
    DP rank (vllm/config/parallel.py) and vllm.envs reads the pod's exported base."""
    import vllm.envs as envs
    from vllm.config import ParallelConfig

    g = gpu_cfg.gpu
    size = g.prefillNodesPerGroup * layout(gpu_cfg).engines_per_node
    for worker in range(g.prefillNodesPerGroup):
        pod = _pod_ports(gpu_cfg, worker)
        for local in range(layout(gpu_cfg).engines_per_node):
            parallel = ParallelConfig(tensor_parallel_size=g.tensorParallel, data_parallel_size=size,
                                      data_parallel_rank=pod["start_rank"] + local, enable_expert_parallel=True)
            os.environ["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(pod["nixl_base"])
            try:
                port = envs.VLLM_NIXL_SIDE_CHANNEL_PORT + parallel.data_parallel_index
            finally:
                del os.environ["VLLM_NIXL_SIDE_CHANNEL_PORT"]
            assert port == contract.NIXL_SIDE_CHANNEL_PORT + local, (worker, local)

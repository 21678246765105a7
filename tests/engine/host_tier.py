"""A GPU prefill engine with its host-DRAM tier as the pods run it: vLLM 0.33.0's Scheduler with the
OffloadingConnector the pods configure (components/plan/engines.py `vllm_kv_transfer`, its CPU tier's
`cpu_bytes_to_use` and LRU policy), so the scheduler-side connector and CPU manager (vllm/distributed/kv_transfer/
kv_connector/v1/offloading/scheduler.py, vllm/v1/kv_offload/cpu/manager.py) decide what is stored, evicted, looked
up and loaded. Only the workers' copies are stood in for: each step, every load and store job the scheduler issued
reports done, as a worker's `get_finished` and `build_connector_meta` report them (offloading/worker.py)."""

from __future__ import annotations

from components.plan import engines


def offload_connector(cfg) -> dict:
    """The OffloadingConnector entry of the prefill pods' MultiConnector (NIXL is the other; it holds no cache)."""
    connectors = engines.vllm_kv_transfer(cfg, "prefill")["kv_connector_extra_config"]["connectors"]
    [entry] = [c for c in connectors if c["kv_connector"] == "OffloadingConnector"]
    return entry

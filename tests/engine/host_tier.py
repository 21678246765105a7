"""A GPU prefill engine with its host-DRAM tier as the pods run it: vLLM 0.33.0's Scheduler with the
OffloadingConnector the pods configure (components/plan/engines.py `vllm_kv_transfer`, its CPU tier's
`cpu_bytes_to_use` and LRU policy), so the scheduler-side connector and CPU manager (vllm/distributed/kv_transfer/
kv_connector/v1/offloading/scheduler.py, vllm/v1/kv_offload/cpu/manager.py) decide what is stored, evicted, looked
up and loaded. Only the workers' copies are stood in for: each step, every load and store job the scheduler issued
reports done, as a worker's `get_finished` and `build_connector_meta` report them (offloading/worker.py)."""

from __future__ import annotations

from components.plan import engines, replay
from tests.engine_replay import VllmEngine


def offload_connector(cfg) -> dict:
    """The OffloadingConnector entry of the prefill pods' MultiConnector (NIXL is the other; it holds no cache)."""
    connectors = engines.vllm_kv_transfer(cfg, "prefill")["kv_connector_extra_config"]["connectors"]
    [entry] = [c for c in connectors if c["kv_connector"] == "OffloadingConnector"]
    return entry


class HostTierEngine(VllmEngine):
    """`serve` through the scheduler and its connector; `peek` the HBM prefix cache, `host_peek` the CPU tier alone
    (the connector's own lookup, `_lookup`, on a request of the prompt, which stores nothing)."""

    def __init__(self, vllm_config, kv_cache_config, computes_output: bool, connector: dict):
        from vllm.config import KVTransferConfig

        vllm_config.kv_transfer_config = KVTransferConfig(**connector, engine_id="host-tier")
        super().__init__(vllm_config, kv_cache_config, computes_output)
        self.offload = self.scheduler.connector.connector_scheduler
        self.host_hit_tokens = 0
        """Hit tokens loaded from host DRAM beyond what HBM had (the replay's `from host` column)."""

    @property
    def host_chunks(self) -> int:
        return self.offload.manager._num_chunks

    def host_peek(self, prompt: replay.Tokens) -> int:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
            RequestOffloadState,
            _create_req_context,
        )
        from vllm.v1.kv_offload.base import RequestOffloadingContext

        super().peek(prompt)  # makes (once per prompt and hash unit) the probe request every engine shares
        request = prompt.__dict__["_vllm_probes"][self.hash_block]
        state = RequestOffloadState(config=self.offload.config, req=request, req_context=_create_req_context(request),
                                    offloading_context=RequestOffloadingContext())
        state.update_offload_keys()
        return self.offload._lookup(state) or 0

    def peek(self, prompt: replay.Tokens) -> int:
        return max(super().peek(prompt), self.host_peek(prompt))

    def serve(self, prompt: replay.Tokens, output: list[int]) -> int:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

        hbm = super().peek(prompt)
        answer = output if self.computes_output and output else output[:1] or [0]
        request = self._request(prompt.ids, len(answer))
        self.scheduler.add_request(request)
        hit = None
        workers = self.offload.config.num_workers
        for _ in range(1_000_000):  # bounded: one step per chunk, load and generated token
            scheduled = self.scheduler.schedule()
            jobs = scheduled.kv_connector_metadata
            done = {job: workers for job in [*jobs.load_jobs, *jobs.store_jobs]}
            loaded = {job.req_id for job in jobs.load_jobs.values() if not job.sync}
            ids = list(scheduled.num_scheduled_tokens)
            if hit is None and request.request_id in ids:
                hit = request.num_computed_tokens - scheduled.num_scheduled_tokens[request.request_id]
            sampled = []
            for rid in ids:
                r = self.scheduler.requests[rid]
                sampled.append([answer[len(r.output_token_ids)]] if r.num_computed_tokens >= r.num_tokens else [])
            self.scheduler.update_from_output(scheduled, ModelRunnerOutput(
                req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)}, sampled_token_ids=sampled,
                kv_connector_output=KVConnectorOutput(
                    finished_recving=loaded, kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done))))
            if request.is_finished() and not self.scheduler.has_requests():
                self.host_hit_tokens += max((hit or 0) - hbm, 0)
                return hit or 0
        raise RuntimeError("request did not finish")


class HostOnly:
    """The engine as `sessions_kept` sees it when it asks the host tier alone."""

    def __init__(self, engine: HostTierEngine):
        self.serve, self.peek = engine.serve, engine.host_peek

"""The replay's engine cache as the engine counts it, shared by the two engine-code tiers: the pinned vLLM's own
Scheduler and KVCacheManager (vLLM 0.33.0 in .venv-engines, the vLLM 0.29.0 core vLLM-TorchTPU ships in
.venv-engines-tpu) on one engine's KVCacheConfig, driven step by step as the engine core drives them
(vllm/v1/engine/core.py `step`: `schedule`, the model's output, `update_from_output`), with the model's forward pass
replaced by the next token of the replayed answer. The hit a request gets is the scheduler's own: the tokens computed
before its first scheduled step."""

from __future__ import annotations

import copy
import itertools

from components.plan import replay


class VllmEngine:
    """One engine: a released Scheduler over its own copy of the KVCacheConfig (components/plan/replay.py
    EngineCache)."""

    _ids = itertools.count()

    def __init__(self, vllm_config, kv_cache_config, computes_output: bool):
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core import kv_cache_utils
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.structured_output import StructuredOutputManager

        config = copy.deepcopy(kv_cache_config)
        vllm_config.cache_config.num_gpu_blocks = config.num_blocks  # core.py `_initialize_kv_caches` L335
        # The planner copies the retention into the KVCacheConfig the coordinator reads (vLLM 0.33.0
        # kv_cache_planning.py L665, L738; kv_cache_coordinator.py L189).
        config.prefix_cache_retention_interval = vllm_config.cache_config.prefix_cache_retention_interval
        scheduler_block, hash_block = kv_cache_utils.resolve_kv_cache_block_sizes(config, vllm_config)
        # as vllm/v1/engine/core.py `_initialize_kv_caches` sets them (vLLM 0.33.0; 0.29.0 has neither field)
        if hasattr(kv_cache_utils, "resolve_cache_hit_alignment_tokens"):
            config.hash_block_size = hash_block
            config.cache_hit_alignment_tokens = kv_cache_utils.resolve_cache_hit_alignment_tokens(
                config, vllm_config, scheduler_block, hash_block)
        self.scheduler = Scheduler(vllm_config=vllm_config, kv_cache_config=config,
                                   structured_output_manager=StructuredOutputManager(vllm_config),
                                   block_size=scheduler_block, hash_block_size=hash_block, log_stats=False)
        hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        lookahead = getattr(vllm_config, "num_hash_lookahead_tokens", None)  # vLLM 0.33.0 only
        self.hasher = get_request_block_hasher(hash_block, hash_fn, *([] if lookahead is None else [lookahead]))
        self.computes_output = computes_output
        self.hash_block = hash_block

    def _request(self, ids: list[int], max_tokens: int):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        return Request(f"r{next(self._ids)}", ids, SamplingParams(max_tokens=max_tokens, ignore_eos=True), None,
                       block_hasher=self.hasher)

    def peek(self, prompt: replay.Tokens) -> int:
        """The hit the engine's manager finds now (`get_computed_blocks`, which allocates nothing). The request and
        its block hashes are made once per prompt and hash unit and shared by every engine of the replay."""
        probes = prompt.__dict__.setdefault("_vllm_probes", {})
        if self.hash_block not in probes:
            probes[self.hash_block] = self._request(prompt.ids, 1)
        _, hit, _ = self.scheduler.kv_cache_manager.get_computed_blocks(probes[self.hash_block])
        return hit

    def serve(self, prompt: replay.Tokens, output: list[int]) -> int:
        from vllm.v1.outputs import ModelRunnerOutput

        answer = output if self.computes_output and output else output[:1] or [0]
        request = self._request(prompt.ids, len(answer))
        self.scheduler.add_request(request)
        hit = None
        for _ in range(1_000_000):  # bounded: one step per chunk and per generated token
            scheduled = self.scheduler.schedule()
            ids = list(scheduled.num_scheduled_tokens)
            if hit is None and request.request_id in ids:
                # schedule() advances num_computed_tokens by the step's tokens: what came before is the hit
                hit = request.num_computed_tokens - scheduled.num_scheduled_tokens[request.request_id]
            sampled = []
            for rid in ids:
                r = self.scheduler.requests[rid]
                done_prompt = r.num_computed_tokens >= r.num_tokens
                sampled.append([answer[len(r.output_token_ids)]] if done_prompt else [])
            self.scheduler.update_from_output(scheduled, ModelRunnerOutput(
                req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)}, sampled_token_ids=sampled,
                kv_connector_output=self._workers_report(scheduled)))
            if request.is_finished() and not self._connector_busy():
                return hit or 0
        raise RuntimeError("request did not finish")

    def _workers_report(self, scheduled):
        """What the workers' KV connectors report for a step: nothing, without a connector."""
        return None

    def _connector_busy(self) -> bool:
        return False


def sessions_kept(engine, shape: replay.Shape, limit: int = 400) -> tuple[int, int, int]:
    """Serve sessions of `shape` one after another, every turn through `engine` (the released manager), until the
    first session's next turn no longer gets the hit it got right after it was served, and two more sessions have
    been served; then count the sessions whose next turn still gets it (beyond the shared prefix). Returns (sessions
    kept, the tokens their next turns hit with the shared prefix counted once, sessions served). Nothing of the plan
    goes in but the shape: the pool and the cache are the engine's. The shared prefix is what it hits for a new
    session once two have shared it (a tier that keeps the junction only while it is fresh, as a host tier does,
    still keeps the prefix's blocks once for every session)."""
    ids = replay._Ids()
    system = ids.take(shape.system_tokens)
    sessions: list[tuple[list[int], int]] = []

    def next_hit(history: list[int]) -> int:
        return engine.peek(replay.Tokens(history + ids.take(shape.input_tokens)))

    evicted_at, shared = None, 0
    for s in range(limit):
        history = (list(system) if shape.system_shared else ids.take(shape.system_tokens)) + ids.take(
            shape.first_input(s))
        for turn in range(shape.turns):
            if turn:
                history += ids.take(shape.input_tokens)
            prompt = replay.Tokens(history)
            output = ids.take(shape.output_tokens)
            engine.serve(prompt, output)
            history = prompt.ids + output
        sessions.append((history, next_hit(history)))
        if s == 1 and shape.system_shared:
            shared = next_hit(list(system) + ids.take(shape.first_input(0)))
        if evicted_at is None and next_hit(sessions[0][0]) < sessions[0][1]:
            evicted_at = s
        if evicted_at is not None and s >= evicted_at + 2:
            break
    else:
        raise AssertionError(f"{shape.name}: the pool never evicted the first session in {limit} sessions")
    hits = [hit for history, hit in sessions if hit > shared and next_hit(history) >= hit]
    return len(hits), sum(hits) - max(len(hits) - 1, 0) * shared, len(sessions)


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
        manager = self.offload.manager
        return getattr(manager, "_num_chunks", None) or manager._num_blocks  # vLLM 0.33.0 / 0.29.0

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
        hbm = super().peek(prompt)
        hit = super().serve(prompt, output)
        self.host_hit_tokens += max(hit - hbm, 0)
        return hit

    def _workers_report(self, scheduled):
        """Every load and store job the step issued, done on every worker; a load that ran between steps frees its
        request (vLLM 0.29.0's load jobs are all of that kind)."""
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
        from vllm.v1.outputs import KVConnectorOutput

        jobs = scheduled.kv_connector_metadata
        done = {job: self.offload.config.num_workers for job in [*jobs.load_jobs, *jobs.store_jobs]}
        loaded = {job.req_id for job in jobs.load_jobs.values() if not getattr(job, "sync", False)}
        return KVConnectorOutput(finished_recving=loaded,
                                 kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done))

    def _connector_busy(self) -> bool:
        """Stores still in flight keep the engine stepping (Scheduler.has_requests)."""
        return self.scheduler.has_requests()


class HostOnly:
    """The engine as `sessions_kept` sees it when it asks the host tier alone."""

    def __init__(self, engine: HostTierEngine):
        self.serve, self.peek = engine.serve, engine.host_peek

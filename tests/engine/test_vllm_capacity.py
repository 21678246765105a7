"""HBM prefix capacity per session shape as vLLM 0.33.0's own Scheduler and KVCacheManager count it, on one GPU
prefill engine planned as the pods start it (the stack's pool, `--prefix-match-unit`, sparse KDA retention): the
sessions whose next turn still gets its whole hit after serving sessions one after another, and the prefix tokens
they hit. The plan's rule (components/plan/prefixcache.py `prefix_footprint`, `shape_capacity`) must be within 5 %.
The host-DRAM tier likewise, as the released OffloadingConnector and CPU manager keep it (tests/engine/host_tier.py;
`host_footprint`)."""

from __future__ import annotations

import pytest

from components.plan import prefixcache, replay
from tests.engine.conftest import stack_config
from tests.engine.host_tier import offload_connector
from tests.engine.test_vllm_replay import _engines
from tests.engine_replay import HostOnly, HostTierEngine, sessions_kept
from tests.engine_support import record

TOLERANCE = 0.05


@pytest.mark.parametrize("shape_name", ["benchmark", "agentic", "long 200K", "long 500K", "long 1015K", "chat"])
def test_prefix_capacity_is_the_engines(tmp_path, monkeypatch, shape_name):
    cfg = stack_config("gpu")
    shape = next(s for s in prefixcache.capacity_shapes(cfg) if s.name == shape_name)
    choice = replay.rendered_choice(cfg)
    engine = _engines(cfg, choice, tmp_path, monkeypatch)(0)
    kept, tokens, served = sessions_kept(engine, shape)
    plan = prefixcache.shape_capacity(cfg, shape)
    record(f"GPU HBM prefix capacity, {shape_name}: vLLM 0.33.0 keeps {kept} sessions ({tokens:,} prefix tokens) per "
           f"engine after {served}; plan {plan.hbm_sessions_per_engine} ({plan.hbm_tokens_per_engine:,})")
    assert abs(plan.hbm_sessions_per_engine - kept) <= TOLERANCE * kept, (kept, plan)
    assert abs(plan.hbm_tokens_per_engine - tokens) <= TOLERANCE * tokens, (tokens, plan)


def test_host_chunks_are_the_engines(tmp_path, monkeypatch):
    """The chunks the CPU tier of the pods' connector config holds (vllm/v1/kv_offload/cpu/spec.py
    `CPUOffloadingSpec`: `cpu_bytes_to_use` over one block id across the engine's workers, page-aligned)."""
    cfg = stack_config("gpu")
    engine = _host_engine(cfg, tmp_path, monkeypatch)
    record(f"GPU host tier: vLLM 0.33.0's CPU manager holds {engine.host_chunks:,} chunks per engine; plan "
           f"{prefixcache.host_chunks_per_engine(cfg):,}")
    assert engine.host_chunks == prefixcache.host_chunks_per_engine(cfg)


@pytest.mark.parametrize("shape_name", ["benchmark", "agentic", "long 200K", "long 500K", "long 1015K", "chat"])
def test_host_prefix_capacity_is_the_engines(tmp_path, monkeypatch, shape_name):
    """Sessions served one after another through the scheduler and its OffloadingConnector: the sessions whose next
    turn the CPU tier alone still serves whole, and the prefix tokens they hit."""
    cfg = stack_config("gpu")
    shape = next(s for s in prefixcache.capacity_shapes(cfg) if s.name == shape_name)
    engine = _host_engine(cfg, tmp_path, monkeypatch)
    kept, tokens, served = sessions_kept(HostOnly(engine), shape)
    plan = prefixcache.shape_capacity(cfg, shape)
    record(f"GPU host prefix capacity, {shape_name}: vLLM 0.33.0's CPU tier keeps {kept} sessions ({tokens:,} prefix "
           f"tokens) per engine after {served}; plan {plan.host_sessions_per_engine} ({plan.host_tokens_per_engine:,})")
    assert abs(plan.host_sessions_per_engine - kept) <= TOLERANCE * kept, (kept, plan)
    assert abs(plan.host_tokens_per_engine - tokens) <= TOLERANCE * tokens, (tokens, plan)


def _host_engine(cfg, tmp_path, monkeypatch) -> HostTierEngine:
    base = _engines(cfg, replay.rendered_choice(cfg), tmp_path, monkeypatch)(0)
    return HostTierEngine(base.scheduler.vllm_config, base.scheduler.kv_cache_config, False, offload_connector(cfg))

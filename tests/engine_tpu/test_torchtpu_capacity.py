"""HBM prefix capacity per session shape as the vLLM 0.29.0 core vLLM-TorchTPU 0.29.0 ships counts it (its own
Scheduler and KVCacheManager on the slice's pool, tests/engine_tpu/test_torchtpu_replay.py `_engines`): the sessions
whose next turn still gets its whole hit after serving sessions one after another, and the prefix tokens they hit.
The plan's rule (components/plan/prefixcache.py `prefix_footprint`, `shape_capacity`) must be within 5 %.

The host tier: the pods' TPURaidenOffloadingConnector decides what to store with vLLM 0.29.0's own
OffloadingConnectorScheduler (vllm_torchtpu/offload/raiden_connector.py subclasses it) but keeps it in Raiden's
native KVCacheStore (`tpu_sync`, published nowhere this tier can install from), so the tier runs vLLM 0.29.0's
OffloadingConnector with vLLM's CPU LRU manager in the store's place, at Raiden's chunk count."""

from __future__ import annotations

import pytest

from components.plan import prefixcache, replay
from tests.engine_replay import HostOnly, HostTierEngine, sessions_kept
from tests.engine_support import record, stack_config
from tests.engine_tpu.test_torchtpu_replay import _engines, with_host

TOLERANCE = 0.05


@pytest.mark.parametrize("shape_name", ["benchmark", "agentic", "long 200K", "long 458K", "chat"])
def test_prefix_capacity_is_the_engines(tmp_path, shape_name):
    cfg = stack_config("tpu")
    shape = next(s for s in prefixcache.capacity_shapes(cfg) if s.name == shape_name)
    choice = replay.rendered_choice(cfg)
    engine = _engines(cfg, choice, tmp_path)(0)
    kept, tokens, served = sessions_kept(engine, shape)
    plan = prefixcache.shape_capacity(cfg, shape)
    record(f"TPU HBM prefix capacity, {shape_name}: vLLM-TorchTPU 0.29.0 keeps {kept} sessions ({tokens:,} prefix "
           f"tokens) per slice after {served}; plan {plan.hbm_sessions_per_engine} ({plan.hbm_tokens_per_engine:,})")
    assert abs(plan.hbm_sessions_per_engine - kept) <= TOLERANCE * kept, (kept, plan)
    assert abs(plan.hbm_tokens_per_engine - tokens) <= TOLERANCE * tokens, (tokens, plan)


@pytest.mark.parametrize("shape_name", ["benchmark", "agentic", "long 200K", "long 458K", "chat"])
def test_host_prefix_capacity_is_the_connectors(tmp_path, shape_name):
    """The sessions vLLM 0.29.0's connector keeps in a CPU tier of the slice's host chunks, asked through the
    connector's own lookup alone, against the plan's host figure (`prefixcache.host_footprint`: what the prefix cache
    keeps less the KDA states no hit finds, which the connector does not store)."""
    cfg = stack_config("tpu")
    shape = next(s for s in prefixcache.capacity_shapes(cfg) if s.name == shape_name)
    engine = _host_engine(cfg, tmp_path)
    # vLLM's CPU spec turned the bytes given into exactly Raiden's chunk count (its alignment rounding included);
    # test_torchtpu_code holds Raiden's count to the plan's.
    assert engine.host_chunks == prefixcache.host_chunks_per_engine(cfg)
    kept, tokens, served = sessions_kept(HostOnly(engine), shape)
    plan = prefixcache.shape_capacity(cfg, shape)
    record(f"TPU host prefix capacity, {shape_name}: vLLM 0.29.0's connector (vLLM's CPU LRU in Raiden's store's "
           f"place) keeps {kept} sessions ({tokens:,} prefix tokens) per slice after {served}; plan "
           f"{plan.host_sessions_per_engine} ({plan.host_tokens_per_engine:,})")
    assert abs(plan.host_sessions_per_engine - kept) <= TOLERANCE * kept, (kept, plan)
    assert abs(plan.host_tokens_per_engine - tokens) <= TOLERANCE * tokens, (tokens, plan)


def _host_engine(cfg, tmp_path) -> HostTierEngine:
    return with_host(cfg, _engines(cfg, replay.rendered_choice(cfg), tmp_path)(0))

"""HBM prefix capacity per session shape as vLLM 0.33.0's own Scheduler and KVCacheManager count it, on one GPU
prefill engine planned as the pods start it (the stack's pool, `--prefix-match-unit`, sparse KDA retention): the
sessions whose next turn still gets its whole hit after serving sessions one after another, and the prefix tokens
they hit. The plan's rule (components/plan/prefixcache.py `prefix_footprint`, `shape_capacity`) must be within 5 %."""

from __future__ import annotations

import pytest

from components.plan import prefixcache, replay
from tests.engine.conftest import stack_config
from tests.engine.test_vllm_replay import _engines
from tests.engine_replay import sessions_kept
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

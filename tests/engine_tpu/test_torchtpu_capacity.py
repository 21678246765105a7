"""HBM prefix capacity per session shape as the vLLM 0.29.0 core vLLM-TorchTPU 0.29.0 ships counts it (its own
Scheduler and KVCacheManager on the slice's pool, tests/engine_tpu/test_torchtpu_replay.py `_engines`): the sessions
whose next turn still gets its whole hit after serving sessions one after another, and the prefix tokens they hit.
The plan's rule (components/plan/prefixcache.py `prefix_footprint`, `shape_capacity`) must be within 5 %."""

from __future__ import annotations

import pytest

from components.plan import prefixcache, replay
from tests.engine_replay import sessions_kept
from tests.engine_support import record, stack_config
from tests.engine_tpu.test_torchtpu_replay import _engines

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

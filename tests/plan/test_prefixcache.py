"""What one engine's prefix cache keeps per session shape (components/plan/prefixcache.py) against hand-worked
figures and against the replay's rule engine filled the way the engine tiers fill the released managers
(tests/engine/test_vllm_capacity.py, tests/engine_tpu/test_torchtpu_capacity.py hold it equal to those)."""

from __future__ import annotations

from components.plan import prefixcache, replay
from tests.config.test_config import parse
from tests.engine_replay import sessions_kept


def _shape(cfg, name):
    return next(s for s in prefixcache.capacity_shapes(cfg) if s.name == name)


def test_gpu_benchmark_hand_worked():
    """The benchmark on a GPU prefill engine (222 blocks; 761 host chunks; 128-token unit in 11,392-token blocks):
    prompts 34,816 + 2,560 k tokens, k = 0..7, each a multiple of 128, so each turn keeps its state at prompt - 128
    (units 271, 291, ..., 411, none on a block edge: 8 MLA tails). Shared: the system prompt's 2 whole blocks + the
    junction state (3 KDA groups) = 5. A session: 52,736 // 11,392 = 4 blocks, 2 of them its own, + 8 tails + the
    last two states (the last hit touched the one before) = 16 live, 6 earlier states x 3 = 18 stale.
    HBM: (222 - 5 - 16) // 34 + 1 = 6 sessions, 6 x (52,608 - 22,784) + 22,784 = 201,728 tokens. The host tier
    also stores each prompt's state at its last whole block (34,176 at turn 1, 45,568 at turn 6: 2 x 3 chunks) and
    needs only the last tail and the last two states for the next hit: 2 + 1 + 3 + 3 = 9 live, 2 + 8 + 3 x 10 = 40
    a session; (761 - 5 - 9) // 40 + 1 = 19 sessions, 589,440 tokens = 4,605 router blocks."""
    cfg = parse("gpu")
    c = prefixcache.shape_capacity(cfg, _shape(cfg, "benchmark"))
    f = c.footprint
    assert (f.shared_blocks, f.live_blocks, f.stale_blocks, f.hit_tokens, f.shared_tokens) == (5, 16, 18, 52_608,
                                                                                               22_784)
    assert (c.hbm_sessions_per_engine, c.hbm_tokens_per_engine) == (6, 201_728)
    h = prefixcache.host_footprint(cfg, _shape(cfg, "benchmark"))
    assert (h.shared_blocks, h.live_blocks, h.stale_blocks) == (5, 9, 31)
    assert (c.host_sessions_per_engine, c.host_tokens_per_engine, c.lru_capacity_per_server) == (19, 589_440, 4_605)
    assert c.sessions_per_replica == 16 * 19


def test_the_rendered_lru_is_the_largest_shape_the_engine_keeps():
    """One LRU serves every shape; a long prompt's blocks must fit it (docs/capacity.md)."""
    for stack in ("gpu", "tpu"):
        cfg = parse(stack)
        each = {s.name: prefixcache.shape_capacity(cfg, s).lru_capacity_per_server
                for s in prefixcache.capacity_shapes(cfg)}
        assert prefixcache.lru_capacity_per_server(cfg) == max(each.values()) > each["benchmark"]


def test_the_rule_is_the_rule_engine_filled_as_the_engine_tier_fills_the_managers():
    """The closed form against the replay's RuleEngine (the engines' managers turn by turn, engine tiers), filled
    with sessions until the first is evicted, on the two cheap GPU shapes; the tiers run every shape."""
    cfg = parse("gpu")
    settings = replay.deployment_for(cfg, host=False).engine
    for name in ("benchmark", "chat"):
        shape = _shape(cfg, name)
        plan = prefixcache.shape_capacity(cfg, shape)
        kept, tokens, _ = sessions_kept(replay.RuleEngine(settings), shape)
        assert (kept, tokens) == (plan.hbm_sessions_per_engine, plan.hbm_tokens_per_engine), name


def test_the_capacity_doc_block_is_generated_from_the_plan():
    """docs/capacity.md "Prefix capacity per session shape" is what `python -m tools replay --write-doc` writes."""
    from pathlib import Path

    from tools.preview import replay as cli

    doc = (Path(__file__).resolve().parents[2] / "docs" / "capacity.md").read_text()
    block = doc.split(cli.CAPACITY_BEGIN, 1)[1].split(cli.CAPACITY_END, 1)[0]
    assert block == "\n" + "\n".join(cli.capacity_blocks([parse("gpu"), parse("tpu")], ["gpu", "tpu"])), \
        "docs/capacity.md's prefix capacity tables are stale: python -m tools replay --stack gpu --stack tpu " \
        "--write-doc docs/capacity.md"

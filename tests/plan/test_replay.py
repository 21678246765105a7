"""components/plan/replay.py: the router's released scoring as the replay restates it (llm-d-router v0.10.0, cited in
the module), the rule engine on the cases the issue names, and the replay's bookkeeping, on small deployments. The
engine-code tier (tests/engine/test_vllm_replay.py) holds the rule engine equal to vLLM's own KVCacheManager and
runs the full shapes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from components.plan import replay
from tests.config.test_config import parse


def _router(endpoints: int = 3, block: int = 64, **kw) -> replay.Router:
    return replay.Router(replay.RouterSettings(block, 1000, 1 << 20, 10_000.0, **kw), endpoints)


def test_router_hashes_count_the_trailing_partial_block():
    """hashing.go L132-146: 130 tokens in 64-token blocks are 3 hashes, the last over 2 tokens; a prompt extending
    another shares the full blocks' hashes only."""
    a = replay.router_hashes(list(range(130)), 64, 100)
    b = replay.router_hashes(list(range(200)), 64, 100)
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]
    assert len(replay.router_hashes(list(range(1000)), 64, 4)) == 4  # maxBlocks (L102-104)


def test_match_counts_every_endpoint_until_no_endpoint_has_the_block():
    """plugin.go L316-332: one walk over the request's hashes, stopping at the first block no endpoint has."""
    index = replay.ApproxPrefixIndex(100)
    index.add([1, 2, 3], 0)
    index.add([1, 9], 1)
    assert index.match([1, 2, 3, 4]) == {0: 3, 1: 1}
    assert index.match([5, 1]) == {}


def test_lru_eviction_forgets_the_endpoint():
    """indexer.go L55-118: an endpoint's LRU holds lruCapacityPerServer hashes; the oldest leaves the reverse map."""
    index = replay.ApproxPrefixIndex(2)
    index.add([1, 2, 3], 0)
    assert index.match([1]) == {} and index.match([2, 3]) == {0: 2}


def test_affinity_sticks_above_the_threshold_and_breaks_on_the_ttft_gate():
    """prefixcacheaffinity/plugin.go L165-211 and token_load.go: a prompt extending one routed before sticks to that
    endpoint even when it is the busiest; past maxTTFTPenaltyMs of extra in-flight work it does not."""
    router = _router(max_ttft_penalty_ms=1000.0)
    first, _, _ = router.route(list(range(640)))
    router.inflight[first.endpoint] = 5_000  # 0.5 s at 10,000 tokens/s: under the penalty
    again, _, _ = router.route(list(range(700)))
    assert again.endpoint == first.endpoint and again.sticky and not again.gate_broken
    router.inflight[first.endpoint] = 20_000  # 2 s: over it
    broken, _, _ = router.route(list(range(760)))
    assert broken.gate_broken and broken.endpoint != first.endpoint


def test_below_the_threshold_the_load_score_still_prefers_the_cached_endpoint():
    """token_load.go L93-130 with producer.go L610-639: the request's own uncached tokens count in each endpoint's
    load, so with equal queues the endpoint holding the prefix scores highest even when no endpoint is sticky."""
    router = _router()
    first, _, _ = router.route(list(range(640)))
    router.release(first.endpoint, 10**9)
    half, _, _ = router.route(list(range(1280)))  # 10 of 20 blocks cached: 0.5 < 0.8
    assert not half.sticky and half.endpoint == first.endpoint


def _gpu_engine(unit: int | None = None) -> replay.RuleEngine:
    cfg = parse("gpu")
    choice = replay.former_choice(cfg)
    if unit:
        choice = replace(choice, hash_unit=unit, router_block=unit)
    return replay.RuleEngine(replay.deployment_for(cfg, choice).engine)


def test_sparse_kda_retention_as_the_issue_measured_it():
    """vLLM 0.33.0 at prefix_cache_retention_interval 0 (its default), 11,392-token blocks: a second session sharing
    the 32,768-token system prompt hits nothing (no KDA state at 22,784), the third 22,784 (the junction the second
    kept); the session's own next turn hits its last prompt floored to the block."""
    engine, ids = _gpu_engine(), iter(range(1 << 20, 1 << 30))
    system = [next(ids) for _ in range(32768)]
    turns = [replay.Tokens(system + [next(ids) for _ in range(2048)]) for _ in range(3)]
    assert [engine.serve(t, [0]) for t in turns] == [0, 0, 22784]
    follow = replay.Tokens(turns[0].ids + [next(ids) for _ in range(2560)])
    assert engine.peek(follow) == 34816 // 11392 * 11392


def test_a_finer_prefix_match_unit_lands_hits_inside_the_block():
    engine, ids = _gpu_engine(128), iter(range(1 << 20, 1 << 30))
    prompt = replay.Tokens([next(ids) for _ in range(34816)])
    engine.serve(prompt, [0])
    assert engine.peek(replay.Tokens(prompt.ids + [next(ids) for _ in range(2560)])) == 34815 // 128 * 128


def test_the_pool_evicts_least_recently_used():
    engine = replay.RuleEngine(replay.EngineSettings(256, 256, 8, 1, 3, 0, False))
    a = replay.Tokens(list(range(1000, 1000 + 513)))  # replay boundary 512: two whole blocks
    b = replay.Tokens(list(range(5000, 5000 + 1024)))
    engine.serve(a, [0])
    assert engine.peek(replay.Tokens(a.ids + [1])) == 512
    engine.serve(b, [0])  # 4 blocks + 3 state blocks: a's oldest entries go
    assert engine.peek(replay.Tokens(a.ids + [1])) == 0
    assert engine.hbm.used <= 8


def test_replay_reports_per_shape_and_the_engine_layout_beats_the_pod_layout_under_load():
    """Eight engines as two 4-engine pods or as eight endpoints, sessions at twice the concurrency the pods take
    without overlap: behind one port the pod's balancer scatters a session's turns (vLLM core_client.py
    L1762-1797), one endpoint per engine keeps them."""
    settings = replay.EngineSettings(1024, 128, 400, 1, 3, 0, False)
    router = replay.RouterSettings(128, 10_000, 1 << 20, 20_000.0, max_ttft_penalty_ms=2000.0)
    pods = replay.Deployment("gpu", ((0, 1, 2, 3), (4, 5, 6, 7)), router, settings, 20_000.0)
    flat = replace(pods, endpoints=tuple((e,) for e in range(8)))
    shape = replay.Shape("s", 16, 16, 4, 0, False, 4096, 1024, 256)
    by_pod = replay.run(pods, [shape]).rows[0]
    by_engine = replay.run(flat, [shape]).rows[0]
    assert by_engine[1] == pytest.approx(1.0) and by_engine[2] > 0.9
    assert by_pod[1] < by_engine[1] and by_pod[2] < by_engine[2]
    assert "on best engine" in replay.run(flat, [shape]).table()


def test_the_stack_shapes_follow_the_benchmark_keys():
    cfg = parse("gpu", benchmark__concurrency=16)
    names = {s.name: s for s in replay.stack_shapes(cfg)}
    assert names["benchmark"].concurrency == 16 and names["benchmark@2x"].concurrency == 32
    assert names["benchmark"].system_tokens == cfg.benchmark.systemPromptTokens
    assert max(names["long"].first_input_spread) + 4 * 4096 <= cfg.context_length


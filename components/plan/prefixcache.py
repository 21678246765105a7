"""What each engine's prefix cache keeps per session shape, as the engines count it: HBM and host-DRAM prefix
capacity, sessions per replica and the router's `lruCapacityPerServer` (docs/capacity.md "Prefix capacity per
session shape"). The engine tiers hold the figures equal to the released managers (tests/engine/
test_vllm_capacity.py, tests/engine_tpu/test_torchtpu_capacity.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config import StackConfig
from ..facts import contract
from . import capacity, engines, kvblocks, parallel, sessions


def chunk_end_states(cfg) -> int | None:
    """EngineSettings.chunk_end_states for the stack's engine: the prefill chunk on vLLM-TorchTPU (vLLM 0.29.0 core,
    `--max-num-batched-tokens`, components/plan/engines.py), None on vLLM 0.33.0."""
    return contract.PREFILL_CHUNK_TOKENS if cfg.track == "tpu" and cfg.tpu.engine == "vllm-torchtpu" else None



@dataclass(frozen=True)
class PrefixFootprint:
    """What one engine keeps cached for a session shape, in the engine's own accounting, under vLLM's default sparse
    KDA retention (`prefix_cache_retention_interval` 0, vllm/config/cache.py): every MLA block the engine computed,
    and a KDA state (one block in each KDA group) only where it is reachable, at each turn's replay boundary and at a
    shared-prefix junction (vllm/v1/core/single_type_kv_cache_manager.py `MambaManager.reachable_block_mask`;
    kv_cache_coordinator.py `replay_boundaries`), with an MLA partial tail block at a boundary inside a block when
    prefixes hash in units finer than the block (`--prefix-match-unit`). The replay's RuleEngine
    (components/plan/replay.py) keeps the same entries; tests/engine/test_vllm_capacity.py and
    tests/engine_tpu/test_torchtpu_capacity.py hold the sessions per engine equal to the released KVCacheManagers.

    In blocks of one engine's pool (HBM) or chunks of its CPU tier (host): a chunk is one block id
    (capacity.host_tier_chunks_per_engine), and the offload stores what the prefix cache keeps: MLA chunks per
    block, KDA chunks per kept boundary (vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py
    `_reachable_store_block_mask` calls the same `reachable_block_mask`; `_build_aligned_boundary_store_jobs`,
    `_build_partial_tail_store_jobs` store a boundary's state and tail)."""

    shape: str
    shared_blocks: int
    """Cached once for every session: the shared system prompt's whole MLA blocks and the KDA state at its junction."""
    live_blocks: int
    """Per session: what its next turn's hit needs or what its last hit touched (its own MLA blocks and partial tails,
    the last two boundaries' states)."""
    stale_blocks: int
    """Per session: KDA states kept at earlier turns' boundaries, which no hit reaches again; the LRU evicts them
    first, as vLLM frees them a turn earlier and no later hit touches them."""
    hit_tokens: int
    """Tokens a kept session's next turn hits: its last prompt, less one, floored to the hash unit."""
    shared_tokens: int
    """Of those, the shared prefix (the junction), counted once per engine."""

    @property
    def session_blocks(self) -> int:
        return self.live_blocks + self.stale_blocks

    def sessions(self, pool_blocks: int) -> int:
        """Sessions an LRU pool of `pool_blocks` keeps whole after serving them one after another: the newest whole,
        the oldest kept one with its stale states gone."""
        room = pool_blocks - self.shared_blocks - self.live_blocks
        return room // self.session_blocks + 1 if room >= 0 else 0

    def tokens(self, sessions: int) -> int:
        """Distinct cached prefix tokens those sessions reuse (the shared prefix once)."""
        return sessions * (self.hit_tokens - self.shared_tokens) + (self.shared_tokens if sessions else 0)


def prefix_footprint(cfg: StackConfig, shape, hash_unit: int | None = None,
                     computes_output: bool | None = None, host: bool = False) -> PrefixFootprint:
    """One engine's cache entries for a session of `shape` (components/plan/sessions.py Shape; its first turn's input
    `first_input_tokens`), served turn after turn. GPU prefill engines compute prompts only (max_tokens 1 in P/D);
    a TPU slice also computes the answer, whose MLA blocks it keeps.

    `host`: what the engine's CPU tier keeps instead (host_footprint)."""
    g, block = capacity.kv_cache_groups(cfg), kvblocks.block_rule(cfg).block_tokens
    chunk = chunk_end_states(cfg)
    unit = hash_unit or engines.prefix_match_unit(cfg)
    output = cfg.track != "gpu" if computes_output is None else computes_output
    per = block // unit
    a, k = g.attention_groups, g.state_groups
    shared = shape.system_shared and shape.system_tokens >= block
    shared_units = (shape.system_tokens // block) * per if shared else 0
    prompt, computed, reach, boundaries = shape.system_tokens + shape.first_input_tokens, 0, 0, []
    junctions, unreachable, block_ends = [], 0, set()
    for turn in range(shape.turns):
        if turn:
            prompt += shape.output_tokens + shape.input_tokens
        hit = max(boundaries + junctions + [shared_units if shared else 0])
        # The MLA group reaches past the hit when whole blocks (here: the answer's, TPU) lie beyond the last state:
        # a junction state at the reach (kv_cache_manager.py, the RuleEngine's `mla_reach > hit`).
        if turn and reach > hit:
            junctions.append(reach)
            hit = reach
        # vLLM 0.29.0 (TPU) keeps a block-aligned prompt's replay state only where a prefill chunk ended
        # (chunk_end_states).
        if chunk is None or prompt % block or (prompt - block - hit * unit) % chunk == 0 \
                or prompt - block <= hit * unit:
            boundaries.append((prompt - 1) // unit)
        else:
            unreachable += 1  # its state block is held, at no position a hit finds
        computed = prompt + (shape.output_tokens - 1 if output else 0)
        reach = (computed // block) * per
        block_ends.add((prompt // block) * per)
    kept = sorted(set(boundaries + junctions) - {0})
    last = max(kept) if kept else 0
    own_blocks = (computed // block - shared_units // per) * a
    shared_blocks = (shared_units // per) * a + (k if shared else 0)
    if host and chunk is None:
        # vLLM 0.33.0's CPU tier also stores each prompt's state at its last whole block (a KDA group's offload
        # window is one chunk), which the next turn's lookup needs under the boundary's tail; earlier tails and
        # states no hit reaches again go first.
        ends = block_ends - set(kept) - {0, shared_units}
        tails = sum(a for b in kept if b % per)
        live = own_blocks + (a if last % per else 0) + k * (1 + (1 if (last // per) * per in ends else 0))
        total = own_blocks + tails + k * (len(kept) + len(ends) + unreachable)
        return PrefixFootprint(shape.name, shared_blocks, live, total - live, last * unit, shared_units * unit)
    # An MLA partial block at each boundary inside a block: below the next hit, so every hit touches it again
    # (the MLA group's hit walks them) and it lives as long as the session.
    tails = sum(a for b in kept if b % per)
    # The last turn's hit also touches the state it hit (the previous boundary's), after the blocks that turn added:
    # that state outlives them, so it counts with the session.
    touched = min(len(kept), 2)
    live = own_blocks + tails + k * touched
    # vLLM 0.29.0's connector stores no state no hit finds (`host`, TPU); its prefix cache holds them as blocks.
    stale = k * (len(kept) - touched + (0 if host else unreachable))
    return PrefixFootprint(shape.name, shared_blocks, live, stale, last * unit, shared_units * unit)


@dataclass(frozen=True)
class ShapeCapacity:
    """Per session shape: what one engine (and one replica, and one router endpoint) keeps in HBM and host DRAM."""

    footprint: PrefixFootprint
    engines_per_replica: int
    router_block: int
    hbm_sessions_per_engine: int
    host_sessions_per_engine: int
    hbm_tokens_per_engine: int
    host_tokens_per_engine: int

    @property
    def sessions_per_replica(self) -> int:
        """Sessions whose next turn hits in HBM or host DRAM (the host tier keeps what HBM evicted)."""
        return self.engines_per_replica * max(self.hbm_sessions_per_engine, self.host_sessions_per_engine)

    @property
    def hbm_tokens_per_replica(self) -> int:
        return self.engines_per_replica * self.hbm_tokens_per_engine

    @property
    def host_tokens_per_replica(self) -> int:
        return self.engines_per_replica * self.host_tokens_per_engine

    @property
    def lru_capacity_per_server(self) -> int:
        """Router blocks one endpoint (one engine) holds across HBM and host DRAM: the host tier's copies cover what
        HBM keeps, so the larger of the two."""
        return max(self.hbm_tokens_per_engine, self.host_tokens_per_engine) // self.router_block


def host_chunks_per_engine(cfg: StackConfig) -> int:
    """Chunks (one block id each) one engine's host tier holds: vLLM's CPU tier on GPU
    (capacity.host_tier_chunks_per_engine); on TPU `cpu_bytes_to_use` over one block id across the engine's TP ranks
    (capacity.tpu_offload_bytes_per_engine)."""
    if cfg.track == "gpu":
        return capacity.host_tier_chunks_per_engine(cfg)
    c = capacity.serving_capacity(cfg)
    ranks = parallel.layout(cfg).tensor_parallel
    return capacity.tpu_offload_bytes_per_engine(cfg) // (c.groups.bytes_per_block * ranks)


def shape_capacity(cfg: StackConfig, shape) -> ShapeCapacity:
    c = capacity.serving_capacity(cfg)
    f, h = prefix_footprint(cfg, shape), host_footprint(cfg, shape)
    hbm, host = f.sessions(c.blocks_per_engine), h.sessions(host_chunks_per_engine(cfg))
    return ShapeCapacity(f, c.kv_groups, engines.prefix_match_unit(cfg), hbm, host, f.tokens(hbm), h.tokens(host))


def host_footprint(cfg: StackConfig, shape) -> PrefixFootprint:
    """What one engine's host tier keeps for a session of `shape`. GPU: vLLM 0.33.0's OffloadingConnector stores
    every whole MLA block, each boundary's partial tail and KDA states (`_build_partial_tail_store_jobs`), and the
    KDA state at each prompt's last whole block (`_build_store_jobs`, an offload window of one chunk:
    offloading/config.py `get_sliding_window_size_in_chunks`); tests/engine/test_vllm_capacity.py holds the sessions
    it keeps equal to the released connector and CPU manager. TPU: what the prefix cache keeps less the KDA states no
    hit finds (`chunk_end_states`), which vLLM 0.29.0's OffloadingConnectorScheduler, the one Raiden's connector
    inherits, does not store; tests/engine_tpu/test_torchtpu_capacity.py holds the sessions equal to that connector
    with vLLM's CPU LRU in the place of Raiden's native store."""
    return prefix_footprint(cfg, shape, host=True)


def router_shape(cfg: StackConfig):
    """The committed benchmark's sessions (`benchmark.*`): the shape the plan summary's cache line reports."""
    return next(s for s in capacity_shapes(cfg) if s.name == "benchmark")


def lru_capacity_per_server(cfg: StackConfig) -> int:
    """`approx-prefix-cache-producer` `lruCapacityPerServer`, a count of blocks of `blockSizeTokens` per endpoint
    (https://github.com/llm-d/llm-d-router/blob/v0.10.0/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/plugin.go):
    the most router blocks one endpoint's engine keeps, in HBM or host DRAM, over the reported session shapes (the
    long sessions'). One LRU serves every shape: below a long prompt's blocks the router's walk stops at the first
    block it evicted and never matches that session again (approximateprefix/indexer.go), while above what the
    engine keeps for short sessions it only predicts hits the engine has evicted, which the session replay counts
    (it runs with this value)."""
    c = capacity.serving_capacity(cfg)
    per_endpoint = max(c.kv_groups // c.endpoints_per_replica, 1)  # engines behind one endpoint (TPU dp-across-hosts)
    return per_endpoint * max(shape_capacity(cfg, s).lru_capacity_per_server for s in capacity_shapes(cfg))


def capacity_shapes(cfg: StackConfig) -> list:
    """The session shapes capacity is reported for: the replay's at the benchmark's concurrency, the long shape
    split by document size (components/plan/sessions.py stack_shapes)."""
    out = []
    for shape in sessions.stack_shapes(cfg):
        if "@" in shape.name:
            continue
        if shape.first_input_spread:
            out += [replace(shape, name=f"{shape.name} {n // 1000}K", first_input_tokens=n, first_input_spread=())
                    for n in shape.first_input_spread]
        else:
            out.append(shape)
    return out


def table(cfg: StackConfig) -> str:
    """Every reported shape's figures for one stack (docs/capacity.md, generated by `python -m tools replay
    --write-doc`; tests/plan/test_prefixcache.py holds the doc to it)."""
    rows = [f"{'shape':<12} {'session blocks':>14} {'HBM sessions':>13} {'HBM tokens':>12} {'host sessions':>14} "
            f"{'host tokens':>12} {'per replica':>12} {'router blocks':>14}"]
    for shape in capacity_shapes(cfg):
        c = shape_capacity(cfg, shape)
        f = c.footprint
        rows.append(f"{shape.name:<12} {f'{f.live_blocks}+{f.stale_blocks}':>14} {c.hbm_sessions_per_engine:>13,} "
                    f"{c.hbm_tokens_per_engine:>12,} {c.host_sessions_per_engine:>14,} {c.host_tokens_per_engine:>12,} "
                    f"{c.sessions_per_replica:>12,} {c.lru_capacity_per_server:>14,}")
    return "\n".join(rows)

"""Session replay: where the router sends each turn of a session, and what the engine it lands on has cached.

Replays session shapes (the committed benchmark, agentic sessions, long single sessions, short chat) through a
Python restatement of the llm-d router's released scoring and through an engine cache (a rule here, or the engine's
own `KVCacheManager` in the engine-code tier, which drives the same replay), and reports per shape the share of
turns 2..N routed to the engine holding the longest cached prefix and the hit tokens against the ideal.

No Pulumi here: plain inputs in (`Deployment`, `Shape`), a `Report` out. `deployment_for` builds the inputs from a
stack's typed config.

The router (llm-d-router v0.10.0, tag object 0b43c18, commit 71f4f09; paths under pkg/epp/framework/plugins/):
- block hashes: requestcontrol/dataproducer/prefixhash/hashing.go L60-117 (one chained hash per block of
  `blockSizeTokens` tokens, the trailing partial block included, L132-146; at most maxBlocks, L102-104);
- prefix match: requestcontrol/dataproducer/approximateprefix/plugin.go L228-254 (`Produce`: match, total),
  L316-332 (`matchLongestPrefix`: walk the request's hashes, stop at the first no endpoint has, count per
  endpoint), L258-288 (`PreRequest`: the picked endpoint's LRU records the request's hashes), L359-375
  (`resolveMaxBlocks`); approximateprefix/indexer.go L55-86 (one LRU per endpoint of `lruCapacityPerServer`
  entries; an eviction drops the endpoint from that hash, L108-118);
- affinity: scheduling/filter/prefixcacheaffinity/plugin.go L165-211 (sticky = matched/total >= threshold, 0.80
  by default L93-101; none sticky keeps all; if the best sticky endpoint's TTFT estimate exceeds the best
  non-sticky one's by more than maxTTFTPenaltyMs, 18000 by default, keeps all), L256-265 (TTFT estimate = in-flight
  tokens / peakPrefillThroughput x 1000);
- load: scheduling/scorer/tokenload/token_load.go L93-130 (score = 1 - min(in-flight + this request's uncached
  tokens, queueThresholdTokens) / queueThresholdTokens, threshold 4194304 L34);
  requestcontrol/dataproducer/inflightload/producer.go L393-460 (the picked endpoint gains the request's uncached
  tokens), L610-639 (uncached = (total - matched) x block + the tail past the indexed blocks), L511-526 (released
  at the first response chunk when output tokens are not estimated, the default L73-75);
- pick: scheduling/picker/maxscore/picker.go L87-115 (highest score, ties broken by a shuffle: a seeded one here).

The engine behind a GPU endpoint: with `--data-parallel-hybrid-lb` one API server fronts a pod's engines and picks
one by load alone (vLLM 0.33.0 vllm/v1/engine/core_client.py L1751-1800, `DPLBAsyncMPClient
.get_core_engine_for_request`: least waiting + running, starting from a rotating index); with
`--data-parallel-multi-port-external-lb` each engine is its own endpoint.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .sessions import Shape, shapes, stack_shapes  # noqa: F401 (the replay's shapes, re-exported)

# --------------------------------------------------------------------------- router defaults (v0.10.0)
AFFINITY_THRESHOLD = 0.80
"""prefixcacheaffinity/plugin.go L93-101 `DefaultConfig.AffinityThreshold`."""
MAX_TTFT_PENALTY_MS = 18000.0
"""prefixcacheaffinity/plugin.go L93-101 `DefaultConfig.MaxTTFTPenaltyMs`."""
QUEUE_THRESHOLD_TOKENS = 4194304
"""tokenload/token_load.go L34 `tokenQueueThresholdDefault`."""
MIN_BLOCK_TOKENS = 64
"""approximateprefix/plugin.go L52 `minBlockSizeTokens`: a smaller configured block is raised to it (L344-357)."""


# --------------------------------------------------------------------------- requests
class Tokens:
    """A prompt's token ids with its chained prefix hashes per unit, computed once and shared by every engine."""

    def __init__(self, ids: list[int]):
        self.ids = ids
        self._chains: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def chain(self, unit: int) -> list[int]:
        """h[k] = hash of the first (k + 1) x unit tokens (full units only)."""
        if unit not in self._chains:
            ids, out, prev = self.ids, [], 0
            for end in range(unit, len(ids) + 1, unit):
                prev = hash((prev, tuple(ids[end - unit:end])))
                out.append(prev)
            self._chains[unit] = out
        return self._chains[unit]


def router_hashes(tokens: Sequence[int], block: int, max_blocks: int) -> list[int]:
    """prefixhash/hashing.go L88-146: one chained hash per block, the trailing partial block included."""
    out, prev = [], hash("kimi")  # the model name seeds the chain (L94); one model here
    for start in range(0, len(tokens), block):
        if len(out) >= max_blocks:
            break
        prev = hash((prev, tuple(tokens[start:start + block])))
        out.append(prev)
    return out


# --------------------------------------------------------------------------- engines
class EngineCache(Protocol):
    """One engine's prefix cache. `peek` is the hit a prompt would get now; `serve` runs a request through it
    (lookup, compute, cache) and returns the hit tokens the engine counted."""

    def peek(self, prompt: Tokens) -> int: ...

    def serve(self, prompt: Tokens, output: list[int]) -> int: ...


@dataclass(frozen=True)
class EngineSettings:
    block_tokens: int
    """The engine's KV block (components/plan/kvblocks.py)."""
    hash_unit: int
    """Where a hit can land: vLLM's hash block (`--prefix-match-unit`, else the block;
    vllm/v1/core/kv_cache_utils.py `resolve_kv_cache_block_sizes`)."""
    pool_blocks: int
    """Usable blocks of one engine's pool (the null block excluded)."""
    attention_groups: int
    state_groups: int
    retention_interval: int | None
    """`prefix_cache_retention_interval`: 0 keeps KDA states only at replay boundaries and shared-prefix junctions,
    None at every block (vllm/config/cache.py; vllm/v1/core/single_type_kv_cache_manager.py
    `MambaManager.reachable_block_mask`)."""
    computes_output: bool
    """Whether the engine also generates (TPU) or only prefills (a GPU prefill engine: max_tokens 1)."""
    chunk_end_states: int | None = None
    """vLLM 0.29.0 (the core vLLM-TorchTPU ships): KDA states are written at prefill chunk ends only, so a prompt of
    a whole number of blocks keeps a findable replay-boundary state (one block before its end) only where a chunk of
    this many tokens, counted from the hit, ended; the state's block is held all the same
    (vllm/v1/core/sched/scheduler.py `_mamba_block_aligned_split`: chunk ends are block-aligned, the prompt's last
    chunk exempt; tests/engine_tpu/test_torchtpu_replay.py holds the rule equal to that manager). None: vLLM 0.33.0,
    whose scheduler stops a chunk at the replay boundary (kv_cache_coordinator.py `replay_boundaries`)."""

    host_chunks: int = 0
    """Chunks of the engine's host-DRAM tier, one block id each (components/plan/capacity.py
    host_chunks_per_engine); 0: HBM only."""
    block_end_states: bool = False
    """vLLM 0.33.0 (GPU): a request also leaves the KDA state at the end of its last whole block cached, in HBM (the
    released KVCacheManager hashes it; tests/engine/test_vllm_replay.py) and in the CPU tier (a KDA group's offload
    window is one chunk: offloading/config.py `get_sliding_window_size_in_chunks`, scheduler.py `_build_store_jobs`),
    whose lookup needs it under a boundary's partial tail (`_lookup`); and it frees each KDA group's state block on
    its own, KDA groups before the MLA group, each tail first (single_type_kv_cache_manager.py `free`)."""

    def keeps_replay_state(self, prompt_tokens: int, hit: int) -> bool:
        """Whether serving a prompt from `hit` leaves a KDA state at its replay boundary."""
        if self.chunk_end_states is None or prompt_tokens % self.block_tokens:
            return True
        boundary = prompt_tokens - self.block_tokens
        return boundary <= hit or (boundary - hit) % self.chunk_end_states == 0


class RuleEngine:
    """The vLLM 0.33.0 hybrid prefix cache as a rule, which tests/engine/test_vllm_replay.py holds equal to the
    released KVCacheManager on the replayed shapes (and tests/engine_tpu/test_torchtpu_replay.py to vLLM-TorchTPU's,
    with `chunk_end_states`):

    - a hit lands on a multiple of the hash unit, at most the prompt length - 1 (kv_cache_manager.py
      `get_computed_blocks`), where the MLA group holds every block below it (a partial tail block when the unit is
      finer than the block) and a KDA group holds the state at exactly that position (MambaManager
      `find_longest_cache_hit`);
    - KDA states are kept at the replay boundary (prompt length - 1, floored to the unit;
      kv_cache_coordinator.py `replay_boundaries`), at a shared-prefix junction (where the MLA hit ran past the
      last state, kv_cache_manager.py L319-326), and with retention None at every block;
    - a cached MLA block costs one pool block per attention group, a kept state one per KDA group; the least
      recently used go first when the pool is full.

    With `host_chunks`, a host-DRAM tier beside it: the CPU offload stores what the prefix cache keeps, in chunks of
    one block id (an MLA chunk per block, the KDA groups' chunks per kept boundary, a boundary's partial tail;
    vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py `_build_store_jobs` filters by the same
    `reachable_block_mask`, `_build_partial_tail_store_jobs`), in an LRU of its own (vllm/v1/kv_offload/cpu/
    policies); a request takes the longer of the two tiers' hits, and what it loads from host DRAM is in HBM
    afterwards. On GPU both tiers also keep each request's state at its last whole block, and HBM's LRU follows
    vLLM 0.33.0's free order (`block_end_states`). tests/engine/test_vllm_replay.py compares the replay's figures
    with the released OffloadingConnector and CPU manager (tests/engine/host_tier.py)."""

    def __init__(self, settings: EngineSettings):
        self.s = settings
        # vLLM 0.33.0 (block_end_states) frees and evicts each KDA group's state block on its own: one entry per
        # group; otherwise one entry for the groups' states together.
        self.state_kinds = tuple(f"s{g}" for g in range(settings.state_groups)) if settings.block_end_states \
            else ("s",)
        self.state_cost = 1 if settings.block_end_states else settings.state_groups
        # One LRU over everything cached, as vLLM's free-block queue is: ("m", h) an MLA block (a full block's end
        # or a partial tail), ("s", h) a kept KDA state, ("x", h) a state no hit finds, by the prefix hash at its
        # position.
        self.hbm = _Tier(settings.pool_blocks)
        self.host = _Tier(settings.host_chunks) if settings.host_chunks else None
        self.host_hit_tokens = 0
        """Hit tokens served from host DRAM beyond what HBM had."""

    @property
    def lru(self) -> OrderedDict[tuple[str, int], int]:
        return self.hbm.lru

    def _hit(self, prompt: Tokens, tier: _Tier) -> tuple[int, int]:
        """(hit tokens, how far the MLA group alone reaches) in one tier."""
        s, n = self.s, len(prompt)
        chain = prompt.chain(s.hash_unit)
        reach = self._mla_reach(chain, tier)
        for units in range(min(reach, (n - 1) // s.hash_unit), 0, -1):
            if self._has_state(tier, chain[units - 1]) and self._mla_covers(chain, units, tier):
                return units * s.hash_unit, reach * s.hash_unit
        return 0, reach * s.hash_unit

    def _has_state(self, tier: _Tier, key: int) -> bool:
        return all((kind, key) in tier.lru for kind in self.state_kinds)

    def _states(self, key: int) -> list[tuple[str, int, int]]:
        return [(kind, key, self.state_cost) for kind in self.state_kinds]

    def _mla_reach(self, chain: list[int], tier: _Tier) -> int:
        """Units from the start the MLA group holds: whole blocks, then a partial tail inside the next block."""
        per = self.s.block_tokens // self.s.hash_unit
        b = 0
        while (b + 1) * per <= len(chain) and ("m", chain[(b + 1) * per - 1]) in tier.lru:
            b += 1
        for units in range(min(len(chain), (b + 1) * per - 1), b * per, -1):
            if ("m", chain[units - 1]) in tier.lru:
                return units
        return b * per

    def _mla_covers(self, chain: list[int], units: int, tier: _Tier) -> bool:
        per_block = self.s.block_tokens // self.s.hash_unit
        full = units // per_block
        if any(("m", chain[b * per_block + per_block - 1]) not in tier.lru for b in range(full)):
            return False
        return units % per_block == 0 or ("m", chain[units - 1]) in tier.lru

    def peek(self, prompt: Tokens) -> int:
        hit = self._hit(prompt, self.hbm)[0]
        return max(hit, self._hit(prompt, self.host)[0]) if self.host else hit

    def serve(self, prompt: Tokens, output: list[int]) -> int:
        s = self.s
        hit, mla_reach = self._hit(prompt, self.hbm)
        loaded = 0
        if self.host:
            host_hit, host_reach = self._hit(prompt, self.host)
            if host_hit > hit:
                self.host_hit_tokens += host_hit - hit
                self.host.touch(prompt.chain(s.hash_unit), host_hit // s.hash_unit, self.state_kinds)
                hit, mla_reach, loaded = host_hit, max(mla_reach, host_reach), host_hit
        seq = Tokens(prompt.ids + output[:-1]) if s.computes_output and output else prompt
        chain = seq.chain(s.hash_unit)
        per_block = s.block_tokens // s.hash_unit
        computed_units = len(seq) // s.hash_unit
        entries = [("m", chain[b * per_block + per_block - 1], s.attention_groups)
                   for b in range(computed_units // per_block)]
        end = (computed_units // per_block) * per_block
        if s.block_end_states and end:
            entries += self._states(chain[end - 1])
        boundaries = {(len(prompt) - 1) // s.hash_unit}
        if not s.keeps_replay_state(len(prompt), hit):
            # The state block is still held and cached, at no position a later hit finds.
            entries.append(("x", chain[(len(prompt) - 1) // s.hash_unit - 1], s.state_groups))
            boundaries = set()
        if mla_reach > hit:
            boundaries.add(mla_reach // s.hash_unit)
        if s.retention_interval is None:
            boundaries |= {b * per_block for b in range(1, computed_units // per_block + 1)}
        elif s.retention_interval:
            step = s.retention_interval // s.hash_unit
            boundaries |= set(range(step, computed_units + 1, step))
        for units in sorted(boundaries):
            if units <= 0 or units > computed_units:
                continue
            if units % per_block:
                entries.append(("m", chain[units - 1], s.attention_groups))  # the partial tail block
            entries += self._states(chain[units - 1])
        for entry in entries:
            self.hbm.add(entry)
        if self.host:
            skipped = set()
            if s.block_end_states and loaded % s.block_tokens:
                # vLLM 0.33.0 resumes storing after a load at the block past the loaded tail (scheduler.py
                # `update_state_after_alloc`: next_stored_chunk_idx = cdiv(cached tokens, chunk)): the block that
                # held the tail, and its end state unless a boundary keeps it, stay out of host DRAM.
                edge = -(-loaded // s.block_tokens) * per_block
                skipped = {("m", chain[edge - 1])} if edge <= len(chain) else set()
                if edge not in boundaries and edge <= len(chain):
                    skipped |= {(kind, chain[edge - 1]) for kind in self.state_kinds}
            for kind, key, cost in entries:
                # A state no hit finds is not stored (vLLM 0.29.0's connector, components/plan/prefixcache.py
                # host_footprint).
                if (kind, key) not in skipped and kind != "x":
                    self.host.add((kind, key, cost))
        if s.block_end_states:
            # What the request held goes back to the LRU in vLLM 0.33.0's free order: each KDA group's states, then
            # the MLA blocks, each tail first; a hit's partial tail block was copied, not held.
            states = {hit // s.hash_unit, end} | {u for u in boundaries if 0 < u <= computed_units}
            mla = {(b + 1) * per_block for b in range(computed_units // per_block)}
            mla |= {u for u in boundaries if 0 < u <= computed_units and u % per_block}
            self.hbm.refresh([(kind, chain[u - 1]) for kind in self.state_kinds
                              for u in sorted(states - {0}, reverse=True)]
                             + [("m", chain[u - 1]) for u in sorted(mla, reverse=True)])
        elif hit:
            self.hbm.touch(prompt.chain(s.hash_unit), hit // s.hash_unit)
        return hit


class _Tier:
    """One LRU of cache entries ((kind, prefix hash) -> the blocks or chunks it costs) within a capacity."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.lru: OrderedDict[tuple[str, int], int] = OrderedDict()
        self.used = 0

    def add(self, entry: tuple[str, int, int]) -> None:
        kind, key, cost = entry
        if (kind, key) in self.lru:
            self.lru.move_to_end((kind, key))
            return
        self.lru[(kind, key)] = cost
        self.used += cost
        while self.used > self.capacity and self.lru:
            _, freed = self.lru.popitem(last=False)
            self.used -= freed

    def refresh(self, keys: list[tuple[str, int]]) -> None:
        """These entries, where cached, become the most recent, the last one most."""
        for key in keys:
            if key in self.lru:
                self.lru.move_to_end(key)

    def touch(self, chain: list[int], units: int, state_kinds: tuple[str, ...] = ("s",)) -> None:
        """A hit at `units`: its MLA entries, then the state it hit, become the most recent."""
        for key in chain[:units]:
            if ("m", key) in self.lru:
                self.lru.move_to_end(("m", key))
        self.refresh([(kind, chain[units - 1]) for kind in state_kinds])


# --------------------------------------------------------------------------- router
@dataclass(frozen=True)
class RouterSettings:
    block_tokens: int
    lru_capacity_per_server: int
    max_prefix_tokens: int
    peak_prefill_throughput: float
    affinity_threshold: float = AFFINITY_THRESHOLD
    max_ttft_penalty_ms: float = MAX_TTFT_PENALTY_MS
    queue_threshold_tokens: int = QUEUE_THRESHOLD_TOKENS

    @property
    def block(self) -> int:
        return max(self.block_tokens, MIN_BLOCK_TOKENS)

    @property
    def max_blocks(self) -> int:
        return self.max_prefix_tokens // self.block  # plugin.go L367-375


class ApproxPrefixIndex:
    """approximateprefix/indexer.go: per-endpoint LRU of block hashes and the reverse map."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.lru: dict[int, OrderedDict[int, None]] = {}
        self.pods: dict[int, set[int]] = {}

    def add(self, hashes: list[int], endpoint: int) -> None:
        lru = self.lru.setdefault(endpoint, OrderedDict())
        for h in hashes:  # L73-75: each Add may evict the oldest
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
                if len(lru) > self.capacity:
                    old, _ = lru.popitem(last=False)
                    pods = self.pods.get(old)
                    if pods is not None:
                        pods.discard(endpoint)
                        if not pods:
                            del self.pods[old]
            self.pods.setdefault(h, set()).add(endpoint)

    def match(self, hashes: list[int]) -> dict[int, int]:
        """plugin.go L316-332."""
        res: dict[int, int] = {}
        for h in hashes:
            servers = self.pods.get(h)
            if not servers:
                break
            for server in servers:
                res[server] = res.get(server, 0) + 1
        return res


@dataclass
class Decision:
    endpoint: int
    sticky: bool
    gate_broken: bool
    matched: int
    total: int


class Router:
    """The prefill profile of components/router/router.py's EndpointPickerConfig: prefix-cache-affinity-filter, then
    token-load-scorer and the max-score picker, over the approx-prefix-cache-producer and inflight-load-producer."""

    def __init__(self, settings: RouterSettings, endpoints: int, seed: int = 0):
        self.s = settings
        self.endpoints = endpoints
        self.index = ApproxPrefixIndex(settings.lru_capacity_per_server)
        self.inflight = [0] * endpoints
        self.rng = random.Random(seed)

    def route(self, prompt: Sequence[int]) -> tuple[Decision, list[int], int]:
        s = self.s
        hashes = router_hashes(prompt, s.block, s.max_blocks)
        total = len(hashes)
        matches = self.index.match(hashes)
        score = [matches.get(e, 0) / total if total else 0.0 for e in range(self.endpoints)]
        candidates = list(range(self.endpoints))
        sticky = [e for e in candidates if score[e] >= s.affinity_threshold]
        kept, gate_broken = candidates, False
        if sticky and self.endpoints > 1:
            others = [e for e in candidates if score[e] < s.affinity_threshold]
            kept = sticky
            if s.max_ttft_penalty_ms > 0 and others:
                ttft = lambda e: self.inflight[e] / s.peak_prefill_throughput * 1000  # noqa: E731
                if min(map(ttft, sticky)) - min(map(ttft, others)) > s.max_ttft_penalty_ms:
                    kept, gate_broken = candidates, True
        uncached = {e: self._uncached(len(prompt), matches.get(e, 0), total) for e in kept}
        load = {e: 1.0 - min(self.inflight[e] + uncached[e], s.queue_threshold_tokens) / s.queue_threshold_tokens
                for e in kept}
        order = list(kept)
        self.rng.shuffle(order)
        best = max(order, key=lambda e: load[e])  # the first of the highest after the shuffle
        self.index.add(hashes, best)
        self.inflight[best] += uncached[best]
        return (Decision(best, bool(sticky) and not gate_broken, gate_broken, matches.get(best, 0), total),
                hashes, uncached[best])

    def _uncached(self, prompt_tokens: int, matched: int, total: int) -> int:
        """inflightload/producer.go L610-639."""
        block = self.s.block
        indexed = total * block
        return max(indexed - matched * block, 0) + max(prompt_tokens - indexed, 0)

    def release(self, endpoint: int, tokens: int) -> None:
        self.inflight[endpoint] = max(self.inflight[endpoint] - tokens, 0)


# --------------------------------------------------------------------------- deployment and replay
@dataclass(frozen=True)
class Deployment:
    """What the replay needs of a stack."""

    track: str
    endpoints: tuple[tuple[int, ...], ...]
    """Engines behind each router endpoint: one each, or a GPU pod's data-parallel engines."""
    router: RouterSettings
    engine: EngineSettings
    prefill_tokens_per_s: float
    """One engine's prefill rate in the replay's clock (the router's peakPrefillThroughput: the calibration it
    assumes)."""
    seconds_per_output_token: float = 0.02
    """Pacing of generation in the replay's clock (ASSUMED: it only spaces a session's turns)."""
    pacing_jitter: float = 0.25
    """Each answer's pace varies by up to this share (seeded), so sessions do not march in lockstep."""

    @property
    def engines(self) -> int:
        return sum(len(e) for e in self.endpoints)


@dataclass
class TurnRecord:
    session: int
    turn: int
    engine: int
    hit: int
    best: int
    ideal: int
    prompt: int
    sticky: bool
    gate_broken: bool
    ttft_s: float
    host: int = 0
    """Of `hit`, the tokens served from host DRAM beyond what HBM had."""


@dataclass
class ShapeResult:
    shape: Shape
    records: list[TurnRecord] = field(default_factory=list)

    def _later(self) -> list[TurnRecord]:
        return [r for r in self.records if r.turn >= 1]

    @property
    def on_best_share(self) -> float:
        """Turns 2..N that landed on an engine whose hit equals the longest any engine could give."""
        later = self._later()
        return sum(r.hit >= r.best for r in later) / len(later) if later else 1.0

    @property
    def hit_share(self) -> float:
        """Hit tokens of turns 2..N over the ideal (the previous turn's prompt and answer: every reusable token)."""
        later = self._later()
        ideal = sum(r.ideal for r in later)
        return sum(r.hit for r in later) / ideal if ideal else 1.0

    @property
    def host_share(self) -> float:
        """Hit tokens of turns 2..N served from host DRAM (what HBM had evicted), over all their hit tokens."""
        later = self._later()
        hits = sum(r.hit for r in later)
        return sum(r.host for r in later) / hits if hits else 0.0

    @property
    def gate_broken_share(self) -> float:
        later = self._later()
        return sum(r.gate_broken for r in later) / len(later) if later else 0.0

    @property
    def ttft_p95_s(self) -> float:
        ttfts = sorted(r.ttft_s for r in self.records)
        return ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))] if ttfts else 0.0


class _Ids:
    def __init__(self) -> None:
        self.next = 1 << 20

    def take(self, n: int) -> list[int]:
        start, self.next = self.next, self.next + n
        return list(range(start, start + n))


def replay(deployment: Deployment, shape: Shape, engines: Sequence[EngineCache], seed: int = 0) -> ShapeResult:
    """Closed-loop replay in a simulated clock: routing at arrival, one prefill queue per engine at
    `prefill_tokens_per_s` on its uncached tokens, the router's in-flight tokens released at the first token."""
    router = Router(deployment.router, len(deployment.endpoints), seed)
    pacing = random.Random(seed + 1)
    engine_of = [list(e) for e in deployment.endpoints]
    busy_until = [0.0] * deployment.engines
    running = [0] * deployment.engines  # requests an engine has not finished (the DP balancer's count)
    ids = _Ids()
    system_shared = ids.take(shape.system_tokens)
    result = ShapeResult(shape)
    histories: dict[int, list[int]] = {}
    events: list[tuple[float, int, str, tuple]] = []
    seq = 0

    def push(t: float, kind: str, payload: tuple) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, payload))

    for slot in range(min(shape.concurrency, shape.sessions)):
        push(0.0, "turn", (slot, 0))
    while events:
        t, _, kind, payload = heapq.heappop(events)
        if kind == "release":
            endpoint, tokens = payload
            router.release(endpoint, tokens)
            continue
        if kind == "free":
            running[payload[0]] -= 1
            continue
        if kind == "done":
            session, turn = payload
            if turn + 1 < shape.turns:
                push(t, "turn", (session, turn + 1))
            elif session + shape.concurrency < shape.sessions:
                push(t, "turn", (session + shape.concurrency, 0))
            continue
        session, turn = payload
        if turn == 0:
            system = system_shared if shape.system_shared else ids.take(shape.system_tokens)
            history, new = list(system), ids.take(shape.first_input(session))
            ideal = shape.system_tokens if shape.system_shared and session > 0 else 0
        else:
            history = histories[session]
            new = ids.take(shape.input_tokens)
            ideal = len(history)
        prompt = Tokens(history + new)
        output = ids.take(shape.output_tokens)
        histories[session] = prompt.ids + output
        decision, _, uncached_estimate = router.route(prompt.ids)
        members = engine_of[decision.endpoint]
        if len(members) == 1:
            engine = members[0]
        else:  # core_client.py L1762-1797: the first engine, in rank order, with the fewest requests in flight
            engine = min(members, key=lambda e: running[e])
        best = max(cache.peek(prompt) for cache in engines)
        from_host = getattr(engines[engine], "host_hit_tokens", 0)
        hit = engines[engine].serve(prompt, output)
        from_host = getattr(engines[engine], "host_hit_tokens", 0) - from_host
        begin = max(t, busy_until[engine])
        first_token = begin + (len(prompt) - hit) / deployment.prefill_tokens_per_s
        busy_until[engine] = first_token
        running[engine] += 1
        push(first_token, "release", (decision.endpoint, uncached_estimate))
        pace = deployment.seconds_per_output_token * (1 + deployment.pacing_jitter * (2 * pacing.random() - 1))
        finished = first_token + shape.output_tokens * pace
        # A prefill-only engine (GPU P/D) is done with the request at its first token; the session's next turn
        # waits for the decode side.
        push(finished if deployment.engine.computes_output else first_token, "free", (engine,))
        push(finished, "done", (session, turn))
        result.records.append(TurnRecord(session, turn, engine, hit, best, min(ideal, len(prompt) - 1),
                                         len(prompt), decision.sticky, decision.gate_broken, first_token - t,
                                         from_host))
    return result


@dataclass(frozen=True)
class Report:
    track: str
    rows: tuple[tuple[str, float, float, float, float, float], ...]
    """(shape, on-best share, hit share, gate-broken share, TTFT p95 s, share of the hits from host DRAM)."""

    def table(self) -> str:
        lines = [f"{'shape':<16} {'on best engine':>15} {'hit / ideal':>12} {'from host':>10} {'gate broken':>12} "
                 f"{'TTFT p95 s':>11}"]
        for name, on_best, hits, broken, ttft, host in self.rows:
            lines.append(f"{name:<16} {on_best:>14.1%} {hits:>12.1%} {host:>10.1%} {broken:>12.1%} {ttft:>11.1f}")
        return "\n".join(lines)


def run(deployment: Deployment, shape_list: Sequence[Shape], make_engine=None, seed: int = 0) -> Report:
    """Every shape on fresh engines (RuleEngine unless `make_engine(engine_index)` gives another cache)."""
    rows = []
    for shape in shape_list:
        factory = make_engine or (lambda _i: RuleEngine(deployment.engine))
        engines = [factory(i) for i in range(deployment.engines)]
        r = replay(deployment, shape, engines, seed)
        rows.append((shape.name, r.on_best_share, r.hit_share, r.gate_broken_share, r.ttft_p95_s, r.host_share))
    return Report(deployment.track, tuple(rows))


# --------------------------------------------------------------------------- from a stack
@dataclass(frozen=True)
class RoutingChoice:
    """The knobs the replay compares: how router endpoints map to engines, where prefix hits land, the router's block
    and the affinity filter's TTFT penalty."""

    layout: str
    """"engine": one router endpoint per engine (`--data-parallel-multi-port-external-lb`, one InferencePool
    target port per engine); "pod": a pod's data-parallel engines behind one port (`--data-parallel-hybrid-lb`)."""
    hash_unit: int
    """Engine hit granularity: vLLM's `--prefix-match-unit` (the block when unset)."""
    router_block: int
    """The approximate producer's `blockSizeTokens`."""
    retention: int | None
    """vLLM's `prefix_cache_retention_interval` (0, its default: sparse KDA states)."""
    penalty_ms: float
    """The affinity filter's `maxTTFTPenaltyMs`."""


TTFT_PENALTY_MS = 2000.0
"""The affinity filter's `maxTTFTPenaltyMs` the router renders (components/router/router.py). A shared 32K system
prompt makes every new session sticky to the endpoint that saw it first (GPU at 128-token router blocks; TPU at
1,024); at the default 18 s the gate lets that endpoint queue 18 s of prefill before spilling, and its pool evicts
the sessions it holds (replayed: GPU agentic 44 % of ideal hits and TTFT p95 143 s; TPU agentic 83 % on
vLLM-TorchTPU's own manager). At 2 s the spill starts early and sessions stay put afterwards."""

def rendered_choice(cfg) -> RoutingChoice:
    """What the stack renders (components/plan/engines.py, components/router/router.py): one endpoint per engine,
    hits and router blocks in the engines' prefix unit, the 2 s TTFT penalty."""
    from . import engines

    unit = engines.prefix_match_unit(cfg)
    return RoutingChoice("engine", unit, unit, 0, TTFT_PENALTY_MS)


def former_choice(cfg) -> RoutingChoice:
    """What the stack rendered before the replay (kept to show why it changed): on GPU a pod's engines behind one
    port (`--data-parallel-hybrid-lb`), hits and router blocks on whole blocks, the filter's default 18 s."""
    from . import kvblocks

    block = kvblocks.block_rule(cfg).block_tokens
    return RoutingChoice("pod" if cfg.track == "gpu" else "engine", block, block, 0, MAX_TTFT_PENALTY_MS)


def deployment_for(cfg, choice: RoutingChoice | None = None, lru_capacity: int | None = None,
                   threshold: float | None = None, host: bool = True) -> Deployment:
    """The replay's inputs from a stack's typed config (components.config StackConfig) under `choice` (the
    rendered one by default): the prefill engines the router picks from (GPU: every prefill group's data-parallel
    engines; TPU: one engine per slice), grouped into router endpoints, and the router and engine settings."""
    from . import capacity as cap
    from . import prefixcache
    from .engines import prefix_match_unit

    choice = choice or rendered_choice(cfg)
    c = cap.serving_capacity(cfg)
    # The rendered lruCapacityPerServer (per engine, in the rendered router block), in this choice's block and
    # endpoints.
    rendered_lru, rendered_unit = prefixcache.lru_capacity_per_server(cfg), prefix_match_unit(cfg)
    rendered_per_endpoint = max(c.kv_groups // c.endpoints_per_replica, 1)
    block = c.block_tokens
    if cfg.track == "gpu":
        pods = cfg.gpu.slices * cfg.gpu.prefillGroups * cfg.gpu.prefillNodesPerGroup
        per_pod = c.kv_groups // cfg.gpu.prefillNodesPerGroup
    else:  # one engine per slice, or (tpu.launch=dp-across-hosts) a slice's engines behind its leader's API server
        pods, per_pod = cfg.tpu.slices, c.kv_groups
    engines = pods * per_pod
    if choice.layout == "pod" or c.endpoints_per_replica < c.kv_groups:
        endpoints = tuple(tuple(range(p * per_pod, (p + 1) * per_pod)) for p in range(pods))
    else:
        endpoints = tuple((e,) for e in range(engines))
    router = RouterSettings(block_tokens=choice.router_block,
                            lru_capacity_per_server=lru_capacity or rendered_lru * rendered_unit
                            * (engines // len(endpoints)) // rendered_per_endpoint // choice.router_block,
                            max_prefix_tokens=cfg.context_length,
                            peak_prefill_throughput=float(cap.peak_prefill_throughput(cfg)),
                            affinity_threshold=AFFINITY_THRESHOLD if threshold is None else threshold,
                            max_ttft_penalty_ms=choice.penalty_ms)
    g = c.groups
    engine = EngineSettings(block_tokens=block, hash_unit=choice.hash_unit, pool_blocks=c.blocks_per_engine,
                            host_chunks=prefixcache.host_chunks_per_engine(cfg) if host else 0,
                            block_end_states=cfg.track == "gpu",
                            attention_groups=g.attention_groups, state_groups=g.state_groups,
                            retention_interval=choice.retention, computes_output=cfg.track != "gpu",
                            chunk_end_states=prefixcache.chunk_end_states(cfg))
    return Deployment(cfg.track, endpoints, router, engine,
                      prefill_tokens_per_s=float(cap.peak_prefill_throughput(cfg)))

"""Session shapes: the workloads the session replay (components/plan/replay.py) routes and the prefix-cache model
(components/plan/prefixcache.py) sizes, from the committed benchmark's keys. No Pulumi, no other plan module."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Shape:
    """A closed-loop session workload: `concurrency` slots, each running its sessions one after another, each turn
    sent when the previous one finished (inference-perf's conversation replay does the same)."""

    name: str
    sessions: int
    concurrency: int
    turns: int
    system_tokens: int
    system_shared: bool
    first_input_tokens: int
    input_tokens: int
    output_tokens: int
    description: str = ""
    first_input_spread: tuple[int, ...] = ()
    """Per-session first-turn sizes, cycled (long sessions); empty: `first_input_tokens` for all."""

    def first_input(self, session: int) -> int:
        spread = self.first_input_spread
        return spread[session % len(spread)] if spread else self.first_input_tokens

    def scaled(self, factor: int) -> Shape:
        """The same sessions at `factor` x the concurrency (and as many more sessions)."""
        return replace(self, name=f"{self.name}@{factor}x", sessions=self.sessions * factor,
                       concurrency=self.concurrency * factor)


def shapes(benchmark_sessions: int, benchmark_concurrency: int, turns: int, system_tokens: int, input_tokens: int,
           output_tokens: int, context_length: int) -> list[Shape]:
    """The shapes docs/capacity.md reports, from the committed benchmark's keys (`benchmark.*`)."""
    bench = Shape("benchmark", benchmark_sessions, benchmark_concurrency, turns, system_tokens, True, input_tokens,
                  input_tokens, output_tokens, "the committed benchmark: one shared system prompt, fixed turns")
    agentic = Shape("agentic", benchmark_sessions, benchmark_concurrency, 16, 32768, True, 2048, 4096, 256,
                    "shared 32K system prompt, a 2K task, then tool turns: 256 generated (a tool call), 4K of tool "
                    "result back")
    # The longest document a 4-turn session fits in the served context, in whole thousands (as a document's length
    # is, not a whole number of KV blocks); the 200K and 500K documents where they fit under it
    top = (min(context_length, 1_048_576) - 8 * 4096) // 1000 * 1000
    long = Shape("long", max(8, benchmark_concurrency // 4), max(4, benchmark_concurrency // 8), 4, 2048, True,
                 200_000, 2048, 1024, "single long sessions: a 200K-1M document, then follow-up turns",
                 first_input_spread=tuple(n for n in (200_000, 500_000) if n < top) + (top,))
    chat = Shape("chat", benchmark_sessions, benchmark_concurrency, 6, 256, True, 200, 200, 150,
                 "short chat: a 256-token system prompt, 200-token turns, 150-token answers")
    return [bench, bench.scaled(2), agentic, agentic.scaled(2), long, chat]


def stack_shapes(cfg) -> list[Shape]:
    b = cfg.benchmark
    return shapes(b.conversations, b.concurrency, b.turnsPerConversation, b.systemPromptTokens,
                  b.inputTokensPerTurn, b.outputTokensPerTurn, cfg.context_length)

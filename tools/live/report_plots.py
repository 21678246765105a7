"""PNG plots of the benchmark report (`python -m tools report`), drawn with matplotlib's Agg backend (no display
needed). Each function draws one figure for one or two runs; a run without the data a plot needs is left out of it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen before pyplot loads)
from matplotlib.ticker import MaxNLocator  # noqa: E402

from tools.live.report_runs import QUANTILES, Request, Run, by_turn, percentile, windows  # noqa: E402

COLORS = ("tab:blue", "tab:orange")
STYLES = {50: "-", 90: "--", 99: ":"}
LATENCY_PANELS: tuple[tuple[str, Callable[[Request], float | None]], ...] = (
    ("time to first token", lambda r: r.ttft),
    ("inter-token latency (request mean)", lambda r: r.itl),
    ("end-to-end latency", lambda r: r.e2e),
)


def _ms(values: list[float | None]) -> list[float | None]:
    return [None if v is None else v * 1000 for v in values]


def _save(fig: plt.Figure, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=100)
    plt.close(fig)
    return name


def _latency_figure(runs: Sequence[Run], groups_of: Callable[[Run], list[tuple[float, list[Request]]]],
                    xlabel: str, title: str) -> plt.Figure:
    """TTFT, ITL and end-to-end percentiles, one panel each, of requests grouped by `groups_of` (x, requests)."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, (label, value) in zip(axes, LATENCY_PANELS, strict=True):
        for color, run in zip(COLORS, runs, strict=False):
            groups = groups_of(run)
            for q in QUANTILES:
                ys = _ms([percentile([v for r in g if (v := value(r)) is not None], q) for _, g in groups])
                ax.plot([x for x, _ in groups], ys, STYLES[q], color=color, marker="o", markersize=3,
                        label=f"{run.name} p{q}")
        ax.set_title(label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("ms")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    return fig


def latency_over_run(runs: Sequence[Run], out: Path) -> str | None:
    if not any(windows(r.requests) for r in runs):
        return None
    fig = _latency_figure(runs, lambda run: [(x, g) for x, _, g in windows(run.requests)],
                          "seconds since the run started",
                          "Latency percentiles over the run (requests grouped by completion time)")
    return _save(fig, out, "latency-over-run.png")


def latency_by_turn(runs: Sequence[Run], out: Path) -> str | None:
    if not any(by_turn(r.requests) for r in runs):
        return None
    fig = _latency_figure(runs, lambda run: [(float(t), g) for t, g in by_turn(run.requests).items()],
                          "conversation turn", "Latency percentiles by conversation turn")
    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return _save(fig, out, "latency-by-turn.png")


def throughput(runs: Sequence[Run], out: Path) -> str | None:
    if not any(windows(r.requests) for r in runs):
        return None
    fig, (tokens, requests) = plt.subplots(1, 2, figsize=(12, 4.5))
    for color, run in zip(COLORS, runs, strict=False):
        groups = windows(run.requests)
        if not groups:
            continue
        xs = [x for x, _, _ in groups]
        tokens.plot(xs, [sum(r.output_tokens for r in g) / width for _, width, g in groups], color=color,
                    marker="o", markersize=3, label=f"{run.name} (per window)")
        summary = run.throughput("output_tokens_per_sec")
        if summary:
            tokens.axhline(summary, color=color, linestyle="--", alpha=0.6, label=f"{run.name} whole run")
        requests.plot(xs, [len(g) / width for _, width, g in groups], color=color, marker="o", markersize=3,
                      label=run.name)
    tokens.set_title("output tokens per second")
    requests.set_title("requests completed per second")
    for ax in (tokens, requests):
        ax.set_xlabel("seconds since the run started")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_ylim(bottom=0)
    fig.suptitle("Throughput over the run")
    return _save(fig, out, "throughput.png")


def prefix_cache(runs: Sequence[Run], out: Path) -> str | None:
    """Cached share of prompt tokens per turn (from response usage), and hit rate per tier when scraped."""
    has_usage = any(r.cached_tokens is not None for run in runs for r in run.requests)
    has_tiers = any(run.tier_hits for run in runs)
    if not has_usage and not has_tiers:
        return None
    fig, (per_turn, tiers) = plt.subplots(1, 2, figsize=(12, 4.5))
    for color, run in zip(COLORS, runs, strict=False):
        turns = by_turn(run.requests)
        xs, ys = [], []
        for turn, reqs in turns.items():
            counted = [r for r in reqs if r.cached_tokens is not None]
            prompt = sum(r.prompt_tokens for r in counted)
            if prompt:
                xs.append(turn)
                ys.append(100 * sum(r.cached_tokens or 0 for r in counted) / prompt)
        per_turn.plot(xs, ys, color=color, marker="o", markersize=3, label=run.name)
    per_turn.set_title("cached share of prompt tokens by turn (all tiers, from usage)")
    per_turn.set_xlabel("conversation turn")
    per_turn.xaxis.set_major_locator(MaxNLocator(integer=True))
    per_turn.set_ylabel("%")
    per_turn.set_ylim(0, 100)
    per_turn.grid(alpha=0.3)
    per_turn.legend(fontsize=8)
    labels = sorted({tier for run in runs for tier in run.tier_hits})
    if labels:
        width = 0.8 / len(runs)
        for i, (color, run) in enumerate(zip(COLORS, runs, strict=False)):
            tiers.bar([j + i * width for j in range(len(labels))], [run.tier_hits.get(t, 0) for t in labels],
                      width, color=color, label=run.name)
        tiers.set_xticks([j + width * (len(runs) - 1) / 2 for j in range(len(labels))], labels, fontsize=8)
        tiers.set_ylabel("hit rate, %")
        tiers.legend(fontsize=8)
    else:
        tiers.text(0.5, 0.5, "hits by tier not scraped\n(no summary_prometheus_metrics report)", ha="center",
                   va="center", transform=tiers.transAxes)
        tiers.set_xticks([])
        tiers.set_yticks([])
    tiers.set_title("prefix-cache hit rate by tier (engine metrics)")
    fig.suptitle("Prefix cache")
    return _save(fig, out, "prefix-cache.png")


PLOTS: tuple[tuple[Callable[[Sequence[Run], Path], str | None], str], ...] = (
    (latency_over_run, "Latency percentiles over the run"),
    (latency_by_turn, "Latency percentiles by conversation turn"),
    (throughput, "Throughput over the run"),
    (prefix_cache, "Prefix cache"),
)


def draw(runs: Sequence[Run], out: Path) -> list[tuple[str, str]]:
    """Every plot the runs have data for: (file name in `out`, caption)."""
    drawn = []
    for plot, caption in PLOTS:
        if (name := plot(runs, out)) is not None:
            drawn.append((name, caption))
    return drawn

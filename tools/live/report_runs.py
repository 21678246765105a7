"""The benchmark run model shared by the report and its plots: inference-perf's reports of one run, loaded
and summarized (percentiles, time windows, conversation turns). Kept apart so `report` and `report_plots`
both import it and not each other."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUMMARY = "summary_lifecycle_metrics.json"
PER_REQUEST = "per_request_lifecycle_metrics.json"
PROMETHEUS = "summary_prometheus_metrics.json"
QUANTILES = (50, 90, 99)
REPORT = "report.md"


class ReportError(Exception):
    """The folder holds no inference-perf report this tool can read."""


@dataclass(frozen=True)
class Request:
    start: float
    end: float
    ok: bool
    ttft: float | None = None
    itl: float | None = None
    """Mean inter-token latency of the request."""
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    """Prompt tokens the server reported as served from its prefix cache (usage.prompt_tokens_details)."""
    turn: int | None = None
    session: str | None = None

    @property
    def e2e(self) -> float:
        return self.end - self.start


@dataclass
class Run:
    name: str
    folder: Path
    summary: dict[str, Any]
    requests: list[Request] = field(default_factory=list)
    prometheus: dict[str, Any] | None = None
    hourly_usd: float | None = None
    hourly_complete: bool = True

    # ----------------------------------------------------------------------------- whole-run figures
    def latency(self, metric: str, stat: str) -> float | None:
        """`metric` of inference-perf's summary (time_to_first_token, inter_token_latency, request_latency)."""
        values = self.summary.get("successes", {}).get("latency", {}).get(metric) or {}
        value = values.get("median" if stat == "p50" else stat)
        return float(value) if isinstance(value, int | float) else None

    def throughput(self, key: str) -> float | None:
        value = self.summary.get("successes", {}).get("throughput", {}).get(key)
        return float(value) if isinstance(value, int | float) else None

    @property
    def successes(self) -> int:
        return int(self.summary.get("successes", {}).get("count") or 0)

    @property
    def failures(self) -> int:
        return int(self.summary.get("failures", {}).get("count") or 0)

    @property
    def duration_s(self) -> float | None:
        if self.requests:
            return max(r.end for r in self.requests) - min(r.start for r in self.requests)
        value = self.summary.get("benchmark_time_seconds")
        return float(value) if isinstance(value, int | float) else None

    @property
    def cached_share(self) -> float | None:
        """Share of prompt tokens the engines reported as cached (all tiers), from response usage."""
        prompt = self.summary.get("successes", {}).get("prompt_tokens") or {}
        total, cached = prompt.get("total"), prompt.get("cached")
        if isinstance(total, int | float) and isinstance(cached, int | float) and total > 0:
            return cached / total
        return None

    @property
    def tier_hits(self) -> dict[str, float]:
        """Prefix-cache hit percent per tier when inference-perf scraped the engines: HBM (the engines' local
        prefix cache) and connector (on GPU prefill engines, the host-DRAM offload tier)."""
        if not self.prometheus:
            return {}
        found = {}
        for label, key in (("HBM (local prefix cache)", "prefix_cache_hit_percent"),
                           ("connector (host DRAM on prefill)", "external_prefix_cache_hit_percent")):
            value = (self.prometheus.get("successes", {}).get(key) or {}).get("mean")
            if isinstance(value, int | float):
                found[label] = float(value)
        return found

    @property
    def cost_per_million_output(self) -> float | None:
        tps = self.throughput("output_tokens_per_sec")
        if not self.hourly_usd or not tps:
            return None
        from components.plan.cost import cost_per_million_tokens  # noqa: PLC0415 - components.plan.cost imports pulumi (0.3 s)

        return cost_per_million_tokens(self.hourly_usd, tps)


# --------------------------------------------------------------------------------------------- loading
def _find(folder: Path, suffix: str) -> Path | None:
    found = sorted(p for p in folder.rglob(f"*{suffix}") if p.is_file() and "compare-" not in p.parent.name)
    return found[0] if found else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_request(entry: dict[str, Any]) -> Request | None:
    start, end = _number(entry.get("start_time")), _number(entry.get("end_time"))
    if start is None or end is None:
        return None
    info = entry.get("info") or {}
    response = info.get("response_metrics") or {}
    extra = info.get("extra_info") or {}
    usage = response.get("server_usage") or {}
    computed = entry.get("computed_metrics") or {}
    ttft, itl = _number(computed.get("time_to_first_token")), _number(computed.get("inter_token_latency"))
    times = [t for t in response.get("output_token_times") or [] if isinstance(t, int | float)]
    if ttft is None and times:
        ttft = times[0] - start
    if itl is None and len(times) > 1:
        itl = (times[-1] - times[0]) / (len(times) - 1)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    prompt = ((info.get("request_metrics") or {}).get("text") or {}).get("input_tokens") or usage.get("prompt_tokens")
    turn = extra.get("chat_round")
    return Request(
        start=start, end=end, ok=entry.get("error") is None, ttft=ttft, itl=itl,
        output_tokens=int(_number(response.get("output_tokens")) or _number(usage.get("completion_tokens")) or 0),
        prompt_tokens=int(_number(prompt) or 0),
        cached_tokens=int(cached) if isinstance(cached, int | float) else None,
        turn=int(turn) if isinstance(turn, int | float) else None,
        session=extra.get("user_session"),
    )


def load_run(folder: Path, hourly_usd: float | None = None) -> Run:
    folder = Path(folder)
    summary_path = _find(folder, SUMMARY)
    if summary_path is None:
        raise ReportError(f"{folder}: no inference-perf *{SUMMARY} below it (is this a benchmark run folder?)")
    run = Run(folder.name, folder, json.loads(summary_path.read_text()))
    if (per_request := _find(folder, PER_REQUEST)) is not None:
        entries = json.loads(per_request.read_text())
        run.requests = [r for r in map(parse_request, entries if isinstance(entries, list) else []) if r]
    if (prometheus := _find(folder, PROMETHEUS)) is not None:
        run.prometheus = json.loads(prometheus.read_text())
    outputs = folder / "outputs.json"
    if hourly_usd is not None:
        run.hourly_usd = hourly_usd
    elif outputs.is_file():
        stack = json.loads(outputs.read_text())
        run.hourly_usd = _number(stack.get("hourlyCostUsd"))
        run.hourly_complete = bool(stack.get("hourlyCostComplete", True))
    return run


# --------------------------------------------------------------------------------------------- statistics
def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), `q` in percent."""
    ordered = sorted(v for v in values if v is not None and math.isfinite(v))
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def windows(requests: Sequence[Request], count: int = 12) -> list[tuple[float, float, list[Request]]]:
    """Successful requests grouped by completion time into equal windows: (midpoint s, width s, requests)."""
    done = [r for r in requests if r.ok]
    if not done:
        return []
    t0 = min(r.start for r in done)
    span = max(r.end for r in done) - t0 or 1.0
    count = max(1, min(count, len(done) // 3 or 1))
    width = span / count
    groups: list[list[Request]] = [[] for _ in range(count)]
    for r in done:
        groups[min(count - 1, int((r.end - t0) / width))].append(r)
    return [((i + 0.5) * width, width, g) for i, g in enumerate(groups) if g]


def by_turn(requests: Iterable[Request]) -> dict[int, list[Request]]:
    turns: dict[int, list[Request]] = {}
    for r in requests:
        if r.ok and r.turn is not None:
            turns.setdefault(r.turn, []).append(r)
    return dict(sorted(turns.items()))

"""What the smoke check (`tools.live.smoke`) reads from metrics: the one table of metric names per track, a
Prometheus text parser, metrics URLs tagged by role, and the pure before/after comparison of a check."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from components.facts import metrics

TRACKS = ("gpu", "tpu")
ROLES = ("engine", "prefill", "decode", "router")
DEFAULT_ROLE = "engine"


# --------------------------------------------------------------------------- the metric table
@dataclass(frozen=True)
class Selector:
    """One candidate series: a metric name, labels that must be equal, labels that must be absent."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()
    without: tuple[str, ...] = ()

    def matches(self, sample: Sample) -> bool:
        if sample.name != self.name:
            return False
        if any(sample.labels.get(key) != value for key, value in self.labels):
            return False
        return not any(key in sample.labels for key in self.without)

    def __str__(self) -> str:
        parts = [f'{key}="{value}"' for key, value in self.labels] + [f"!{key}" for key in self.without]
        return f"{self.name}{{{','.join(parts)}}}" if parts else self.name


@dataclass(frozen=True)
class MetricCheck:
    """A health fact: which counter, scraped from which roles, must have grown during the long-prompt step."""

    what: str
    roles: tuple[str, ...]
    candidates: tuple[Selector, ...]  # the first one with a matching series is used (the engine's spelling)
    source: str
    cumulative_ok: bool = False  # a non-zero total since start also passes, unless --strict


# Every metric name below comes from components/facts/metrics.py (`require` fails at import for an unlisted name),
# where each one is checked against the pinned engine release with its source. Candidates are tried in order:
# the first with a matching series is used. Reading GPU prefill connector hits as "host DRAM" is an inference:
# prefill pods receive no NIXL KV in llm-d P/D, so their connector loads come from the OffloadingConnector.
def _vllm(name: str, **labels: str) -> Selector:
    return Selector(metrics.require(name, "vllm"), labels=tuple(labels.items()))


def _tpu_vllm(name: str, **labels: str) -> Selector:
    return Selector(metrics.require(name, "vllm-torchtpu"), labels=tuple(labels.items()))


def _sglang(name: str, **labels: str) -> Selector:
    return Selector(metrics.require(name, "sglang"), labels=tuple(labels.items()))


METRIC_CHECKS: dict[str, dict[str, MetricCheck]] = {
    "gpu": {
        "prefill-requests": MetricCheck(
            what="prefill engines finished requests",
            roles=("prefill",),
            candidates=(_vllm("vllm:request_success_total"),),
            source="llm-d P/D guide verify step (prefill port 8000); components/facts/metrics.py",
        ),
        "hbm-prefix-hits": MetricCheck(
            what="prefix-cache hits in HBM (vLLM local prefix cache)",
            roles=("prefill", "decode", "engine"),
            candidates=(_vllm("vllm:prefix_cache_hits_total"),),
            source="components/facts/metrics.py",
        ),
        "host-dram-prefix-hits": MetricCheck(
            what="prefix-cache hits served from host DRAM (OffloadingConnector loads on prefill)",
            roles=("prefill",),
            candidates=(_vllm("vllm:kv_offload_load_bytes_total"), _vllm("vllm:external_prefix_cache_hits_total")),
            source="components/facts/metrics.py; prefill-side connector hits as host DRAM is INFERRED (see above)",
            cumulative_ok=True,
        ),
        "pd-router-decisions": MetricCheck(
            what="router sent requests prefill -> decode",
            roles=("router",),
            candidates=(Selector(metrics.require("llm_d_epp_disagg_decision_total", "epp"),
                                 labels=(("decision_type", "prefill-decode"),)),),
            source="llm-d P/D guide verify step (EPP port 9090); components/facts/metrics.py",
        ),
        "pd-kv-transfer": MetricCheck(
            what="decode engine received the prompt's KV from prefill (NIXL)",
            roles=("decode",),
            candidates=(_vllm("vllm:external_prefix_cache_hits_total"),),
            source="llm-d P/D guide verify step (decode port 8200, about the prompt length); "
                   "components/facts/metrics.py",
        ),
    },
    "tpu": {
        "engine-requests": MetricCheck(
            what="TPU engines finished requests",
            roles=("engine", "prefill", "decode"),
            candidates=(_tpu_vllm("vllm:request_success_total"), _sglang("sglang:num_requests_total")),
            source="components/facts/metrics.py",
        ),
        "hbm-prefix-hits": MetricCheck(
            what="prefix-cache hits in HBM",
            roles=("engine", "prefill", "decode"),
            candidates=(
                _tpu_vllm("vllm:prefix_cache_hits_total"),
                _sglang("sglang:cached_tokens_total", cache_source="device"),
                # SGLang labels the hits `total` when the scheduler sent no device/host breakdown.
                _sglang("sglang:cached_tokens_total", cache_source="total"),
            ),
            source="components/facts/metrics.py",
        ),
        "host-dram-prefix-hits": MetricCheck(
            what="prefix-cache hits served from host DRAM (TPURaidenOffloadingConnector; SGLang HiCache)",
            roles=("engine", "prefill", "decode"),
            candidates=(
                _tpu_vllm("vllm:kv_offload_load_bytes_total"),
                _tpu_vllm("vllm:external_prefix_cache_hits_total"),
                _sglang("sglang:cached_tokens_total", cache_source="host"),
                _sglang("sglang:load_back_tokens_total"),
            ),
            source="components/facts/metrics.py",
            cumulative_ok=True,
        ),
    },
}

ENGINES: dict[str, tuple[metrics.Exporter, ...]] = {"gpu": ("vllm",), "tpu": ("vllm-torchtpu", "sglang")}
"""Which engine serves each track: the first is the default (tpu.engine=vllm-torchtpu; sglang for a
user-supplied SGLang-TorchTPU build). Checks an engine has no metric for (metrics.GAPS) report SKIP."""


def all_check_names() -> list[str]:
    """Every check name the CLI can print, for `--skip`."""
    names = ["completions", "chat-completions", "long-prompt", "metrics-scrape"]
    for checks in METRIC_CHECKS.values():
        names += [name for name in checks if name not in names]
    return names


# --------------------------------------------------------------------------- Prometheus text format
@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


class MetricsParseError(ValueError):
    """The text is not in the Prometheus exposition format."""


_METRIC_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def parse_prometheus(text: str) -> list[Sample]:
    """Parse `name{label="value",...} value [timestamp]` lines; comments and blank lines are skipped."""
    samples = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            samples.append(_parse_sample(line, number))
    return samples


def _parse_sample(line: str, number: int) -> Sample:
    match = _METRIC_NAME.match(line)
    if not match:
        raise MetricsParseError(f"line {number}: expected a metric name: {snippet(line)}")
    pos = match.end()
    labels: dict[str, str] = {}
    if line.startswith("{", pos):
        labels, pos = _parse_labels(line, pos + 1, number)
    rest = line[pos:]
    fields = rest.split()
    if not rest[:1].isspace() or not 1 <= len(fields) <= 2:
        raise MetricsParseError(f"line {number}: expected `name{{labels}} value [timestamp]`: {snippet(line)}")
    return Sample(match.group(), labels, _parse_float(fields[0], number, line))


def _parse_labels(line: str, pos: int, number: int) -> tuple[dict[str, str], int]:
    labels: dict[str, str] = {}
    while True:
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if line.startswith("}", pos):
            return labels, pos + 1
        name = _LABEL_NAME.match(line, pos)
        if not name or not line.startswith('="', name.end()):
            raise MetricsParseError(f"line {number}: bad label at column {pos + 1}: {snippet(line)}")
        pos = name.end() + 2
        value = []
        while True:
            if pos >= len(line):
                raise MetricsParseError(f"line {number}: unterminated label value: {snippet(line)}")
            char = line[pos]
            if char == "\\" and pos + 1 < len(line):
                value.append(_ESCAPES.get(line[pos + 1], "\\" + line[pos + 1]))
                pos += 2
            elif char == '"':
                pos += 1
                break
            else:
                value.append(char)
                pos += 1
        labels[name.group()] = "".join(value)
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if line.startswith(",", pos):
            pos += 1
        elif not line.startswith("}", pos):
            raise MetricsParseError(f"line {number}: expected `,` or `}}` at column {pos + 1}: {snippet(line)}")


def _parse_float(token: str, number: int, line: str) -> float:
    try:
        return float(token)  # also takes NaN, +Inf, -Inf
    except ValueError:
        raise MetricsParseError(f"line {number}: bad sample value {token!r}: {snippet(line)}") from None


def sum_selector(samples: Iterable[Sample], selector: Selector) -> float | None:
    """Sum of the matching series (NaN values count as 0); None when no series matches."""
    found = False
    total = 0.0
    for sample in samples:
        if selector.matches(sample):
            found = True
            if not math.isnan(sample.value):
                total += sample.value
    return total if found else None


# --------------------------------------------------------------------------- metrics targets and evaluation
@dataclass(frozen=True)
class MetricsTarget:
    role: str
    url: str

    def __str__(self) -> str:
        return f"{self.role}={self.url}"


def parse_metrics_target(spec: str) -> MetricsTarget:
    """`prefill=http://...` -> role prefill; a spec without a known role prefix is an `engine` URL."""
    role, sep, url = spec.partition("=")
    if sep and role in ROLES:
        if not url:
            raise ValueError(f"--metrics-url {spec!r}: missing URL after `{role}=`")
        return MetricsTarget(role, url)
    return MetricsTarget(DEFAULT_ROLE, spec)


Snapshot = dict[int, list[Sample]]  # target index -> samples; a target that could not be scraped is absent


@dataclass(frozen=True)
class Outcome:
    check: str
    status: str  # PASS, FAIL or SKIP
    detail: str

    @property
    def line(self) -> str:
        return f"{self.status} {self.check}: {self.detail}"


def evaluate_metric_check(name: str, check: MetricCheck, targets: Sequence[MetricsTarget], before: Snapshot,
                          after: Snapshot, strict: bool = False, engine: str | None = None) -> Outcome:
    """Compare one counter between two scrapes of the check's roles (pure). A metric the serving `engine`
    is known not to export (components/facts/metrics.py GAPS) is a SKIP with the reason, not a FAIL forever."""
    roles = "/".join(check.roles)
    indexes = [i for i, target in enumerate(targets) if target.role in check.roles]
    if not indexes:
        return Outcome(name, "FAIL", f"no --metrics-url with role {' or '.join(check.roles)} "
                                     f"(pass e.g. {check.roles[0]}=http://127.0.0.1:PORT/metrics)")
    usable = [i for i in indexes if i in before and i in after]
    if not usable:
        return Outcome(name, "FAIL", f"no {roles} metrics URL could be scraped twice (see metrics-scrape)")
    where = f"{len(usable)} {roles} URL(s)"
    for selector in check.candidates:
        now = [sum_selector(after[i], selector) for i in usable]
        if all(value is None for value in now):
            continue
        total_after = sum(value or 0.0 for value in now)
        total_before = sum(sum_selector(before[i], selector) or 0.0 for i in usable)
        delta = total_after - total_before
        if delta > 0:
            return Outcome(name, "PASS", f"{selector} +{delta:g} during the long-prompt step "
                                         f"(total {total_after:g}, {where})")
        if delta < 0:
            return Outcome(name, "FAIL", f"{selector} went down {total_before:g} -> {total_after:g} "
                                         f"(engine restarted?) ({where})")
        if check.cumulative_ok and not strict and total_after > 0:
            return Outcome(name, "PASS", f"{selector} did not grow during this run but is {total_after:g} since "
                                         f"start (the repeated prompt was still in HBM) ({where})")
        return Outcome(name, "FAIL", f"{selector} did not increase after the repeated long prompt "
                                     f"(stays {total_after:g}, {where})")
    names = ", ".join(str(selector) for selector in check.candidates)
    missing = metrics.gap(name, engine) if engine else None
    if missing:
        return Outcome(name, "SKIP", f"{engine} exports no equivalent of {names} ({missing.reason}; "
                                     "components/facts/metrics.py GAPS)")
    return Outcome(name, "FAIL", f"metric missing: none of {names} found at {where}")


def snippet(text: str, limit: int = 160) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."

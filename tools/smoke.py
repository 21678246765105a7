"""Smoke check of a deployed guide (issue 7): end-to-end generation, then the seed's health facts from metrics.

    python -m tools.smoke --endpoint http://127.0.0.1:8080 --track gpu --model moonshotai/Kimi-K3.1-Pro \\
        --metrics-url prefill=URL --metrics-url decode=URL --metrics-url router=URL

Steps:
1. generation: POST /v1/completions (and /v1/chat/completions) with a short prompt; expect HTTP 200 JSON with a
   non-empty first choice and the requested model name. Connection errors, timeouts, HTTP 408/425/429/5xx and
   malformed JSON are retried with exponential backoff until the step's deadline.
2. long prompt: scrape every metrics URL (baseline), then send one deterministic long prompt (a few thousand
   tokens) twice.
3. metrics: scrape again (polling until the checks pass or the metrics wait runs out) and compare with the
   baseline: prefix-cache hits in HBM and in host DRAM, and on GPU that the router took prefill -> decode
   decisions and the decode engine received KV. `METRIC_CHECKS` says which; the names and their sources
   are in components/metrics.py. A metric the engine is known not to export is a SKIP with the reason.

Metrics URLs are tagged with the role of what they scrape: `prefill=`, `decode=`, `router=` or `engine=`
(an untagged URL is `engine`). Counters are summed over label sets and over every URL of the check's roles.
Each check prints `PASS <check>: ...`, `FAIL <check>: ...` or `SKIP <check>: ...`, then one `SUMMARY` line;
the exit code is 0 only when every check that ran passed and none was left out because an earlier step failed.

Only the given endpoint and metrics URLs are contacted; proxy settings from the environment are ignored.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import requests

from components import catalog, contract, metrics

TRACKS = ("gpu", "tpu")
ROLES = ("engine", "prefill", "decode", "router")
DEFAULT_ROLE = "engine"

# The guides' own smoke request (https://github.com/llm-d/llm-d/blob/main/guides/wide-ep/guide.yaml).
SHORT_PROMPT = "How are you today?"
SHORT_MAX_TOKENS = 16
CHAT_MAX_TOKENS = 64  # room for a reasoning parser to hand back visible text
LONG_MAX_TOKENS = 8
LONG_PROMPT_WORDS = 3000  # about 4,000 tokens with a BPE tokenizer

RETRY_STATUSES = frozenset({408, 425, 429})  # plus every 5xx
BACKOFF_FACTOR = 2.0
BACKOFF_CAP_SECONDS = 15.0


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


# Every metric name below comes from components/metrics.py (`require` fails at import for an unlisted name),
# where each one is checked against the pinned engine release with its source. Candidates are tried in order:
# the first with a matching series is used. Reading GPU prefill connector hits as "host DRAM" is an inference:
# prefill pods receive no NIXL KV in llm-d P/D, so their connector loads come from the OffloadingConnector.
def _vllm(name: str, **labels: str) -> Selector:
    return Selector(metrics.require(name, "vllm"), labels=tuple(labels.items()))


def _sglang(name: str, **labels: str) -> Selector:
    return Selector(metrics.require(name, "sglang"), labels=tuple(labels.items()))


METRIC_CHECKS: dict[str, dict[str, MetricCheck]] = {
    "gpu": {
        "prefill-requests": MetricCheck(
            what="prefill engines finished requests",
            roles=("prefill",),
            candidates=(_vllm("vllm:request_success_total"),),
            source="llm-d P/D guide verify step (prefill port 8000); components/metrics.py",
        ),
        "hbm-prefix-hits": MetricCheck(
            what="prefix-cache hits in HBM (vLLM local prefix cache)",
            roles=("prefill", "decode", "engine"),
            candidates=(_vllm("vllm:prefix_cache_hits_total"),),
            source="components/metrics.py",
        ),
        "host-dram-prefix-hits": MetricCheck(
            what="prefix-cache hits served from host DRAM (OffloadingConnector loads on prefill)",
            roles=("prefill",),
            candidates=(_vllm("vllm:kv_offload_load_bytes_total"), _vllm("vllm:external_prefix_cache_hits_total")),
            source="components/metrics.py; prefill-side connector hits as host DRAM is INFERRED (see above)",
            cumulative_ok=True,
        ),
        "pd-router-decisions": MetricCheck(
            what="router sent requests prefill -> decode",
            roles=("router",),
            candidates=(Selector(metrics.require("llm_d_epp_disagg_decision_total", "epp"),
                                 labels=(("decision_type", "prefill-decode"),)),),
            source="llm-d P/D guide verify step (EPP port 9090); components/metrics.py",
        ),
        "pd-kv-transfer": MetricCheck(
            what="decode engine received the prompt's KV from prefill (NIXL)",
            roles=("decode",),
            candidates=(_vllm("vllm:external_prefix_cache_hits_total"),),
            source="llm-d P/D guide verify step (decode port 8200, about the prompt length); components/metrics.py",
        ),
    },
    "tpu": {
        "engine-requests": MetricCheck(
            what="SGLang engines finished requests",
            roles=("engine", "prefill", "decode"),
            candidates=(_sglang("sglang:num_requests_total"),),
            source="components/metrics.py",
        ),
        "hbm-prefix-hits": MetricCheck(
            what="prefix-cache hits in HBM (radix cache on device)",
            roles=("engine", "prefill", "decode"),
            candidates=(
                _sglang("sglang:cached_tokens_total", cache_source="device"),
                # SGLang labels the hits `total` when the scheduler sent no device/host breakdown.
                _sglang("sglang:cached_tokens_total", cache_source="total"),
            ),
            source="components/metrics.py",
        ),
        "host-dram-prefix-hits": MetricCheck(
            what="prefix-cache hits served from host DRAM (HiCache)",
            roles=("engine", "prefill", "decode"),
            candidates=(
                _sglang("sglang:cached_tokens_total", cache_source="host"),
                _sglang("sglang:load_back_tokens_total"),
            ),
            source="components/metrics.py",
            cumulative_ok=True,
        ),
    },
}

ENGINES: dict[str, tuple[metrics.Exporter, ...]] = {"gpu": ("vllm",), "tpu": ("sglang-jax", "sglang")}
"""Which engine serves each track: the first is the default (tpu.engineProfile=release runs sglang-jax,
day0 runs the day-0 SGLang build). Checks an engine has no metric for (metrics.GAPS) report SKIP."""


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
        raise MetricsParseError(f"line {number}: expected a metric name: {_snippet(line)}")
    pos = match.end()
    labels: dict[str, str] = {}
    if line.startswith("{", pos):
        labels, pos = _parse_labels(line, pos + 1, number)
    rest = line[pos:]
    fields = rest.split()
    if not rest[:1].isspace() or not 1 <= len(fields) <= 2:
        raise MetricsParseError(f"line {number}: expected `name{{labels}} value [timestamp]`: {_snippet(line)}")
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
            raise MetricsParseError(f"line {number}: bad label at column {pos + 1}: {_snippet(line)}")
        pos = name.end() + 2
        value = []
        while True:
            if pos >= len(line):
                raise MetricsParseError(f"line {number}: unterminated label value: {_snippet(line)}")
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
            raise MetricsParseError(f"line {number}: expected `,` or `}}` at column {pos + 1}: {_snippet(line)}")


def _parse_float(token: str, number: int, line: str) -> float:
    try:
        return float(token)  # also takes NaN, +Inf, -Inf
    except ValueError:
        raise MetricsParseError(f"line {number}: bad sample value {token!r}: {_snippet(line)}") from None


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
    is known not to export (components/metrics.py GAPS) is a SKIP with the reason, not a FAIL forever."""
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
                                     "components/metrics.py GAPS)")
    return Outcome(name, "FAIL", f"metric missing: none of {names} found at {where}")


# --------------------------------------------------------------------------- OpenAI-compatible API
class StepError(Exception):
    """A step failed for good (deadline reached, or an error that retrying cannot fix)."""


class _RetryableError(Exception):
    """One attempt failed in a way that may clear up (connection, timeout, 5xx, malformed JSON)."""


class _FinalError(Exception):
    """One attempt failed in a way retrying cannot fix (e.g. HTTP 400/404)."""


def completion_payload(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}


def chat_payload(model: str, content: str, max_tokens: int) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0}


def validate_response(body: Any, model: str, chat: bool) -> str:
    """The generated text of a completions (or chat) response; ValueError naming what is wrong."""
    if not isinstance(body, dict):
        raise ValueError(f"response is JSON {type(body).__name__}, not an object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError(f"no choices in response: {_snippet(json.dumps(body))}")
    first = choices[0] if isinstance(choices[0], dict) else {}
    if chat:
        message = first.get("message") if isinstance(first.get("message"), dict) else {}
        # A reasoning parser (kimi_k2/kimi_k3) moves the first tokens into reasoning_content.
        texts = [message.get(key) for key in ("content", "reasoning_content", "reasoning")]
    else:
        texts = [first.get("text")]
    text = next((t for t in texts if isinstance(t, str) and t), None)
    if text is None:
        raise ValueError(f"empty choices[0].{'message' if chat else 'text'}: {_snippet(json.dumps(first))}")
    if body.get("model") != model:
        raise ValueError(f"model is {body.get('model')!r}, expected {model!r}")
    return text


def post_json(session: requests.Session, url: str, payload: Mapping[str, Any], *, request_timeout: float,
              deadline_seconds: float, backoff_seconds: float,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> tuple[dict[str, Any], int]:
    """POST JSON until a 200 with a JSON object arrives or the deadline passes; returns (body, attempts)."""
    return _with_retries(lambda timeout: _post_once(session, url, payload, timeout),
                         request_timeout=request_timeout, deadline_seconds=deadline_seconds,
                         backoff_seconds=backoff_seconds, clock=clock, sleep=sleep)


def _send(session: requests.Session, method: str, url: str, timeout: float, **kwargs: Any) -> requests.Response:
    """One HTTP request; transport failures become _RetryableError/_FinalError."""
    try:
        return session.request(method, url, timeout=timeout, **kwargs)
    except requests.Timeout:
        raise _RetryableError(f"timed out after {timeout:.3g}s") from None
    except requests.ConnectionError as exc:
        raise _RetryableError(f"connection failed: {_snippet(str(exc))}") from None
    except requests.RequestException as exc:
        raise _FinalError(f"request failed: {_snippet(str(exc))}") from None


def _post_once(session: requests.Session, url: str, payload: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    response = _send(session, "POST", url, timeout, json=payload)
    if response.status_code != 200:
        message = f"HTTP {response.status_code}: {_snippet(response.text)}"
        if response.status_code >= 500 or response.status_code in RETRY_STATUSES:
            raise _RetryableError(message)
        raise _FinalError(message)
    try:
        body = response.json()
    except ValueError:
        raise _RetryableError(f"malformed JSON in HTTP 200 response: {_snippet(response.text)}") from None
    if not isinstance(body, dict):
        raise _RetryableError(f"malformed JSON: expected an object, got {_snippet(response.text)}")
    return body


def scrape(session: requests.Session, url: str, timeout: float) -> list[Sample]:
    """GET a Prometheus text endpoint once; _RetryableError/_FinalError on failure."""
    response = _send(session, "GET", url, timeout, headers={"Accept": "text/plain"})
    if response.status_code != 200:
        raise _RetryableError(f"HTTP {response.status_code}: {_snippet(response.text)}")
    try:
        return parse_prometheus(response.text)
    except MetricsParseError as exc:
        raise _RetryableError(f"not Prometheus text: {exc}") from None


def _with_retries(attempt: Callable[[float], Any], *, request_timeout: float, deadline_seconds: float,
                  backoff_seconds: float, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> tuple[Any, int]:
    """Call attempt(request_timeout) with exponential backoff until it succeeds or the deadline passes.

    The deadline gates new attempts; an attempt already running may take up to its request timeout.
    """
    deadline = clock() + deadline_seconds
    delay = backoff_seconds
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt(request_timeout), attempts
        except _FinalError as exc:
            raise StepError(f"{exc} (attempt {attempts}, not retried)") from None
        except _RetryableError as exc:
            remaining = deadline - clock()
            if remaining <= 0:
                raise StepError(f"{exc} (gave up after {attempts} attempt(s), deadline {deadline_seconds:g}s)") \
                    from None
            sleep(min(delay, remaining))
            delay = min(delay * BACKOFF_FACTOR, BACKOFF_CAP_SECONDS)


# --------------------------------------------------------------------------- prompts
_VOCABULARY = (
    "river stone lantern orbit cedar harbor velvet signal meadow copper quartz falcon ember glacier prism "
    "thunder willow canyon beacon marble compass saffron tundra cobalt ripple summit anchor jasmine fjord "
    "ledger nebula orchard pylon quiver raven sequoia tarmac umbra vortex walnut xenon yarrow zephyr"
).split()


def long_prompt(words: int = LONG_PROMPT_WORDS, tag: str = "") -> str:
    """Deterministic text of about `words` words; the same arguments give the same text (same token prefix)."""
    state = 20251129
    out: list[str] = [f"Smoke-check context {tag}".strip() + "."]
    sentence = 0
    while len(out) < words:
        sentence += 1
        out.append(f"Line {sentence}:")
        for _ in range(11):
            state = (state * 1103515245 + 12345) % 2**31  # a fixed LCG: no randomness between runs
            out.append(_VOCABULARY[state % len(_VOCABULARY)])
    body = " ".join(out[:words])
    return body + "\n\nIn one short sentence, what is the first word after 'Line 1:' above?"


# --------------------------------------------------------------------------- the run
@dataclass
class Settings:
    endpoint: str
    track: str
    model: str
    api: str
    targets: list[MetricsTarget]
    request_timeout: float
    deadline_seconds: float
    metrics_wait_seconds: float
    backoff_seconds: float
    long_prompt_words: int
    prompt_tag: str
    strict: bool
    skip: frozenset[str]
    engine: str = ""
    """The serving engine (ENGINES); empty means the track's default."""

    @property
    def serving_engine(self) -> str:
        return self.engine or ENGINES[self.track][0]


class Reporter:
    def __init__(self, out: Callable[[str], None]):
        self.out = out
        self.outcomes: list[Outcome] = []

    def add(self, outcome: Outcome) -> Outcome:
        self.outcomes.append(outcome)
        self.out(outcome.line)
        return outcome

    def summary(self) -> tuple[str, bool]:
        counts = {status: sum(o.status == status for o in self.outcomes) for status in ("PASS", "FAIL", "SKIP")}
        not_run = sum(o.status == "SKIP" and o.detail.startswith("not run") for o in self.outcomes)
        ok = counts["FAIL"] == 0 and not_run == 0 and counts["PASS"] > 0
        line = (f"SUMMARY: {'PASS' if ok else 'FAIL'} ({counts['PASS']} passed, {counts['FAIL']} failed, "
                f"{counts['SKIP']} skipped)")
        return line, ok


def _url(endpoint: str, path: str) -> str:
    return endpoint.rstrip("/") + path


def check_generation(session: requests.Session, settings: Settings, chat: bool) -> Outcome:
    name = "chat-completions" if chat else "completions"
    path = "/v1/chat/completions" if chat else "/v1/completions"
    payload = (chat_payload(settings.model, SHORT_PROMPT, CHAT_MAX_TOKENS) if chat
               else completion_payload(settings.model, SHORT_PROMPT, SHORT_MAX_TOKENS))
    start = time.monotonic()
    try:
        body, attempts = post_json(session, _url(settings.endpoint, path), payload,
                                   request_timeout=settings.request_timeout,
                                   deadline_seconds=settings.deadline_seconds,
                                   backoff_seconds=settings.backoff_seconds)
        text = validate_response(body, settings.model, chat)
    except (StepError, ValueError) as exc:
        return Outcome(name, "FAIL", f"POST {path}: {exc}")
    took = time.monotonic() - start
    return Outcome(name, "PASS", f"POST {path} -> HTTP 200 in {took:.2f}s after {attempts} attempt(s), "
                                 f"model={settings.model}, text={_snippet(text, 60)!r}")


def send_long_prompt_twice(session: requests.Session, settings: Settings) -> Outcome:
    prompt = long_prompt(settings.long_prompt_words, settings.prompt_tag)
    url = _url(settings.endpoint, "/v1/completions")
    notes = []
    for round_ in (1, 2):
        try:
            body, attempts = post_json(session, url, completion_payload(settings.model, prompt, LONG_MAX_TOKENS),
                                       request_timeout=settings.request_timeout,
                                       deadline_seconds=settings.deadline_seconds,
                                       backoff_seconds=settings.backoff_seconds)
            validate_response(body, settings.model, chat=False)
        except (StepError, ValueError) as exc:
            return Outcome("long-prompt", "FAIL", f"request {round_} of 2 ({len(prompt.split())} words): {exc}")
        notes.append(_usage_note(body))
    return Outcome("long-prompt", "PASS", f"sent the same {len(prompt.split())}-word prompt twice; "
                                          f"usage: first {notes[0]}, second {notes[1]}")


def _usage_note(body: Mapping[str, Any]) -> str:
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    prompt_tokens = usage.get("prompt_tokens", "?")
    details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
    cached = details.get("cached_tokens")
    return f"{prompt_tokens} prompt tokens" + (f" ({cached} cached)" if cached is not None else "")


def scrape_round(session: requests.Session, targets: Sequence[MetricsTarget], indexes: Iterable[int],
                 request_timeout: float) -> tuple[Snapshot, dict[int, str]]:
    """One scrape attempt per target; returns (samples by target index, error by target index)."""
    snapshot: Snapshot = {}
    errors: dict[int, str] = {}
    for i in indexes:
        try:
            snapshot[i] = scrape(session, targets[i].url, request_timeout)
        except (_RetryableError, _FinalError) as exc:
            errors[i] = str(exc)
    return snapshot, errors


def poll_metrics(session: requests.Session, settings: Settings, indexes: Sequence[int],
                 done: Callable[[Snapshot, dict[int, str]], bool]) -> tuple[Snapshot, dict[int, str]]:
    """Scrape in rounds (backoff between rounds) until done(snapshot, errors) or the metrics wait is over.

    A target that answered in an earlier round keeps its last good samples only if it fails later.
    """
    deadline = time.monotonic() + settings.metrics_wait_seconds
    delay = settings.backoff_seconds
    snapshot: Snapshot = {}
    while True:
        fresh, errors = scrape_round(session, settings.targets, indexes, settings.request_timeout)
        snapshot.update(fresh)
        errors = {i: message for i, message in errors.items() if i not in snapshot}
        remaining = deadline - time.monotonic()
        if done(snapshot, errors) or remaining <= 0:
            return snapshot, errors
        time.sleep(min(delay, remaining))
        delay = min(delay * BACKOFF_FACTOR, BACKOFF_CAP_SECONDS)


def scrape_outcome(settings: Settings, indexes: Sequence[int], errors: Mapping[int, str]) -> Outcome:
    if not indexes:
        return Outcome("metrics-scrape", "FAIL", "no --metrics-url given for the metric checks")
    if errors:
        failed = "; ".join(f"{settings.targets[i]}: {message}" for i, message in errors.items())
        return Outcome("metrics-scrape", "FAIL", f"{len(errors)} of {len(indexes)} URL(s) failed: {failed}")
    roles = ", ".join(sorted({settings.targets[i].role for i in indexes}))
    return Outcome("metrics-scrape", "PASS", f"{len(indexes)} URL(s) scraped before and after ({roles})")


def run(settings: Settings, out: Callable[[str], None] = print) -> int:
    reporter = Reporter(out)
    checks = {name: check for name, check in METRIC_CHECKS[settings.track].items() if name not in settings.skip}
    out(f"smoke check: track={settings.track} engine={settings.serving_engine} model={settings.model} "
        f"endpoint={settings.endpoint} "
        f"metrics={len(settings.targets)} URL(s)")
    for name in sorted(settings.skip):
        reporter.add(Outcome(name, "SKIP", "skipped by --skip"))

    with requests.Session() as session:
        session.trust_env = False  # only the URLs given on the command line; no proxies or netrc from env
        generation = []
        for chat in (False, True):
            name = "chat-completions" if chat else "completions"
            if name in settings.skip or settings.api not in ("both", "chat" if chat else "completions"):
                continue
            if any(o.status == "FAIL" for o in generation):  # the endpoint is broken: do not wait a second time
                reporter.add(Outcome(name, "SKIP", "not run: generation failed"))
                continue
            generation.append(reporter.add(check_generation(session, settings, chat)))
        later = [n for n in ("long-prompt", "metrics-scrape", *checks) if n not in settings.skip]
        if any(o.status == "FAIL" for o in generation):
            for name in later:
                reporter.add(Outcome(name, "SKIP", "not run: generation failed"))
            return _finish(reporter, out)

        indexes = [i for i, target in enumerate(settings.targets)
                   if any(target.role in check.roles for check in checks.values())]
        before: Snapshot = {}
        if checks:
            before, _ = poll_metrics(session, settings, indexes, lambda snapshot, errors: not errors)

        if "long-prompt" not in settings.skip:
            if reporter.add(send_long_prompt_twice(session, settings)).status == "FAIL":
                for name in later[1:]:
                    reporter.add(Outcome(name, "SKIP", "not run: the long-prompt step failed"))
                return _finish(reporter, out)
        if not checks:
            return _finish(reporter, out)

        # Counters move asynchronously (engine stats loops, the EPP's bookkeeping): re-scrape until all pass.
        def evaluate(after: Snapshot) -> list[Outcome]:
            return [evaluate_metric_check(name, check, settings.targets, before, after, settings.strict,
                                          settings.serving_engine)
                    for name, check in checks.items()]

        after, errors = poll_metrics(
            session, settings, indexes,
            lambda snapshot, errors: not errors and all(r.status != "FAIL" for r in evaluate(snapshot)))
        for i in indexes:
            if i not in before:
                errors.setdefault(i, "no baseline: not scraped before the long prompt")
        if "metrics-scrape" not in settings.skip:
            reporter.add(scrape_outcome(settings, indexes, errors))
        for result in evaluate(after):
            reporter.add(result)
    return _finish(reporter, out)


def _finish(reporter: Reporter, out: Callable[[str], None]) -> int:
    line, ok = reporter.summary()
    out(line)
    return 0 if ok else 1


def _snippet(text: str, limit: int = 160) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# --------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.smoke",
        description="Smoke check of the deployed guide: generation, prefix-cache hits (HBM, host DRAM) and, on "
                    "GPU, prefill -> decode with KV transfer. Prints PASS/FAIL lines; exit 0 only if all pass.",
        epilog=f"Metrics URL roles: prefill (vLLM port {contract.MODEL_SERVER_PORT}), decode (vLLM port "
               f"{contract.DECODE_ENGINE_PORT}), router (EPP port 9090), engine (TPU SGLang port "
               f"{contract.MODEL_SERVER_PORT}; the default for an untagged URL). Example: "
               f"--metrics-url router=http://127.0.0.1:9090/metrics "
               f"(kubectl port-forward svc/{catalog.GUIDE_NAME}-epp 9090:9090).")
    parser.add_argument("--endpoint", required=True,
                        help=f"base URL of the OpenAI-compatible API: the {catalog.GUIDE_NAME}-epp service through "
                             "a port-forward, or http://<gateway address>")
    parser.add_argument("--track", required=True, choices=TRACKS)
    parser.add_argument("--engine", choices=sorted({e for engines in ENGINES.values() for e in engines}),
                        help="the serving engine, for metrics it is known not to export (default: gpu vllm, tpu "
                             "sglang-jax; pass sglang for tpu.engineProfile=day0)")
    parser.add_argument("--model", default=catalog.KIMI.hf_id, help="served model name (default %(default)s)")
    parser.add_argument("--api", choices=("completions", "chat", "both"), default="both",
                        help="which generation endpoints to check (default %(default)s)")
    parser.add_argument("--metrics-url", action="append", default=[], metavar="[ROLE=]URL",
                        help="Prometheus text endpoint, repeatable; ROLE is one of " + ", ".join(ROLES))
    parser.add_argument("--deadline-seconds", type=_positive, default=600.0,
                        help="retry budget of each HTTP step: no new attempt after it (default %(default)s)")
    parser.add_argument("--request-timeout", type=_positive, default=120.0,
                        help="timeout of one HTTP request (default %(default)s)")
    parser.add_argument("--metrics-wait-seconds", type=_non_negative, default=90.0,
                        help="how long to re-scrape metrics until the checks pass (default %(default)s)")
    parser.add_argument("--backoff-seconds", type=_non_negative, default=2.0,
                        help="first retry delay, doubled per retry up to 15 s (default %(default)s)")
    parser.add_argument("--long-prompt-words", type=int, default=LONG_PROMPT_WORDS,
                        help="length of the repeated long prompt in words (default %(default)s)")
    parser.add_argument("--prompt-tag", default="",
                        help="text put in front of the long prompt, e.g. a run id for a cold prefix (default none)")
    parser.add_argument("--strict", action="store_true",
                        help="host-DRAM hits must grow during this run (not just be non-zero since start)")
    parser.add_argument("--skip", action="append", default=[], choices=all_check_names(), metavar="CHECK",
                        help="leave out a check, repeatable: " + ", ".join(all_check_names()))
    return parser


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text}")
    return value


def settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings(
        endpoint=args.endpoint, track=args.track, model=args.model, api=args.api,
        targets=[parse_metrics_target(spec) for spec in args.metrics_url],
        request_timeout=args.request_timeout, deadline_seconds=args.deadline_seconds,
        metrics_wait_seconds=args.metrics_wait_seconds, backoff_seconds=args.backoff_seconds,
        long_prompt_words=args.long_prompt_words, prompt_tag=args.prompt_tag, strict=args.strict,
        skip=frozenset(args.skip), engine=args.engine or "",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    if args.engine and args.engine not in ENGINES[args.track]:
        parser.error(f"--engine {args.engine}: track {args.track} runs {' or '.join(ENGINES[args.track])}")
    return run(settings, out=lambda line: print(line, flush=True))


if __name__ == "__main__":
    sys.exit(main())

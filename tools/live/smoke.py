"""Smoke check of a deployed guide (issue 7): end-to-end generation, then the seed's health facts from metrics.

    python -m tools smoke --endpoint http://127.0.0.1:8080 --track gpu --model moonshotai/Kimi-K3.1-Pro \\
        --metrics-url prefill=URL --metrics-url decode=URL --metrics-url router=URL

Steps:
1. generation: POST /v1/completions (and /v1/chat/completions) with a short prompt; expect HTTP 200 JSON with a
   non-empty first choice and the requested model name. Then the same completion straight to one serving pod
   of every slice given with --slice-endpoint (docs/scaling.md): each slice must answer on its own.
   Connection errors, timeouts, HTTP 408/425/429/5xx and malformed JSON are retried with exponential backoff
   until the step's deadline.
2. long prompt: scrape every metrics URL (baseline), then send one deterministic long prompt (a few thousand
   tokens) twice.
3. metrics: scrape again (polling until the checks pass or the metrics wait runs out) and compare with the
   baseline: prefix-cache hits in HBM and in host DRAM, and on GPU that the router took prefill -> decode
   decisions and the decode engine received KV. `METRIC_CHECKS` says which; the names and their sources
   are in components/facts/metrics.py. A metric the engine is known not to export is a SKIP with the reason.

Metrics URLs are tagged with the role of what they scrape: `prefill=`, `decode=`, `router=` or `engine=`
(an untagged URL is `engine`). Counters are summed over label sets and over every URL of the check's roles.
Each check prints `PASS <check>: ...`, `FAIL <check>: ...` or `SKIP <check>: ...`, then one `SUMMARY` line;
the exit code is 0 only when every check that ran passed and none was left out because an earlier step failed.

Only the given endpoint and metrics URLs are contacted: no redirects are followed and proxy settings from
the environment are ignored; bodies are read up to a bound. Every request has a total deadline, and the
whole run one more (--total-timeout), so a slow or trickling server cannot hold a caller such as the
benchmark driver's teardown (tools/live/smoke_http.py). The metric table and parser live in tools/live/smoke_metrics.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from components.facts import catalog, contract
from tools import deprecated, prog
from tools.live.core import Deadline, bounded_number
from tools.live.smoke_http import (
    BACKOFF_CAP_SECONDS,
    BACKOFF_FACTOR,
    CONNECT_TIMEOUT_SECONDS,
    StepError,
    _FinalError,
    _RetryableError,
    _with_retries,
    chat_payload,
    completion_payload,
    post_json,
    scrape,
    validate_response,
)
from tools.live.smoke_metrics import (
    ENGINES,
    METRIC_CHECKS,
    ROLES,
    TRACKS,
    MetricsParseError,
    MetricsTarget,
    Outcome,
    Selector,
    Snapshot,
    all_check_names,
    evaluate_metric_check,
    parse_metrics_target,
    parse_prometheus,
    snippet,
    sum_selector,
)

# Re-exported: the smoke check's public names, whichever module holds them.
__all__ = ["METRIC_CHECKS", "ROLES", "TRACKS", "MetricsParseError", "MetricsTarget", "Selector", "StepError",
           "_RetryableError", "_with_retries", "evaluate_metric_check", "parse_metrics_target", "parse_prometheus",
           "sum_selector", "validate_response"]

# The guides' own smoke request (https://github.com/llm-d/llm-d/blob/main/guides/wide-ep/guide.yaml).
SHORT_PROMPT = "How are you today?"
SHORT_MAX_TOKENS = 16
CHAT_MAX_TOKENS = 64  # room for a reasoning parser to hand back visible text
LONG_MAX_TOKENS = 8
LONG_PROMPT_WORDS = 3000  # about 4,000 tokens with a BPE tokenizer
TOTAL_SECONDS = 900.0
"""A smoke check on a Ready stack takes seconds; 15 min leaves room for a router still warming up."""


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
    slices: list[tuple[str, str]] = field(default_factory=list)
    """(slice, base URL of one of its serving pods): each slice is asked directly, past the router."""
    total_seconds: float = TOTAL_SECONDS
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS
    """How long a step waits while nothing accepts its connection (smoke_http.CONNECT_TIMEOUT_SECONDS)."""
    budget: Deadline = field(init=False)

    def __post_init__(self) -> None:
        self.budget = Deadline(self.total_seconds)  # the whole run's deadline starts with its settings

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


def _progress(line: str) -> None:
    """A long wait's progress line: on stderr, so `--json` keeps stdout to its one document."""
    print(line, file=sys.stderr, flush=True)


def _url(endpoint: str, path: str) -> str:
    return endpoint.rstrip("/") + path


def check_generation(settings: Settings, chat: bool, endpoint: str = "", name: str = "") -> Outcome:
    name = name or ("chat-completions" if chat else "completions")
    path = "/v1/chat/completions" if chat else "/v1/completions"
    payload = (chat_payload(settings.model, SHORT_PROMPT, CHAT_MAX_TOKENS) if chat
               else completion_payload(settings.model, SHORT_PROMPT, SHORT_MAX_TOKENS))
    start = time.monotonic()
    try:
        body, attempts = post_json(_url(endpoint or settings.endpoint, path), payload,
                                   request_timeout=settings.request_timeout,
                                   deadline_seconds=settings.deadline_seconds,
                                   backoff_seconds=settings.backoff_seconds, budget=settings.budget,
                                   connect_timeout=settings.connect_timeout, progress=_progress)
        text = validate_response(body, settings.model, chat)
    except (StepError, ValueError) as exc:
        return Outcome(name, "FAIL", f"POST {path}: {exc}")
    took = time.monotonic() - start
    where = f" to {endpoint}" if endpoint else ""
    return Outcome(name, "PASS", f"POST {path}{where} -> HTTP 200 in {took:.2f}s after {attempts} attempt(s), "
                                 f"model={settings.model}, text={snippet(text, 60)!r}")


def parse_slice_endpoint(spec: str) -> tuple[str, str]:
    """`SLICE=URL`: a serving pod of one slice (GPU: a decode pod's routing sidecar, which serves a request without
    a prefill header itself; TPU: the slice's leader)."""
    label, sep, url = spec.partition("=")
    if not sep or not label or not url.startswith(("http://", "https://")):
        raise ValueError(f"--slice-endpoint {spec!r}: expected SLICE=http://HOST:PORT")
    return label, url


def check_slices(settings: Settings) -> list[Outcome]:
    """Every slice answers on its own: a router that reaches one healthy slice hides the others."""
    return [check_generation(settings, False, url, f"slice-{label}") for label, url in settings.slices]


def send_long_prompt_twice(settings: Settings) -> Outcome:
    prompt = long_prompt(settings.long_prompt_words, settings.prompt_tag)
    url = _url(settings.endpoint, "/v1/completions")
    notes = []
    for round_ in (1, 2):
        try:
            body, attempts = post_json(url, completion_payload(settings.model, prompt, LONG_MAX_TOKENS),
                                       request_timeout=settings.request_timeout,
                                       deadline_seconds=settings.deadline_seconds,
                                       backoff_seconds=settings.backoff_seconds, budget=settings.budget,
                                       connect_timeout=settings.connect_timeout, progress=_progress)
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


def scrape_round(targets: Sequence[MetricsTarget], indexes: Iterable[int], request_timeout: float,
                 budget: Deadline) -> tuple[Snapshot, dict[int, str]]:
    """One scrape attempt per target; returns (samples by target index, error by target index)."""
    snapshot: Snapshot = {}
    errors: dict[int, str] = {}
    for i in indexes:
        if budget.passed:
            errors[i] = f"not scraped: the smoke check's total time ({budget.seconds:g}s) ran out"
            continue
        try:
            snapshot[i] = scrape(targets[i].url, min(request_timeout, budget.remaining()))
        except (_RetryableError, _FinalError) as exc:
            errors[i] = str(exc)
    return snapshot, errors


def poll_metrics(settings: Settings, indexes: Sequence[int],
                 done: Callable[[Snapshot, dict[int, str]], bool]) -> tuple[Snapshot, dict[int, str]]:
    """Scrape in rounds (backoff between rounds) until done(snapshot, errors) or the metrics wait is over.

    A target that answered in an earlier round keeps its last good samples only if it fails later.
    """
    deadline = time.monotonic() + settings.metrics_wait_seconds
    delay = settings.backoff_seconds
    snapshot: Snapshot = {}
    while True:
        fresh, errors = scrape_round(settings.targets, indexes, settings.request_timeout, settings.budget)
        snapshot.update(fresh)
        errors = {i: message for i, message in errors.items() if i not in snapshot}
        remaining = min(deadline - time.monotonic(), settings.budget.remaining())
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


def run(settings: Settings, out: Callable[[str], None] = print, outcomes: list[Outcome] | None = None) -> int:
    """The checks in order; each outcome goes to `out` as its line and, when given, into `outcomes`."""
    reporter = Reporter(out)
    if outcomes is not None:
        reporter.outcomes = outcomes
    checks = {name: check for name, check in METRIC_CHECKS[settings.track].items() if name not in settings.skip}
    out(f"smoke check: track={settings.track} engine={settings.serving_engine} model={settings.model} "
        f"endpoint={settings.endpoint} metrics={len(settings.targets)} URL(s)")
    for name in sorted(settings.skip):
        reporter.add(Outcome(name, "SKIP", "skipped by --skip"))

    generation = []
    for chat in (False, True):
        name = "chat-completions" if chat else "completions"
        if name in settings.skip or settings.api not in ("both", "chat" if chat else "completions"):
            continue
        if any(o.status == "FAIL" for o in generation):  # the endpoint is broken: do not wait a second time
            reporter.add(Outcome(name, "SKIP", "not run: generation failed"))
            continue
        generation.append(reporter.add(check_generation(settings, chat)))
    slice_names = [f"slice-{label}" for label, _ in settings.slices]
    if any(o.status == "FAIL" for o in generation):
        for name in slice_names:
            reporter.add(Outcome(name, "SKIP", "not run: generation failed"))
    else:
        for outcome in check_slices(settings):
            reporter.add(outcome)
    later = [n for n in ("long-prompt", "metrics-scrape", *checks) if n not in settings.skip]
    if any(o.status == "FAIL" for o in generation):
        for name in later:
            reporter.add(Outcome(name, "SKIP", "not run: generation failed"))
        return _finish(reporter, out)

    indexes = [i for i, target in enumerate(settings.targets)
               if any(target.role in check.roles for check in checks.values())]
    before: Snapshot = {}
    if checks:
        before, _ = poll_metrics(settings, indexes, lambda snapshot, errors: not errors)

    if "long-prompt" not in settings.skip:
        if reporter.add(send_long_prompt_twice(settings)).status == "FAIL":
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
        settings, indexes,
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


# --------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog("smoke"),
        description="Smoke check of the deployed guide: generation, prefix-cache hits (HBM, host DRAM) and, on "
                    "GPU, prefill -> decode with KV transfer. Prints PASS/FAIL lines; exit 0 only if all pass.",
        epilog=f"Metrics URL roles: prefill (vLLM port {contract.MODEL_SERVER_PORT}), decode (vLLM port "
               f"{contract.DECODE_ENGINE_PORT}), router (EPP port 9090), engine (TPU leader port "
               f"{contract.MODEL_SERVER_PORT}; the default for an untagged URL). Example: "
               f"--metrics-url router=http://127.0.0.1:9090/metrics "
               f"(kubectl port-forward svc/{catalog.GUIDE_NAME}-epp 9090:9090).")
    parser.add_argument("--endpoint", required=True,
                        help=f"base URL of the OpenAI-compatible API: the {catalog.GUIDE_NAME}-epp service through "
                             "a port-forward, or http://<gateway address>")
    parser.add_argument("--track", required=True, choices=TRACKS)
    parser.add_argument("--engine", choices=sorted({e for engines in ENGINES.values() for e in engines}),
                        help="the serving engine, whose metric names are checked (default: gpu vllm, tpu "
                             "vllm-torchtpu; pass sglang for tpu.engine=sglang-torchtpu)")
    parser.add_argument("--model", default=catalog.KIMI.hf_id, help="served model name (default %(default)s)")
    parser.add_argument("--api", choices=("completions", "chat", "both"), default="both",
                        help="which generation endpoints to check (default %(default)s)")
    parser.add_argument("--metrics-url", action="append", default=[], metavar="[ROLE=]URL",
                        help="Prometheus text endpoint, repeatable; ROLE is one of " + ", ".join(ROLES))
    parser.add_argument("--slice-endpoint", action="append", default=[], metavar="SLICE=URL",
                        help="base URL of one serving pod of a slice, repeatable: each slice must answer on its own "
                             "(GPU: a decode pod's port " f"{contract.MODEL_SERVER_PORT}; TPU: the slice's leader)")
    step = bounded_number(float, 0.01, 86400, above_low=True)
    parser.add_argument("--step-timeout", type=step, default=300.0, metavar="SECONDS",
                        help="retry budget of each HTTP step: no new attempt after it (seconds, default %(default)s; "
                             "was --deadline-seconds)")
    deprecated(parser, "--deadline-seconds", "--step-timeout", type=step)
    parser.add_argument("--connect-timeout", type=bounded_number(float, 0.01, 86400), default=CONNECT_TIMEOUT_SECONDS,
                        metavar="SECONDS",
                        help="how long a step retries while nothing accepts the connection (refused, no route, name "
                             "not found) before it fails saying so (seconds, default %(default)s); a server that "
                             "answers, even with 503, gets the whole --step-timeout")
    parser.add_argument("--request-timeout", type=bounded_number(float, 0.01, 3600), default=120.0, metavar="SECONDS",
                        help="total time of one HTTP request, connect to last byte (seconds, default %(default)s)")
    total = bounded_number(float, 0.01, 86400)
    parser.add_argument("--total-timeout", type=total, default=TOTAL_SECONDS, metavar="SECONDS",
                        help="total time of the whole smoke check; no request outlives it (seconds, default "
                             "%(default)s; was --total-seconds)")
    deprecated(parser, "--total-seconds", "--total-timeout", type=total)
    metrics = bounded_number(float, 0, 3600)
    parser.add_argument("--metrics-timeout", type=metrics, default=90.0, metavar="SECONDS",
                        help="how long to re-scrape metrics until the checks pass (seconds, default %(default)s; "
                             "was --metrics-wait-seconds)")
    deprecated(parser, "--metrics-wait-seconds", "--metrics-timeout", type=metrics)
    parser.add_argument("--backoff-seconds", type=bounded_number(float, 0, 60), default=2.0, metavar="SECONDS",
                        help="first retry delay, doubled per retry up to 15 s (default %(default)s)")
    parser.add_argument("--long-prompt-words", type=bounded_number(int, 1, 200_000), default=LONG_PROMPT_WORDS,
                        help="length of the repeated long prompt in words (default %(default)s)")
    parser.add_argument("--prompt-tag", default="",
                        help="text put in front of the long prompt, e.g. a run id for a cold prefix (default none)")
    parser.add_argument("--strict", action="store_true",
                        help="host-DRAM hits must grow during this run (not just be non-zero since start)")
    parser.add_argument("--skip", action="append", default=[], choices=all_check_names(), metavar="CHECK",
                        help="leave out a check, repeatable: " + ", ".join(all_check_names()))
    parser.add_argument("--json", action="store_true",
                        help='the PASS/FAIL lines go to stderr and stdout gets one JSON object: {"ok": bool, '
                             '"checks": [{"check", "status", "detail"}, ...]}')
    return parser


def settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings(
        endpoint=args.endpoint, track=args.track, model=args.model, api=args.api,
        targets=[parse_metrics_target(spec) for spec in args.metrics_url],
        request_timeout=args.request_timeout, deadline_seconds=args.step_timeout,
        metrics_wait_seconds=args.metrics_timeout, backoff_seconds=args.backoff_seconds,
        long_prompt_words=args.long_prompt_words, prompt_tag=args.prompt_tag, strict=args.strict,
        skip=frozenset(args.skip), engine=args.engine or "", total_seconds=args.total_timeout,
        slices=[parse_slice_endpoint(spec) for spec in args.slice_endpoint], connect_timeout=args.connect_timeout,
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
    if not args.json:
        return run(settings, out=lambda line: print(line, flush=True))
    outcomes: list[Outcome] = []
    code = run(settings, out=lambda line: print(line, file=sys.stderr, flush=True), outcomes=outcomes)
    print(json.dumps({"ok": code == 0, "checks": [asdict(o) for o in outcomes]}, indent=2), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())

"""The smoke check (`tools.live.smoke`) against a fake OpenAI-compatible server on 127.0.0.1, plus its pure helpers."""

from __future__ import annotations

import contextlib
import json
import math
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import ROOT
from tools.live import smoke, smoke_http

MODEL = "moonshotai/Kimi-K3.1-Pro"
FAST = ["--step-timeout", "0.4", "--request-timeout", "0.3", "--metrics-timeout", "0.2",
        "--backoff-seconds", "0.01", "--long-prompt-words", "300"]


# --------------------------------------------------------------------------- fake server
@dataclass
class Fake:
    """What the fake server does; tests change fields before running the check."""

    model: str = MODEL
    fail_first: int = 0  # answer this many generation requests with fail_status first
    fail_status: int = 503
    hang_seconds: float = 0.0  # sleep before answering generation requests
    malformed: bool = False  # answer generation requests with broken JSON
    omit: set[str] = field(default_factory=set)  # metric names never served
    static: set[str] = field(default_factory=set)  # metric names that never grow
    metrics_body: str | None = None  # serve this text on every /metrics path instead
    preload: float = 0.0  # starting value of every counter
    # state
    posts: int = 0
    seen: set[str] = field(default_factory=set)
    counters: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        model = (("model_name", MODEL),)
        for key in [("prefill", "vllm:request_success_total", (("finished_reason", "length"), *model)),
                    ("prefill", "vllm:prefix_cache_hits_total", (("engine", "0"), *model)),
                    ("prefill", "vllm:prefix_cache_hits_total", (("engine", "1"), *model)),
                    ("prefill", "vllm:external_prefix_cache_hits_total", model),
                    ("decode", "vllm:prefix_cache_hits_total", model),
                    ("decode", "vllm:external_prefix_cache_hits_total", model),
                    ("router", "llm_d_epp_disagg_decision_total", (("decision_type", "decode-only"), *model)),
                    ("router", "llm_d_epp_disagg_decision_total", (("decision_type", "prefill-decode"), *model)),
                    ("engine", "sglang:num_requests_total", model),
                    ("engine", "sglang:cached_tokens_total", (("cache_source", "device"), *model)),
                    ("engine", "sglang:cached_tokens_total", (("cache_source", "host"), *model))]:
            self.counters[key] = self.preload

    def bump(self, role: str, name: str, amount: float, **labels: str) -> None:
        if name in self.static:
            return
        for key in self.counters:
            if key[0] == role and key[1] == name and all((k, v) in key[2] for k, v in labels.items()):
                self.counters[key] += amount
                return

    def serve_generation(self, prompt: str) -> None:
        """What the engines and the router would count for one request."""
        tokens = len(prompt.split())
        with self.lock:
            repeated = prompt in self.seen
            self.seen.add(prompt)
            self.bump("router", "llm_d_epp_disagg_decision_total", 1, decision_type="prefill-decode")
            self.bump("prefill", "vllm:request_success_total", 1)
            self.bump("decode", "vllm:external_prefix_cache_hits_total", tokens)  # KV received over NIXL
            self.bump("engine", "sglang:num_requests_total", 1)
            if repeated:
                self.bump("prefill", "vllm:prefix_cache_hits_total", tokens, engine="1")
                self.bump("prefill", "vllm:external_prefix_cache_hits_total", tokens // 2)
                self.bump("engine", "sglang:cached_tokens_total", tokens, cache_source="device")
                self.bump("engine", "sglang:cached_tokens_total", tokens // 2, cache_source="host")

    def metrics(self, role: str) -> str:
        lines = ["# HELP fake_info a gauge with awkward labels", "# TYPE fake_info gauge",
                 'fake_info{path="a,b",quote="say \\"hi\\"",brace="}"} 1', "fake_nan NaN", "fake_inf +Inf"]
        with self.lock:
            for (key_role, name, labels), value in sorted(self.counters.items()):
                if key_role == role and name not in self.omit:
                    text = ",".join(f'{k}="{v}"' for k, v in labels)
                    lines += [f"# TYPE {name.removesuffix('_total')} counter", f"{name}{{{text}}} {value}"]
        return "\n".join(lines) + "\n"


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that timed out and hung up is expected in the timeout test


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass

    def reply(self, status: int, body: str, content_type: str = "application/json") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's spelling)
        fake = self.server.fake  # type: ignore[attr-defined]
        role = self.path.rsplit("/", 1)[-1]
        if not self.path.startswith("/metrics/"):
            self.reply(404, "not found", "text/plain")
        elif fake.metrics_body is not None:
            self.reply(200, fake.metrics_body, "text/plain")
        else:
            self.reply(200, fake.metrics(role), "text/plain; version=0.0.4")

    def do_POST(self) -> None:  # noqa: N802
        fake: Fake = self.server.fake  # type: ignore[attr-defined]
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with fake.lock:
            fake.posts += 1
            failing = fake.posts <= fake.fail_first
        if fake.hang_seconds:
            fake.stop.wait(fake.hang_seconds)
        if failing:
            return self.reply(fake.fail_status, '{"error": "upstream not ready"}')
        if fake.malformed:
            return self.reply(200, '{"id": "cmpl-1", "choices": [')
        chat = self.path == "/v1/chat/completions"
        prompt = request["messages"][-1]["content"] if chat else request["prompt"]
        repeated = prompt in fake.seen
        fake.serve_generation(prompt)
        tokens = len(prompt.split())
        choice = ({"index": 0, "message": {"role": "assistant", "content": None, "reasoning_content": "Fine."}}
                  if chat else {"index": 0, "text": " I am fine.", "finish_reason": "length"})
        usage = {"prompt_tokens": tokens, "completion_tokens": 4,
                 "prompt_tokens_details": {"cached_tokens": tokens if repeated else 0}}
        self.reply(200, json.dumps({"id": "cmpl-1", "object": "text_completion", "model": fake.model,
                                    "choices": [choice], "usage": usage}))


@pytest.fixture
def fake() -> Iterator[tuple[Fake, str]]:
    state = Fake()
    server = QuietServer(("127.0.0.1", 0), Handler)
    server.fake = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        state.stop.set()
        server.shutdown()
        server.server_close()


def gpu_urls(base: str) -> list[str]:
    return ["--metrics-url", f"prefill={base}/metrics/prefill", "--metrics-url", f"decode={base}/metrics/decode",
            "--metrics-url", f"router={base}/metrics/router"]


def run_smoke(capsys, base: str, track: str, *extra: str) -> tuple[int, str]:
    urls = gpu_urls(base) if track == "gpu" else ["--metrics-url", f"{base}/metrics/engine"]
    code = smoke.main(["--endpoint", base, "--track", track, "--model", MODEL, *urls, *FAST, *extra])
    return code, capsys.readouterr().out


def lines(out: str, status: str) -> dict[str, str]:
    found = {}
    for line in out.splitlines():
        if line.startswith(status + " "):
            check, _, detail = line[len(status) + 1:].partition(": ")
            found[check] = detail
    return found


# --------------------------------------------------------------------------- end to end
def test_gpu_success(fake, capsys):
    _, base = fake
    code, out = run_smoke(capsys, base, "gpu")
    passed = lines(out, "PASS")
    assert code == 0, out
    assert set(passed) == {"completions", "chat-completions", "long-prompt", "metrics-scrape", "prefill-requests",
                           "hbm-prefix-hits", "host-dram-prefix-hits", "pd-router-decisions", "pd-kv-transfer"}
    assert "FAIL" not in out and out.rstrip().splitlines()[-1].startswith("SUMMARY: PASS (9 passed, 0 failed")
    assert passed["pd-router-decisions"].startswith('llm_d_epp_disagg_decision_total{decision_type="prefill-decode"}'
                                                    " +2 ")
    assert passed["pd-kv-transfer"].startswith("vllm:external_prefix_cache_hits_total +")
    assert f"({len(smoke.long_prompt(300).split())} cached)" in passed["long-prompt"]


def test_tpu_success_through_the_cli_with_json(fake):
    """What users and the benchmark driver run: `python -m tools smoke`; with --json the lines go to stderr and
    stdout is one JSON object with the same outcomes."""
    _, base = fake
    proc = subprocess.run([sys.executable, "-m", "tools", "smoke", "--endpoint", base, "--track", "tpu",
                           "--metrics-url", f"engine={base}/metrics/engine", *FAST, "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    passed = lines(proc.stderr, "PASS")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True
    assert {c["check"]: c["detail"] for c in report["checks"] if c["status"] == "PASS"} == passed
    assert set(passed) == {"completions", "chat-completions", "long-prompt", "metrics-scrape", "engine-requests",
                           "hbm-prefix-hits", "host-dram-prefix-hits"}
    assert passed["hbm-prefix-hits"].startswith('sglang:cached_tokens_total{cache_source="device"} +')
    assert passed["host-dram-prefix-hits"].startswith('sglang:cached_tokens_total{cache_source="host"} +')


def test_tpu_fallback_series_without_a_cache_breakdown(fake, capsys):
    state, base = fake
    for key in [k for k in state.counters if k[1] == "sglang:cached_tokens_total"]:
        del state.counters[key]
    state.counters[("engine", "sglang:cached_tokens_total", (("cache_source", "total"), ("model_name", MODEL)))] = 0.0
    state.counters[("engine", "sglang:load_back_tokens_total", ())] = 0.0
    original = state.serve_generation

    def serve(prompt: str) -> None:
        repeated = prompt in state.seen
        original(prompt)
        if repeated:
            state.bump("engine", "sglang:cached_tokens_total", 10)
            state.bump("engine", "sglang:load_back_tokens_total", 5)

    state.serve_generation = serve  # type: ignore[method-assign]
    code, out = run_smoke(capsys, base, "tpu")
    passed = lines(out, "PASS")
    assert code == 0, out
    assert passed["hbm-prefix-hits"].startswith('sglang:cached_tokens_total{cache_source="total"} +10')
    assert passed["host-dram-prefix-hits"].startswith("sglang:load_back_tokens_total +5")


def test_retries_5xx_then_succeeds(fake, capsys):
    state, base = fake
    state.fail_first = 2
    code, out = run_smoke(capsys, base, "gpu", "--api", "completions")
    assert code == 0, out
    assert "after 3 attempt(s)" in lines(out, "PASS")["completions"]


def test_5xx_until_deadline_fails(fake, capsys):
    state, base = fake
    state.fail_first = 10**6
    code, out = run_smoke(capsys, base, "gpu")
    failed = lines(out, "FAIL")
    assert code == 1
    assert "HTTP 503" in failed["completions"] and "gave up after" in failed["completions"]
    skipped = lines(out, "SKIP")
    assert skipped["chat-completions"] == skipped["pd-kv-transfer"] == "not run: generation failed"
    assert out.rstrip().splitlines()[-1].startswith("SUMMARY: FAIL")


def test_4xx_is_not_retried(fake, capsys):
    state, base = fake
    state.fail_first, state.fail_status = 1, 404
    code, out = run_smoke(capsys, base, "tpu", "--api", "completions")
    assert code == 1
    assert "HTTP 404" in lines(out, "FAIL")["completions"] and "not retried" in out
    assert state.posts == 1


def test_timeout_fails(fake, capsys):
    state, base = fake
    state.hang_seconds = 5.0
    code, out = run_smoke(capsys, base, "tpu", "--api", "completions", "--request-timeout", "0.2",
                          "--step-timeout", "0.3")
    assert code == 1
    assert "timed out after 0.2s" in lines(out, "FAIL")["completions"]


def test_malformed_json_fails(fake, capsys):
    state, base = fake
    state.malformed = True
    code, out = run_smoke(capsys, base, "gpu", "--api", "completions")
    assert code == 1
    assert "malformed JSON" in lines(out, "FAIL")["completions"]


def test_wrong_model_name_fails(fake, capsys):
    state, base = fake
    state.model = "some/other-model"
    code, out = run_smoke(capsys, base, "gpu", "--api", "chat")
    assert code == 1
    assert "model is 'some/other-model'" in lines(out, "FAIL")["chat-completions"]


def test_missing_router_metric_fails_naming_the_check(fake, capsys):
    state, base = fake
    state.omit = {"llm_d_epp_disagg_decision_total"}
    code, out = run_smoke(capsys, base, "gpu")
    failed = lines(out, "FAIL")
    assert code == 1
    assert set(failed) == {"pd-router-decisions"}
    assert failed["pd-router-decisions"].startswith("metric missing: none of llm_d_epp_disagg_decision_total")


def test_tpu_default_engine_passes_on_vllm_torchtpu_counters(fake, capsys):
    """vLLM-TorchTPU exports vLLM's names (components/facts/metrics.py): with them on the leader, the TPU checks
    read them
    first; the SGLang spellings are only the unreleased build's fallback."""
    state, base = fake
    model = (("model_name", MODEL),)
    state.omit = {"sglang:num_requests_total", "sglang:cached_tokens_total"}
    for name in ("vllm:request_success_total", "vllm:prefix_cache_hits_total", "vllm:kv_offload_load_bytes_total"):
        state.counters[("engine", name, model)] = 0.0
    original = state.serve_generation

    def serve(prompt: str) -> None:
        repeated = prompt in state.seen
        original(prompt)
        state.bump("engine", "vllm:request_success_total", 1)
        if repeated:
            state.bump("engine", "vllm:prefix_cache_hits_total", 10)
            state.bump("engine", "vllm:kv_offload_load_bytes_total", 4096)

    state.serve_generation = serve  # type: ignore[method-assign]
    code, out = run_smoke(capsys, base, "tpu")
    passed = lines(out, "PASS")
    assert code == 0, out
    assert passed["engine-requests"].startswith("vllm:request_success_total +")
    assert passed["hbm-prefix-hits"].startswith("vllm:prefix_cache_hits_total +10")
    assert passed["host-dram-prefix-hits"].startswith("vllm:kv_offload_load_bytes_total +")


def test_engine_must_belong_to_the_track(capsys):
    with pytest.raises(SystemExit):
        smoke.main(["--endpoint", "http://127.0.0.1:9", "--track", "gpu", "--engine", "vllm-torchtpu"])
    assert "track gpu runs vllm" in capsys.readouterr().err


def test_gpu_host_dram_hits_prefer_the_offload_load_counter(fake, capsys):
    state, base = fake
    state.counters[("prefill", "vllm:kv_offload_load_bytes_total", (("model_name", MODEL),))] = 0.0
    original = state.serve_generation

    def serve(prompt: str) -> None:
        repeated = prompt in state.seen
        original(prompt)
        if repeated:
            state.bump("prefill", "vllm:kv_offload_load_bytes_total", 4096)

    state.serve_generation = serve  # type: ignore[method-assign]
    code, out = run_smoke(capsys, base, "gpu")
    assert code == 0, out
    assert lines(out, "PASS")["host-dram-prefix-hits"].startswith("vllm:kv_offload_load_bytes_total +4096")


def test_counter_that_does_not_grow_fails(fake, capsys):
    state, base = fake
    state.static = {"vllm:prefix_cache_hits_total"}
    code, out = run_smoke(capsys, base, "gpu")
    assert code == 1
    assert "did not increase" in lines(out, "FAIL")["hbm-prefix-hits"]


def test_host_hits_since_start_pass_unless_strict(fake, capsys):
    state, base = fake
    state.preload = 7.0
    state.__post_init__()
    state.static = {"sglang:cached_tokens_total"}
    code, out = run_smoke(capsys, base, "tpu", "--skip", "hbm-prefix-hits")
    assert code == 0, out
    assert "did not grow during this run but is 7 since start" in lines(out, "PASS")["host-dram-prefix-hits"]
    assert lines(out, "SKIP") == {"hbm-prefix-hits": "skipped by --skip"}
    code, out = run_smoke(capsys, base, "tpu", "--skip", "hbm-prefix-hits", "--strict")
    assert code == 1
    assert "did not increase" in lines(out, "FAIL")["host-dram-prefix-hits"]


def test_unreachable_and_untagged_metrics_urls_fail(fake, capsys):
    _, base = fake
    code, out = run_smoke(capsys, base, "gpu", "--metrics-url", f"prefill=http://127.0.0.1:{closed_port()}/metrics")
    failed = lines(out, "FAIL")
    assert code == 1
    assert "1 of 4 URL(s) failed" in failed["metrics-scrape"] and "connection failed" in failed["metrics-scrape"]
    assert "PASS prefill-requests" in out  # the other prefill URL still answers

    code = smoke.main(["--endpoint", base, "--track", "gpu", *FAST, "--metrics-url", f"{base}/metrics/prefill"])
    failed = lines(capsys.readouterr().out, "FAIL")
    assert code == 1
    assert failed["pd-router-decisions"].startswith("no --metrics-url with role router")
    assert failed["prefill-requests"].startswith("no --metrics-url with role prefill")


def test_metrics_that_are_not_prometheus_text_fail(fake, capsys):
    state, base = fake
    state.metrics_body = "<html><body>login</body></html>"
    code, out = run_smoke(capsys, base, "tpu")
    failed = lines(out, "FAIL")
    assert code == 1
    assert "not Prometheus text: line 1" in failed["metrics-scrape"]
    assert "could be scraped twice" in failed["hbm-prefix-hits"]


def closed_port() -> int:
    """A local TCP port with nothing listening (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- pure helpers
def test_parser_handles_labels_comments_and_special_values():
    text = "\n".join([
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
        "# TYPE vllm:prefix_cache_hits_total counter",
        'vllm:prefix_cache_hits_total{engine="0",model_name="moonshotai/Kimi-K3.1-Pro"} 120.0',
        'weird{path="/a,b",msg="say \\"hi\\", ok",slash="C:\\\\dir",nl="x\\ny",brace="{}",} 3 1700000000000',
        '  spaced{a="1", b="2" }   4.5e2  ',
        "empty{} -Inf",
        "nan_value NaN",
        "inf_value +Inf",
        "",
        "# EOF",
    ])
    samples = smoke.parse_prometheus(text)
    assert [s.name for s in samples] == ["vllm:prefix_cache_hits_total", "weird", "spaced", "empty", "nan_value",
                                         "inf_value"]
    assert samples[0].labels == {"engine": "0", "model_name": MODEL} and samples[0].value == 120.0
    assert samples[1].labels == {"path": "/a,b", "msg": 'say "hi", ok', "slash": "C:\\dir", "nl": "x\ny",
                                 "brace": "{}"}
    assert samples[1].value == 3.0
    assert samples[2].labels == {"a": "1", "b": "2"} and samples[2].value == 450.0
    assert samples[3].value == -math.inf and math.isnan(samples[4].value) and samples[5].value == math.inf


@pytest.mark.parametrize("line", ["not a metric line at all!", 'x{a="1"', 'x{a=1} 2', "x 1 2 3", "x{a=\"1\"}2",
                                  "x abc", "{a=\"1\"} 1"])
def test_parser_rejects_malformed_lines(line):
    with pytest.raises(smoke.MetricsParseError, match="line 2"):
        smoke.parse_prometheus("ok 1\n" + line)


def test_sum_selector_sums_label_sets_and_respects_filters():
    samples = smoke.parse_prometheus("\n".join([
        'sglang:cached_tokens_total{cache_source="device",tp_rank="0"} 10',
        'sglang:cached_tokens_total{cache_source="device",tp_rank="1"} 5',
        'sglang:cached_tokens_total{cache_source="host",tp_rank="0"} NaN',
        'sglang:cached_tokens_total{cache_source="host",tp_rank="1"} 2',
    ]))
    device = smoke.Selector("sglang:cached_tokens_total", labels=(("cache_source", "device"),))
    host = smoke.Selector("sglang:cached_tokens_total", labels=(("cache_source", "host"),))
    assert smoke.sum_selector(samples, device) == 15
    assert smoke.sum_selector(samples, host) == 2  # NaN counts as 0
    assert smoke.sum_selector(samples, smoke.Selector("sglang:cached_tokens_total")) == 17
    assert smoke.sum_selector(samples, smoke.Selector("sglang:cached_tokens_total", without=("cache_source",))) \
        is None
    assert smoke.sum_selector(samples, smoke.Selector("absent_total")) is None


def test_metric_table_is_complete_and_cited():
    assert set(smoke.METRIC_CHECKS) == set(smoke.TRACKS)
    assert {"hbm-prefix-hits", "host-dram-prefix-hits", "pd-router-decisions", "pd-kv-transfer"} <= set(
        smoke.METRIC_CHECKS["gpu"])
    assert {"hbm-prefix-hits", "host-dram-prefix-hits"} <= set(smoke.METRIC_CHECKS["tpu"])
    for checks in smoke.METRIC_CHECKS.values():
        for check in checks.values():
            assert check.candidates and check.source and set(check.roles) <= set(smoke.ROLES)
    gpu = smoke.METRIC_CHECKS["gpu"]
    assert gpu["pd-kv-transfer"].roles == ("decode",)  # NIXL hits on decode must not count as host-DRAM hits
    assert "decode" not in gpu["host-dram-prefix-hits"].roles


def test_evaluate_metric_check_reports_restart_and_missing_baseline():
    check = smoke.METRIC_CHECKS["gpu"]["pd-kv-transfer"]
    targets = [smoke.MetricsTarget("decode", "http://x/metrics")]
    before = {0: smoke.parse_prometheus("vllm:external_prefix_cache_hits_total 100")}
    after = {0: smoke.parse_prometheus("vllm:external_prefix_cache_hits_total 40")}
    outcome = smoke.evaluate_metric_check("pd-kv-transfer", check, targets, before, after)
    assert outcome.status == "FAIL" and "went down 100 -> 40" in outcome.detail
    outcome = smoke.evaluate_metric_check("pd-kv-transfer", check, targets, {}, after)
    assert outcome.status == "FAIL" and "could be scraped twice" in outcome.detail


def test_metrics_target_roles():
    assert smoke.parse_metrics_target("decode=http://h:8200/metrics") == smoke.MetricsTarget(
        "decode", "http://h:8200/metrics")
    assert smoke.parse_metrics_target("http://h/metrics?a=b") == smoke.MetricsTarget("engine", "http://h/metrics?a=b")
    with pytest.raises(ValueError, match="missing URL"):
        smoke.parse_metrics_target("router=")


def test_long_prompt_is_deterministic_and_long():
    first, second = smoke.long_prompt(), smoke.long_prompt()
    assert first == second and len(first.split()) >= 3000
    assert smoke.long_prompt(tag="run-1") != first and smoke.long_prompt(tag="run-1").startswith(
        "Smoke-check context run-1.")


def test_validate_response_accepts_reasoning_and_rejects_empty():
    chat = {"model": MODEL, "choices": [{"message": {"content": "", "reasoning_content": "Thinking"}}]}
    assert smoke.validate_response(chat, MODEL, chat=True) == "Thinking"
    with pytest.raises(ValueError, match="empty choices"):
        smoke.validate_response({"model": MODEL, "choices": [{"text": ""}]}, MODEL, chat=False)
    with pytest.raises(ValueError, match="no choices"):
        smoke.validate_response({"model": MODEL, "choices": []}, MODEL, chat=False)
    with pytest.raises(ValueError, match="not an object"):
        smoke.validate_response([1], MODEL, chat=False)


def test_retry_helper_backs_off_and_stops_at_the_deadline():
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    def attempt(timeout: float) -> None:
        raise smoke._RetryableError("HTTP 503: busy")

    with pytest.raises(smoke.StepError, match=r"HTTP 503: busy \(gave up after 5 attempt\(s\), deadline 10s\)"):
        smoke._with_retries(attempt, request_timeout=1, deadline_seconds=10, backoff_seconds=1,
                            clock=lambda: now[0], sleep=sleep)
    assert sleeps == [1, 2, 4, 3]  # doubling, the last one cut to the deadline


# --------------------------------------------------------------------------- deadlines, redirects, bounded bodies
class Trickle(BaseHTTPRequestHandler):
    """A router that answers a byte at a time, forever: idle timeouts never fire on it."""

    protocol_version = "HTTP/1.1"
    where = "body"  # or "headers": trickle the status line and headers too
    contacted: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def _trickle(self, data: bytes) -> None:
        for byte in data:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(0.02)

    def handle_one_request(self) -> None:
        # One request per connection: handle() calls this until close_connection is set, and a closed client's
        # empty reads would otherwise spin that loop on a core for the rest of the session.
        self.close_connection = True
        self.raw_requestline = self.rfile.readline(65537)
        if not self.raw_requestline or not self.parse_request():
            return
        Trickle.contacted.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        with contextlib.suppress(OSError):
            if self.where == "headers":
                self._trickle(b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100_000)
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            self._trickle(b'{"choices": [' + b" " * 100_000)


@contextlib.contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = QuietServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("where", ["body", "headers"])
def test_a_trickling_router_cannot_hold_a_request_past_its_total_time(where):
    handler = type("T", (Trickle,), {"where": where})
    with serve(handler) as base:
        start = time.monotonic()
        with pytest.raises(smoke._RetryableError, match=r"timed out after 0.5s \(total time"):
            smoke_http.fetch("POST", f"{base}/v1/completions", 0.5, body=b"{}")
        assert time.monotonic() - start < 1.5


def test_a_trickling_router_cannot_hold_the_smoke_check_past_its_total_time(capsys):
    """Per-request and per-run deadlines: generous step deadlines, a 2 s run, a router that never finishes."""
    with serve(Trickle) as base:
        start = time.monotonic()
        code = smoke.main(["--endpoint", base, "--track", "tpu", "--metrics-url", f"{base}/metrics",
                           "--request-timeout", "1", "--step-timeout", "60", "--backoff-seconds", "0.05",
                           "--total-timeout", "2"])
        took = time.monotonic() - start
    out = capsys.readouterr().out
    assert code == 1
    assert took < 3.5, f"took {took:.1f}s"
    assert "timed out after" in lines(out, "FAIL")["completions"]


def test_redirects_are_not_followed_to_another_host():
    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            self.send_response(307)
            self.send_header("Location", other + "/v1/completions")
            self.send_header("Content-Length", "0")
            self.end_headers()

    Trickle.contacted = []
    with serve(Trickle) as other, serve(Redirect) as base:
        with pytest.raises(smoke.StepError, match=r"HTTP 307 redirect to http://127\.0\.0\.1:\d+/v1/completions: "
                                                  r"not followed.*not retried"):
            smoke_http.post_json(f"{base}/v1/completions", {}, request_timeout=1, deadline_seconds=1,
                                 backoff_seconds=0)
    assert Trickle.contacted == [], "the other host was contacted"


def test_bodies_are_read_up_to_a_bound(fake):
    state, base = fake
    state.metrics_body = "x 1\n" * 50_000  # 200 kB
    with pytest.raises(smoke_http._FinalError, match="larger than 100000 bytes"):
        smoke_http.fetch("GET", f"{base}/metrics/engine", 5, max_bytes=100_000)
    assert len(smoke_http.fetch("GET", f"{base}/metrics/engine", 5, max_bytes=200_000)[1]) == 200_000


@pytest.mark.parametrize("args", [
    ["--request-timeout", "1e12"], ["--request-timeout", "nan"], ["--request-timeout", "-1"],
    ["--step-timeout", "0"], ["--step-timeout", "inf"], ["--total-timeout", "1e9"],
    ["--metrics-timeout", "-5"], ["--backoff-seconds", "3600"], ["--long-prompt-words", "1000000000"],
    ["--long-prompt-words", "many"],
    # the older spellings, accepted for one release, hold the same bounds
    ["--deadline-seconds", "0"], ["--total-seconds", "1e9"], ["--metrics-wait-seconds", "-5"],
])
def test_absurd_numbers_are_a_usage_error(args, capsys):
    with pytest.raises(SystemExit) as caught:
        smoke.main(["--endpoint", "http://127.0.0.1:9", "--track", "gpu", *args])
    assert caught.value.code == 2
    assert args[0] in capsys.readouterr().err


# --------------------------------------------------------------------------- every slice answers (docs/scaling.md)
def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_each_slice_is_asked_directly(fake, capsys):
    _, base = fake
    # A longer retry budget than FAST's: on a busy machine a 0.4 s budget can run out on a healthy fake.
    code, out = run_smoke(capsys, base, "gpu", "--slice-endpoint", f"0={base}", "--slice-endpoint", f"1={base}/",
                          "--step-timeout", "10", "--request-timeout", "5")
    passed = lines(out, "PASS")
    assert code == 0, out
    assert passed["slice-0"].startswith(f"POST /v1/completions to {base} -> HTTP 200")
    assert "slice-1" in passed


def test_a_slice_that_does_not_answer_fails_the_smoke_check(fake, capsys):
    _, base = fake
    dead = f"http://127.0.0.1:{_closed_port()}"
    code, out = run_smoke(capsys, base, "tpu", "--slice-endpoint", f"0={base}", "--slice-endpoint", f"1={dead}")
    assert code == 1
    assert "slice-0" in lines(out, "PASS")
    assert lines(out, "FAIL")["slice-1"].startswith("POST /v1/completions: ")
    assert out.rstrip().splitlines()[-1].startswith("SUMMARY: FAIL")


@pytest.mark.parametrize("spec", ["1", "=http://x", "1=ftp://x"])
def test_slice_endpoint_must_name_a_slice_and_a_url(spec, capsys):
    with pytest.raises(SystemExit):
        smoke.main(["--endpoint", "http://127.0.0.1:1", "--track", "gpu", "--slice-endpoint", spec])
    assert f"--slice-endpoint {spec!r}: expected SLICE=http://HOST:PORT" in capsys.readouterr().err


def test_json_reports_a_failure_too(capsys):
    code = smoke.main(["--endpoint", f"http://127.0.0.1:{_closed_port()}", "--track", "gpu", *FAST, "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 1 and report["ok"] is False
    assert report["checks"][0]["check"] == "completions" and report["checks"][0]["status"] == "FAIL"
    assert "FAIL completions: " in captured.err and "SUMMARY: FAIL" in captured.err


# --------------------------------------------------------------------------- "is anything there" before "wait for it"
def _fake_clock():
    now = [0.0]
    lines: list[str] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    return now, sleep, lines


def test_nothing_listening_ends_the_step_at_the_connect_timeout_not_the_step_timeout():
    now, sleep, lines = _fake_clock()

    def attempt(timeout: float) -> None:
        raise smoke_http._UnreachableError("connection failed, nothing accepts it: [Errno 111] Connection refused")

    with pytest.raises(smoke.StepError, match=r"nothing answered for 10 s .*is the endpoint up"):
        smoke._with_retries(attempt, request_timeout=1, deadline_seconds=600, backoff_seconds=2,
                            clock=lambda: now[0], sleep=sleep, connect_timeout=10, progress=lines.append)
    assert now[0] == 10


def test_a_server_that_answers_gets_the_whole_step_and_progress_lines():
    now, sleep, lines = _fake_clock()
    answers = iter([smoke_http._UnreachableError("refused")] + [smoke._RetryableError("HTTP 503: warming up")] * 100)

    def attempt(timeout: float) -> None:
        raise next(answers)

    with pytest.raises(smoke.StepError, match=r"HTTP 503: warming up \(gave up"):
        smoke._with_retries(attempt, request_timeout=1, deadline_seconds=120, backoff_seconds=2,
                            clock=lambda: now[0], sleep=sleep, connect_timeout=10, progress=lines.append,
                            what="POST http://router/v1/completions")
    assert now[0] == 120
    assert lines and all(line.startswith("  still waiting for POST http://router/v1/completions: HTTP 503")
                         for line in lines)
    assert len(lines) <= 120 / smoke_http.PROGRESS_SECONDS


def test_smoke_against_nothing_says_so_in_seconds():
    """The command as users run it, with no server on the port: one FAIL line naming the cause, well inside 10 s
    with a short --connect-timeout (the default is 10 s: smoke_http.CONNECT_TIMEOUT_SECONDS)."""
    assert smoke_http.CONNECT_TIMEOUT_SECONDS == 10.0
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tools", "smoke", "--endpoint", f"http://127.0.0.1:{closed_port()}",
                           "--track", "gpu", "--connect-timeout", "0.5"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert time.monotonic() - start < 10
    assert proc.returncode == 1
    [failed] = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert "Connection refused" in failed and "is the endpoint up" in failed

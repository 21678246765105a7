"""tools.live.report on real inference-perf output: the pinned release replays multi-turn conversations against a
fake OpenAI-compatible server on loopback (a few seconds), then the report renders from what it wrote."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import background
from tests.conftest import ROOT, required_tool
from tests.fakes.fake_openai import FakeOpenAI
from tools.live import report, report_runs

CONVERSATIONS, TURNS, SYSTEM_TOKENS, INPUT_TOKENS, OUTPUT_TOKENS = 4, 4, 600, 60, 12
HOURLY_USD = 150.0
RUN_TIMEOUT_S = 120
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


PERF_VENV = Path(os.environ.get("INFERENCE_PERF_VENV", ROOT / ".venv-inference-perf"))


def perf_python() -> Path:
    """The inference-perf virtualenv `make test` builds (requirements-inference-perf.txt), or a skip that says
    why; in CI, which sets CI, a missing one fails."""
    required_tool((PERF_VENV / "bin" / "inference-perf").is_file(),
                  f"{PERF_VENV} has no inference-perf: run `make inference-perf` (needs Python >= 3.12)")
    return PERF_VENV / "bin" / "python"


TOKENIZER = ("import sys, pathlib; from inference_perf_probe import write_tokenizer; "
             "write_tokenizer(pathlib.Path(sys.argv[1]))")
"""The probe's word-level tokenizer (tools/live/inference_perf_probe.py), written by the inference-perf interpreter:
the Job reads Kimi's from the weights volume."""


def fixed(value: int) -> dict[str, int]:
    return {"type": "fixed", "min": value, "max": value, "mean": value, "std_dev": 0}


def perf_config(base_url: str, tokenizer: Path, out: Path) -> dict:
    """The shape of the benchmark Job's config (components/serving/benchmark.py), small, local and on loopback."""
    return {
        "load": {"type": "concurrent", "num_workers": 1, "request_timeout": 30,
                 "stages": [{"num_requests": CONVERSATIONS * TURNS, "concurrency_level": 2}]},
        "api": {"type": "completion", "streaming": True},
        "server": {"type": "vllm", "model_name": "fake-model", "base_url": base_url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tokenizer)},
        "data": {"type": "conversation_replay", "conversation_replay": {
            "seed": 0, "num_conversations": 2, "shared_system_prompt_len": SYSTEM_TOKENS,
            "turns_per_conversation": fixed(TURNS), "input_tokens_per_turn": fixed(INPUT_TOKENS),
            "output_tokens_per_turn": fixed(OUTPUT_TOKENS)}},
        "report": {"request_lifecycle": {"summary": True, "per_stage": True, "per_request": True,
                                         "per_request_fields": {"request": False, "response": False,
                                                                "response_chunks": False, "computed_metrics": True}}},
        "storage": {"local_storage": {"path": str(out), "report_file_prefix": "kimi-k3-1-"}},
    }


PERF_JOB = "inference-perf"
RUN_NAME = "gpu-20261130T060000Z"


def perf_run(work: Path) -> None:
    """One inference-perf run against the fake server, in this process (`python -m tests.tools.live.test_report WORK`, a
    background job tests/conftest.py starts as soon as collection ends, so it overlaps the first tests instead of
    adding its seconds to the suite). Writes WORK/result.json: the requests the server saw and any error."""
    python = PERF_VENV / "bin" / "python"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    requests, error = 0, None
    try:
        subprocess.run([str(python), "-c", TOKENIZER, str(work / "tokenizer")], check=True, timeout=60,
                       env={**env, "PYTHONPATH": str(ROOT / "tools" / "live")}, capture_output=True)
        server = FakeOpenAI()
        try:
            config = work / "config.yml"
            config.write_text(yaml.safe_dump(perf_config(server.url, work / "tokenizer", work / RUN_NAME)))
            proc = subprocess.run([str(python.with_name("inference-perf")), "--config_file", str(config)],
                                  cwd=work, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        finally:
            server.close()
        requests = server.requests
        if proc.returncode != 0:
            error = f"inference-perf exited {proc.returncode}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    except (OSError, subprocess.SubprocessError) as err:
        error = f"{type(err).__name__}: {err}"
    (work / "result.json").write_text(json.dumps({"requests": requests, "error": error}))


def start_run() -> None:
    """Start the run once per session if the inference-perf virtualenv exists (conftest calls this)."""
    if (PERF_VENV / "bin" / "inference-perf").is_file():
        job = background.Job(PERF_JOB)
        job.start_once([sys.executable, "-m", "tests.tools.live.test_report", str(job.folder / "work")], cwd=ROOT,
                       prepare=lambda folder: (folder / "work").mkdir())


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    perf_python()  # skip, or fail in CI, without the virtualenv
    start_run()  # a no-op when collection started it
    job = background.Job(PERF_JOB)
    proc = job.wait(RUN_TIMEOUT_S + 120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((job.folder / "work" / "result.json").read_text())
    assert result["error"] is None, result["error"]
    assert result["requests"] == CONVERSATIONS * TURNS
    # The run is shared by the session's processes; the report is written into a copy of it.
    run = tmp_path_factory.mktemp("perf") / RUN_NAME
    shutil.copytree(job.folder / "work" / RUN_NAME, run)
    (run / "outputs.json").write_text(json.dumps({"hourlyCostUsd": HOURLY_USD, "hourlyCostComplete": True}))
    return run


@pytest.fixture(scope="module")
def rendered(run_dir) -> Path:
    assert report.main([str(run_dir)]) == 0
    return run_dir


def test_real_run_renders_report_and_plots(rendered):
    run_dir = rendered
    text = (run_dir / report.REPORT).read_text()
    pngs = sorted(run_dir.glob("*.png"))
    assert len(pngs) >= 3
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, png.name
        assert f"]({png.name})" in text
    run = report.load_run(run_dir)
    assert run.successes == CONVERSATIONS * TURNS and run.failures == 0
    assert len(run.requests) == CONVERSATIONS * TURNS
    for label in ("TTFT p50", "ITL p90", "end-to-end p99", "output tokens/s"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
        assert "| - |" not in row, row
    # Cost per million output tokens from the stack's hourly estimate and the measured output rate.
    expected = HOURLY_USD / (run.throughput("output_tokens_per_sec") * 3600) * 1e6
    assert f"${expected:,.2f} (at ${HOURLY_USD:,.2f}/h)" in text


def test_turns_show_what_the_server_did(rendered):
    """The fake server caches prefixes: later turns reuse more of the prompt and start faster."""
    run = report.load_run(rendered)
    turns = report.by_turn(run.requests)
    assert sorted(turns) == list(range(1, TURNS + 1))
    assert all(len(reqs) == CONVERSATIONS for reqs in turns.values())

    def cached_share(turn: int) -> float:
        reqs = turns[turn]
        return sum(r.cached_tokens or 0 for r in reqs) / sum(r.prompt_tokens for r in reqs)

    assert cached_share(TURNS) > cached_share(1) and cached_share(TURNS) > 0.8
    assert all(r.ttft is not None and 0 < r.ttft < r.e2e for r in run.requests)
    assert all(r.output_tokens == OUTPUT_TOKENS for r in run.requests)
    assert run.cached_share is not None and 0 < run.cached_share < 1
    rows = [line for line in (rendered / report.REPORT).read_text().splitlines() if line.startswith("| 1 |")]
    assert len(rows) == 1 and rows[0].count(" ms |") == 3  # TTFT p50, p90, e2e p50 of the first turn


def test_two_runs_compare_side_by_side(run_dir, tmp_path):
    other = tmp_path / "tpu-20261130T070000Z"
    shutil.copytree(run_dir, other, ignore=shutil.ignore_patterns("*.png", "report.md", "compare-*"))
    summary = next(other.glob("*summary_lifecycle_metrics.json"))
    data = json.loads(summary.read_text())
    data["successes"]["throughput"]["output_tokens_per_sec"] *= 2
    summary.write_text(json.dumps(data))
    path = report.render([run_dir, other])
    assert path == run_dir / f"compare-{other.name}" / report.REPORT
    text = path.read_text()
    assert f"# Benchmark comparison: {run_dir.name} vs {other.name}" in text
    row = next(line for line in text.splitlines() if line.startswith("| output tokens/s |"))
    assert row.endswith("| +100.0% |")
    cost = next(line for line in text.splitlines() if line.startswith("| cost per million output tokens |"))
    assert cost.endswith("| -50.0% |")
    assert len(list(path.parent.glob("*.png"))) >= 3
    # The compare folder is not mistaken for a run's own reports.
    assert report.load_run(run_dir).summary == json.loads(next(run_dir.glob("*summary_lifecycle_metrics.json"))
                                                          .read_text())


def test_tiers_appear_when_inference_perf_scraped_the_engines(rendered, tmp_path):
    scraped = tmp_path / "scraped"
    shutil.copytree(rendered, scraped, ignore=shutil.ignore_patterns("*.png", "report.md", "compare-*"))
    (scraped / "kimi-k3-1-summary_prometheus_metrics.json").write_text(json.dumps({"successes": {
        "prefix_cache_hit_percent": {"mean": 61.5}, "external_prefix_cache_hit_percent": {"mean": 22.0}}}))
    text = report.markdown([report.load_run(scraped)], [])
    assert "| prefix-cache hit rate, HBM (local prefix cache) | 61.5% |" in text
    assert "| prefix-cache hit rate, connector (host DRAM on prefill) | 22.0% |" in text
    assert "not scraped" not in text
    assert "not scraped" in (rendered / report.REPORT).read_text()


def test_a_folder_without_reports_is_one_error_line(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "summary_lifecycle_metrics.json" in err and err.count("\n") == 1


def test_per_request_rows_without_computed_metrics_use_token_times():
    entry = {"start_time": 10.0, "end_time": 10.5, "error": None,
             "info": {"request_metrics": {"text": {"input_tokens": 100}},
                      "response_metrics": {"output_tokens": 3, "output_token_times": [10.1, 10.2, 10.4],
                                           "server_usage": {"prompt_tokens_details": {"cached_tokens": 40}}},
                      "extra_info": {"user_session": "conv_1", "chat_round": 2}}}
    r = report_runs.parse_request(entry)
    assert r is not None and r.turn == 2 and r.cached_tokens == 40 and r.prompt_tokens == 100
    assert r.ttft == pytest.approx(0.1) and r.itl == pytest.approx(0.15) and r.e2e == pytest.approx(0.5)
    assert report_runs.parse_request({"start_time": "x"}) is None


def test_percentile_matches_linear_interpolation():
    assert report.percentile([1, 2, 3, 4], 50) == 2.5
    assert report.percentile([5], 99) == 5
    assert report.percentile([3, 1, 2], 0) == 1 and report.percentile([3, 1, 2], 100) == 3
    assert report.percentile([], 50) is None


if __name__ == "__main__":
    perf_run(Path(sys.argv[1]))


def test_the_example_renders_the_bundled_run_through_the_cli(tmp_path):
    """`python -m tools report --example`: the user's way to see what a benchmark produces, without a stack."""
    proc = subprocess.run([sys.executable, "-m", "tools", "report", "--example", "--out", str(tmp_path / "ex")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report_md = (tmp_path / "ex" / "gpu-sample" / "report.md").read_text()
    assert "| requests | 16 ok, 0 failed |" in report_md and "cost per million output tokens" in report_md
    assert len(list((tmp_path / "ex" / "gpu-sample").glob("*.png"))) >= 3
    # The bundled files are report files only: no machine paths or addresses of the run that made them.
    for sample in (ROOT / "tools" / "live" / "sample_run").iterdir():
        text = sample.read_text()
        assert "/tmp" not in text and "127.0.0.1" not in text and "/home" not in text, sample.name


def test_example_takes_no_run_folder(tmp_path, capsys):
    assert report.main(["--example", str(tmp_path)]) == 2
    assert "give no RUN_DIR" in capsys.readouterr().err

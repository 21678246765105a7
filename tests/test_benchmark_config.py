"""The benchmark Job's config, loaded by the inference-perf release its image carries with inference-perf's own
loader, and its data generator built and asked for a first request (tools/live/inference_perf_probe.py, run in the
pinned release's own virtualenv: `make inference-perf`). Offline; the only substitution is the tokenizer."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import benchmark, catalog
from components.versions import INFERENCE_PERF_IMAGE
from tests.conftest import ROOT, STACKS
from tests.test_config import parse
from tests.test_operate import manifest

IP_PYTHON = Path(os.environ.get("INFERENCE_PERF_VENV", ROOT / ".venv-inference-perf")) / "bin" / "python"


@pytest.fixture(scope="module")
def probe_python() -> Path:
    """The pinned inference-perf's interpreter, or a skip that says how to get it (a failure in CI, which sets CI)."""
    if not IP_PYTHON.exists():
        message = f"{IP_PYTHON} is missing: run `make inference-perf` (needs Python >= 3.12)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return IP_PYTHON


def probe(python: Path, config: dict[str, Any] | str, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / benchmark.CONFIG_FILE
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
    proc = subprocess.run([str(python), str(ROOT / "tools" / "live" / "inference_perf_probe.py"), str(path),
                           "--tokenizer-dir", str(tmp_path / "tokenizer")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-2000:]
    result = json.loads(lines[-1])
    assert result["ok"] == (proc.returncode == 0), (result, proc.stderr[-2000:])
    return result


def test_one_pin_and_it_is_the_job_image_tag():
    """inference-perf publishes the image and the package from one tag (its .github/workflows/
    publish-on-release.yml), so the pinned package is what the Job's image runs."""
    pins = [line for line in (ROOT / "requirements-inference-perf.txt").read_text().splitlines()
            if line.startswith("inference-perf==")]
    assert len(pins) == 1
    assert INFERENCE_PERF_IMAGE.endswith(f":v{pins[0].split('==')[1].strip()}")
    for other in ("requirements.txt", "requirements-dev.txt"):
        assert not [line for line in (ROOT / other).read_text().splitlines() if line.startswith("inference-perf")], \
            "one pin, in requirements-inference-perf.txt (it cannot share .venv)"


def test_job_config_loads_and_builds_its_data_generator(probe_python, variants, tmp_path):
    """The ConfigMap the bench plan's Job mounts, exactly as rendered."""
    text = manifest(variants["bench"], "ConfigMap", f"{benchmark.JOB_NAME}-config")["data"][benchmark.CONFIG_FILE]
    result = probe(probe_python, text, tmp_path)
    assert result["ok"], result
    bench = parse("gpu", benchmark__enabled="true").benchmark
    slots = min(bench.conversations, bench.concurrency)
    assert result["tokenizer"] == "/models", "the Job reads the tokenizer from the weights volume"
    assert result["load"] == {"type": "concurrent", "num_workers": benchmark.CPU,
                              "request_timeout": benchmark.REQUEST_TIMEOUT_S,
                              "stages": [{"num_requests": bench.conversations * bench.turnsPerConversation,
                                          "concurrency_level": slots}]}
    assert (result["api"], result["server"]) == ("completion", "vllm")
    assert result["conversations"] == slots
    assert result["turns"] == [bench.turnsPerConversation] and result["output_tokens"] == [bench.outputTokensPerTurn]
    first = result["first_request"]
    assert (first["model"], first["max_tokens"], first["stream"]) == (catalog.KIMI.hf_id, bench.outputTokensPerTurn,
                                                                      True)
    expected = bench.systemPromptTokens + bench.inputTokensPerTurn
    assert abs(first["prompt_tokens"] - expected) <= expected // 100, (first, expected)


@pytest.mark.parametrize("stack", STACKS)
def test_config_of_each_track_loads(probe_python, stack, tmp_path):
    cfg = parse(stack, benchmark__enabled="true", benchmark__conversations="4", benchmark__concurrency="2",
                benchmark__systemPromptTokens="256", benchmark__inputTokensPerTurn="64")
    result = probe(probe_python, benchmark.inference_perf_config(cfg, "http://kimi-k3-1-epp:80", "bucket", "p"),
                   tmp_path)
    assert result["ok"], result
    assert result["server"] == ("vllm" if stack == "gpu" else "sglang") and result["conversations"] == 2


def test_the_release_refuses_what_the_old_config_sent(probe_python, tmp_path):
    """Proof the check can fail: plain integers for per-turn sizes, the chat API and an unknown key (this
    program's config before it was checked against the release had the first two)."""
    good = benchmark.inference_perf_config(parse("gpu", benchmark__enabled="true", benchmark__conversations="2",
                                                 benchmark__concurrency="2"), "http://x:80", "bucket", "p")
    cases = {
        "turns_per_conversation": lambda c: c["data"]["conversation_replay"].update(turns_per_conversation=8),
        "Unsupported API type": lambda c: c["api"].update(type="chat"),
        "Extra inputs are not permitted": lambda c: c["data"]["conversation_replay"].update(turns=3),
    }
    for expected, change in cases.items():
        bad = copy.deepcopy(good)
        change(bad)
        result = probe(probe_python, bad, tmp_path)
        assert not result["ok"] and expected in result["error"], (expected, result)

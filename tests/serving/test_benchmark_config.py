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

from components.facts import catalog
from components.facts.versions import INFERENCE_PERF_IMAGE
from components.serving import benchmark
from tests.config.test_config import parse
from tests.conftest import ROOT, STACKS, required_tool
from tests.plan.test_operate import manifest

IP_PYTHON = Path(os.environ.get("INFERENCE_PERF_VENV", ROOT / ".venv-inference-perf")) / "bin" / "python"


@pytest.fixture(scope="module")
def probe_python() -> Path:
    """The pinned inference-perf's interpreter, or a skip that says how to get it (a failure in CI, which sets CI)."""
    required_tool(IP_PYTHON.exists(), f"{IP_PYTHON} is missing: run `make inference-perf` (needs Python >= 3.12)")
    return IP_PYTHON


def probe_all(python: Path, configs: dict[str, dict[str, Any] | str], folder: Path) -> dict[str, dict[str, Any]]:
    """Every config through one probe process (one import of inference-perf and transformers for all)."""
    paths = []
    for index, config in enumerate(configs.values()):
        path = folder / f"{index}-{benchmark.CONFIG_FILE}"
        path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
        paths.append(str(path))
    proc = subprocess.run([str(python), str(ROOT / "tools" / "live" / "inference_perf_probe.py"), *paths,
                           "--tokenizer-dir", str(folder / "tokenizer")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    results = [json.loads(line) for line in proc.stdout.strip().splitlines()]
    assert len(results) == len(configs), proc.stderr[-2000:]
    assert all(r["ok"] for r in results) == (proc.returncode == 0), (results, proc.stderr[-2000:])
    return dict(zip(configs, results, strict=True))


def small_config(stack: str) -> dict[str, Any]:
    cfg = parse(stack, benchmark__enabled="true", benchmark__conversations="4", benchmark__concurrency="2",
                benchmark__systemPromptTokens="256", benchmark__inputTokensPerTurn="64")
    return benchmark.inference_perf_config(cfg, "http://kimi-k3-1-epp:80", "bucket", "p")


def refused_configs() -> dict[str, dict[str, Any]]:
    """Plain integers for per-turn sizes, the chat API and an unknown key (this program's config before it was
    checked against the release had the first two), each keyed by the error the release must give."""
    good = benchmark.inference_perf_config(parse("gpu", benchmark__enabled="true", benchmark__conversations="2",
                                                 benchmark__concurrency="2"), "http://x:80", "bucket", "p")
    cases = {
        "turns_per_conversation": lambda c: c["data"]["conversation_replay"].update(turns_per_conversation=8),
        "Unsupported API type": lambda c: c["api"].update(type="chat"),
        "Extra inputs are not permitted": lambda c: c["data"]["conversation_replay"].update(turns=3),
    }
    bad = {}
    for expected, change in cases.items():
        bad[expected] = copy.deepcopy(good)
        change(bad[expected])
    return bad


@pytest.fixture(scope="module")
def probed(probe_python, variants, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """The results of every config the tests below check, from one probe run."""
    job = manifest(variants["bench"], "ConfigMap", f"{benchmark.JOB_NAME}-config")["data"][benchmark.CONFIG_FILE]
    configs = {"job": job, **{f"track-{s}": small_config(s) for s in STACKS},
               **{f"refused-{e}": c for e, c in refused_configs().items()}}
    return probe_all(probe_python, configs, tmp_path_factory.mktemp("inference-perf-probe"))


def test_one_pin_and_it_is_the_job_image_tag():
    """inference-perf publishes the image and the package from one tag (its .github/workflows/
    publish-on-release.yml), so the pinned package is what the Job's image runs."""
    pins = [line for line in (ROOT / "requirements-inference-perf.in").read_text().splitlines()
            if line.startswith("inference-perf==")]
    assert len(pins) == 1
    assert INFERENCE_PERF_IMAGE.endswith(f":v{pins[0].split('==')[1].strip()}")
    for other in ("requirements.in", "requirements-dev.in", "requirements.txt", "requirements-dev.txt"):
        assert not [line for line in (ROOT / other).read_text().splitlines() if line.startswith("inference-perf")], \
            "one pin, in requirements-inference-perf.in (it cannot share .venv)"


def test_job_config_loads_and_builds_its_data_generator(probed):
    """The ConfigMap the bench plan's Job mounts, exactly as rendered."""
    result = probed["job"]
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
def test_config_of_each_track_loads(probed, stack):
    result = probed[f"track-{stack}"]
    assert result["ok"], result
    assert result["server"] == "vllm" and result["conversations"] == 2  # vLLM-TorchTPU speaks vLLM on TPU


def test_the_release_refuses_what_the_old_config_sent(probed):
    """Proof the check can fail: each config of refused_configs() is refused with its own error."""
    for expected in refused_configs():
        result = probed[f"refused-{expected}"]
        assert not result["ok"] and expected in result["error"], (expected, result)

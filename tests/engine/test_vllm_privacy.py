"""vLLM 0.33.0's usage-stats switch on the GPU engines' environment (docs/engine-preconditions.md GPU-PRIVACY-1): the
gate `report_usage_stats` asks before it posts is closed by what the pods set (components/plan/engines.py
ENGINE_PRIVACY_ENV), and open without it."""

from __future__ import annotations

from components.plan import engines
from tests.engine_support import USAGE_STATS_SWITCHES, record, usage_stats_enabled


def test_usage_stats_are_off_on_the_pods_environment(monkeypatch, tmp_path):
    pods = dict(engines.ENGINE_PRIVACY_ENV)
    assert {"VLLM_NO_USAGE_STATS", "DO_NOT_TRACK"} <= pods.keys()
    assert usage_stats_enabled(monkeypatch, tmp_path, pods) is False
    assert usage_stats_enabled(monkeypatch, tmp_path, {}) is True, "the gate is open without the pods' switches"
    for name, value in pods.items():  # each usage-stats switch the pods set is enough alone
        if name not in USAGE_STATS_SWITCHES:
            continue
        assert usage_stats_enabled(monkeypatch, tmp_path, {name: value}) is False, name
    record("GPU usage stats (vLLM 0.33.0 is_usage_stats_enabled on the pods' env): off; on without it")

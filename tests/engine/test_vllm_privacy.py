"""vLLM 0.33.0's usage-stats switch on the GPU engines' environment (docs/engine-preconditions.md GPU-PRIVACY-1): the
gate `report_usage_stats` asks before it posts is closed by what the pods set (components/plan/engines.py
ENGINE_PRIVACY_ENV), and open without it."""

from __future__ import annotations

import pytest

from components.plan import engines
from tests.engine_support import record


@pytest.mark.parametrize("off", [True, False])
def test_usage_stats_are_off_on_the_pods_environment(monkeypatch, tmp_path, off):
    from vllm.usage import usage_lib

    for name in ("VLLM_NO_USAGE_STATS", "VLLM_DO_NOT_TRACK", "DO_NOT_TRACK"):
        monkeypatch.delenv(name, raising=False)
    if off:
        for name, value in engines.ENGINE_PRIVACY_ENV:
            monkeypatch.setenv(name, value)
    # The do-not-track file under the user's home decides too: point it where nothing is.
    monkeypatch.setattr(usage_lib, "_USAGE_STATS_DO_NOT_TRACK_PATH", str(tmp_path / "do_not_track"))
    monkeypatch.setattr(usage_lib, "_USAGE_STATS_ENABLED", None)
    assert usage_lib.is_usage_stats_enabled() is (not off)
    if off:
        record("GPU usage stats (vLLM 0.33.0 is_usage_stats_enabled on the pods' env): off; on without it")

"""components/facts/metrics.py is the one checked list: every name the smoke check reads is in it, each entry is cited
at the pinned release, and the smoke check cannot use a name outside it."""

from __future__ import annotations

import re

import pytest

from components.facts import metrics, versions
from components.plan import autoscaling
from tests.observe.test_observability import observability_metric_names
from tools.live import smoke

CITED = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/blob/[\w.-]+/\S+$")


def test_every_entry_names_a_pinned_release_and_a_file_at_it():
    keys = {(m.name, m.exporter) for m in metrics.METRICS}
    assert keys and len(keys) == len(metrics.METRICS)
    pinned = {"vllm": f"v{versions.VLLM.version}", "sglang": f"v{versions.SGLANG_TORCHTPU_FLAGS_VERSION}",
              "vllm-torchtpu": f"v{versions.VLLM_TORCHTPU.version}", "epp": versions.ROUTER_VERSION,
              "gmp": metrics.GMP_COMMIT, "dcgm": metrics.DCGM_EXPORTER_COMMIT,
              "ksm": metrics.KSM_COMMIT}
    for metric in metrics.METRICS:
        if metric.exporter == "gke":  # GKE's own system metrics: an unversioned published list
            assert metric.source == metrics.GKE_SYSTEM_METRICS and metric.name.startswith("kubernetes_io:"), metric
            continue
        assert CITED.match(metric.source), metric
        assert f"/blob/{pinned[metric.exporter]}/" in metric.source, metric  # moves with the pin
        assert metric.exporter in metrics.RELEASES and metric.note
        if metric.kind == "counter":
            assert metric.name.endswith("_total"), f"{metric.name}: counters are scraped with _total"


def test_every_smoke_selector_is_in_the_checked_list():
    used = set()
    for checks in smoke.METRIC_CHECKS.values():
        for check in checks.values():
            for selector in check.candidates:
                assert selector.name in {m.name for m in metrics.METRICS}, selector
                listed = [m for m in metrics.METRICS if m.name == selector.name]
                assert any({key for key, _ in selector.labels} <= set(m.labels) for m in listed), selector
                used.add(selector.name)
    used |= observability_metric_names()
    used |= set(autoscaling.TRIGGER_METRICS)
    assert used == {m.name for m in metrics.METRICS}, "an entry no consumer reads: drop it or name its consumer"


def test_require_rejects_unlisted_names_and_wrong_exporters():
    assert metrics.require("vllm:request_success_total", "vllm") == "vllm:request_success_total"
    with pytest.raises(KeyError, match="not in components/facts/metrics.py"):
        metrics.require("vllm:gpu_prefix_cache_hits_total", "vllm")  # removed before 0.33.0
    with pytest.raises(KeyError):
        metrics.require("llm_d_epp_pd_decision_total", "epp")  # only the deprecated pd-profile-handler records it
    with pytest.raises(KeyError):
        metrics.require("sglang:num_requests_total", "vllm-torchtpu")
    with pytest.raises(KeyError):  # 0.29.0 has no per-source breakdown of cached prompt tokens
        metrics.require("vllm:prompt_tokens_cached_by_source_total", "vllm-torchtpu")


def test_gaps_name_real_checks_and_only_engines_that_serve_the_track():
    for gap in metrics.GAPS:
        tracks = [t for t, engines in smoke.ENGINES.items() if gap.exporter in engines]
        assert tracks and any(gap.fact in smoke.METRIC_CHECKS[t] for t in tracks), gap
    assert metrics.gap("engine-requests", "vllm-torchtpu") is None

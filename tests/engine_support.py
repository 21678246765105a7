"""Shared by the two engine-code tiers (tests/engine/ in .venv-engines, tests/engine_tpu/ in .venv-engines-tpu): the
fixture stacks as the program's typed config, the skip-or-fail rule for a missing engine, and the figures each tier
prints at the end of its run (so .ci/run's log shows what the engines' own functions computed next to the plan)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def engines_stay_offline() -> None:
    """Tests reach only loopback: the engine reads the local config.json it is given, never the Hub, and sends no
    usage stats. Called by the two tiers' conftest files before the engines import; never at this module's import,
    since the main suite imports stack_config from here and an environment variable set in a worker would stay set
    for every later test of that worker (huggingface_hub checks HF_HUB_OFFLINE on each call)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

FIGURES: list[str] = []
"""Lines the tier's tests record: `engine ... == plan ...`, printed by pytest_terminal_summary."""


def record(line: str) -> None:
    FIGURES.append(line)


USAGE_STATS_SWITCHES = ("VLLM_NO_USAGE_STATS", "VLLM_DO_NOT_TRACK", "DO_NOT_TRACK")
"""The variables vLLM's envs.py reads for its usage-stats gate (both pinned wheels)."""


def usage_stats_enabled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str]) -> bool:
    """The installed vLLM's own `is_usage_stats_enabled` (the gate `report_usage_stats` asks before it posts) under
    `env` alone: every switch it reads cleared first, its do-not-track file pointed where nothing is, its cached
    answer reset. Both engine tiers ask it (GPU-PRIVACY-1, TPU-PRIVACY-1)."""
    from vllm.usage import usage_lib

    for name in USAGE_STATS_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(usage_lib, "_USAGE_STATS_DO_NOT_TRACK_PATH", str(tmp_path / "do_not_track"))
    monkeypatch.setattr(usage_lib, "_USAGE_STATS_ENABLED", None)
    return usage_lib.is_usage_stats_enabled()


def skip_or_fail(message: str) -> None:
    """A missing engine skips with its reason on a developer's machine and fails in CI (CI=true)."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def stack_config(name: str, **changes: str):
    """tests/stacks/Pulumi.<name>.yaml as the program's StackConfig (project prefix stripped, values as text), with
    `changes` (keys as `section.key`, values as config text) applied on top."""
    from components.config import PROJECT, parse_config

    document = yaml.safe_load((ROOT / "tests" / "stacks" / f"Pulumi.{name}.yaml").read_text())
    prefix = f"{PROJECT}:"
    raw = {k[len(prefix):]: v if isinstance(v, str) else yaml.safe_dump(v, default_flow_style=True).strip()
           .removesuffix("...").strip() for k, v in document["config"].items() if k.startswith(prefix)}
    raw = {k: ("true" if v is True else "false" if v is False else v) for k, v in raw.items()}
    return parse_config({**raw, **changes})


def terminal_summary(terminalreporter, title: str) -> None:
    if FIGURES:
        terminalreporter.section(title)
        for line in FIGURES:
            terminalreporter.write_line(line)

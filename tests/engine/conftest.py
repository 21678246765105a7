"""The engine-code tier: runs inside .venv-engines (requirements-engines.txt), where the pinned vLLM imports on the
CPU. The project's own modules come from this checkout; the stack configs are the fixture stacks the main suite
renders (tests/stacks/), read into the same typed config the program validates."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# Tests reach only loopback: the engine reads the local config.json it is given, never the Hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")


def _require_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        message = ("vllm is not importable here: run the tier with .venv-engines/bin/python (`make engine-tests`; "
                   "requirements-engines.txt)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def stack_config(name: str):
    """tests/stacks/Pulumi.<name>.yaml as the program's StackConfig (project prefix stripped, values as text)."""
    from components.config import PROJECT, parse_config

    document = yaml.safe_load((ROOT / "tests" / "stacks" / f"Pulumi.{name}.yaml").read_text())
    prefix = f"{PROJECT}:"
    raw = {k[len(prefix):]: v if isinstance(v, str) else yaml.safe_dump(v, default_flow_style=True).strip()
           .removesuffix("...").strip() for k, v in document["config"].items() if k.startswith(prefix)}
    return parse_config({k: ("true" if v is True else "false" if v is False else v) for k, v in raw.items()})


@pytest.fixture(scope="session", autouse=True)
def engine_importable() -> None:
    _require_vllm()


@pytest.fixture(scope="session")
def gpu_cfg():
    return stack_config("gpu")

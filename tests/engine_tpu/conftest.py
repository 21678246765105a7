"""The TPU half of the engine-code tier: runs inside .venv-engines-tpu (requirements-engines-tpu.txt and
requirements-engines-tpu-wheels.txt), where vLLM-TorchTPU 0.29.0's released Python (its vLLM 0.29.0 and the
vllm-torchtpu-core platform plugin, files as the wheels ship them) imports on the CPU build of the torch 2.13.0 the
engine pins. Why on CPython 3.11 and not the engine's 3.12: requirements-engines-tpu.in's header."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.engine_support import engines_stay_offline, skip_or_fail, stack_config, terminal_summary  # noqa: E402

engines_stay_offline()


@pytest.fixture(scope="session", autouse=True)
def engine_importable() -> None:
    try:
        import vllm_torchtpu  # noqa: F401
        from vllm_torchtpu.offload import raiden_store  # noqa: F401
    except ImportError as error:
        skip_or_fail(f"vLLM-TorchTPU is not importable here ({error}): run the tier with .venv-engines-tpu/bin/python "
                     "(`make engine-tests`; requirements-engines-tpu.txt)")


@pytest.fixture(scope="session")
def tpu_cfg():
    return stack_config("tpu")


def pytest_terminal_summary(terminalreporter):
    terminal_summary(terminalreporter, "TPU figures from vLLM-TorchTPU 0.29.0's own functions (engine == plan)")

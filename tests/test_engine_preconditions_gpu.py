"""The GPU rows of docs/engine-preconditions.md: what vLLM 0.33.0 asserts, reads or binds on its start-up path,
checked against the rendered prefill and decode pods (tests/preconditions.py)."""

from __future__ import annotations

from tests import preconditions as pc

ENGINE = "vllm"


def _engines(objs: pc.Objects) -> list[tuple[str, dict]]:
    found = pc.containers(objs, ENGINE)
    roles = {where.split("/")[1] for where, _ in found}
    assert roles == {"prefill", "decode"}, f"engine roles {sorted(roles)}, expected prefill and decode"
    return found


# --------------------------------------------------------------------------- NIXL connector
@pc.row("GPU-NIXL-1", breaks=lambda objs: pc.drop_env(objs, ENGINE, "VLLM_SSM_CONV_STATE_LAYOUT"))
def _conv_state_layout(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        value = pc.env(container).get("VLLM_SSM_CONV_STATE_LAYOUT")
        assert value == "DS", f"{where}: VLLM_SSM_CONV_STATE_LAYOUT={value!r}, the NIXL worker asserts DS"


test_gpu_precondition_holds = pc.holds_test("GPU")

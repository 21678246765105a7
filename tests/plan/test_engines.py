"""The engine each track pins can load the checkpoint: its registry, read from the released code
(../shared/engine-models/), maps the model's architecture to an implementation for that accelerator; a checkpoint
or engine that breaks this is refused before any resource exists, and the staged revision's config.json is held
to the geometry the plan was computed with (components/weights/geometry.py)."""

from __future__ import annotations

import json

import pytest

from components.config import ConfigError
from components.facts.versions import SGLANG_TORCHTPU_ARCHITECTURES, VLLM, VLLM_TORCHTPU
from components.plan import engines
from components.weights import geometry
from tests.config.test_config import parse
from tests.conftest import run_plan, stack_document, write_stack


def registry(shared, name: str) -> frozenset[str]:
    return frozenset(line.strip() for line in (shared / "engine-models" / name).read_text().splitlines()
                     if line.strip())


def test_pinned_engines_register_the_checkpoint_architecture(shared):
    """GPU: vLLM 0.33.0's registry; TPU: what vllm-torchtpu-core 0.29.0's register_models() points at TPU code."""
    gpu = registry(shared, f"vllm-{VLLM.version}.txt")
    tpu = registry(shared, f"vllm-torchtpu-core-{VLLM_TORCHTPU.core_version}.txt")
    assert VLLM.architectures <= gpu
    assert {"KimiK3ForConditionalGeneration", "KimiLinearForCausalLM"} <= VLLM.architectures
    assert VLLM_TORCHTPU.architectures == tpu
    # The combined wheel's own vLLM 0.29.0 registry accepts the names too (the plugin only re-points them).
    assert VLLM_TORCHTPU.architectures <= registry(shared, f"vllm-torchtpu-{VLLM_TORCHTPU.version}.txt")
    default = parse("gpu").model.architecture
    assert default == "KimiK3ForConditionalGeneration"
    for track in ("gpu", "tpu"):
        engine, registered = engines.registered_architectures(parse(track))
        assert default in registered, engine
    # The unreleased SGLang build is assumed to carry SGLang 0.5.23's K3 class.
    assert SGLANG_TORCHTPU_ARCHITECTURES <= registry(shared, "sglang-0.5.23.txt")


def test_an_engine_whose_registry_lacks_the_architecture_is_refused_with_one_line(shared):
    """sglang-jax at cddbf6f, the previous TPU engine, registers no Kimi K3 class (its real registry list)."""
    sglang_jax = registry(shared, "sglang-jax-cddbf6f.txt")
    assert "KimiK3ForConditionalGeneration" not in sglang_jax
    with pytest.raises(ConfigError) as info:
        engines.check_architecture(parse("tpu").model.architecture, "sglang-jax cddbf6f", sglang_jax)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("kimi-k3-1:model.architecture = 'KimiK3ForConditionalGeneration': sglang-jax cddbf6f "
                              "registers no such model for this track")


def test_plan_refuses_an_architecture_the_pinned_tpu_engine_does_not_register(tmp_path, shared):
    """KimiK25 is in vLLM 0.29.0's registry but vLLM-TorchTPU gives it no TPU implementation: refused before any
    resource is registered, one line, no traceback."""
    assert "KimiK25ForConditionalGeneration" not in registry(shared, "vllm-torchtpu-core-0.29.0.txt")
    config = dict(stack_document("tpu")["config"])
    config["kimi-k3-1:model.architecture"] = "KimiK25ForConditionalGeneration"
    out = tmp_path / "out"
    proc = run_plan(out, "--stack-file", str(write_stack(tmp_path, "k25", config)))
    assert proc.returncode != 0
    assert "kimi-k3-1:model.architecture = 'KimiK25ForConditionalGeneration': vLLM-TorchTPU 0.29.0 registers no " \
           "such model for this track" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("changes,expected", [
    ({"model__speculative": "mtp"}, "kimi-k3-1:model.speculative = 'mtp': vLLM-TorchTPU 0.29.0 re-registers no Kimi "
                                    "K3 MTP drafter for TPU"),
    ({"model__kdaStateDtype": "bfloat16"}, "kimi-k3-1:model.kdaStateDtype = 'bfloat16': vLLM-TorchTPU 0.29.0 keeps "
                                           "the KDA recurrent state in float32"),
])
def test_settings_the_tpu_engine_would_refuse_or_ignore_stop_offline(changes, expected):
    with pytest.raises(ConfigError) as info:
        engines.check_engine(parse("tpu", **changes))
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)


def test_a_kda_state_dtype_vllm_refuses_is_rejected_with_one_line():
    """vLLM 0.33.0 raises for any KDA recurrent dtype but auto, float32 and bfloat16 (mamba_utils.py
    kda_state_dtype): the key offers only those."""
    from tests.config.test_config import error

    message = error("gpu", model__kdaStateDtype="float16")
    assert message.startswith("kimi-k3-1:model.kdaStateDtype = 'float16'") and "float32" in message


# --------------------------------------------------------------------------- config.json at pulumi up
K3_CONFIG = {
    # The text_config of moonshotai/Kimi-K3's config.json as vllm-project/tpu-inference mirrors it
    # (tests/models/jax/test_kimi_k3_real_shapes.py REAL_K3_TEXT_CONFIG), inside the multimodal wrapper.
    "architectures": ["KimiK3ForConditionalGeneration"],
    "text_config": {
        "num_hidden_layers": 93, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        "linear_attn_config": {
            "full_attn_layers": [*range(4, 93, 4), 93],
            "kda_layers": [i for i in range(1, 94) if i not in {*range(4, 93, 4), 93}],
            "head_dim": 128, "num_heads": 96, "short_conv_kernel_size": 4,
        },
    },
}


def _compare(config: dict, stack: str = "tpu") -> str | None:
    cfg = parse(stack)
    engine, registered = engines.registered_architectures(cfg)
    return geometry._CheckGeometry.compare(json.loads(json.dumps(config)), geometry.expected_geometry(cfg),
                                           sorted(registered), engine)


def test_the_published_k3_config_matches_the_defaults():
    assert _compare(K3_CONFIG) is None and _compare(K3_CONFIG, "gpu") is None


def test_a_checkpoint_with_other_geometry_names_the_key_to_set():
    """A Kimi Linear 48B-sized KDA (32 heads) would make every figure of the plan wrong."""
    smaller = json.loads(json.dumps(K3_CONFIG))
    smaller["text_config"]["linear_attn_config"]["num_heads"] = 32
    assert _compare(smaller) == ("config.json gives 32 where the plan was computed with 96: set "
                                 "kimi-k3-1:model.kdaHeads to 32 (pulumi config set model.kdaHeads 32)")
    fewer = json.loads(json.dumps(K3_CONFIG))
    fewer["text_config"]["linear_attn_config"]["kda_layers"] = fewer["text_config"]["linear_attn_config"][
        "kda_layers"][:60]
    assert "kimi-k3-1:model.kdaLayers to 60" in _compare(fewer)


def test_a_checkpoint_the_engine_does_not_register_is_refused():
    other = dict(K3_CONFIG, architectures=["KimiK25ForConditionalGeneration"])
    message = _compare(other)
    assert message.startswith("the checkpoint's config.json names architecture 'KimiK25ForConditionalGeneration', "
                              "which vLLM-TorchTPU 0.29.0 does not register")


def test_accelerator_pools_wait_for_the_geometry_check(plans):
    for stack in ("gpu", "tpu"):
        plan = plans[stack]
        [check] = [r for r in plan.resources if r["type"] == "pulumi-python:dynamic/kimi:CheckpointGeometry"]
        pools = [r for r in plan.of_type("gcp:container/nodePool:NodePool") if r["parent"] in ("gpu", "tpu")]
        assert pools
        for pool in pools:
            assert check["name"] in plan.closure(pool["name"]), pool["name"]

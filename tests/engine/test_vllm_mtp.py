"""vLLM 0.33.0's MTP drafter configuration on Kimi K3's config class, run: where the MTP layer count comes from
(SpeculativeConfig.hf_config_override, vllm/config/speculative.py) and what a checkpoint without it gives (0, the
KimiLinearConfig default), against the plan's reading of config.json (components/weights/geometry.py) and its refusal
(components/plan/engines.py check_mtp)."""

from __future__ import annotations

import pytest

from components.config import ConfigError
from components.plan import engines
from tests.engine.conftest import stack_config
from tests.engine_facts import MTP_READINGS


def n_predict(text_config: dict) -> int:
    from vllm.config.speculative import SpeculativeConfig
    from vllm.transformers_utils.configs.kimi_k3 import KimiK3Config

    hf = KimiK3Config(text_config=text_config)
    hf.architectures = ["KimiK3ForConditionalGeneration"]
    return SpeculativeConfig.hf_config_override(hf).n_predict


@pytest.mark.parametrize(("text_config", "layers"), MTP_READINGS)
def test_vllm_reads_the_mtp_layers_as_the_plan_does(text_config, layers):
    assert n_predict(text_config) == layers


def test_mtp_without_layers_is_refused_at_plan_time():
    assert n_predict({}) == 0  # what vLLM would divide num_speculative_tokens by
    with pytest.raises(ConfigError, match="model.speculative.*no MTP layers.*num_nextn_predict_layers"):
        engines.check_mtp(stack_config("gpu", **{"model.speculative": "mtp"}))
    engines.check_mtp(stack_config("gpu", **{"model.speculative": "mtp", "model.mtpLayers": "1"}))
    with pytest.raises(ConfigError, match="model.speculativeTokens"):
        engines.check_mtp(stack_config(
            "gpu", **{"model.speculative": "mtp", "model.mtpLayers": "2", "model.speculativeTokens": "3"}))

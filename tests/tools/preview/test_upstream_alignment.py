"""docs/upstream-alignment.md holds the generated model-server pods and router configs side by side with
upstream: every generated setting has a row with its value, every difference a reason (tools/preview/alignment.py)."""

from __future__ import annotations

import copy

import pytest
import yaml

from tools.preview import alignment


@pytest.fixture(scope="module")
def tables() -> dict[str, list[alignment.Row]]:
    return alignment.read_tables(alignment.DOC.read_text())


@pytest.fixture(scope="module")
def generated(plans, plan_root) -> dict[str, dict[str, str]]:
    return alignment.generated(plan_root)


def _problems(tables, generated, heading=None, settings=None):
    ours = dict(generated)
    if heading:
        ours[heading] = settings
    return alignment.problems(tables, ours)


def test_every_row_holds_and_every_difference_is_explained(tables, generated):
    found = alignment.problems(tables, generated)
    assert not found, ("docs/upstream-alignment.md is out of step with the generated objects; run `make plan "
                       "&& python -m tools alignment --write` and explain the UNEXPLAINED rows:\n" + "\n".join(found))


def test_each_subject_has_a_table(tables):
    assert set(tables) == {s.heading for s in alignment.SUBJECTS}
    assert all(len(rows) > 10 for rows in tables.values())


@pytest.mark.parametrize("heading,setting", [
    ("GPU prefill pod", "hostPID"),                                      # DSV4@6b047cf
    ("GPU decode pod", "env.NVSHMEM_CUMEM_HANDLE_TYPE"),                 # DSV4@6b047cf
    ("GPU decode pod", "init.routing-proxy.flag.--enable-prefiller-sampling"),
    ("TPU worker pod", "init.tpu-node-setup.script"),                    # TPU host-offload guide @54523a5
    ("Router, GPU (P/D DisaggregatedSet)", "plugin.disaggregatedset-rollout-screener"),  # DSV4 router @785dfec
])
def test_deleting_an_adopted_setting_fails(tables, generated, heading, setting):
    settings = dict(generated[heading])
    assert setting in settings
    del settings[setting]
    found = _problems(tables, generated, heading, settings)
    assert any(f"`{setting}`" in line and "generated object has '—'" in line for line in found), found


def test_a_new_unexplained_setting_fails(tables, generated):
    settings = {**generated["GPU decode pod"], "env.SOMETHING_NEW": "1"}
    found = _problems(tables, generated, "GPU decode pod", settings)
    assert found == ["GPU decode pod: `env.SOMETHING_NEW` = '1' is generated but not in the table (UNEXPLAINED)"]


def test_a_changed_value_fails(tables, generated):
    settings = {**generated["GPU prefill pod"], "env.UCX_TLS": "cuda_copy,cuda_ipc,tcp"}
    found = _problems(tables, generated, "GPU prefill pod", settings)
    assert len(found) == 1 and "`env.UCX_TLS`" in found[0]


def test_verdicts_are_checked():
    rows = {"GPU prefill pod": [alignment.Row("hostPID", "true", "false", "same (DSV4)")]}
    found = alignment.problems({**{s.heading: [] for s in alignment.SUBJECTS}, **rows},
                               {s.heading: {} for s in alignment.SUBJECTS} | {"GPU prefill pod": {"hostPID": "true"}})
    assert found == ["GPU prefill pod: `hostPID`: 'same' but ours 'true' != upstream 'false'"]
    rows = {"GPU prefill pod": [alignment.Row("hostPID", "true", "—", "differs")]}
    found = alignment.problems({**{s.heading: [] for s in alignment.SUBJECTS}, **rows},
                               {s.heading: {} for s in alignment.SUBJECTS} | {"GPU prefill pod": {"hostPID": "true"}})
    assert found == ["GPU prefill pod: `hostPID`: 'differs' needs the reason and its source"]


def test_a_row_neither_side_has_fails_and_write_drops_it(tables, generated):
    """A setting the program stopped generating, kept as an 'ours only' row with both sides empty, is stale."""
    rows = {"TPU leader pod": [alignment.Row("mount./gone", "—", "—", "ours only: a lock mounted at start, once")]}
    found = alignment.problems({**{s.heading: [] for s in alignment.SUBJECTS}, **rows},
                               {s.heading: {} for s in alignment.SUBJECTS})
    assert found == ["TPU leader pod: `mount./gone`: neither the generated object nor upstream has it: remove the row"]
    text = alignment.DOC.read_text()
    row = "| `env.POD_IP` |"
    stale = text.replace(row, "| `mount./gone` | — | — | ours only: a lock mounted at start, once |\n" + row, 1)
    assert alignment.rewrite(stale, generated) == text


def test_write_refreshes_ours_and_adds_unexplained_rows(generated):
    text = alignment.DOC.read_text()
    ours = copy.deepcopy(generated)
    ours["TPU leader pod"]["env.NEW"] = "x"
    ours["TPU leader pod"]["flag.--block-size"] = "64"
    rewritten = alignment.rewrite(text, ours)
    found = alignment.problems(alignment.read_tables(rewritten), ours)
    assert found == ["TPU leader pod: `env.NEW`: verdict must start with one of same, adopted, differs, "
                     "ours only, upstream only ('UNEXPLAINED: explain or adopt')"]
    assert "| `flag.--block-size` | `64` |" in rewritten
    assert alignment.rewrite(text, generated) == text, "--write on an up-to-date doc changes nothing"


def test_rows_citing_the_local_a4x_max_overlay_hold_there(shared, generated):
    """Claims that cite the A4X Max P/D guide (rendered in ../shared) are checked against that file."""
    path = shared / "upstream" / "llm-d-guides" / "pd-disaggregation_modelserver_gpu_vllm_gke_a4xmax.yaml"
    if not path.exists():
        pytest.skip(f"{path} missing")
    templates = alignment.pod_templates(m for m in yaml.safe_load_all(path.read_text()) if m)
    for role in ("prefill", "decode"):
        upstream = alignment.pod_settings(templates[f"Deployment/pd-disaggregation-nvidia-gpu-vllm-{role}"])
        ours = generated[f"GPU {role} pod"]
        for key in ("env.USER", "env.UCX_IB_ROCE_REACHABILITY_MODE", "env.NCCL_TUNER_PLUGIN", "env.NCCL_NET_PLUGIN"):
            assert ours[key] == upstream[key], key
        assert "label.llm-d.ai/engine-type" in upstream
    decode = alignment.pod_settings(templates["Deployment/pd-disaggregation-nvidia-gpu-vllm-decode"])
    assert decode["init.routing-proxy.flag.--secure-proxy"] == generated["GPU decode pod"][
        "init.routing-proxy.flag.--secure-proxy"], "the sidecar release line before ours spells it --secure-proxy"

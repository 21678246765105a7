"""Supply chain of the TPU engine: the two vLLM-TorchTPU wheels at the hashes their release publishes, every
dependency from a hash-pinned lock at the versions the wheels pin, the lock shipped to the pods, and no token in the
installer's environment; the lock writer keeps only what a CPython 3.12 manylinux x86_64 host installs."""

from __future__ import annotations

import fnmatch
import re

import pytest
import yaml
from packaging.utils import canonicalize_name

from components.versions import TPU_ENGINE_LOCK_DIR, VLLM_TORCHTPU
from tests.conftest import ROOT
from tools.preview import lock_tpu_engine

LOCK_TEXT = lock_tpu_engine.LOCK.read_text()
ENTRY = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s\\]+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", re.M)


def lock_entries() -> dict[str, tuple[str, list[str]]]:
    entries = {canonicalize_name(m[1]): (m[2], re.findall(r"sha256:([0-9a-f]{64})", m[3]))
               for m in ENTRY.finditer(LOCK_TEXT)}
    body = [line for line in LOCK_TEXT.splitlines() if line and not line.startswith("#")]
    hashes = sum(1 for line in body if line.lstrip().startswith("--hash="))
    assert len(entries) + hashes == len(body), "every lock line is a pin or one of its hashes"
    return entries


def test_lock_pins_the_released_wheels_by_their_published_hashes(shared):
    """engine-flags/README.md records the sha256 of both wheels as PyPI serves them."""
    readme = (shared / "engine-flags" / "README.md").read_text()
    published = dict(re.findall(r"\| `(vllm_torchtpu(?:_core)?)-0\.29\.0-[^`]+\.whl` \| `([0-9a-f]{64})` \|", readme))
    assert set(published) == {"vllm_torchtpu", "vllm_torchtpu_core"}
    entries = lock_entries()
    assert entries["vllm-torchtpu"] == (VLLM_TORCHTPU.version, [published["vllm_torchtpu"]])
    assert entries["vllm-torchtpu-core"] == (VLLM_TORCHTPU.core_version, [published["vllm_torchtpu_core"]])
    assert LOCK_TEXT.splitlines()[0] == lock_tpu_engine.INPUT.read_text().splitlines()[0]


def test_lock_holds_the_runtime_the_wheels_pin(shared):
    """The versions the TPU plugin pins (engine-flags/README.md: torch 2.13.0, jax/jaxlib 0.11.2), and the TPU
    runtime packages it needs."""
    entries = lock_entries()
    assert len(entries) > 100
    readme = (shared / "engine-flags" / "README.md").read_text()
    assert "torch==2.13.0" in readme and "`jax`/`jaxlib` 0.11.2" in readme
    assert entries["torch"][0] == "2.13.0"
    assert entries["jax"][0] == entries["jaxlib"][0] == "0.11.2"
    for name in ("torch-tpu", "libtpu", "tpu-sync-torch", "transformers"):
        assert name in entries, name


def test_install_uses_only_hashes_without_the_token():
    [step] = VLLM_TORCHTPU.install_commands
    assert step.startswith("env -u HF_TOKEN python3 -m pip install ")
    assert "--index-url https://pypi.org/simple" in step
    assert f"--require-hashes --no-deps -r {TPU_ENGINE_LOCK_DIR}/requirements.txt" in step
    assert "git+" not in step


def test_tpu_pods_carry_the_lock(tpu):
    [lock] = [m for m in tpu.manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"].endswith("-lock")]
    assert lock["data"]["requirements.txt"] == LOCK_TEXT
    [lws] = [m for m in tpu.manifests if m["kind"] == "LeaderWorkerSet"]
    for template in ("leaderTemplate", "workerTemplate"):
        spec = lws["spec"]["leaderWorkerTemplate"][template]["spec"]
        [volume] = [v for v in spec["volumes"] if v.get("configMap", {}).get("name") == lock["metadata"]["name"]]
        [container] = spec["containers"]
        assert {"name": volume["name"], "mountPath": TPU_ENGINE_LOCK_DIR, "readOnly": True} in container["volumeMounts"]
        script = container["args"][0]
        assert script.index("--require-hashes") < script.index("exec vllm serve")
    assert tpu.named("tpu-engine-lock")["name"] in tpu.named("tpu-engine-lws")["dependsOn"]


def test_user_supplied_sglang_build_installs_nothing(variants):
    plan = variants["sglang"]
    assert not [m for m in plan.manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"].endswith("-lock")]
    assert "pip install" not in yaml.safe_dump([m for m in plan.manifests if m["kind"] == "LeaderWorkerSet"])


def wheel(name: str, sha: str) -> dict:
    return {"url": f"https://files.pythonhosted.org/packages/x/{name}", "hashes": {"sha256": sha}}


def test_lock_writer_keeps_only_artifacts_a_cp312_linux_host_installs():
    tags = lock_tpu_engine.supported_tags()
    package = {"name": "orjson", "version": "3.11.1", "sdist": wheel("orjson-3.11.1.tar.gz", "0" * 64), "wheels": [
        wheel("orjson-3.11.1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "1" * 64),
        wheel("orjson-3.11.1-cp312-cp312-macosx_11_0_arm64.whl", "2" * 64),
        wheel("orjson-3.11.1-cp311-cp311-manylinux_2_17_x86_64.whl", "3" * 64),
        wheel("orjson-3.11.1-cp312-cp312-manylinux_2_17_aarch64.whl", "4" * 64),
        wheel("orjson-3.11.1-cp312-cp312-musllinux_1_2_x86_64.whl", "5" * 64),
    ]}
    assert lock_tpu_engine.artifacts(package, tags) == ["1" * 64]
    pure = {"name": "zipp", "version": "1", "wheels": [wheel("zipp-1-py3-none-any.whl", "6" * 64)]}
    assert lock_tpu_engine.artifacts(pure, tags) == ["6" * 64]
    sdist_only = {"name": "msgpack-python", "version": "0.5.6", "sdist": wheel("msgpack-python-0.5.6.tar.gz", "7" * 64)}
    assert lock_tpu_engine.artifacts(sdist_only, tags) == ["7" * 64]
    with pytest.raises(SystemExit, match="no artifact"):
        lock_tpu_engine.artifacts({"name": "x", "version": "1", "wheels": [
            wheel("x-1-cp312-cp312-win_amd64.whl", "8" * 64)]}, tags)
    text = lock_tpu_engine.render({"packages": [pure, sdist_only]}, ["# header"])
    assert text.splitlines()[0] == "# header" and "msgpack-python==0.5.6 \\\n    --hash=sha256:" + "7" * 64 in text


# --------------------------------------------------------------------------- image digests
def _image_refs(plan) -> dict[str, str]:
    from tests.test_policy import rules

    return {f"{r['name']}:{path}": ref for r in plan.resources if r["type"].startswith("kubernetes:")
            for path, ref in rules.image_references(r["inputs"])}


@pytest.mark.parametrize("name", ["gpu-pinned", "tpu-pinned"])
def test_every_image_carries_its_configured_digest(variants, name):
    from components import images

    refs = _image_refs(variants[name])
    assert refs and all("@sha256:" in ref for ref in refs.values()), {k: v for k, v in refs.items() if "@" not in v}
    charts = {r["name"]: r["inputs"]["values"] for r in variants[name].resources if r["type"].endswith(":Chart")}
    lws = next(v for k, v in charts.items() if k.endswith("-lws"))
    assert lws["image"]["manager"]["tag"] == images.IMAGES["lws"].tag + "@sha256:" + ("b" * 64 if name == "tpu-pinned"
                                                                                       else f"{8:064x}")
    if name == "gpu-pinned":
        router = next(v for k, v in charts.items() if k.startswith("router"))
        assert router["router"]["proxy"]["presets"]["envoy"]["image"] == images.IMAGES["envoy"].reference + \
            f"@sha256:{4:064x}"
        dra = next(v for k, v in charts.items() if "dra" in k)
        assert dra["image"] == {"tag": images.IMAGES["dra-driver"].tag + f"@sha256:{9:064x}"}


def test_unpinned_plans_pull_by_tag_and_set_no_chart_image(plans):
    for stack in ("gpu", "tpu"):
        assert not [ref for ref in _image_refs(plans[stack]).values() if "@" in ref]


def test_chart_default_images_are_the_ones_the_digests_belong_to(shared):
    """A digest is only right for the image the chart would pull: the pinned references equal the charts' own."""
    from components import images

    router = yaml.safe_load((shared / "charts" / "llm-d-router-standalone" / "values.yaml").read_text())
    assert router["router"]["proxy"]["presets"]["envoy"]["image"] == images.IMAGES["envoy"].reference
    epp = router["router"]["epp"]["image"]
    assert f"{epp['registry']}/{epp['repository']}:{epp['tag']}" == images.IMAGES["epp"].reference
    lws = yaml.safe_load((shared / "charts" / "lws" / "values.yaml").read_text())["image"]["manager"]
    assert f"{lws['repository']}:{lws['tag']}" == images.IMAGES["lws"].reference
    dra = yaml.safe_load((shared / "charts" / "nvidia-dra-driver-gpu" / "Chart.yaml").read_text())
    dra_values = yaml.safe_load((shared / "charts" / "nvidia-dra-driver-gpu" / "values.yaml").read_text())
    assert f"{dra_values['image']['repository']}:v{dra['appVersion']}" == images.IMAGES["dra-driver"].reference


def test_a_malformed_digest_stops_the_run_with_one_line():
    from components.config import ConfigError, parse_config

    base = {"track": "gpu", "gcp.project": "my-gcp-project", "gcp.zone": "us-central1-b", "gpu.reservation": "r"}
    parse_config({**base, "images.vllmDigest": "sha256:" + "0" * 64})
    with pytest.raises(ConfigError) as err:
        parse_config({**base, "images.vllmDigest": "sha256:abc"})
    assert str(err.value) == ("kimi-k3-1:images.vllmDigest = 'sha256:abc': a sha256 digest is 64 lowercase hex "
                              "digits after 'sha256:' (the image's digest, e.g. from `crane digest <image>`)")


# --------------------------------------------------------------------------- the checkov scan's inputs
def test_scan_extracts_every_custom_resource_pod_template(plans):
    from tools.preview import scan

    for stack, expected_templates in (("gpu", 2), ("tpu", 2)):
        manifests = plans[stack].manifests
        extracted = [m for m in scan.expand(manifests) if m.get("metadata", {}).get("annotations", {}).get(
            "kimi-k3-1/extracted-from")]
        assert len(extracted) == expected_templates  # DisaggregatedSet roles; LeaderWorkerSet leader + worker
        assert all(m["kind"] == "Pod" and m["spec"]["containers"] for m in extracted)


def test_scan_exceptions_name_real_resources_and_nothing_else(plans):
    """Every exception pattern matches a resource of a committed plan, and a failure anywhere else is reported."""
    from tools.preview import scan

    names = {f"{m['kind']}.{m['metadata'].get('namespace') or 'default'}.{m['metadata']['name']}"
             for stack in ("gpu", "tpu") for m in scan.expand(plans[stack].manifests)}
    charts_rendered = not any(c["skipped"] for stack in ("gpu", "tpu") for c in plans[stack].charts)
    for allowed in scan.EXCEPTIONS:
        patterns = [p for p in allowed.who if charts_rendered or p not in scan.CHARTS]
        assert allowed.why and all(any(fnmatch.fnmatchcase(n, p) for n in names) for p in patterns), allowed
    assert scan.expected("CKV_K8S_16", "DaemonSet.kube-system.asapd-lite")
    assert not scan.expected("CKV_K8S_16", "Job.kimi-k3-1.kimi-k3-1-calibration")
    assert not scan.expected("CKV_K8S_19", "Pod.kimi-k3-1.kimi-k3-1-vllm-spec-roles-0--spec-leaderworkertemplate-"
                                           "workertemplate")
    assert not scan.expected("CKV_K8S_99", "Pod.x.y")


def test_docs_image_table_lists_every_image_with_its_architectures_and_source():
    """docs/versions.md "Image architectures" has one row per image of components/images.py, with the same
    reference, architectures and evidence, so the table cannot drift from what the plan checks."""
    from components import images

    text = (ROOT / "docs" / "versions.md").read_text()
    table = text.split("## Image architectures", 1)[1].split("\n\n")[2]
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]] for r in table.splitlines()[2:]}
    assert set(rows) == set(images.IMAGES)
    for name, image in images.IMAGES.items():
        reference, architectures, key, _, source = rows[name]
        assert reference == f"`{image.reference}`" and key == f"`images.{image.config_key}`"
        assert architectures == ", ".join(f"linux/{a}" for a in image.architectures)
        assert source == image.evidence and "https://" in source

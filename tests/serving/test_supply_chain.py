"""Supply chain of the TPU engine: the two vLLM-TorchTPU wheels at the hashes their release publishes, every
dependency from a hash-pinned lock at the versions the wheels pin, torch as its CPU build and nothing only PyPI's CUDA
build needs, the image the stack builds from exactly that lock, and pods that run it by digest and install nothing;
the lock writer keeps only what a CPython 3.12 manylinux x86_64 host installs."""

from __future__ import annotations

import fnmatch
import re

import pytest
import yaml
from packaging.utils import canonicalize_name, parse_wheel_filename

from components.facts.versions import TPU_ENGINE_LOCK_DIR, VLLM_TORCHTPU
from components.plan import images, loading
from components.serving import engineimage
from tests.conftest import ROOT
from tools.preview import lock_tpu_engine

LOCK_TEXT = lock_tpu_engine.LOCK.read_text()
BASE_REF = "docker.io/library/python:3.12-slim@sha256:" + "1" * 64
STEP_REF = "gcr.io/cloud-builders/docker:latest@sha256:" + "2" * 64
"""The engine build's base and Cloud Build step by digest, as the stack passes them (components/checks/registry.py)."""
ENTRY = re.compile(r"^([A-Za-z0-9_.\-]+)(?:==([^\s\\]+)| @ (https://\S+)) \\\n"
                   r"((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", re.M)
CUDA_ONLY = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")


def lock_entries(text: str = LOCK_TEXT) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes); a URL pin's version is its wheel file's."""
    entries = {}
    for m in ENTRY.finditer(text):
        version = m[2] or str(parse_wheel_filename(m[3].rsplit("/", 1)[1].replace("%2B", "+"))[1])
        entries[canonicalize_name(m[1])] = (version, re.findall(r"sha256:([0-9a-f]{64})", m[4]))
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
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
    assert entries["torch"][0] == "2.13.0+cpu"
    assert entries["jax"][0] == entries["jaxlib"][0] == "0.11.2"
    for name in ("torch-tpu", "libtpu", "tpu-sync-torch", "transformers"):
        assert name in entries, name


def test_a_tpu_host_installs_no_cuda_wheel():
    """torch and torchvision are the CPU builds, named by their file on PyTorch's CPU index with the recorded hash
    (pip never weighs that index against PyPI); no nvidia-*, cuda-* or triton is left."""
    entries = lock_entries()
    assert not [name for name in entries if CUDA_ONLY.match(name)]
    for name, build in lock_tpu_engine.CPU_BUILDS.items():
        assert f"{name} @ {build.url} \\\n    --hash=sha256:{build.sha256}\n" in LOCK_TEXT
        assert build.url.startswith(lock_tpu_engine.CPU_INDEX + "/") and entries[name] == (build.version,
                                                                                           [build.sha256])
    # The rest comes from PyPI: every other pin is `==`.
    assert LOCK_TEXT.count(" @ https://") == len(lock_tpu_engine.CPU_BUILDS)


def test_lock_writer_drops_what_only_the_cuda_build_needs():
    requirements = "\n".join([
        "filelock==3.0", "    # via torch", "nvidia-cublas==13", "    # via", "    #   cuda-toolkit", "    #   torch",
        "cuda-toolkit==13", "    # via torch", "cuda-pathfinder==1", "    # via cuda-bindings",
        "cuda-bindings==13", "    # via torch", "triton==3", "    # via", "    #   torch", "    #   xgrammar",
        "xgrammar==0.2", "    # via vllm-torchtpu", "torch==2.13.0", "    # via", "    #   torch-tpu",
        "    #   xgrammar", "numpy==2", "    # via", "    #   torch", "    #   xgrammar", ""])
    dropped = lock_tpu_engine.cuda_only(lock_tpu_engine.via(requirements))
    # numpy stays for xgrammar even though torch's CUDA build also lists it here; filelock the CPU build needs.
    assert dropped == {"nvidia-cublas", "cuda-toolkit", "cuda-bindings", "cuda-pathfinder", "triton"}


def test_lock_states_its_download_size_and_the_figures_follow_it():
    """The writer's size line is what the image's size is computed from (components/plan/loading.py)."""
    size = loading.lock_download_bytes()
    assert 1.0e9 < size < 1.4e9, size  # the CPU build: the CUDA lock was 3.7 GB
    assert loading.lock_download_bytes("# download: 42 bytes in 1 files (x)\n") == 42
    with pytest.raises(ValueError, match="no '# download"):
        loading.lock_download_bytes("absl-py==1 \\\n    --hash=sha256:" + "0" * 64 + "\n")


def test_the_image_build_installs_exactly_the_lock():
    """The Dockerfile copies the lock beside it, checks it against the sha256 the stack hashed, and runs the one
    declared install (versions.VLLM_TORCHTPU.install_args): wheels only, hashes required, nothing resolved. The
    build has no Hugging Face token at all."""
    dockerfile = engineimage.DOCKERFILE.read_text()
    assert f"COPY vllm-torchtpu.txt {TPU_ENGINE_LOCK_DIR}/requirements.txt" in dockerfile
    assert 'sha256sum -c -' in dockerfile and "${LOCK_SHA256}" in dockerfile
    runs = re.sub(r"\\\n\s*", "", dockerfile)
    [install] = re.findall(r"python3 -m pip install ([^&]+?)\s*(?:&&|$)", runs, re.M)
    assert tuple(install.split()) == VLLM_TORCHTPU.install_args
    assert f"LABEL {engineimage.LOCK_LABEL}=" in dockerfile
    assert "HF_TOKEN" not in dockerfile and "HF_TOKEN" not in engineimage.BUILD_CONFIG.read_text()
    config = yaml.safe_load(engineimage.BUILD_CONFIG.read_text())
    assert config["images"] == ["${_IMAGE}"] and config["options"]["logging"] == "CLOUD_LOGGING_ONLY"


def test_the_build_reruns_only_when_what_the_image_is_made_of_changes(tpu):
    """The build's triggers are the lock's, the Dockerfile's and the build config's sha256 and the base image; its tag
    is their sha256 (a changed Dockerfile or base never reuses the old image), and an existing tag is reused."""
    build = tpu.one("command:local:Command")
    lock = engineimage.lock_sha256()
    base, step = build["inputs"]["environment"]["BASE"], build["inputs"]["environment"]["STEP"]
    assert re.fullmatch(re.escape(images.IMAGES["tpu-engine"].reference) + "@sha256:[0-9a-f]{64}", base)
    assert re.fullmatch(re.escape(images.IMAGES["build-step"].reference) + "@sha256:[0-9a-f]{64}", step)
    assert build["inputs"]["triggers"] == [lock, engineimage.file_sha256(engineimage.DOCKERFILE),
                                           engineimage.file_sha256(engineimage.BUILD_CONFIG), base, step]
    assert build["inputs"]["environment"]["LOCK_SHA256"] == lock
    assert build["inputs"]["environment"]["TAG"] == engineimage.image_tag(base, step)
    assert engineimage.image_tag(base, step) != engineimage.image_tag(base.split("@")[0] + "@sha256:" + "0" * 64, step)
    assert engineimage.image_tag(base, step) != engineimage.image_tag(base, step.split("@")[0] + "@sha256:" + "0" * 64)
    script = build["inputs"]["create"]
    assert ':$TAG"' in script and script.index("describe") < script.index("gcloud builds submit")
    assert "--service-account" in script and "--config cloudbuild.yaml" in script
    repo = tpu.one("gcp:artifactregistry/repository:Repository")
    assert repo["inputs"]["format"] == "DOCKER" and repo["inputs"]["dockerConfig"]["immutableTags"] is True
    assert repo["name"] in tpu.closure(build["name"])


def test_tpu_pods_run_the_built_image_by_digest_and_install_nothing(tpu):
    """No TPU engine container installs anything or mounts a lock: every host runs the stack's build by digest, the
    pre-pull DaemonSet pulls the same reference, and both wait for the build."""
    assert not [m for m in tpu.manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"].endswith("-lock")]
    [lws] = [m for m in tpu.manifests if m["kind"] == "LeaderWorkerSet"]
    refs = set()
    for template in ("leaderTemplate", "workerTemplate"):
        spec = lws["spec"]["leaderWorkerTemplate"][template]["spec"]
        [container] = spec["containers"]
        assert "pip" not in container["args"][0] and "install" not in container["args"][0]
        assert images.is_built_tpu_engine(container["image"])
        assert re.fullmatch(r"[^@]+@sha256:[0-9a-f]{64}", container["image"])
        refs.add(container["image"])
    [prepull] = [m for m in tpu.manifests if m["kind"] == "DaemonSet" and "prepull" in m["metadata"]["name"]]
    [hold] = prepull["spec"]["template"]["spec"]["containers"]
    assert {hold["image"]} == refs and hold["imagePullPolicy"] == "IfNotPresent"
    build = tpu.one("command:local:Command")["name"]
    assert build in tpu.closure("tpu-engine-lws") and build in tpu.closure("engine-prepull-ds")
    # The output is the reference the pods run; offline its digest is the mock's stand-in (docs/plan-format.md).
    assert tpu.outputs["tpuEngineImage"] == hold["image"] and "tpuEngineImage" in tpu.outputs["$mocked"]


def test_user_supplied_sglang_build_installs_nothing_and_builds_nothing(variants):
    plan = variants["sglang"]
    assert not [m for m in plan.manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"].endswith("-lock")]
    assert "pip install" not in yaml.safe_dump([m for m in plan.manifests if m["kind"] == "LeaderWorkerSet"])
    assert not plan.of_type("command:local:Command") and not plan.of_type("gcp:artifactregistry/repository:Repository")


def wheel(name: str, sha: str, size: int = 1) -> dict:
    return {"url": f"https://files.pythonhosted.org/packages/x/{name}", "hashes": {"sha256": sha}, "size": size}


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
    pure = {"name": "zipp", "version": "1", "wheels": [wheel("zipp-1-py3-none-any.whl", "6" * 64, 10)]}
    assert lock_tpu_engine.artifacts(pure, tags) == ["6" * 64]
    sdist_only = {"name": "msgpack-python", "version": "0.5.6",
                  "sdist": wheel("msgpack-python-0.5.6.tar.gz", "7" * 64, 20)}
    assert lock_tpu_engine.artifacts(sdist_only, tags) == ["7" * 64]
    with pytest.raises(SystemExit, match="no artifact"):
        lock_tpu_engine.artifacts({"name": "x", "version": "1", "wheels": [
            wheel("x-1-cp312-cp312-win_amd64.whl", "8" * 64)]}, tags)
    cuda = {"name": "nvidia-nccl-cu13", "version": "2", "wheels": [wheel("nvidia_nccl_cu13-2-py3-none-any.whl",
                                                                          "9" * 64, 1000)]}
    text = lock_tpu_engine.render({"packages": [pure, sdist_only, cuda]}, ["# header"], {"nvidia-nccl-cu13"})
    assert text.splitlines()[0] == "# header" and "msgpack-python==0.5.6 \\\n    --hash=sha256:" + "7" * 64 in text
    assert "nvidia" not in text and loading.lock_download_bytes(text) == 30


# --------------------------------------------------------------------------- image digests
def _image_refs(plan) -> dict[str, str]:
    from policy import pods

    return {f"{r['name']}:{path}": ref for r in plan.resources if r["type"].startswith("kubernetes:")
            for path, ref in pods.image_references(r["inputs"])}


@pytest.mark.parametrize("name", ["gpu-pinned", "tpu-pinned"])
def test_every_image_carries_its_configured_digest(variants, name):
    from components.plan import images

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


def test_without_digest_keys_every_image_runs_by_the_digest_its_registry_names(plans):
    """Without digest keys every image still runs by digest: the one its registry names for the pinned tag
    (components/checks/registry.py; the offline plan's stand-in, derived from the reference), the TPU engine by the
    stack's own build's."""
    from components.checks import registry
    from components.plan import images
    from tools.preview.render import stand_in_digest

    for stack in ("gpu", "tpu"):
        refs = _image_refs(plans[stack]).values()
        assert refs and all(re.fullmatch(r"[^@]+@sha256:[0-9a-f]{64}", ref) for ref in refs), refs
        for ref in refs:
            tag, digest = ref.split("@")
            if not images.is_built_tpu_engine(ref) and "/" in tag:  # not a chart's tag value (`:v25.8.0@...`)
                assert registry.split(tag) and digest == stand_in_digest(tag), ref


def test_chart_default_images_are_the_ones_the_digests_belong_to(shared):
    """A digest is only right for the image the chart would pull: the pinned references equal the charts' own."""
    from components.plan import images

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
    """docs/versions.md "Image architectures" has one row per image of components/plan/images.py, with the same
    reference, architectures and evidence, so the table cannot drift from what the plan checks."""
    from components.plan import images

    text = (ROOT / "docs" / "versions.md").read_text()
    table = text.split("## Image architectures", 1)[1].split("\n\n")[2]
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]] for r in table.splitlines()[2:]}
    assert set(rows) == set(images.IMAGES)
    for name, image in images.IMAGES.items():
        reference, architectures, key, _, source = rows[name]
        assert reference == f"`{image.reference}`" and key == f"`images.{image.config_key}`"
        assert architectures == ", ".join(f"linux/{a}" for a in image.architectures)
        assert source == image.evidence and "https://" in source


def test_pulumi_command_is_pinned_where_its_reason_is():
    from components.facts import versions

    assert f"pulumi-command=={versions.PULUMI_COMMAND}\n" in (ROOT / "requirements.in").read_text()


FAKE_GCLOUD = """#!/bin/bash
echo "$*" >> "$FAKE_STATE/calls"
record() {  # Cloud Build's record of a SUCCESS build: the digest it pushed, its _INPUTS_SHA256 and service account
  local inputs account
  inputs=$(printf '%s\\n' "$@" | grep -o '_INPUTS_SHA256=[0-9a-f]*' | cut -d= -f2)
  account=$(printf '%s\\n' "$@" | grep -A1 -x -- '--service-account' | tail -n 1)
  echo "${FAKE_DIGEST} ${inputs} ${account}" >> "$FAKE_STATE/builds"
}
case "$1 $2" in
  "artifacts docker")
    if [ -f "$FAKE_STATE/pushed" ]; then printf '%s\\n' "$(cat "$FAKE_STATE/pushed")"; else
      echo "ERROR: (gcloud.artifacts.docker.images.describe) Image not found" >&2; exit 1; fi;;
  "builds submit") [ -f cloudbuild.yaml ] && [ -f Dockerfile ] || exit 3
    if [ -n "${FAKE_PUSHED_BY_OTHER:-}" ]; then echo "${FAKE_DIGEST}" > "$FAKE_STATE/pushed"; record "$@"; exit 1; fi
    refused=$(grep -c "^builds submit" "$FAKE_STATE/calls")
    if [ "$refused" -le "${FAKE_REFUSALS:-0}" ]; then
      echo "ERROR: (gcloud.builds.submit) INVALID_ARGUMENT: could not resolve the service account" >&2; exit 1; fi
    echo "${FAKE_DIGEST}" > "$FAKE_STATE/pushed"; record "$@";;
  "builds list")
    digest=$(printf '%s\\n' "$@" | grep -o 'results.images.digest:sha256:[0-9a-f]*' | cut -d: -f2-)
    [ -f "$FAKE_STATE/builds" ] && grep "^$digest " "$FAKE_STATE/builds" | head -n 1 | cut -d' ' -f2-;;
  *) exit 4;;
esac
"""


FAKE_SLEEP = """#!/bin/bash
echo "sleep $*" >> "$FAKE_STATE/calls"
"""


def run_build(tmp_path, digest: str = "sha256:" + "ab" * 32, gcloud: bool = True, **fake: str):
    import os
    import subprocess

    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    for name, text in (("gcloud", FAKE_GCLOUD if gcloud else None), ("sleep", FAKE_SLEEP)):
        if text:
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
    # /bin/bash by its path, so the fake bin directory alone decides whether gcloud is on PATH.
    env = {"PATH": f"{bin_dir}" if not gcloud else f"{bin_dir}:/usr/bin:/bin", "FAKE_STATE": str(state),
           "FAKE_DIGEST": digest, **{f"FAKE_{k.upper()}": v for k, v in fake.items()},
           "PROJECT": "p", "REGION": "us-central1", "REPOSITORY": "us-central1-docker.pkg.dev/p/c-engine",
           "BASE": BASE_REF, "STEP": STEP_REF, "LOCK_SHA256": engineimage.lock_sha256(),
           "TAG": engineimage.image_tag(BASE_REF, STEP_REF),
           "BUILDER": "c-build@p.iam.gserviceaccount.com", "BUCKET": "b", "HOME": os.environ.get("HOME", "/tmp")}
    proc = subprocess.run(["/bin/bash", "-c", engineimage.build_script()], cwd=engineimage.LOCKS, env=env,
                          capture_output=True, text=True, timeout=60)
    calls = (state / "calls").read_text().splitlines() if (state / "calls").exists() else []
    return proc, calls


def test_the_build_command_builds_once_and_prints_only_the_digest(tmp_path):
    """The build's own script, run by bash against a fake gcloud: the first run submits one build (as the build's
    service account, source staged under engine-image/ of the bucket, the lock's tag) and prints the digest alone,
    which is the `stdout` the pods' image is made of; a second run finds the lock's tag and submits nothing."""
    proc, calls = run_build(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "sha256:" + "ab" * 32
    submits = [c for c in calls if c.startswith("builds submit")]
    assert len(submits) == 1
    tag = engineimage.image_tag(BASE_REF, STEP_REF)
    image = f"us-central1-docker.pkg.dev/p/c-engine/{engineimage.IMAGE_NAME}:{tag}"
    assert f"_IMAGE={image}," in submits[0] and "--config cloudbuild.yaml" in submits[0]
    assert "--service-account projects/p/serviceAccounts/c-build@p.iam.gserviceaccount.com" in submits[0]
    assert f"--gcs-source-staging-dir gs://b/{engineimage.SOURCE_PREFIX}source" in submits[0]
    again, calls = run_build(tmp_path)
    assert again.returncode == 0 and again.stdout == proc.stdout
    assert len([c for c in calls if c.startswith("builds submit")]) == 1, "an existing lock tag is not rebuilt"


def test_the_build_command_fails_without_a_digest(tmp_path):
    proc, _ = run_build(tmp_path, digest="not-a-digest")
    assert proc.returncode == 1 and proc.stdout == "" and "no digest for" in proc.stderr


def test_a_build_refused_while_its_new_identity_propagates_is_submitted_again(tmp_path):
    """First `up`: the builder account and its grants are a moment old and the first submission is refused before
    it runs; the script waits and submits again (bounded), and stdout is still the digest alone."""
    proc, calls = run_build(tmp_path, refusals="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "sha256:" + "ab" * 32
    assert [c.split()[0] for c in calls if c.startswith(("builds submit", "sleep"))] == ["builds", "sleep", "builds"]
    assert f"sleep {engineimage.SUBMIT_RETRY_WAIT_S}" in calls


def test_a_build_that_keeps_failing_ends_with_one_line_and_no_digest(tmp_path):
    proc, calls = run_build(tmp_path, refusals="9")
    assert proc.returncode == 1 and proc.stdout == ""
    assert len([c for c in calls if c.startswith("builds submit")]) == engineimage.SUBMIT_TRIES
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.stderr.count(engineimage.FAILURE_PREFIX) == 1
    assert last.startswith(engineimage.FAILURE_PREFIX + "gcloud builds submit exited 1 (try 3, ERROR: (gcloud.builds."
                           "submit) INVALID_ARGUMENT: could not resolve the service account)")
    assert "gcloud builds list" in last


def test_a_rerun_takes_the_digest_an_interrupted_up_pushed_meanwhile(tmp_path):
    """Ctrl-C ends gcloud, not the build: the rerun's own push then fails on the immutable tag the earlier build
    pushed, and the script takes that digest instead of failing."""
    proc, calls = run_build(tmp_path, pushed_by_other="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "sha256:" + "ab" * 32
    assert len([c for c in calls if c.startswith("builds submit")]) == 1


def test_an_image_pushed_under_the_tag_by_anything_else_is_refused_not_adopted(tmp_path):
    """The adopted-digest attack: the lock's `inputs-<sha>` tag already exists (pushed by a registry writer, or by
    another build) before the stack builds. Nothing of Cloud Build's records says this stack's builder built it from
    these inputs, so the command builds nothing, prints no digest and fails with one line naming the image and how
    to clear it (the tag is immutable: rebuilding over it is impossible)."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "pushed").write_text("sha256:" + "66" * 32 + "\n")
    proc, calls = run_build(tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    assert not [c for c in calls if c.startswith("builds submit")]
    [line] = proc.stderr.strip().splitlines()
    tag = engineimage.image_tag(BASE_REF, STEP_REF)
    assert line.startswith(f"{engineimage.FAILURE_PREFIX}us-central1-docker.pkg.dev/p/c-engine/"
                           f"{engineimage.IMAGE_NAME}:{tag} exists with digest sha256:{'66' * 32}, but no successful "
                           "Cloud Build of project p in us-central1, run as c-build@p.iam.gserviceaccount.com from "
                           f"these inputs (_INPUTS_SHA256={tag.removeprefix('inputs-')}), produced it"), line
    assert "gcloud artifacts docker images delete" in line


@pytest.mark.parametrize("record", ["another builder", "other inputs", "failed"])
def test_a_build_record_of_something_else_does_not_vouch_for_the_digest(tmp_path, record: str):
    """A record for the digest that is another account's, another set of inputs' or not a SUCCESS (the fake lists
    only SUCCESS builds, as the command's filter asks) does not make the image this stack's."""
    state = tmp_path / "state"
    state.mkdir()
    digest = "sha256:" + "ab" * 32
    (state / "pushed").write_text(digest + "\n")
    tag = engineimage.image_tag(BASE_REF, STEP_REF).removeprefix("inputs-")
    rows = {"another builder": f"{digest} {tag} projects/p/serviceAccounts/intruder@p.iam.gserviceaccount.com",
            "other inputs": f"{digest} {'0' * 64} projects/p/serviceAccounts/c-build@p.iam.gserviceaccount.com",
            "failed": ""}
    (state / "builds").write_text(rows[record] + "\n")
    proc, calls = run_build(tmp_path)
    assert proc.returncode == 1 and proc.stdout == "" and "pushed by something else" in proc.stderr
    assert not [c for c in calls if c.startswith("builds submit")]


def test_an_image_this_stacks_build_pushed_is_adopted_without_a_build(tmp_path):
    """The other side: the tag exists and Cloud Build's record says the stack's builder built it from these inputs
    (an earlier `up`, or one interrupted after its build finished): adopted, nothing built, the digest printed."""
    first, _ = run_build(tmp_path)
    assert first.returncode == 0, first.stderr
    again, calls = run_build(tmp_path)
    assert again.returncode == 0 and again.stdout == first.stdout
    assert len([c for c in calls if c.startswith("builds submit")]) == 1
    assert [c for c in calls if c.startswith("builds list")][-1].count("results.images.digest:sha256:") == 1


def test_no_gcloud_on_path_is_one_line(tmp_path):
    proc, _ = run_build(tmp_path, gcloud=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == (engineimage.FAILURE_PREFIX + "gcloud is not on PATH: install the Google Cloud CLI "
                                   "(https://cloud.google.com/sdk/docs/install) and run pulumi up again")


# -------------------------------------------------------------------------- the build's files as Cloud Build reads them
BUILD_SCHEMA = "https://cloud.google.com/build/docs/build-config-file-schema"
BUILD_KEYS = {"steps", "timeout", "queueTtl", "logsBucket", "options", "substitutions", "tags", "serviceAccount",
              "secrets", "availableSecrets", "artifacts", "images"}
"""Top-level keys of a build config (BUILD_SCHEMA, "Structure of a build config file"; the package keys
mavenArtifacts/pythonPackages/npmPackages are left out: this build has none)."""
STEP_KEYS = {"name", "args", "env", "allowFailure", "allowExitCodes", "dir", "id", "waitFor", "entrypoint",
             "secretEnv", "volumes", "timeout", "script", "automapSubstitutions"}
OPTION_KEYS = {"env", "secretEnv", "volumes", "sourceProvenanceHash", "machineType", "diskSizeGb",
               "substitutionOption", "dynamicSubstitutions", "automapSubstitutions", "logStreamingOption", "logging",
               "defaultLogsBucketBehavior", "pool", "requestedVerifyOption"}
MACHINE_TYPES = {"UNSPECIFIED", "N1_HIGHCPU_8", "N1_HIGHCPU_32", "E2_HIGHCPU_8", "E2_HIGHCPU_32", "E2_MEDIUM",
                 "E2_STANDARD_2"}
"""BuildOptions.MachineType (https://cloud.google.com/build/docs/api/reference/rest/v1/projects.builds#machinetype)."""
USER_SA_LOGGING = {"CLOUD_LOGGING_ONLY", "NONE"}
"""A build run as a user-specified service account needs logsBucket or one of these logging modes (BUILD_SCHEMA,
serviceAccount; https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts)."""


def test_the_build_config_is_cloud_builds_schema_and_matches_the_command():
    config = yaml.safe_load(engineimage.BUILD_CONFIG.read_text())
    assert set(config) <= BUILD_KEYS, set(config) - BUILD_KEYS
    assert config["steps"] and all(set(step) <= STEP_KEYS and "name" in step for step in config["steps"])
    assert set(config["options"]) <= OPTION_KEYS
    assert config["options"]["machineType"] in MACHINE_TYPES
    # `gcloud builds submit --service-account`: the logs go to Cloud Logging, or a bucket of the user's.
    assert "--service-account" in engineimage.build_script()
    assert config.get("logsBucket") or config["options"]["logging"] in USER_SA_LOGGING
    assert re.fullmatch(r"\d+s", config["timeout"])
    # User substitutions: `_` then upper-case letters, digits and `_`; with the default MUST_MATCH every one the
    # command passes must be used and every one used must be passed (BUILD_SCHEMA, substitutionOption).
    used = set(re.findall(r"\$\{(_[A-Z0-9_]+)\}", engineimage.BUILD_CONFIG.read_text()))
    [passed] = re.findall(r'--substitutions "([^"]+)"', engineimage.build_script())
    assert used == {pair.split("=", 1)[0] for pair in passed.split(",")}
    assert "substitutionOption" not in config["options"]
    # The docker step's --build-arg names are the Dockerfile's ARGs, and it builds the tag it pushes.
    [step] = config["steps"]
    # The step's image is the stack's: Google's Docker builder by digest, passed in (and seen by the policy pack).
    assert step["name"] == "${_STEP}" and "_STEP=$STEP" in passed and step["args"][0] == "build"
    args = [step["args"][i + 1].split("=", 1)[0] for i, a in enumerate(step["args"]) if a == "--build-arg"]
    assert set(args) == set(re.findall(r"^ARG (\w+)", engineimage.DOCKERFILE.read_text(), re.M))
    assert step["args"][step["args"].index("-t") + 1] == config["images"][0] == "${_IMAGE}"


def test_the_lock_is_what_pips_own_parser_accepts_in_hash_checking_mode():
    """pip's requirements-file parser over the lock: every requirement carries a sha256, and every one is pinned
    with `==` or is a direct URL, the two forms --require-hashes accepts (pip's prepare step raises HashUnpinned
    for `not req.is_direct and not req.is_pinned`: https://github.com/pypa/pip/blob/23.2.1/src/pip/_internal/
    operations/prepare.py). The direct URLs (the CPU torch builds) are https wheels, so --only-binary holds."""
    from pip._internal.network.session import PipSession
    from pip._internal.req.constructors import install_req_from_parsed_requirement
    from pip._internal.req.req_file import parse_requirements

    reqs = [install_req_from_parsed_requirement(p)
            for p in parse_requirements(str(engineimage.LOCK), session=PipSession())]
    assert len(reqs) > 100
    assert not [r.name for r in reqs if not r.hash_options.get("sha256")]
    assert not [r.name for r in reqs if not (r.is_pinned or r.is_direct)]
    direct = {r.name: r.link.url for r in reqs if r.is_direct}
    assert set(direct) == {"torch", "torchvision"}
    assert all(url.startswith("https://download.pytorch.org/whl/cpu/") and url.endswith(".whl")
               for url in direct.values())


def test_the_image_has_what_the_tpu_pods_run(tpu):
    """The pods run `/bin/bash -c` a script that looks the leader up with getent and awk and execs `vllm serve`;
    the build fails unless each is on PATH in the image (the Dockerfile's last check), and Python's stdout is
    unbuffered there."""
    dockerfile = engineimage.DOCKERFILE.read_text()
    [tools] = re.findall(r"for tool in ([\w ]+); do command -v", dockerfile)
    assert tuple(tools.split()) == engineimage.POD_COMMANDS
    assert "ENV PYTHONUNBUFFERED=1" in dockerfile
    assert f'{engineimage.TORCH_AUTOLOAD_ENV}=0 python3 -c "import importlib.metadata as m, torch' in dockerfile
    [lws] = [m for m in tpu.manifests if m["kind"] == "LeaderWorkerSet"]
    for template in ("leaderTemplate", "workerTemplate"):
        [container] = lws["spec"]["leaderWorkerTemplate"][template]["spec"]["containers"]
        assert container["command"][0] == "/bin/bash"
        script = container["args"][0]
        assert re.findall(r"^exec (\S+)", script, re.M) == ["vllm"]
        for tool in ("getent", "awk"):
            assert tool in script
        # The image keeps its base's root user (components/platform/hardening.py ROOT_IMAGES): nothing asks for another.
        context = container.get("securityContext") or {}
        assert "runAsUser" not in context and not context.get("readOnlyRootFilesystem")


def test_the_image_carries_the_allocator_the_tpu_pods_preload(tpu):
    """torch-tpu asks for tcmalloc preloaded (components/facts/versions.py TCMALLOC_LIBRARY): the build installs
    Debian's package under either name the base's release uses, fails without the library, and runs torch-tpu's own
    `check_tcmalloc` under the same LD_PRELOAD as the pods, with its warning an error; every TPU engine pod preloads
    that library (docs/engine-preconditions.md TPU-ALLOC-1 holds it on the rendered pods)."""
    from components.facts.versions import TCMALLOC_LIBRARY, TCMALLOC_PACKAGES

    runs = re.sub(r"\\\n\s*", " ", engineimage.DOCKERFILE.read_text())
    [packages] = re.findall(r"for p in ([\w. -]+); do", runs)
    assert tuple(packages.split()) == TCMALLOC_PACKAGES
    assert 'apt-get install -y --no-install-recommends "$pkg"' in runs
    assert f"[ -f {TCMALLOC_LIBRARY} ] ||" in runs
    [check] = re.findall(r"LD_PRELOAD=(\S+) python3 -W error::UserWarning -c \"[^\"]*_tcmalloc_check\.py'\)"
                         r"\['check_tcmalloc'\]\(\)\"", runs)
    assert check == TCMALLOC_LIBRARY
    assert runs.index("apt-get install") < runs.index("pip install") < runs.index(f"LD_PRELOAD={TCMALLOC_LIBRARY}")
    [lws] = [m for m in tpu.manifests if m["kind"] == "LeaderWorkerSet"]
    for template in ("leaderTemplate", "workerTemplate"):
        [container] = lws["spec"]["leaderWorkerTemplate"][template]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["LD_PRELOAD"] == TCMALLOC_LIBRARY, template

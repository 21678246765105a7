"""Everything the cluster pulls (charts, images), pinned once here with the reason for each pin."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChartRef:
    chart: str
    version: str
    repo: str | None = None
    """Classic Helm repository URL; None for an `oci://` chart reference."""
    why: str = ""
    content_sha256: str = ""
    """sha256 over the chart's files as reviewed (tools.preview.helm_render.content_digest): the offline plan renders a
    local copy, or one pulled from the registry, only if its files hash to this."""
    packaged_sha256: str = ""
    """The same over the chart as `helm package` writes the release archive from that tree (it applies the chart's
    .helmignore and re-serializes Chart.yaml), where the reviewed copy is the source tree rather than the archive."""

    @property
    def digests(self) -> tuple[str, ...]:
        return tuple(d for d in (self.content_sha256, self.packaged_sha256) if d)


LWS_CHART = ChartRef(
    chart="oci://registry.k8s.io/lws/charts/lws",
    version="0.11.1",
    why="llm-d guides require LWS v0.11.1 or newer with enableDisaggregatedSet=true "
        "(https://github.com/llm-d/llm-d/blob/main/guides/pd-disaggregation/README.md)",
    content_sha256="4a7c417fbe443d7821af482fe2c5883035d963f88c81740c32b80cd9e5275681",
)
LWS_MIN_VERSION = "0.11.1"

NVIDIA_DRA_DRIVER_CHART = ChartRef(
    chart="nvidia-dra-driver-gpu",
    version="25.8.0",
    repo="https://helm.ngc.nvidia.com/nvidia",
    why="Cluster Toolkit pins v25.8.0 for A4X Max ComputeDomains (https://github.com/GoogleCloudPlatform/"
        "cluster-toolkit/blob/1047080375af/examples/gke-a4x-max-bm/nvidia-dra-driver.yaml); the llm-d GKE guide "
        "installs 25.8.0 (https://github.com/llm-d/llm-d/blob/60be8bb/docs/infrastructure/providers/gke/README.md)",
    content_sha256="56476d347bd1eb0ee26970f14efcd30b2f490d66e07786742d646fb62aa1fbed",
)

KEDA_CHART = ChartRef(
    chart="keda",
    version="2.20.2",
    repo="https://kedacore.github.io/charts",
    why="llm-d's autoscaling guides scale model servers with KEDA ScaledObjects on the router's metrics "
        "(https://github.com/llm-d/llm-d/tree/main/guides/workload-autoscaling); 2.20.2 is the chart as released "
        "(kedacore/charts tag v2.20.2, cbb9bb8ce0809dc9048f72302f7c09765d66ed56), its CRDs under templates/crds/",
    content_sha256="63309094364c89ac3c81c06316a576f120e20b1df0a83e9e358a27d1bb4bc7c7",
    packaged_sha256="166280195c47cef06d7c0c848314f987a7a93f7df1e9098d8814ed57c30a2617",
)
KEDA_IMAGES = {name: f"ghcr.io/kedacore/{repo}:{KEDA_CHART.version}" for name, repo in (
    ("keda", "keda"), ("keda-metrics-apiserver", "keda-metrics-apiserver"),
    ("keda-webhooks", "keda-admission-webhooks"))}
"""The chart's three images (values.yaml `image.{keda,metricsApiServer,webhooks}`), tag = the chart's appVersion."""

LWS_IMAGE = f"registry.k8s.io/lws/lws:v{LWS_CHART.version}"
"""The LWS chart's manager image at its own version (lws chart values `image.manager`); named here so a digest can
be added (components/plan/images.py)."""
NVIDIA_DRA_DRIVER_IMAGE = f"nvcr.io/nvidia/k8s-dra-driver-gpu:v{NVIDIA_DRA_DRIVER_CHART.version}"
"""The DRA driver chart's image: `image.repository` and `v<appVersion>` (chart templates `fullimage`; appVersion
equals the chart version 25.8.0)."""

ASAPD_LITE_IMAGE = "us-docker.pkg.dev/gce-ai-infra/asapd-lite/asapd-lite:v0.0.8"
"""Initializes the MRDMA NICs on A4X Max nodes; the tag Cluster Toolkit ships
(https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/examples/gke-a4x-max-bm/asapd-lite-installer.yaml)."""


@dataclass(frozen=True)
class VllmRelease:
    version: str
    image: str
    architectures: frozenset[str]
    """The Kimi-family architectures its registry maps to CUDA implementations
    (vllm/model_executor/models/registry.py -> vllm/models/kimi_k3/nvidia/)."""
    hybrid_kv_flag: str
    """Spelling of "keep the hybrid KV-cache manager on": `--no-disable-hybrid-kv-cache-manager` up to 0.23,
    `--enable-hybrid-kv-cache-manager` in 0.33
    (https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/engine/arg_utils.py)."""
    why: str


VLLM = VllmRelease(
    version="0.33.0",
    image="docker.io/vllm/vllm-openai:v0.33.0",
    architectures=frozenset({"KimiK3ForConditionalGeneration", "KimiLinearForCausalLM", "KimiK3MTPModel",
                             "K3DSparkModel"}),
    hybrid_kv_flag="--enable-hybrid-kv-cache-manager",
    why="newest release with a parser dump (engine-flags/vllm-0.33.0.tsv); first with the kimi_k3 reasoning parser "
        "and kimi_k3_mtp (https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/reasoning/__init__.py, "
        "https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/config/speculative.py). The release tag is a "
        "linux/amd64 + linux/arm64 manifest list (architectures and sources: components/plan/images.py)",
)


TPU_ENGINE_LOCK_DIR = "/etc/vllm-torchtpu"
"""Where the TPU engine image keeps the lock it was built from (components/locks/Dockerfile)."""


@dataclass(frozen=True)
class TorchTpuRelease:
    """vLLM-TorchTPU: vLLM plus the TorchTPU platform plugin, the one public release that registers Kimi K3 for TPU."""

    version: str
    core_version: str
    image: str
    """Python 3.12 base the stack's image build installs the pinned wheels into (no release image exists;
    components/serving/engineimage.py)."""
    architectures: frozenset[str]
    """What the plugin registers with TPU implementations: `ModelRegistry.register_model` in
    vllm_torchtpu/models/vllm/__init__.py `register_models()` (vllm-torchtpu-core wheel)."""
    why: str

    @property
    def install_args(self) -> tuple[str, ...]:
        """The image build's one `pip install` (components/locks/Dockerfile): every package, the two vLLM-TorchTPU
        wheels included, from the hash-pinned lock (components/locks/vllm-torchtpu.txt), wheels only, nothing
        resolved. It runs in Cloud Build, never in a serving pod."""
        return ("--no-cache-dir", "--no-input", "--disable-pip-version-check", "--index-url", "https://pypi.org/simple",
                "--require-hashes", "--no-deps", "--only-binary=:all:", "-r", f"{TPU_ENGINE_LOCK_DIR}/requirements.txt")


VLLM_TORCHTPU = TorchTpuRelease(
    version="0.29.0",
    core_version="0.29.0",
    image="docker.io/library/python:3.12-slim",
    architectures=frozenset({"KimiK3ForConditionalGeneration", "KimiLinearForCausalLM", "K3DSparkModel",
                             "DeepseekV4ForCausalLM", "DSparkDraftModel"}),
    why="the only public release registering KimiK3ForConditionalGeneration for TPU (vllm-torchtpu-core 0.29.0 "
        "vllm_torchtpu/models/vllm/__init__.py register_models; https://pypi.org/project/vllm-torchtpu/0.29.0/); "
        "its wheels need CPython 3.12 (`Requires-Python: <3.13,>=3.12`) and no release image is published, so the "
        "stack builds one from a plain Python 3.12 image and the hash-pinned lock (components/serving/engineimage.py; "
        "engine-flags/vllm-torchtpu-0.29.0.tsv is this release's parser)",
)

TCMALLOC_PACKAGES = ("libtcmalloc-minimal4t64", "libtcmalloc-minimal4")
"""Debian's gperftools tcmalloc, the first of these the base image's release has (trixie renamed the package in its
64-bit time_t transition; bookworm keeps the old name); components/locks/Dockerfile installs it and fails without the
library."""
TCMALLOC_LIBRARY = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
"""The allocator torch-tpu asks for: "Preload libtcmalloc before starting Python (e.g.
LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4)"; its standard image preloads it, and without it
`check_tcmalloc` warns of host performance lost to glibc ptmalloc contention between its dispatch and runtime threads
(torch_tpu/_tcmalloc_check.py L100-150 in torch-tpu 0.2.0, the lock's wheel). The TPU pods set LD_PRELOAD to it
(components/plan/engines.py `vllm_torchtpu_env`); the image build (components/locks/Dockerfile) runs that check
under the preload and fails if it warns."""
SGLANG_TORCHTPU_FLAGS_VERSION = "0.5.23"
"""SGLang-TorchTPU is announced, not released: a user-supplied build's flags other than
engines.UNRELEASED_FLAG_VALUES are checked against this SGLang release's parser."""
SGLANG_TORCHTPU_ARCHITECTURES = frozenset({"KimiK3ForConditionalGeneration"})
"""ASSUMPTION for an unreleased build: the Kimi K3 class of SGLang 0.5.23 (sglang/srt/models/kimi_k3.py), which
has no TPU device in that release."""


PULUMI_COMMAND = "1.2.1"
"""pulumi-command (requirements.txt): `local.Command` runs the TPU engine image's Cloud Build at `pulumi up`, since
pulumi-gcp 10.2.0 has no resource that runs a build (components/serving/engineimage.py); 1.2.1 is the newest release
(https://pypi.org/project/pulumi-command/1.2.1/, needs pulumi >= 3.165)."""


ROUTER_VERSION = "v0.10.0"
"""llm-d-router release (tag 2026-08-17): chart, EPP image and disaggregation sidecar move together
(llm-d's env.sh floats on the `v0` channel, https://github.com/llm-d/llm-d/blob/14ecef0/guides/env.sh; a real tag keeps
it reproducible)."""
ROUTER_STANDALONE_CHART = ChartRef(chart="oci://ghcr.io/llm-d/charts/llm-d-router-standalone", version=ROUTER_VERSION,
                                   why="EPP + Envoy proxy; default router mode (https://github.com/llm-d/llm-d-router/blob/v0.10.0/config/charts/README.md)",
                                   content_sha256="36d65bafb2cbdae70b947957f1cd66c6a6da66da55c7e37757c790b0a9199aee")
ROUTER_GATEWAY_CHART = ChartRef(chart="oci://ghcr.io/llm-d/charts/llm-d-router-gateway", version=ROUTER_VERSION,
                                why="EPP + InferencePool for a GKE Gateway (https://github.com/llm-d/llm-d-router/blob/v0.10.0/config/charts/README.md)",
                                content_sha256="5e88cdd2a46e08e1a4044f03b3c00ee1750be16964a8f7f50239567c5b8d95f7")
EPP_IMAGE = ("ghcr.io/llm-d", "llm-d-router-endpoint-picker", ROUTER_VERSION)
"""(registry, repository, tag): the chart's default tag is the moving `main`, so the tag is pinned in values."""
ROUTING_SIDECAR_IMAGE = f"ghcr.io/llm-d/llm-d-router-disagg-sidecar:{ROUTER_VERSION}"
"""P/D routing sidecar on decode pods (renamed from llm-d-routing-sidecar;
https://github.com/llm-d/llm-d/blob/8f5f073/guides/recipes/modelserver/components/images/routing-sidecar/kustomization.yaml)."""
EPP_CONFIG_API_VERSION = "llm-d.ai/v1alpha1"
"""The only EndpointPickerConfig apiVersion the router registers at v0.10.0
(https://github.com/llm-d/llm-d-router/blob/v0.10.0/pkg/epp/config/loader/configloader.go)."""
ENVOY_PROXY_IMAGE = "docker.io/envoyproxy/envoy:distroless-v1.33.2"
"""The standalone router chart's Envoy proxy (values `router.proxy.presets.envoy.image` at v0.10.0,
https://github.com/llm-d/llm-d-router/tree/v0.10.0/charts); set only to add a digest."""
BUILD_STEP_IMAGE = "gcr.io/cloud-builders/docker:latest"
"""The one step of the TPU engine image's Cloud Build (components/locks/cloudbuild.yaml): Google's Docker builder,
which the build config named without a tag (so `latest`) before the step's image was pinned; the stack runs it by the
digest its registry names (components/checks/registry.py) or `images.buildStepDigest`."""
CALIBRATION_IMAGE = "docker.io/library/python:3.11-slim"
"""The router calibration Job runs a plain Python image
(https://github.com/llm-d/llm-d/tree/main/guides/recipes/router/calibration)."""
STAGING_IMAGE = CALIBRATION_IMAGE
"""The checkpoint staging Job runs the same plain Python image: one pin for both (the TPU engine image's build starts
from python:3.12-slim instead, which its wheels need: VLLM_TORCHTPU.image). Its libraries come from
components/weights/copier/requirements.lock, resolved for this image's CPython 3.11 on linux x86_64 (the system
pool)."""


INFERENCE_PERF_IMAGE = "quay.io/inference-perf/inference-perf:v0.7.0"
"""Upstream inference-perf image (quay.io/inference-perf/inference-perf,
https://github.com/kubernetes-sigs/inference-perf/blob/7de5ef2/README.md; tags up to
v0.7.0 seen in the wild). Assumption: the v0.7.0 image carries the schema of main at 7de5ef2 (strict keys,
conversation_replay), which the package list of 2026-11 shows released as 0.7.0 after that read."""

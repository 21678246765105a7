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

LWS_IMAGE = f"registry.k8s.io/lws/lws:v{LWS_CHART.version}"
"""The LWS chart's manager image at its own version (lws chart values `image.manager`); named here so a digest can
be added (components/images.py)."""
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
    hybrid_kv_flag: str
    """Spelling of "keep the hybrid KV-cache manager on": `--no-disable-hybrid-kv-cache-manager` up to 0.23,
    `--enable-hybrid-kv-cache-manager` in 0.33
    (https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/engine/arg_utils.py)."""
    why: str


VLLM = VllmRelease(
    version="0.33.0",
    image="docker.io/vllm/vllm-openai:v0.33.0",
    hybrid_kv_flag="--enable-hybrid-kv-cache-manager",
    why="newest release with a parser dump (engine-flags/vllm-0.33.0.tsv); first with the kimi_k3 reasoning parser "
        "and kimi_k3_mtp (https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/reasoning/__init__.py, "
        "https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/config/speculative.py). The release tag is a "
        "linux/amd64 + linux/arm64 manifest list (architectures and sources: components/images.py)",
)


SGLANG_JAX_LOCK_DIR = "/etc/sglang-jax"
"""Where TPU pods mount components/locks/sglang-jax.txt (a ConfigMap)."""


@dataclass(frozen=True)
class SglangJaxBuild:
    commit: str
    """Short form, as upstream URLs and the flag dump's file name carry it."""
    full_commit: str
    """The 40-hex commit the pods install: git checks the fetched tree against it."""
    image: str
    why: str

    @property
    def install_commands(self) -> tuple[str, ...]:
        """sglang-jax has no release carrying these flags on the package index, so the pinned commit is installed
        into the JAX TPU image at start (the sglang-jax GKE guide installs it the same way). Supply chain
        (docs/security.md): every dependency comes from the hash-pinned lock (components/locks/sglang-jax.txt,
        `--require-hashes --no-deps`), the package itself from the full commit with nothing resolved or built in
        isolation, and the Hugging Face token is not in the installer's environment."""
        pip = "env -u HF_TOKEN pip install --no-cache-dir --no-input --index-url https://pypi.org/simple"
        return (f"{pip} --require-hashes --no-deps --no-build-isolation -r {SGLANG_JAX_LOCK_DIR}/requirements.txt",
                f"{pip} --no-deps --no-build-isolation 'sglang-jax @ git+https://github.com/sgl-project/sglang-jax.git"
                f"@{self.full_commit}#subdirectory=python'")


SGLANG_JAX = SglangJaxBuild(
    commit="cddbf6f",
    full_commit="cddbf6f1cc33cbdd453bd8f36ff7051cf46ca176",
    image="us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:jax0.8.1-rev1",
    why="SGLang's TPU engine; the flag list in engine-flags/sglang-jax-main-cddbf6f.txt is from this commit, and "
        "the image is the one its GKE guide uses (https://github.com/sgl-project/sglang-jax/blob/cddbf6f/docs/deployment/gke-indexed-job.md)",
)

SGLANG_DAY0_FLAGS_VERSION = "0.5.23"
"""The day-0 SGLang TPU build's flags other than DAY0_FLAG_VALUES are checked against this release's parser."""

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
CALIBRATION_IMAGE = "docker.io/library/python:3.11-slim"
"""The router calibration Job runs a plain Python image
(https://github.com/llm-d/llm-d/tree/main/guides/recipes/router/calibration)."""
STAGING_IMAGE = CALIBRATION_IMAGE
"""The checkpoint staging Job runs the same plain Python image: one Python pin. Its libraries come from
tools/staging/requirements.lock, resolved for this image's CPython 3.11 on linux x86_64 (the system pool)."""


INFERENCE_PERF_IMAGE = "quay.io/inference-perf/inference-perf:v0.7.0"
"""Upstream inference-perf image (quay.io/inference-perf/inference-perf,
https://github.com/kubernetes-sigs/inference-perf/blob/7de5ef2/README.md; tags up to
v0.7.0 seen in the wild). Assumption: the v0.7.0 image carries the schema of main at 7de5ef2 (strict keys,
conversation_replay), which the package list of 2026-11 shows released as 0.7.0 after that read."""

"""Every container image the stacks run, by a short name: its pinned tag (components/facts/versions.py), the CPU
architectures that tag is shown to publish (with the source a user can open), and, when the
`images.<name>Digest` config key gives one, `@sha256:` appended, so the cluster pulls exactly that content.

Charts that compose `repository:tag` themselves get the digest through their tag value (`v0.10.0@sha256:...`),
which renders the same reference.

Architectures are `kubernetes.io/arch` values. A4X Max nodes are Grace (arm64; components/facts/machines.py), so
an image a pod can land there with must publish `linux/arm64`; the offline plan checks every container of
every pod against every pool it can schedule on (tools/preview/scheduling.py `architecture_problems`). Only what a
source shows is recorded: an image whose arm64 build is not shown for this exact tag is recorded amd64-only.

Digests (docs/versions.md "Image architectures"): a configured digest should be the tag's multi-platform
index (what `docker buildx imagetools inspect <tag>` prints as `Digest:`); the node's runtime then picks the
manifest for its own architecture. A per-platform manifest digest pins that one platform: it works only on
nodes of that architecture. Digests a source quotes for an image are recorded in `known_digests`, and the
plan refuses one that is provably another platform's manifest or another tag's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..config import ImagesConfig
from ..facts import versions

AMD64, ARM64 = "amd64", "arm64"
INDEX = "index"
"""`KnownDigest.platform` of a multi-platform index (manifest list)."""


@dataclass(frozen=True)
class KnownDigest:
    """A digest a source quotes for a tag of the image: the tag's index, or one platform's manifest."""

    digest: str
    tag: str
    platform: str
    """`INDEX`, or the architecture of a single-platform manifest."""
    source: str


@dataclass(frozen=True)
class Image:
    reference: str
    """`registry/repository:tag` as pinned in components/facts/versions.py."""
    config_key: str
    """The `images.*` key that may add a digest."""
    architectures: tuple[str, ...]
    """`kubernetes.io/arch` values the pinned tag is shown to publish."""
    evidence: str
    """Where a user can see that: the project's release workflow, a registry listing, an upstream guide that
    runs exactly this tag on nodes of that architecture."""
    known_digests: tuple[KnownDigest, ...] = ()

    @property
    def tag(self) -> str:
        return self.reference.rsplit(":", 1)[1]

def _epp() -> str:
    registry, repository, tag = versions.EPP_IMAGE
    return f"{registry}/{repository}:{tag}"


ROUTER_WORKFLOW = ("https://github.com/llm-d/llm-d-router/blob/22c67eea2625af17c9df0551de107328688dbe12/.github/"
                   "workflows/ci-build-images.yaml (\"Push ... image for both AMD64 and ARM64\"), which "
                   "https://github.com/llm-d/llm-d-router/blob/0b1db3e56952e8902c818bd8e8ea93d9496010a5/.github/workflows/"
                   "ci-release.yaml runs for every v* tag")
LLMD_A4X_MAX_GUIDE = ("https://github.com/llm-d/llm-d/tree/main/guides/pd-disaggregation/modelserver/gpu/vllm/gke/"
                      "a4xmax (llm-d's P/D guide on A4X Max, GB300: vllm-openai:v0.26.0 and the disagg sidecar v0.8.1)")
VLLM_ARM64_MIRROR = "https://huggingface.co/carlosmemorandum/vllm-openai"
"""A mirror of vllm-openai:v0.30.0's arm64 platform that quotes the tag's index digest and its arm64 manifest."""

IMAGES: dict[str, Image] = {
    "vllm": Image(
        versions.VLLM.image, "vllmDigest", (AMD64, ARM64),
        "vLLM's release procedure publishes vllm/vllm-openai:v<version> as a manifest list of its -x86_64 and "
        "-aarch64 builds (https://github.com/vllm-project/vllm/blob/16b3d06eb38ee70d5bbe31867e498e4dfc98d5cc/"
        ".buildkite/scripts/annotate-release.sh; arm64 since https://github.com/vllm-project/vllm/pull/23210); the "
        "unsuffixed tag is the CUDA 13.0 build since https://github.com/vllm-project/vllm/pull/39878; llm-d runs "
        f"the unsuffixed tag on GB300: {LLMD_A4X_MAX_GUIDE}",
        known_digests=(
            KnownDigest("sha256:8a69ffad015f138d7170c4ddc429e230a3bc1c1719f67e14324749df200a4b90", "v0.30.0", INDEX,
                        VLLM_ARM64_MIRROR),
            KnownDigest("sha256:4864d46625cbc3307623e29ac742030655e27249feba7b97ec925ce4cc4dfb56", "v0.30.0", ARM64,
                        VLLM_ARM64_MIRROR),
        )),
    "routing-sidecar": Image(versions.ROUTING_SIDECAR_IMAGE, "routingSidecarDigest", (AMD64, ARM64),
                             f"{ROUTER_WORKFLOW}; the sidecar runs on GB300 in {LLMD_A4X_MAX_GUIDE}"),
    "epp": Image(_epp(), "eppDigest", (AMD64, ARM64), ROUTER_WORKFLOW),
    "envoy": Image(versions.ENVOY_PROXY_IMAGE, "envoyDigest", (AMD64,),
                   "Docker Hub lists linux/amd64 and linux/arm64 for the distroless releases it shows "
                   "(https://hub.docker.com/r/envoyproxy/envoy/tags?page=1&name=v1.35.12); this tag's listing is "
                   "not quoted, so only amd64 is recorded (the router pod runs on the system pool)"),
    "tpu-engine": Image(versions.VLLM_TORCHTPU.image, "tpuEngineDigest", (AMD64,),
                        "Cloud TPU VM hosts are x86 (components/facts/machines.py); the Docker official python image "
                        "publishes amd64 among its architectures (https://github.com/docker-library/official-images/"
                        "blob/master/library/python); vLLM-TorchTPU's wheels are manylinux x86_64"),
    "build-step": Image(versions.BUILD_STEP_IMAGE, "buildStepDigest", (AMD64,),
                        "the build config asks for an E2 machine (components/locks/cloudbuild.yaml `machineType`), "
                        "and E2 machines are x86 (https://cloud.google.com/compute/docs/general-purpose-machines"
                        "#e2_machine_types)"),
    "asapd-lite": Image(versions.ASAPD_LITE_IMAGE, "asapdLiteDigest", (ARM64,),
                        "Cluster Toolkit runs this tag only on a4x-maxgpu-4g-metal nodes (Grace, arm64) "
                        "(https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/20315cfa56440c2c74099a8a1bfee39"
                        "cbac68ccf/examples/gke-a4x-max-bm/asapd-lite-installer.yaml); no other build is shown"),
    "calibration": Image(versions.CALIBRATION_IMAGE, "calibrationDigest", (AMD64,),
                         "llm-d's calibration recipe runs it on ordinary (x86) nodes (https://github.com/llm-d/llm-d/"
                         "tree/main/guides/recipes/router/calibration); only amd64 is recorded (system pool)"),
    "staging": Image(versions.STAGING_IMAGE, "stagingDigest", (AMD64,),
                     "the calibration image (https://github.com/llm-d/llm-d/tree/main/guides/recipes/router/"
                     "calibration); components/weights/copier/requirements.lock is resolved for its linux x86_64 "
                     "build (the "
                     "staging Job runs on the system pool)"),
    "inference-perf": Image(versions.INFERENCE_PERF_IMAGE, "inferencePerfDigest", (AMD64,),
                            "the release workflow builds `platforms: linux/amd64` only (https://github.com/"
                            "kubernetes-sigs/inference-perf/blob/cae39dad7278cc54e046f7a396d9009f1d025cd0/.github/"
                            "workflows/publish-on-release.yml)"),
    "lws": Image(versions.LWS_IMAGE, "lwsDigest", (AMD64,),
                 "LWS's Makefile builds multi-platform images (PLATFORMS, https://github.com/kubernetes-sigs/lws/blob/"
                 "02039b4e213fa8f7f6f71c9d9b93eba5b260afc3/Makefile); this tag's listing is not quoted, so only amd64 "
                 "is recorded (the controller runs on the system pool)"),
    **{name: Image(versions.KEDA_IMAGES[name], key, (AMD64, ARM64),
                   "KEDA's release workflow publishes every image for linux/amd64, linux/arm64 and linux/s390x "
                   "(BUILD_PLATFORMS in https://github.com/kedacore/keda/blob/v2.20.2/Makefile, "
                   "`make publish-multiarch` in "
                   "https://github.com/kedacore/keda/blob/v2.20.2/.github/workflows/release-build.yml)")
       for name, key in (("keda", "kedaDigest"), ("keda-metrics-apiserver", "kedaMetricsApiServerDigest"),
                         ("keda-webhooks", "kedaWebhooksDigest"))},
    "dra-driver": Image(versions.NVIDIA_DRA_DRIVER_IMAGE, "draDriverDigest", (AMD64, ARM64),
                        "NVIDIA's image workflow builds it with BUILD_MULTI_ARCH_IMAGES=true (https://github.com/NVIDIA/"
                        "k8s-dra-driver-gpu/blob/0ea368dd97fe1336d4c90027120cf024140c60de/.github/workflows/"
                        "image.yaml); Cluster Toolkit runs v25.8.0's kubelet plugin on GB300 (arm64) nodes "
                        "(https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/examples/"
                        "gke-a4x-max-bm/nvidia-dra-driver.yaml)"),
}


GPU_ONLY = frozenset({"vllm", "routing-sidecar", "asapd-lite", "dra-driver"})
TPU_ONLY = frozenset({"tpu-engine", "build-step"})
"""Images one track only runs (the config's digest keys of the other track have no effect there)."""


BUILT_TPU_ENGINE = r"[a-z0-9-]+-docker\.pkg\.dev/[a-z0-9-]+/[a-z0-9-]+-engine/vllm-torchtpu"
"""Repository of the TPU engine image the stack builds (components/serving/engineimage.py `repository_path`). It has the
architectures of its base (`tpu-engine`): Cloud Build builds it on x86 workers from manylinux x86_64 wheels."""


def is_built_tpu_engine(reference: str) -> bool:
    return re.fullmatch(BUILT_TPU_ENGINE, split_reference(reference)[0].rsplit(":", 1)[0]) is not None


def split_reference(reference: str) -> tuple[str, Optional[str]]:
    """`repo:tag@sha256:...` -> (`repo:tag`, `sha256:...`); no digest -> (reference, None)."""
    base, _, digest_part = reference.partition("@")
    return base, digest_part or None


def _normalized(reference: str) -> str:
    """Docker Hub's implicit registry and `library/` namespace made explicit, so spellings compare equal."""
    first = reference.split("/", 1)[0]
    if "/" not in reference or ("." not in first and ":" not in first and first != "localhost"):
        reference = f"docker.io/{reference if '/' in reference else 'library/' + reference}"
    return reference


def by_reference(reference: str) -> tuple[Optional[str], Optional[str]]:
    """(short name, digest) of a container's `image` value; name None for an image not pinned here (a user's
    own, like `tpu.sglangImage`)."""
    base, digest_part = split_reference(reference)
    if is_built_tpu_engine(reference):
        return "tpu-engine", digest_part
    wanted = _normalized(base)
    name = next((n for n, i in IMAGES.items() if _normalized(i.reference) == wanted), None)
    return name, digest_part


def digest_problem(name: str, digest_value: str, arch: str) -> Optional[str]:
    """Why a digest configured for image `name` cannot run on an `arch` node, when a recorded fact proves it."""
    image = IMAGES[name]
    known = next((k for k in image.known_digests if k.digest == digest_value), None)
    if known is None:
        return None
    what = "index" if known.platform == INDEX else f"linux/{known.platform} manifest"
    if known.tag != image.tag:
        return f"digest {digest_value} is the {what} of tag {known.tag}, not of the pinned {image.tag} ({known.source})"
    if known.platform not in (INDEX, arch):
        return f"digest {digest_value} is the {what} of {image.tag}, not runnable on linux/{arch} ({known.source})"
    return None


def digest(images: ImagesConfig, name: str) -> Optional[str]:
    return getattr(images, IMAGES[name].config_key)


def ref(images: ImagesConfig, name: str) -> str:
    """The reference pods use for image `name`: its pinned tag, plus the configured digest if any."""
    return with_digest(IMAGES[name].reference, digest(images, name))


def tag(images: ImagesConfig, name: str) -> str:
    """The chart tag value for image `name` (tag, or tag@digest)."""
    return tag_with_digest(IMAGES[name].tag, digest(images, name))


def with_digest(reference: str, digest: Optional[str]) -> str:
    return f"{reference}@{digest}" if digest else reference


def tag_with_digest(tag: str, digest: Optional[str]) -> str:
    """For charts that render `repository:tag`: the tag value that makes them render `repository:tag@digest`."""
    return f"{tag}@{digest}" if digest else tag

"""Every container image the stacks run, by a short name: its pinned tag (components/versions.py) and, when the
`images.<name>Digest` config key gives one, `@sha256:` appended, so the cluster pulls exactly that content.

Charts that compose `repository:tag` themselves get the digest through their tag value (`v0.10.0@sha256:...`),
which renders the same reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import versions
from .config import ImagesConfig


@dataclass(frozen=True)
class Image:
    reference: str
    """`registry/repository:tag` as pinned in components/versions.py."""
    config_key: str
    """The `images.*` key that may add a digest."""

    @property
    def tag(self) -> str:
        return self.reference.rsplit(":", 1)[1]


def _epp() -> str:
    registry, repository, tag = versions.EPP_IMAGE
    return f"{registry}/{repository}:{tag}"


IMAGES: dict[str, Image] = {
    "vllm": Image(versions.VLLM.image, "vllmDigest"),
    "routing-sidecar": Image(versions.ROUTING_SIDECAR_IMAGE, "routingSidecarDigest"),
    "epp": Image(_epp(), "eppDigest"),
    "envoy": Image(versions.ENVOY_PROXY_IMAGE, "envoyDigest"),
    "jax-tpu": Image(versions.SGLANG_JAX.image, "jaxTpuDigest"),
    "asapd-lite": Image(versions.ASAPD_LITE_IMAGE, "asapdLiteDigest"),
    "calibration": Image(versions.CALIBRATION_IMAGE, "calibrationDigest"),
    "staging": Image(versions.STAGING_IMAGE, "stagingDigest"),
    "inference-perf": Image(versions.INFERENCE_PERF_IMAGE, "inferencePerfDigest"),
    "lws": Image(versions.LWS_IMAGE, "lwsDigest"),
    "dra-driver": Image(versions.NVIDIA_DRA_DRIVER_IMAGE, "draDriverDigest"),
}


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

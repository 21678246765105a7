"""`images.*`: a digest for each image the stack pulls (pods pull `tag@digest`)."""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from pydantic import Field, model_validator

from ..facts import imageref
from .base import Section, _fail, for_track


def _digest_field(image: str, track: Optional[str] = None, effect: str = "pods pull tag@digest") -> Any:
    return Field(None, description=f"Digest (sha256:...) of the {image} image tag's multi-platform index "
                                   f"(docs/versions.md); when set, {effect}.",
                 json_schema_extra=for_track(track, warn=True) if track else None)


class ImagesConfig(Section):
    """Optional digests of the pinned images (components/plan/images.py); a tag can move, a digest cannot."""

    prefix: ClassVar[str] = "images"
    vllmDigest: Optional[str] = _digest_field("vLLM", "gpu")
    routingSidecarDigest: Optional[str] = _digest_field("P/D routing sidecar", "gpu")
    eppDigest: Optional[str] = _digest_field("router EPP")
    envoyDigest: Optional[str] = _digest_field("standalone router's Envoy proxy")
    tpuEngineDigest: Optional[str] = _digest_field(
        "TPU engine build's Python 3.12 base", "tpu",
        "the stack builds its vLLM-TorchTPU image FROM tag@digest (the pods always run the build by digest)")
    buildStepDigest: Optional[str] = _digest_field(
        "TPU engine build's Cloud Build step (Docker builder)", "tpu", "the build runs its step by that digest")
    asapdLiteDigest: Optional[str] = _digest_field("asapd-lite NIC initializer", "gpu")
    calibrationDigest: Optional[str] = _digest_field("calibration Job's Python")
    stagingDigest: Optional[str] = _digest_field("checkpoint staging Job's Python")
    inferencePerfDigest: Optional[str] = _digest_field("inference-perf benchmark")
    lwsDigest: Optional[str] = _digest_field("LeaderWorkerSet controller")
    kedaDigest: Optional[str] = _digest_field("KEDA operator")
    kedaMetricsApiServerDigest: Optional[str] = _digest_field("KEDA metrics API server")
    kedaWebhooksDigest: Optional[str] = _digest_field("KEDA admission webhooks")
    draDriverDigest: Optional[str] = _digest_field("NVIDIA DRA driver", "gpu")

    @model_validator(mode="after")
    def _check(self) -> ImagesConfig:
        for field in type(self).model_fields:
            value = getattr(self, field)
            if value is not None and (problem := imageref.digest_problem(value)):
                _fail(self.key(field), value, f"{problem} (the image's digest, e.g. from `crane digest <image>`)")
            if value is not None and not value.startswith("sha256:"):
                # The policy pack runs every image as registry/path@sha256:<64 hex> (policy/inventory.py).
                _fail(self.key(field), value, "a sha256 digest: every image runs by its sha256 digest "
                                              "(`crane digest <image>` prints it)")
        return self

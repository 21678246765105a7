"""`router.*`: standalone or Gateway mode, calibration, the client address."""

from __future__ import annotations

from typing import ClassVar, Literal, Optional
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from .base import Section, _fail


class RouterConfig(Section):
    prefix: ClassVar[str] = "router"
    mode: Literal["standalone", "gateway"] = Field(
        "standalone", description="standalone: EPP with its Envoy proxy; gateway: GKE Gateway + InferencePool.")
    gatewayClass: Literal["gke-l7-rilb", "gke-l7-regional-external-managed"] = Field(
        "gke-l7-rilb", description="GatewayClass in gateway mode (regional internal by default).")
    peakPrefillThroughput: Optional[int] = Field(
        None, ge=1, description="Tokens/s one router endpoint (one engine) prefills at peak (prefix-cache-affinity-"
                                "filter); default: the plan's rule for this model and endpoint (docs/capacity.md); "
                                "set it from a calibration.")
    calibrate: bool = Field(False, description="Create the peakPrefillThroughput calibration Job.")
    clientUrl: Optional[str] = Field(
        None, description="URL in-cluster load (benchmark, calibration) is sent to; default the standalone router's "
                          "Service; required in gateway mode, e.g. the Gateway's address.")

    @model_validator(mode="after")
    def _check(self) -> RouterConfig:
        if self.clientUrl is not None:
            try:
                url = urlsplit(self.clientUrl)
                url.port  # noqa: B018 (raises on a port that is not a number)
            except ValueError:
                url = None
            if url is None or url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment:
                _fail(self.key("clientUrl"), self.clientUrl, "an http:// or https:// URL with a host and no query, "
                                                             "e.g. http://10.0.0.10 or http://gateway.example:8080")
        return self

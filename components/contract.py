"""Names that one layer creates and another consumes, defined once and imported by both sides."""

from __future__ import annotations

from . import catalog

TRANSFER_SERVICE_ACCOUNT = f"{catalog.GUIDE_NAME}-weights-transfer"
"""Kubernetes service account the Volume Populator transfer Job runs as; its Workload Identity
principal is the only identity granted read on the checkpoint bucket (gke.md §4)."""

MODELS_PVC = f"{catalog.GUIDE_NAME}-models"
"""ReadOnlyMany Hyperdisk ML claim holding the checkpoint (seed post)."""

MODELS_MOUNT_PATH = "/models"
"""Where model servers mount the checkpoint volume read-only (seed post)."""

HF_TOKEN_SECRET = "llm-d-hf-token"
HF_TOKEN_KEY = "HF_TOKEN"
"""Secret name and key every llm-d guide uses (llm-d.md §5 step 6)."""

RDMA_CLAIM_TEMPLATE = f"{catalog.GUIDE_NAME}-rdma"
"""ResourceClaimTemplate for all 8 `mrdma.google.com` devices of an A4X Max node (gke.md §2.6)."""
COMPUTE_DOMAIN = f"{catalog.GUIDE_NAME}-nvl72"
COMPUTE_DOMAIN_CHANNEL_TEMPLATE = f"{catalog.GUIDE_NAME}-nvl72-channel"
"""ComputeDomain and the channel claim template its driver generates, which serving pods claim."""

# Labels of the serving pods: the router selects them, PodMonitoring scrapes them (llm-d.md §3.2, §7).
SERVING_LABELS = {"llm-d.ai/inference-serving": "true", "llm-d.ai/guide": catalog.GUIDE_NAME}
ROLE_LABEL = "llm-d.ai/role"

MODEL_SERVER_PORT = 8000
"""Port the router sends requests to on a serving pod (engine, or the routing sidecar on decode pods)."""
DECODE_ENGINE_PORT = 8200
"""vLLM's own port behind the routing sidecar on decode pods (llm-d.md §3.2)."""
METRICS_PATH = "/metrics"

ROUTER_MODE_LABEL = "llm-d.ai/igw-mode"
"""Label every llm-d router EPP pod carries (router chart `routerlib/templates/_helpers.tpl`)."""
ROUTER_METRICS_PORT = "metrics"
"""Named EPP container port 9090 (router chart `_deployment.yaml`)."""

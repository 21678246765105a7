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

KV_BLOCK_TOKENS = 128
"""KV block (vLLM --block-size) / page (SGLang --page-size) in tokens. The router's prefix model hashes
blocks of the same size, so both sides import this one value (seed: blockSizeTokens 128; sglang-jax
needs page size 128 for MLA, engines.md §2.7)."""

KV_EVENTS_PORT = 5557
"""ZMQ port engines publish KV-cache events on (vLLM/SGLang default `tcp://*:5557`; the router's pod
discovery default socketPort, llm-d.md §4.2)."""
KV_EVENTS_TOPIC_PREFIX = "kv@"
"""Topic `kv@<pod ip>:<port>@<model>`; the router splits on '@' and filters on `kv@` (llm-d.md §4.1)."""

NIXL_SIDE_CHANNEL_PORT = 5600
"""vLLM NIXL side channel base port; the effective port is base + local DP index (engines.md §1.3)."""
DATA_PARALLEL_RPC_PORT = 5555
SGLANG_DIST_INIT_PORT = 20000

ROUTER_PROXY_PORT = 8081
"""Envoy listener of the standalone router; the chart's Service maps port 80 to it (llm-d.md §1.3)."""
ROUTER_SERVICE_PORT = 80

PREFILL_CHUNK_TOKENS = 8192
"""Tokens one prefill step takes (vLLM --max-num-batched-tokens on prefill engines, SGLang
--chunked-prefill-size). The router's peakPrefillThroughput calibration divides this chunk by the median
TTFT, so it must equal the engines' setting (llm-d.md §2.3)."""

"""Names that one layer creates and another consumes, defined once and imported by both sides."""

from __future__ import annotations

from . import catalog

TRANSFER_SERVICE_ACCOUNT = f"{catalog.GUIDE_NAME}-weights-transfer"
"""Kubernetes service account the Volume Populator transfer Job runs as; its Workload Identity
principal is the only identity granted read on the checkpoint bucket
(https://docs.cloud.google.com/kubernetes-engine/docs/concepts/about-volume-populator)."""

MODELS_PVC = f"{catalog.GUIDE_NAME}-models"
"""ReadOnlyMany Hyperdisk ML claim holding the checkpoint (seed post)."""

MODELS_MOUNT_PATH = "/models"
"""Where model servers mount the checkpoint volume read-only (seed post)."""

BUCKET_ON_DESTROY_LABEL = "on-destroy"
"""Label of a bucket the program creates: `keep` (destroy leaves it and its objects; it is never force-destroyable)
or `delete` (`storage.deleteCheckpointOnDestroy`: destroy deletes it with its objects). The policy pack holds each
bucket to what its label declares (components/checks/declared.py BUCKET_DISPOSITIONS)."""

HF_TOKEN_SECRET = "llm-d-hf-token"
HF_TOKEN_KEY = "HF_TOKEN"
"""Secret name and key every llm-d guide uses
(https://github.com/llm-d/llm-d/blob/main/guides/pd-disaggregation/README.md)."""

RDMA_CLAIM_TEMPLATE = f"{catalog.GUIDE_NAME}-rdma"
"""ResourceClaimTemplate for all 8 `mrdma.google.com` devices of an A4X Max node
(https://github.com/NVIDIA/aicr/blob/9b6263c1d690/docs/integrator/gke-a4x-max-networking.md)."""
COMPUTE_DOMAIN = f"{catalog.GUIDE_NAME}-nvl72"
COMPUTE_DOMAIN_CHANNEL_TEMPLATE = f"{catalog.GUIDE_NAME}-nvl72-channel"
"""ComputeDomain and the channel claim template its driver generates, which serving pods claim."""

# Labels of the serving pods: the router selects them, PodMonitoring scrapes them
# (https://github.com/llm-d/llm-d/blob/39507f3/guides/wide-ep/modelserver/gpu/vllm-deepseek-r1-0528/base/disaggregatedset.yaml).
SERVING_LABELS = {"llm-d.ai/inference-serving": "true", "llm-d.ai/guide": catalog.GUIDE_NAME}
ROLE_LABEL = "llm-d.ai/role"

SLICE_NODE_LABEL = f"{catalog.GUIDE_NAME}.llm-d.ai/slice"
"""Node label on every accelerator node: the index of the slice (serving unit) whose node pool it is in. The
scheduling proof, smoke check and benchmark report group nodes by it; placement itself keys on the label GKE
sets (components/serving/modelservers.py PLACEMENT)."""
DISAGGREGATED_SLICE_LABEL = "disaggregatedset.x-k8s.io/slice"
"""Pod label the DisaggregatedSet controller puts on every pod of slice i (value i)
(https://github.com/kubernetes-sigs/lws/blob/v0.10.0/pkg/utils/disaggregatedset/utils.go); the router reads it as
the pod's rack."""

LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
"""Pod label of a LeaderWorkerSet group's index (kubernetes-sigs/lws v0.10.0 api/leaderworkerset/v1/
leaderworkerset_types.go GroupIndexLabelKey); on TPU one group is one slice."""

MODEL_SERVER_PORT = 8000
"""Port the router sends requests to on a serving pod (engine, or the routing sidecar on decode pods)."""
DECODE_ENGINE_PORT = 8200
"""vLLM's own port behind the routing sidecar on decode pods
(https://github.com/llm-d/llm-d-router/blob/v0.10.0/pkg/sidecar/proxy/options.go)."""
SUPERVISOR_PORT_OFFSET = 8
"""A GPU pod's engines each serve on their own port, base + local rank (vLLM 0.33.0
vllm/entrypoints/launchers/dp_supervisor.py `_build_vllm_dp_server_args`: `child_args.port = args.port + local_rank`),
and vLLM's DP supervisor answers /health and /readyz for all of them on base + 8, outside the rank ports (L108-115),
as llm-d's wide-EP pods run it (8008 and 8208,
https://github.com/llm-d/llm-d/blob/39507f3/guides/wide-ep/modelserver/gpu/vllm-deepseek-r1-0528/base/disaggregatedset.yaml)."""
MAX_TARGET_PORTS = 8
"""An InferencePool lists at most 8 target ports (gateway-api-inference-extension v1 CRD
inference.networking.k8s.io_inferencepools.yaml `spec.targetPorts` maxItems 8)."""


def engine_ports(base: int, engines: int) -> list[int]:
    """The ports of a pod's engines, one per data-parallel rank on the node."""
    return [base + rank for rank in range(engines)]
METRICS_PATH = "/metrics"

ROUTER_MODE_LABEL = "llm-d.ai/igw-mode"
"""Label every llm-d router EPP pod carries (router chart `routerlib/templates/_helpers.tpl`)."""
ROUTER_METRICS_PORT = "metrics"
"""Named EPP container port 9090 (router chart `_deployment.yaml`)."""

KV_BLOCK_TOKENS = 128
"""The KV block asked for (seed: blockSizeTokens 128). It is only a floor: both engines raise the block of this
hybrid model until a page holds a KDA state, so the engine-effective block that the engines are started with and
the router counts in comes from components/plan/kvblocks.py, computed from this floor."""

NIXL_SIDE_CHANNEL_PORT = 5600
"""First NIXL side-channel port of a GPU pod: vLLM binds VLLM_NIXL_SIDE_CHANNEL_PORT + the global DP rank
(https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py),
so each pod's script lowers the base by its START_RANK and its engines listen on this + local rank."""
DATA_PARALLEL_RPC_PORT = 5555
SGLANG_DIST_INIT_PORT = 20000
TPU_MASTER_PORT = 29501
"""vLLM-TorchTPU `--master-port` of a slice's leader (vLLM's default, vllm/config/parallel.py `master_port`); the
plugin's TCPStore rendezvous takes the next port
(https://github.com/vllm-project/vllm-torchtpu/blob/v0.29.0/vllm_torchtpu/distributed/tpu_mp_multihost.py)."""

LOAD_CLIENT_LABELS = {"app.kubernetes.io/part-of": catalog.GUIDE_NAME, "app.kubernetes.io/component": "load-client"}
"""Labels of the in-cluster load Jobs (benchmark, calibration): the router's NetworkPolicy admits them."""
BENCHMARK_NAME_LABEL = {"app.kubernetes.io/name": "inference-perf"}
"""The benchmark Job's pods, the one load client that also writes to Cloud Storage."""

EPP_EXT_PROC_PORT = 9002
EPP_GRPC_HEALTH_PORT = 9003
"""EPP gRPC ext-proc and health ports (router chart `_deployment.yaml` containerPort 9002 and
`grpcHealthPort | default 9003`); a GKE Gateway's proxies call the ext-proc port."""

ROUTER_PROXY_PORT = 8081
"""Envoy listener of the standalone router; the chart's Service maps port 80 to it
(https://github.com/llm-d/llm-d-router/blob/v0.10.0/config/charts/llm-d-router-standalone/values.yaml)."""
ROUTER_SERVICE_PORT = 80

PREFILL_CHUNK_TOKENS = 8192
"""Tokens one prefill step takes (vLLM --max-num-batched-tokens on prefill engines, SGLang
--chunked-prefill-size). The router's peakPrefillThroughput calibration divides this chunk by the median
TTFT, so it must equal the engines' setting
(https://github.com/llm-d/llm-d-router/blob/v0.10.0/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/plugin.go)."""

STAGING_SERVICE_ACCOUNT = f"{catalog.GUIDE_NAME}-weights-stager"
"""Kubernetes service account of the staging Job (Hugging Face Hub -> checkpoint bucket); its Workload
Identity principal may list the bucket and create/delete objects under the checkpoint prefix only."""

STAGING_LABELS = {"app.kubernetes.io/name": "weights-staging", "app.kubernetes.io/part-of": catalog.GUIDE_NAME}
"""Labels of the staging Job's pods, for NetworkPolicies that must let them out (STAGING_EGRESS)."""

STAGING_EGRESS = (
    ("DNS", "kube-dns in kube-system", "53/UDP, 53/TCP"),
    ("metadata server: Workload Identity tokens (google-auth compute_engine/_metadata.py calls 169.254.169.254)",
     "169.254.169.254/32", "80/TCP"),
    ("Python package index: the hashed install of components/weights/copier/requirements.lock", "pypi.org, "
                                                                                                "files.pythonhosted.org",
     "443/TCP"),
    ("Hugging Face Hub API and downloads: hubDomains, lfsDomains and cdnDomains of "
     "https://huggingface.co/.well-known/meta.json", "huggingface.co, cdn-lfs*.hf.co, transfer.xethub*.hf.co, "
     "*.cdn.hf.co", "443/TCP"),
    ("Cloud Storage JSON API: listing and resumable uploads", "storage.googleapis.com", "443/TCP"),
)
"""Where a staging pod connects: (purpose, destination, ports). The public hosts change addresses, so an
IP-based NetworkPolicy must allow TCP 443 to the internet for pods with STAGING_LABELS (docs/weights.md)."""

def disaggregated_set_name(namespace: str) -> str:
    """The GPU DisaggregatedSet's name in the stack's namespace (kubernetes.namespace): the stack creates it, the
    router's rollout screener selects its pods by it. A name, not the config: this module imports no config."""
    return f"{namespace}-vllm"

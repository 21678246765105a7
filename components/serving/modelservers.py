"""Model servers: vLLM prefill/decode LeaderWorkerSet groups in a DisaggregatedSet (GPU), vLLM-TorchTPU
LeaderWorkerSet replicas, one multi-host engine per slice (TPU). Pod labels come from the contract the router
selects on; flags come from components.plan.engines; sizes from components.plan.capacity."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from ..cloud.base import Args, Component, StrInput
from ..config import StackConfig
from ..facts import catalog, contract
from ..plan import autoscaling, engines, images, loading, parallel
from ..platform import hardening
from ..platform.dra import NVIDIA_DRIVER_ROOT
from . import compilecache

PROBE_TIMEOUT_S = 5
"""The kubelet's default is 1 s; a busy engine answers /health slower (llm-d's GB200 pods use 5)."""
GIB = 2**30
PROCESS_MEMORY_GIB = 128
"""Memory an engine process needs besides its offload buffers (assumption; llm-d requests 300-600Gi per GPU pod)."""
SHM_BASE_GIB = 2
"""/dev/shm for inter-process buffers, "roughly 32MB per local DP" rounded up
(https://github.com/llm-d/llm-d/blob/39507f3/guides/wide-ep/modelserver/gpu/vllm-deepseek-r1-0528/base/disaggregatedset.yaml)."""


def model_label() -> str:
    return catalog.KIMI.hf_id.split("/")[-1]


def serving_labels(track: str, engine: str, role: Optional[str] = None, serving: bool = True) -> dict[str, str]:
    """Labels of a model-server pod. Only pods that serve requests carry the router's selector labels."""
    labels = {"llm-d.ai/guide": catalog.GUIDE_NAME, "llm-d.ai/model": model_label(),
              "llm-d.ai/engine-type": engine, "llm-d.ai/accelerator-variant": track}
    if serving:
        labels.update(contract.SERVING_LABELS)
    if role:
        labels[contract.ROLE_LABEL] = role
    return labels


def _env(name: str, value: str) -> k8s.core.v1.EnvVarArgs:
    return k8s.core.v1.EnvVarArgs(name=name, value=value)


def _field_env(name: str, path: str) -> k8s.core.v1.EnvVarArgs:
    return k8s.core.v1.EnvVarArgs(name=name, value_from=k8s.core.v1.EnvVarSourceArgs(
        field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path=path)))


def common_env(command: engines.Command) -> list[k8s.core.v1.EnvVarArgs]:
    """The pod's address only where the command reads it (the TPU launcher's VLLM_HOST_IP), and
    engines.ENGINE_PRIVACY_ENV (usage stats and the Hub off). No PYTHONHASHSEED: it only made block hashes comparable
    with the router's KV-event index, which nothing runs (components/plan/engines.py), and the engines' default
    `--prefix-caching-hash-algo sha256` does not read it
    (https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/v1/core/kv_cache_utils.py L146-158)."""
    pod_ip = [_field_env("POD_IP", "status.podIP")] if engines.POD_IP in command.script() else []
    return [*pod_ip, *(_env(name, value) for name, value in engines.ENGINE_PRIVACY_ENV)]


def weights_volume(claim_name: StrInput) -> tuple[k8s.core.v1.VolumeArgs, k8s.core.v1.VolumeMountArgs]:
    """The claim's name carries the checkpoint's revision (components/weights/volume.py), so a new revision rolls
    the pods."""
    claim = k8s.core.v1.PersistentVolumeClaimVolumeSourceArgs(claim_name=claim_name, read_only=True)
    volume = k8s.core.v1.VolumeArgs(name="models", persistent_volume_claim=claim)
    return volume, k8s.core.v1.VolumeMountArgs(name="models", mount_path=contract.MODELS_MOUNT_PATH, read_only=True)


def shm_volume(size_gib: int) -> tuple[k8s.core.v1.VolumeArgs, k8s.core.v1.VolumeMountArgs]:
    volume = k8s.core.v1.VolumeArgs(name="dshm", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(
        medium="Memory", size_limit=f"{size_gib}Gi"))
    return volume, k8s.core.v1.VolumeMountArgs(name="dshm", mount_path="/dev/shm")


def probes(cfg: StackConfig, port: int, ready_path: str = "/health") -> dict[str, k8s.core.v1.ProbeArgs]:
    """Timeouts and liveness threshold as llm-d's GB200 pods (docs/upstream-alignment.md); ready when `ready_path`
    answers (vLLM serves /v1/models once the model is loaded; SGLang's non-zero ranks serve only /health). The
    startup budget is the modelled load time plus the engine's start, with a margin (components/plan/loading.py)."""
    health = k8s.core.v1.HTTPGetActionArgs(path="/health", port=port)
    ready = k8s.core.v1.HTTPGetActionArgs(path=ready_path, port=port)
    return {
        "startup_probe": k8s.core.v1.ProbeArgs(http_get=health, period_seconds=loading.PROBE_PERIOD_S,
                                               failure_threshold=loading.startup_failure_threshold(cfg),
                                               timeout_seconds=PROBE_TIMEOUT_S),
        "readiness_probe": k8s.core.v1.ProbeArgs(http_get=ready, period_seconds=10, failure_threshold=3,
                                                 timeout_seconds=PROBE_TIMEOUT_S),
        "liveness_probe": k8s.core.v1.ProbeArgs(http_get=health, period_seconds=30, failure_threshold=3,
                                                timeout_seconds=PROBE_TIMEOUT_S),
    }


def await_annotations(cfg: StackConfig, *conditions: str) -> dict[str, str]:
    """Pulumi waits until every condition holds (a JSON array of waitFor forms:
    https://github.com/pulumi/pulumi-kubernetes/blob/v4.32.0/provider/pkg/metadata/overrides.go), for as long as
    the modelled start allows (loading.ready_timeout_s)."""
    return {"pulumi.com/waitFor": json.dumps(list(conditions)),
            "pulumi.com/timeoutSeconds": str(loading.ready_timeout_s(cfg))}


def set_timeouts(cfg: StackConfig) -> pulumi.CustomTimeouts:
    """The resource's own create/update timeouts, a minute beyond the await annotation."""
    minutes = f"{loading.ready_timeout_s(cfg) // 60 + 1}m"
    return pulumi.CustomTimeouts(create=minutes, update=minutes)


def ready_replicas(path: str, count: int) -> str:
    return f"jsonpath={{{path}.readyReplicas}}={count}"


def rollout() -> dict[str, Any]:
    """No surge: accelerator nodes are all in use, a surge pod would never schedule
    (https://github.com/llm-d/llm-d/blob/39507f3/guides/wide-ep/modelserver/gpu/vllm-deepseek-r1-0528/base/disaggregatedset.yaml)."""
    return {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1}}


def pod_template(labels: dict[str, str], spec: k8s.core.v1.PodSpecArgs,
                 annotations: Optional[dict[str, str]] = None) -> k8s.core.v1.PodTemplateSpecArgs:
    return k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels, annotations=annotations), spec=spec)


# --------------------------------------------------------------------------- GPU
def gpu_memory_gib(cfg: StackConfig) -> tuple[int, int]:
    """(shm size, memory request) of a vLLM pod. The CPU offload tier is mmap'ed in /dev/shm, so shm holds it
    (llm-d GLM-5.2 guide,
    https://github.com/llm-d/llm-d/blob/325cc98/guides/wide-ep/modelserver/gpu/vllm-glm-5.2/base/disaggregatedset.yaml)."""
    offload_gib = -(-cfg.gpu.spec.host_memory_gb * 10**9 * cfg.gpu.hostOffloadPercent // 100 // GIB)
    shm = offload_gib + SHM_BASE_GIB
    return shm, shm + PROCESS_MEMORY_GIB


def gpu_placement(machine: catalog.GpuMachine) -> tuple[dict[str, str], list[k8s.core.v1.TolerationArgs]]:
    """Node selector and tolerations of everything that runs on the GPU nodes (engines, image pre-pull)."""
    gpu_key, _, _ = catalog.GPU_TAINT
    return ({"cloud.google.com/gke-accelerator": machine.accelerator,
             "gke.networks.io/accelerator-network-profile": catalog.ACCELERATOR_NETWORK_PROFILE},
            [k8s.core.v1.TolerationArgs(key=gpu_key, operator="Exists", effect="NoSchedule"),
             k8s.core.v1.TolerationArgs(key="kubernetes.io/arch", operator="Equal", value="arm64",
                                        effect="NoSchedule")])


def vllm_pod(cfg: StackConfig, role: engines.Role, claim: StrInput) -> k8s.core.v1.PodSpecArgs:
    machine = cfg.gpu.spec
    command = engines.vllm_command(cfg, role)
    supervisor = engines.vllm_supervisor_port(role)
    shm_gib, memory_gib = gpu_memory_gib(cfg)
    models, models_mount = weights_volume(claim)
    shm, shm_mount = shm_volume(shm_gib)
    jit, jit_mount = compilecache.volume(cfg)
    nvidia = k8s.core.v1.VolumeArgs(name="nvidia", host_path=k8s.core.v1.HostPathVolumeSourceArgs(
        path=NVIDIA_DRIVER_ROOT))
    claims = [k8s.core.v1.PodResourceClaimArgs(name="compute-domain-channel",
                                               resource_claim_template_name=contract.COMPUTE_DOMAIN_CHANNEL_TEMPLATE),
              k8s.core.v1.PodResourceClaimArgs(name="rdma", resource_claim_template_name=contract.RDMA_CLAIM_TEMPLATE)]
    # One port per engine (the router's endpoints: `rank<i>`; behind the decode sidecar `vllm-rank<i>`, as llm-d's
    # wide-EP pods name them) and the DP supervisor the probes ask.
    rank_name = "rank" if role == "prefill" else "vllm-rank"
    ports = [k8s.core.v1.ContainerPortArgs(name=f"{rank_name}{i}", container_port=p)
             for i, p in enumerate(engines.vllm_engine_ports(cfg, role))]
    ports.append(k8s.core.v1.ContainerPortArgs(name="supervisor", container_port=supervisor))
    ports += [k8s.core.v1.ContainerPortArgs(name=f"nixl-{i}", container_port=contract.NIXL_SIDE_CHANNEL_PORT + i)
              for i in range(parallel.layout(cfg).engines_per_node)]
    engine = k8s.core.v1.ContainerArgs(
        name="vllm",
        image=images.ref(cfg.images, "vllm"),
        command=["/bin/bash", "-c"],
        args=[command.script()],
        env=[
            *common_env(command),
            _field_env("VLLM_NIXL_SIDE_CHANNEL_HOST", "status.podIP"),
            # The compile caches on the stack's cache bucket: warm after the first start (serving/compilecache.py).
            *(_env(key, value) for key, value in compilecache.cache_env(cfg).items()),
            # The API server waits this long for its engines: the same startup budget as the probe.
            _env("VLLM_ENGINE_READY_TIMEOUT_S", str(loading.startup_budget_s(cfg))),
            *(_env(key, value) for key, value in loading.GPU_LOADER.env),
            # Keep-alive above the routing sidecar's 90 s idle timeout
            # (https://github.com/llm-d/llm-d/blob/39507f3/guides/wide-ep/modelserver/gpu/vllm-deepseek-r1-0528/base/disaggregatedset.yaml).
            _env("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "120"),
            # K3's KDA layers are Mamba-type: vLLM's NIXL worker asserts the dim-first conv-state layout, unset
            # means "SD" (vllm 0.33.0 distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:705,
            # model_executor/layers/mamba/mamba_utils.py:29; docs/engine-preconditions.md GPU-NIXL-1).
            _env("VLLM_SSM_CONV_STATE_LAYOUT", "DS"),
            _env("USER", "llm-d"),  # vLLM >= 0.20 needs a user name (https://github.com/vllm-project/vllm/issues/44548)
            _env("GLOO_SOCKET_IFNAME", "eth0"),
            _env("NCCL_SOCKET_IFNAME", "eth0"),
            # Multi-node NVLink inside the NVL72 domain, as llm-d's GB200 DeepSeek-V4 guide runs it: NCCL and
            # NVSHMEM over MNNVL, NIXL's KV transfer over UCX CUDA IPC across the domain
            # (https://github.com/llm-d/llm-d/blob/6b047cf/guides/models/deepseek-v4/modelserver/gpu/vllm/base/disaggregatedset.yaml).
            _env("NCCL_MNNVL_ENABLE", "1"),
            _env("NCCL_NVLS_ENABLE", "1"),
            _env("NCCL_CUMEM_ENABLE", "1"),
            _env("NCCL_P2P_LEVEL", "NVL"),
            # The same guide's current GB200 settings (they replaced TORCH_SYMMMEM=NVSHMEM): NVSHMEM over fabric
            # handles, vLLM without NCCL symmetric memory, NIXL over CUDA IPC within the domain and RDMA beyond,
            # UCX memory-type caching off, DP dummy batches randomized, the P2P probe skipped. Its
            # NVIDIA_GDRCOPY=enabled is left out: GKE's overlay below turns GDRCopy off, and one setting must win
            # (docs/seed-vs-reality.md).
            _env("NVSHMEM_CUMEM_HANDLE_TYPE", "FABRIC"),
            _env("NVSHMEM_DISABLE_CUDA_VMM", "0"),
            _env("VLLM_USE_NCCL_SYMM_MEM", "0"),
            _env("UCX_TLS", "cuda_ipc,rc,cuda_copy"),
            _env("UCX_CUDA_IPC_ENABLE_MNNVL", "y"),
            _env("UCX_MEMTYPE_CACHE", "n"),
            _env("UCX_MEMTYPE_REG_WHOLE", "n"),
            _env("VLLM_RANDOMIZE_DP_DUMMY_INPUTS", "1"),
            _env("VLLM_SKIP_P2P_CHECK", "1"),
            # GKE's RDMA settings, as llm-d's GKE overlays set them (A4X Max P/D guide, wide-EP GKE overlay
            # https://github.com/llm-d/llm-d/blob/1c96db2/guides/wide-ep/modelserver/gpu/vllm-deepseek-r1-0528/gke/
            # kustomization.yaml): the RDMA NICs sit on separate subnets, so UCX must reach RoCE v2 GIDs across
            # them; GKE's own NCCL tuner and net plugin off; NVSHMEM without GDRCopy.
            _env("UCX_IB_ROCE_REACHABILITY_MODE", "all"),
            _env("NCCL_TUNER_PLUGIN", "none"),
            _env("NCCL_NET_PLUGIN", ""),
            _env("NVSHMEM_DISABLE_GDRCOPY", "true"),
        ],
        ports=ports,
        resources=k8s.core.v1.ResourceRequirementsArgs(
            requests={"cpu": str(machine.vcpus // 2), "memory": f"{memory_gib}Gi",
                      "nvidia.com/gpu": str(machine.gpus_per_node)},
            limits={"memory": f"{memory_gib}Gi", "nvidia.com/gpu": str(machine.gpus_per_node)},
            claims=[k8s.core.v1.ResourceClaimArgs(name=c.name) for c in claims],
        ),
        # DeepEP/NVSHMEM needs privileged containers on GKE
        # (https://github.com/llm-d/llm-d/blob/60be8bb/docs/infrastructure/providers/gke/README.md): a listed
        # exception (components/checks/declared.py WORKLOADS, docs/security.md).
        security_context=hardening.privileged_context(),
        volume_mounts=[models_mount, shm_mount, jit_mount,
                       k8s.core.v1.VolumeMountArgs(name="nvidia", mount_path=engines.GPU_DRIVER_MOUNT)],
        # The supervisor answers /health once every engine of the pod is healthy and /readyz while they stay so
        # (vllm/entrypoints/launchers/dp_supervisor.py L219-236); llm-d's wide-EP pods probe it the same way.
        **probes(cfg, supervisor, ready_path="/readyz"),
    )
    init = []
    if role == "decode":
        init.append(k8s.core.v1.ContainerArgs(
            name="routing-proxy",
            image=images.ref(cfg.images, "routing-sidecar"),
            args=[f"--port={contract.MODEL_SERVER_PORT}", f"--model-server-port={contract.DECODE_ENGINE_PORT}",
                  # One listener per engine, port + i forwarding to the engine's port + i (llm-d-router v0.10.0
                  # pkg/sidecar/proxy/data_parallel.go `startDataParallel`, which reads POD_IP).
                  f"--data-parallel-size={engines.engines_per_pod(cfg)}",
                  "--kv-connector=nixlv2", "--secure-proxy=false",
                  # Pick among the prefill hosts the router offers at random (llm-d-router v0.10.0
                  # docs/disaggregation.md), as llm-d's GB200 decode pods do.
                  "--enable-prefiller-sampling"],
            env=[_field_env("POD_IP", "status.podIP")],
            ports=[k8s.core.v1.ContainerPortArgs(name=f"rank{i}", container_port=p) for i, p in
                   enumerate(contract.engine_ports(contract.MODEL_SERVER_PORT, engines.engines_per_pod(cfg)))],
            # native sidecar, as
            # https://github.com/llm-d/llm-d/blob/39507f3/guides/wide-ep/modelserver/gpu/vllm-deepseek-r1-0528/base/disaggregatedset.yaml
            restart_policy="Always",
            # Pod hardening, see docs/security.md: the restricted profile and a memory limit; upstream sets only
            # allowPrivilegeEscalation false and runAsNonRoot on this container.
            security_context=hardening.container_context(),
            resources=k8s.core.v1.ResourceRequirementsArgs(
                requests={"cpu": "1", "memory": hardening.SIDECAR_MEMORY},
                limits={"memory": hardening.SIDECAR_MEMORY}),
        ))
    node_selector, tolerations = gpu_placement(machine)
    return k8s.core.v1.PodSpecArgs(
        init_containers=init or None,
        containers=[engine],
        resource_claims=claims,
        # CUDA IPC between the engines of a pod and across the domain (llm-d GB200 DeepSeek-V4 guide,
        # https://github.com/llm-d/llm-d/blob/6b047cf/guides/models/deepseek-v4/modelserver/gpu/vllm/base/disaggregatedset.yaml).
        host_ipc=True,
        # Cross-pod cuda_ipc for NIXL's KV transfer over MNNVL needs the host PID namespace too (same guide).
        host_pid=True,
        node_selector=node_selector,
        tolerations=tolerations,
        volumes=[models, shm, jit, nvidia],
        service_account_name=compilecache.SERVICE_ACCOUNT,
        automount_service_account_token=False,
        termination_grace_period_seconds=autoscaling.termination_grace_s(cfg, 120),
    )


def vllm_role(cfg: StackConfig, role: engines.Role, claim: StrInput) -> dict[str, Any]:
    """One role of the set. Autoscaled: `scaling.mode: External`, so the controller creates the role's
    DisaggregatedSetRoleScaler `<set>-<role>` (its /scale, seeded at 1 replica) and reads the replicas from it, which
    its ScaledObject writes (components/serving/scaling.py); the role's own `replicas` is left out, or the program
    and the autoscaler would fight over it (lws CRD disaggregatedsetrolescalers, DisaggregatedSet roles[].scaling)."""
    replicas = cfg.gpu.prefillGroups if role == "prefill" else cfg.gpu.decodeGroups
    labels = serving_labels("gpu", "vllm", role)
    scaled = cfg.autoscaling_on
    return {
        "name": role,
        "metadata": {"labels": labels},
        **({"scaling": {"mode": "External"}} if scaled else {}),
        "spec": {
            **({} if scaled else {"replicas": replicas}),
            "leaderWorkerTemplate": {
                "size": engines.vllm_group_nodes(cfg, role),
                "restartPolicy": "RecreateGroupOnPodRestart",
                "workerTemplate": pod_template(labels, vllm_pod(cfg, role, claim),
                                               dict(compilecache.SIDECAR_ANNOTATION)),
            },
            "rolloutStrategy": rollout(),
        },
    }


class VllmDisaggregatedSetArgs(Args):
    namespace: StrInput
    name: str
    config: StackConfig
    models_claim: StrInput
    """The hydrated weights claim (WeightStaging.claim)."""


RACK_TOPOLOGY_KEY = "cloud.google.com/gce-topology-subblock"
"""Node label GKE sets from Compute Engine's physical topology: the ID of the reservation sub-block a node runs in
(https://cloud.google.com/ai-hypercomputer/docs/workloads/schedule-gke-workloads-tas). On A4X Max a sub-block is one
NVL72 rack of 18 nodes ("18 nodes to obtain the GPU topology of 1x72 in one subblock", Cluster Toolkit
https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/examples/gke-a4x-max-bm/README.md, whose
Kueue topology for these nodes uses the same label, kueue-configuration.yaml.tftpl)."""
PLACEMENT = {"type": "ExclusiveTopology", "topology": RACK_TOPOLOGY_KEY}
"""Each slice's roles in one rack, one slice per rack: the controller injects required pod affinity to the
slice's own pods and anti-affinity to every other slice on the key
(https://github.com/kubernetes-sigs/lws/blob/v0.10.0/pkg/utils/disaggregatedset/affinity.go). Required terms
without gang scheduling can wedge a slice whose rack lacks room (kubernetes-sigs/lws
keps/848-disaggregatedset-placement-policy/README.md); config rejects slices that two could share
(GpuConfig._check_racks) and each rack's pool is exactly one slice's size."""


class VllmDisaggregatedSet(Component):
    """`gpu.slices` copies of the prefill + decode multi-node groups, each slice kept inside one NVL72 sub-block
    and each sub-block holding one slice, by the set's placement policy."""

    def __init__(self, name: str, args: VllmDisaggregatedSetArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("modelserver", "VllmDisaggregatedSet", name, opts)
        cfg = args.config
        # Ready replicas per role, from status.roleStatuses: the set's Available condition arrived in lws after
        # the v0.10.0 tag
        # (https://github.com/kubernetes-sigs/lws/blob/060ab4d/api/disaggregatedset/v1/disaggregatedset_types.go), so
        # the pinned controller may not set it.
        # roleStatuses sum every slice (kubernetes-sigs/lws 060ab4d pkg/controllers/disaggregatedset/
        # disaggregatedset_controller.go updateStatus).
        counts = {"prefill": cfg.gpu.prefillGroups, "decode": cfg.gpu.decodeGroups}
        if cfg.autoscaling_on:
            # `pulumi up` waits for what the RoleScalers start with (1 each), not for what the load may ask later.
            counts = {role: 1 for role in counts}
        ready = [ready_replicas(f'.status.roleStatuses[?(@.name=="{role}")]', count * cfg.gpu.slices)
                 for role, count in counts.items()]
        self.set = k8s.apiextensions.CustomResource(
            f"{name}-ds",
            api_version="disaggregatedset.x-k8s.io/v1",
            kind="DisaggregatedSet",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=args.name, namespace=args.namespace,
                                                labels={"llm-d.ai/guide": catalog.GUIDE_NAME},
                                                annotations=await_annotations(cfg, *ready)),
            spec={
                "roles": [vllm_role(cfg, "prefill", args.models_claim), vllm_role(cfg, "decode", args.models_claim)],
                # N complete prefill/decode copies; changing it scales copies and rolls nothing
                # (DisaggregatedSet CRD, spec.slices).
                "slices": cfg.gpu.slices,
                "placementPolicy": dict(PLACEMENT),
            },
            opts=self.child(custom_timeouts=set_timeouts(cfg)),
        )
        self.finish(name=args.name)


# --------------------------------------------------------------------------- TPU
TPU_SHM_GIB = 128
"""/dev/shm of a TPU engine host, where torch_tpu keeps its compile cache (/dev/shm/torch_tpu_cache): the engine's
multi-host mp recipe runs `--shm-size=128G` (https://github.com/kowalski-4831/vllm-torchtpu/blob/
003f5297822635de1c4f00db8b67be35eb03286a/scripts/multihost/run_cluster_mp.sh)."""
TPU_COMPILED_PROGRAM_BYTES = 13e9
"""ASSUMPTION: host memory one compiled bucket's programs keep resident, as read on a TP8 Qwen3.5-397B
vLLM-TorchTPU run (about 13 GB per bucket); no figure is published for Kimi K3."""
TPU_COMPILED_BUCKETS = 10
"""ASSUMPTION: the engine's default number of compiled buckets."""
TPU_RANK_RESIDENT_GIB = 4
"""ASSUMPTION: one rank's resident process (CPython with torch, jax and libtpu imported); no published figure."""
TPU_FRONTEND_GIB = 8
"""ASSUMPTION: the leader's API server and engine core (tokenizer, scheduler, ZMQ queues)."""


@dataclass(frozen=True)
class TpuHostMemory:
    """What one TPU host's engine pod keeps in host memory, GiB, each term with its source above."""

    pool: int
    shm: int
    compiled: int
    processes: int

    @property
    def total(self) -> int:
        return self.pool + self.shm + self.compiled + self.processes

    def line(self) -> str:
        return (f"TPU pod memory per host: {self.total} GiB = offload pool {self.pool} + /dev/shm {self.shm} "
                f"(compile cache) + compiled programs {self.compiled} + the ranks' "
                f"and the frontend's processes {self.processes}")


def tpu_host_memory(host_pool_bytes: float) -> TpuHostMemory:
    ranks = catalog.IRONWOOD.chips_per_host * catalog.IRONWOOD.tensorcores_per_chip
    return TpuHostMemory(pool=int(-(-host_pool_bytes // GIB)), shm=TPU_SHM_GIB,
                         compiled=int(-(-TPU_COMPILED_PROGRAM_BYTES * TPU_COMPILED_BUCKETS // GIB)),
                         processes=ranks * TPU_RANK_RESIDENT_GIB + TPU_FRONTEND_GIB)


def tpu_memory_gib(cfg: StackConfig, host_pool_bytes: float) -> int:
    """The pod's memory request and limit: vLLM-TorchTPU's whole breakdown (`tpu_host_memory`: the offload pool, the
    memory-backed /dev/shm, which the kubelet charges to the pod, the compiled programs and the processes); the
    scheduling proof holds it against the node's allocatable. A user's SGLang build: the pool plus 64 GiB."""
    if cfg.tpu.engine == "vllm-torchtpu":
        return tpu_host_memory(host_pool_bytes).total
    return int(-(-host_pool_bytes // GIB)) + PROCESS_MEMORY_GIB // 2


def tpu_shm_gib(cfg: StackConfig) -> int:
    """/dev/shm of a TPU engine pod: vLLM-TorchTPU's compile cache as its recipe sizes it (`TPU_SHM_GIB`), else 64."""
    return TPU_SHM_GIB if cfg.tpu.engine == "vllm-torchtpu" else 64


TORCH_TPU_SLICEBUILDER_PORT = 8070
"""TorchTPU's slice-builder ports start here, one per rank a host runs: `TORCH_TPU_BASE_PORT` (vllm_torchtpu/envs.py
L974) + the rank's local index, for `local_world_size` ranks per host under `--nnodes`
(vllm_torchtpu/distributed/tpu_mp_multihost.py L160-166; vLLM's `ParallelConfig.local_world_size` = world size / nnodes)
and `world_size x data_parallel_size_local` under multi-host DP (L264-272). A rank is a TensorCore, two per Ironwood
chip: 8 ranks, ports 8070-8077, on a 4-chip host."""


RAIDEN_CONTROLLER_PORT = engines.RAIDEN_CONTROLLER_PORT


def tpu_ranks_per_host(cfg: StackConfig) -> int:
    """Engine ranks (TorchTPU workers) one TPU host runs: the devices its pod drives, a TensorCore each."""
    return parallel.layout(cfg).role("slice").devices_per_node


def tpu_ports(cfg: StackConfig, rank: engines.TpuRank) -> list[k8s.core.v1.ContainerPortArgs]:
    """What a TPU pod listens on: every host its ranks' slice builders; the leader serves HTTP, hosts the coordination
    port (`--master-port`, or the DP RPC port) and the host rendezvous beside it; the Raiden controller where its
    engines' schedulers run (the leader, or every host under dp-across-hosts, one per local engine), and under
    dp-across-hosts the DP groups' ports on the leader (engines.DP_MASTER_PORTS)."""
    port = k8s.core.v1.ContainerPortArgs
    if cfg.tpu.engine != "vllm-torchtpu":
        return [] if rank == "worker" else [port(name="http", container_port=contract.MODEL_SERVER_PORT),
                                            port(name="dist-init", container_port=contract.SGLANG_DIST_INIT_PORT)]
    ports = [port(name=f"slice-{i}", container_port=TORCH_TPU_SLICEBUILDER_PORT + i)
             for i in range(tpu_ranks_per_host(cfg))]
    dp = engines.dp_across_hosts(cfg)
    controllers = [port(name=f"raiden-{i}" if dp else "raiden", container_port=RAIDEN_CONTROLLER_PORT + i)
                   for i in range(parallel.layout(cfg).engines_per_node if dp else 1)]
    if rank == "worker":
        return ports + (controllers if dp else [])
    leader = [port(name="http", container_port=contract.MODEL_SERVER_PORT), *ports,
              port(name="master", container_port=contract.TPU_MASTER_PORT),
              port(name="rendezvous", container_port=contract.TPU_MASTER_PORT + 1), *controllers]
    if dp:
        leader += [port(name=f"dp-group-{i}", container_port=contract.TPU_MASTER_PORT + 100 + i)
                   for i in range(engines.DP_MASTER_PORTS)]
    return leader


TPU_MAX_MAP_COUNT = 33554432
TPU_DMA_ENTRY_LIMIT = 8000000


def tpu_node_setup(image: str) -> k8s.core.v1.ContainerArgs:
    """Host preparation of llm-d's TPU host-offload guide: more memory mappings for the host KV pool and more DMA
    entries for the TPU driver (https://github.com/llm-d/llm-d/blob/54523a5/guides/tiered-prefix-cache/
    modelserver/tpu/base/vllm/multi-host/patch-vllm.yaml). Both are node-wide kernel settings, so the container is
    privileged (a listed exception, components/platform/hardening.py). It runs a small pinned image with a shell
    (`hardening.NODE_SETUP_IMAGE`) instead of an unpinned busybox, the same for every engine profile, since the
    policy pack keys the exception on the image it runs."""
    script = "\n".join([
        "set -eu",
        f"echo {TPU_MAX_MAP_COUNT} > /proc/sys/vm/max_map_count",
        "limit=/sys/module/vfio_iommu_type1/parameters/dma_entry_limit",
        f'if [ -f "$limit" ]; then echo {TPU_DMA_ENTRY_LIMIT} > "$limit"; fi',
    ]) + "\n"
    return k8s.core.v1.ContainerArgs(
        name="tpu-node-setup", image=image, command=["/bin/sh", "-c"], args=[script],
        security_context=hardening.privileged_context(),
        resources=k8s.core.v1.ResourceRequirementsArgs(requests={"cpu": "100m", "memory": "64Mi"},
                                                       limits={"memory": "64Mi"}))


def tpu_engine_image(cfg: StackConfig, built: Optional[StrInput] = None) -> StrInput:
    """The TPU engine's image: the stack's vLLM-TorchTPU build by digest (components/serving/engineimage.py
    `image`), or the
    user's SGLang build."""
    if cfg.tpu.engine != "vllm-torchtpu":
        return cfg.tpu.sglangImage
    if built is None:
        raise ValueError("a vLLM-TorchTPU stack runs the image it builds: pass EngineImage.image")
    return built


def tpu_placement(cfg: StackConfig) -> tuple[dict[str, str], list[k8s.core.v1.TolerationArgs]]:
    """Node selector and tolerations of everything that runs on the slices' hosts (engines, image pre-pull)."""
    tpu_key, _, _ = catalog.TPU_TAINT
    return ({"cloud.google.com/gke-tpu-accelerator": catalog.IRONWOOD.accelerator_label,
             "cloud.google.com/gke-tpu-topology": cfg.tpu.topology},
            [k8s.core.v1.TolerationArgs(key=tpu_key, operator="Exists", effect="NoSchedule")])


def tpu_pod(cfg: StackConfig, rank: engines.TpuRank, memory_gib: int, claim: StrInput,
            image: StrInput) -> k8s.core.v1.PodSpecArgs:
    command = engines.tpu_command(cfg, rank)
    models, models_mount = weights_volume(claim)
    shm, shm_mount = shm_volume(tpu_shm_gib(cfg))
    volumes, mounts = [models, shm], [models_mount, shm_mount]
    env = [*common_env(command)]
    if cfg.tpu.engine == "vllm-torchtpu":
        # The compile caches on the stack's cache bucket: warm after the first start (serving/compilecache.py).
        cache, cache_mount = compilecache.volume(cfg)
        volumes.append(cache)
        mounts.append(cache_mount)
        env += [_env(key, value) for key, value in compilecache.cache_env(cfg).items()]
        # The unified block pool, tcmalloc, the engine-ready and Raiden timeouts (engines.py says why for each).
        env += [_env(name, value) for name, value in engines.vllm_torchtpu_env(cfg)]
    else:
        env.append(_field_env("SGLANG_HOST_IP", "status.podIP"))
    # Headless vLLM workers serve no HTTP; the leader's probes speak for the group (LWS recreates it on failure).
    pod_probes = probes(cfg, contract.MODEL_SERVER_PORT, ready_path="/v1/models" if cfg.tpu.engine == "vllm-torchtpu"
                        else "/health") if rank == "leader" or cfg.tpu.engine != "vllm-torchtpu" else {}
    node_selector, tolerations = tpu_placement(cfg)
    chips = str(catalog.IRONWOOD.chips_per_host)
    return k8s.core.v1.PodSpecArgs(
        init_containers=[tpu_node_setup(images.ref(cfg.images, "staging"))],
        containers=[k8s.core.v1.ContainerArgs(
            name=TPU_CONTAINER[cfg.tpu.engine],
            image=image,
            command=["/bin/bash", "-c"],
            args=[command.script()],
            env=env,
            ports=tpu_ports(cfg, rank),
            resources=k8s.core.v1.ResourceRequirementsArgs(
                requests={"cpu": str(catalog.IRONWOOD.vcpus // 2), "memory": f"{memory_gib}Gi",
                          "google.com/tpu": chips},
                limits={"memory": f"{memory_gib}Gi", "google.com/tpu": chips},
            ),
            volume_mounts=mounts,
            # Root and a writable root filesystem stay (components/platform/hardening.py ROOT_IMAGES); the rest is
            # hardened.
            security_context=hardening.root_engine_context(
                add=hardening.TPU_ENGINE_CAPABILITIES if cfg.tpu.engine == "vllm-torchtpu" else ()),
            **pod_probes,
        )],
        node_selector=node_selector,
        tolerations=tolerations,
        volumes=volumes,
        security_context=hardening.pod_context(user=None),
        service_account_name=compilecache.SERVICE_ACCOUNT if cfg.tpu.engine == "vllm-torchtpu" else None,
        automount_service_account_token=False,
        termination_grace_period_seconds=autoscaling.termination_grace_s(cfg, 120),
    )


TPU_CONTAINER = {"vllm-torchtpu": "vllm-tpu", "sglang-torchtpu": "sglang"}


def tpu_set_name(cfg: StackConfig) -> str:
    return f"{cfg.kubernetes.namespace}-{TPU_CONTAINER[cfg.tpu.engine]}"


class TpuLeaderWorkerSetArgs(Args):
    namespace: StrInput
    name: str
    config: StackConfig
    models_claim: StrInput
    """The hydrated weights claim (WeightStaging.claim)."""
    host_pool_bytes_per_node: float
    """Host-DRAM KV tier of one host (capacity model); the pod's memory request must hold it."""
    image: StrInput
    """The engine image (`tpu_engine_image`): the stack's build by digest, or the user's SGLang build."""


def tpu_replicas(cfg: StackConfig) -> int:
    """Engines the set is created with: every slice, or the autoscaler's minimum (it raises them with the load)."""
    if cfg.autoscaling_on:
        return next(r.min for r in autoscaling.roles(cfg))
    return cfg.tpu.slices


class TpuLeaderWorkerSet(Component):
    """One LeaderWorkerSet, a replica per slice: each group of `hosts_per_slice` pods owns one slice node pool and
    runs one engine across it."""

    def __init__(self, name: str, args: TpuLeaderWorkerSetArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("modelserver", "TpuLeaderWorkerSet", name, opts)
        cfg = args.config
        memory = tpu_memory_gib(cfg, args.host_pool_bytes_per_node)
        leader = tpu_pod(cfg, "leader", memory, args.models_claim, args.image)
        worker = tpu_pod(cfg, "worker", memory, args.models_claim, args.image)
        engine = engines.tpu_engine_type(cfg)
        cache_annotation = dict(compilecache.SIDECAR_ANNOTATION) if cfg.tpu.engine == "vllm-torchtpu" else None
        self.set = k8s.apiextensions.CustomResource(
            f"{name}-lws",
            api_version="leaderworkerset.x-k8s.io/v1",
            kind="LeaderWorkerSet",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=args.name, namespace=args.namespace, labels={"llm-d.ai/guide": catalog.GUIDE_NAME},
                annotations={
                    # Available alone has been seen True with workers still Pending
                    # (https://github.com/dsx-ai-factory/workload-map/issues/228).
                    **await_annotations(cfg, "condition=Available", ready_replicas(".status", tpu_replicas(cfg))),
                    # One group per slice node pool: a group never straddles two slices
                    # (https://github.com/llm-d/llm-d/blob/54523a5/guides/tiered-prefix-cache/modelserver/tpu/base/vllm/multi-host/patch-vllm.yaml).
                    "leaderworkerset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool",
                }),
            spec={
                "replicas": tpu_replicas(cfg),
                "leaderWorkerTemplate": {
                    "size": cfg.tpu.hosts_per_slice,
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    # Only the leader serves the API, so only leaders carry the router's selector labels.
                    "leaderTemplate": pod_template(serving_labels("tpu", engine), leader, cache_annotation),
                    "workerTemplate": pod_template(serving_labels("tpu", engine, serving=False), worker,
                                                   cache_annotation),
                },
                "rolloutStrategy": rollout(),
                # Workers are created with the leader, not once it is ready (LWS v0.10.0 CRD `spec.startupPolicy`,
                # default LeaderCreated): the leader is ready only after every host joined its rendezvous, which
                # gives up after 300 s (docs/engine-preconditions.md TPU-MH-7). Set, so a changed default cannot
                # fail every group's start.
                "startupPolicy": "LeaderCreated",
            },
            # The autoscaler owns spec.replicas once the set exists (its ScaledObject writes /scale): a later
            # `pulumi up` must not set it back.
            opts=self.child(custom_timeouts=set_timeouts(cfg),
                            ignore_changes=["spec.replicas"] if cfg.autoscaling_on else None),
        )
        self.finish(name=args.name)

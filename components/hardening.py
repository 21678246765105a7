"""Pod hardening in one place: the restricted security settings every pod builder applies, and the
exceptions, each with its reason and source. The policy pack (policy/rules.py) reads `EXCEPTIONS`, so a
privileged or host-namespace pod passes only if it is listed here. The matrix is in docs/security.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi_kubernetes as k8s

NON_ROOT_UID = 65532
"""The conventional unprivileged `nonroot` user of distroless images, also what the llm-d routing sidecar runs
as (llm-d guides set runAsNonRoot on it)."""

SIDECAR_MEMORY = "1Gi"
"""Memory request and limit of the decode pods' routing sidecar (a Go reverse proxy)."""


def container_context(*, user: Optional[int] = NON_ROOT_UID,
                      read_only_root: bool = True) -> k8s.core.v1.SecurityContextArgs:
    """The restricted profile of the Kubernetes Pod Security Standards for one container: no privilege
    escalation, every capability dropped, RuntimeDefault seccomp, a non-root user and a read-only root
    filesystem (https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted).

    `user=None` keeps the image's own user and does not assert non-root: only for images that run as root and
    write to their own filesystem at start (listed in `ROOT_IMAGES`)."""
    return k8s.core.v1.SecurityContextArgs(
        allow_privilege_escalation=False,
        capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
        privileged=False,
        read_only_root_filesystem=read_only_root,
        run_as_non_root=True if user is not None else None,
        run_as_user=user,
        run_as_group=user,
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
    )


def pod_context(*, user: Optional[int] = NON_ROOT_UID) -> k8s.core.v1.PodSecurityContextArgs:
    """Pod-level defaults matching `container_context`; `fs_group` lets a non-root user write its emptyDirs.
    `user=None`: RuntimeDefault seccomp only, the image's user stays (`ROOT_IMAGES`)."""
    return k8s.core.v1.PodSecurityContextArgs(
        run_as_non_root=True if user is not None else None,
        run_as_user=user,
        run_as_group=user,
        fs_group=user,
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
    )


def root_engine_context() -> k8s.core.v1.SecurityContextArgs:
    """An engine image that must keep its root user and writable filesystem (`ROOT_IMAGES`): still no privilege
    escalation, RuntimeDefault seccomp and no raw sockets; the runtime's default capabilities otherwise stay,
    since which of them the accelerator runtime uses is not published."""
    return k8s.core.v1.SecurityContextArgs(
        allow_privilege_escalation=False,
        capabilities=k8s.core.v1.CapabilitiesArgs(drop=["NET_RAW"]),
        privileged=False,
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
    )


def privileged_context() -> k8s.core.v1.SecurityContextArgs:
    """For the containers in `EXCEPTIONS` that need `privileged` (which implies every capability and no seccomp)."""
    return k8s.core.v1.SecurityContextArgs(privileged=True)


def scratch_volume(name: str, path: str, size: str = "1Gi") -> tuple[k8s.core.v1.VolumeArgs,
                                                                      k8s.core.v1.VolumeMountArgs]:
    """A writable emptyDir for a container whose root filesystem is read-only (HOME, caches, reports)."""
    volume = k8s.core.v1.VolumeArgs(name=name, empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit=size))
    return volume, k8s.core.v1.VolumeMountArgs(name=name, mount_path=path)


# --------------------------------------------------------------------------- exceptions
@dataclass(frozen=True)
class Exemption:
    """One pod template allowed to relax the restricted profile: which object kind and container, which
    fields (`privileged`, `hostIPC`, `hostPID`, `hostNetwork`, `hostPath`), why, and where that comes from."""

    kind: str
    container: str
    fields: frozenset[str]
    reason: str
    source: str


EXCEPTIONS: tuple[Exemption, ...] = (
    Exemption(
        kind="DisaggregatedSet", container="vllm",
        fields=frozenset({"privileged", "hostIPC", "hostPID", "hostPath"}),
        reason="DeepEP/NVSHMEM GPU-initiated communication needs a privileged container on GKE; CUDA IPC across "
               "the engines of a pod and the NVL72 domain (NIXL KV transfer over MNNVL) needs the host IPC and "
               "PID namespaces; the GKE-installed NVIDIA driver is mounted from the host",
        source="llm-d docs/infrastructure/providers/gke/README.md (privileged for DeepEP/NVSHMEM) and "
               "guides/models/deepseek-v4/modelserver/gpu/vllm/base/disaggregatedset.yaml@6b047cf (GB200: hostIPC, "
               "hostPID), "
               "https://github.com/llm-d/llm-d"),
    Exemption(
        kind="LeaderWorkerSet", container="tpu-node-setup", fields=frozenset({"privileged"}),
        reason="raises vm.max_map_count and the vfio DMA entry limit on the TPU host before the engine maps its "
               "host KV pool: node-wide kernel settings a container can only write privileged",
        source="llm-d guides/tiered-prefix-cache/modelserver/tpu/base/vllm/multi-host/patch-vllm.yaml@54523a5 "
               "(https://github.com/llm-d/llm-d/blob/54523a5/guides/tiered-prefix-cache/modelserver/tpu/base/vllm/"
               "multi-host/patch-vllm.yaml)"),
    Exemption(
        kind="DaemonSet", container="asapd-lite", fields=frozenset({"privileged", "hostNetwork", "hostPID",
                                                                    "hostPath"}),
        reason="initializes the MRDMA NICs of A4X Max bare-metal nodes: it configures host links, udev and systemd "
               "units, so it runs in the host's network and PID namespaces with host paths",
        source="Cluster Toolkit examples/gke-a4x-max-bm/asapd-lite-installer.yaml "
               "(https://github.com/GoogleCloudPlatform/cluster-toolkit @1047080375afbb44da4b596be314634e7486af4a)"),
    *(Exemption(
        kind="DaemonSet", container=container, fields=frozenset({"privileged", "hostPath"}),
        reason="the NVIDIA DRA driver's kubelet plugin (rendered from its chart, tools/helm_render.py) waits for the "
               "host's GPU driver, writes CDI specs on the host and registers with the kubelet's plugin socket",
        source="nvidia-dra-driver-gpu chart templates/kubeletplugin.yaml (https://github.com/NVIDIA/"
               "k8s-dra-driver-gpu/blob/v25.8.0/deployments/helm/nvidia-dra-driver-gpu/templates/kubeletplugin.yaml)")
      for container in ("init-container", "compute-domains")),
)
"""The only pod templates the policy pack lets run privileged, share a host namespace or mount host paths."""

ROOT_IMAGES: dict[str, str] = {
    "vllm": "the vllm/vllm-openai image runs as root and the container is privileged anyway (see EXCEPTIONS)",
    "sglang": "the JAX TPU image runs as root and the release profile pip-installs sglang-jax into its "
              "site-packages at start, so the root filesystem stays writable (docs/security.md, supply chain)",
}
"""Containers that keep the image's root user or a writable root filesystem, and why (not privileged)."""


def exemption(kind: str, container: str) -> Optional[Exemption]:
    return next((e for e in EXCEPTIONS if e.kind == kind and e.container == container), None)

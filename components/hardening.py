"""Pod hardening in one place: the restricted security settings every pod builder applies, and the
exceptions, each with its reason and source. The policy pack (policy/rules.py) reads `EXCEPTIONS`, so a
privileged or host-namespace pod passes only if it is listed here. The matrix is in docs/security.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi_kubernetes as k8s

from . import versions

NON_ROOT_UID = 65532
"""The conventional unprivileged `nonroot` user of distroless images, also what the llm-d routing sidecar runs
as (llm-d guides set runAsNonRoot on it)."""

NODE_SETUP_IMAGE = versions.STAGING_IMAGE
"""The image of the privileged TPU host-setup init container: the small pinned image with a shell the weight
staging Job runs (upstream runs busybox), the same whatever engine image a profile runs, so its exemption can name
it; `images.stagingDigest` pins its digest."""

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
def repository(reference: str) -> str:
    """The image repository of a reference, normalized as Docker does (`vllm/vllm-openai:v1` ->
    `docker.io/vllm/vllm-openai`, `busybox` -> `docker.io/library/busybox`): no tag, no digest.
    A first segment with a dot or a colon, or `localhost`, is a registry
    (https://github.com/distribution/reference/blob/v0.6.0/normalize.go)."""
    name = reference.partition("@")[0]
    head, _, last = name.rpartition("/")
    name = f"{head}/{last.partition(':')[0]}" if head else last.partition(":")[0]
    first, _, rest = name.partition("/")
    if not rest:
        return f"docker.io/library/{first}"
    if "." in first or ":" in first or first == "localhost":
        return name
    return f"docker.io/{name}"


@dataclass(frozen=True)
class Exemption:
    """Containers allowed to relax the restricted profile, keyed on what makes them dangerous, never on a name:
    the object kind, the image repositories they run, the pod and container fields they may set (`privileged`,
    `hostIPC`, `hostPID`, `hostNetwork`), the host paths they may mount and the capabilities they may add
    (`privileged` holds every one). `role` only names them in messages and docs."""

    kind: str
    images: frozenset[str]
    fields: frozenset[str]
    host_paths: frozenset[str]
    reason: str
    source: str
    role: str
    capabilities: frozenset[str] = frozenset()


def _repos(*references: str) -> frozenset[str]:
    return frozenset(repository(r) for r in references)


EXCEPTIONS: tuple[Exemption, ...] = (
    Exemption(
        kind="DisaggregatedSet", images=_repos(versions.VLLM.image), role="vLLM engine",
        fields=frozenset({"privileged", "hostIPC", "hostPID"}), host_paths=frozenset({"/home/kubernetes/bin/nvidia"}),
        reason="DeepEP/NVSHMEM GPU-initiated communication needs a privileged container on GKE; CUDA IPC across "
               "the engines of a pod and the NVL72 domain (NIXL KV transfer over MNNVL) needs the host IPC and "
               "PID namespaces; the GKE-installed NVIDIA driver is mounted from the host",
        source="llm-d docs/infrastructure/providers/gke/README.md (privileged for DeepEP/NVSHMEM) and "
               "guides/models/deepseek-v4/modelserver/gpu/vllm/base/disaggregatedset.yaml@6b047cf (GB200: hostIPC, "
               "hostPID), "
               "https://github.com/llm-d/llm-d"),
    Exemption(
        kind="LeaderWorkerSet", images=_repos(NODE_SETUP_IMAGE), role="TPU host setup (init)",
        fields=frozenset({"privileged"}), host_paths=frozenset(),
        reason="raises vm.max_map_count and the vfio DMA entry limit on the TPU host before the engine maps its "
               "host KV pool: node-wide kernel settings a container can only write privileged",
        source="llm-d guides/tiered-prefix-cache/modelserver/tpu/base/vllm/multi-host/patch-vllm.yaml@54523a5 "
               "(https://github.com/llm-d/llm-d/blob/54523a5/guides/tiered-prefix-cache/modelserver/tpu/base/vllm/"
               "multi-host/patch-vllm.yaml)"),
    Exemption(
        kind="DaemonSet", images=_repos(versions.ASAPD_LITE_IMAGE), role="asapd-lite",
        fields=frozenset({"privileged", "hostNetwork", "hostPID"}),
        host_paths=frozenset({"/sys", "/proc", "/etc/udev/rules.d", "/run/udev", "/run/asapd-lite",
                              "/var/log/google/asapd-lite", "/var/lib/google/asapd-lite", "/etc/systemd/system",
                              "/run/systemd"}),
        reason="initializes the MRDMA NICs of A4X Max bare-metal nodes: it configures host links, udev and systemd "
               "units, so it runs in the host's network and PID namespaces with host paths",
        source="Cluster Toolkit examples/gke-a4x-max-bm/asapd-lite-installer.yaml "
               "(https://github.com/GoogleCloudPlatform/cluster-toolkit @1047080375afbb44da4b596be314634e7486af4a)"),
    Exemption(
        kind="DaemonSet", images=_repos(versions.NVIDIA_DRA_DRIVER_IMAGE), role="NVIDIA DRA kubelet plugin",
        fields=frozenset({"privileged"}),
        host_paths=frozenset({"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi",
                              "/home/kubernetes/bin", "/home/kubernetes/bin/nvidia"}),
        reason="the NVIDIA DRA driver's kubelet plugin (rendered from its chart, tools/preview/helm_render.py) waits "
               "for the host's GPU driver, writes CDI specs on the host and registers with the kubelet's plugin socket",
        source="nvidia-dra-driver-gpu chart templates/kubeletplugin.yaml (https://github.com/NVIDIA/"
               "k8s-dra-driver-gpu/blob/v25.8.0/deployments/helm/nvidia-dra-driver-gpu/templates/kubeletplugin.yaml)"),
)
"""The only containers the policy pack lets run privileged, add capabilities, share a host namespace or mount host
paths. Any other container in a pod that shares a host namespace must run restricted (`container_context`)."""

ROOT_IMAGES: dict[str, str] = {
    "vllm": "the vllm/vllm-openai image runs as root and the container is privileged anyway (see EXCEPTIONS)",
    "vllm-tpu": "the Python 3.12 image runs as root and pip-installs the hash-pinned vLLM-TorchTPU lock into its "
                "site-packages at start, so the root filesystem stays writable (docs/security.md, supply chain)",
    "sglang": "a user-supplied SGLang-TorchTPU image (tpu.engine=sglang-torchtpu): its user and filesystem are "
              "whatever that build needs",
}
"""Containers that keep the image's root user or a writable root filesystem, and why (not privileged)."""


def exemption(kind: str, image: str) -> Optional[Exemption]:
    """The exemption of a container of a `kind` object that runs `image` (any tag or digest), if any."""
    repo = repository(image)
    return next((e for e in EXCEPTIONS if e.kind == kind and repo in e.images), None)

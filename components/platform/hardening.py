"""Pod hardening in one place: the restricted security settings every pod builder applies. Which container may
relax them (privileged, root, host access) is declared per workload and container in components/checks/declared.py,
which the policy pack enforces; the matrix is in docs/security.md."""

from __future__ import annotations

from typing import Optional

import pulumi_kubernetes as k8s

from ..facts import versions

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


TPU_ENGINE_CAPABILITIES = ("IPC_LOCK",)
"""The released Raiden recipes run the engine with IPC_LOCK (vllm-torchtpu .buildkite/kubernetes/manifests/v7x/
jobset_disagg.yaml@293a473, `capabilities.add: [IPC_LOCK]`): the offload store pins its host pool. Their
`privileged: true` is not taken: GKE hands the chips to the pod through the device plugin (`google.com/tpu`)."""


def root_engine_context(add: tuple[str, ...] = ()) -> k8s.core.v1.SecurityContextArgs:
    """An engine image that must keep its root user and writable filesystem (`ROOT_IMAGES`): still no privilege
    escalation, RuntimeDefault seccomp and no raw sockets; the runtime's default capabilities otherwise stay,
    since which of them the accelerator runtime uses is not published. `add`: capabilities its declaration lists
    (components/checks/declared.py)."""
    return k8s.core.v1.SecurityContextArgs(
        allow_privilege_escalation=False,
        capabilities=k8s.core.v1.CapabilitiesArgs(drop=["NET_RAW"], add=list(add) or None),
        privileged=False,
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
    )


def privileged_context() -> k8s.core.v1.SecurityContextArgs:
    """For the containers components/checks/declared.py declares privileged (which implies every capability and no
    seccomp)."""
    return k8s.core.v1.SecurityContextArgs(privileged=True)


def scratch_volume(name: str, path: str, size: str = "1Gi") -> tuple[k8s.core.v1.VolumeArgs,
                                                                      k8s.core.v1.VolumeMountArgs]:
    """A writable emptyDir for a container whose root filesystem is read-only (HOME, caches, reports)."""
    volume = k8s.core.v1.VolumeArgs(name=name, empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit=size))
    return volume, k8s.core.v1.VolumeMountArgs(name=name, mount_path=path)


# --------------------------------------------------------------------------- images
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


ROOT_IMAGES: dict[str, str] = {
    "vllm": "the vllm/vllm-openai image runs as root and the container is privileged anyway "
            "(components/checks/declared.py)",
    "vllm-tpu": "the stack's engine image (components/serving/engineimage.py) keeps its Python 3.12 base's root "
                "user, and "
                "vLLM writes its cache under that user's home (VLLM_CACHE_ROOT, ~/.cache/vllm by default in "
                "vllm/envs.py), so the root filesystem stays writable (docs/security.md)",
    "sglang": "a user-supplied SGLang-TorchTPU image (tpu.engine=sglang-torchtpu): its user and filesystem are "
              "whatever that build needs",
}
"""Containers that keep the image's root user or a writable root filesystem, and why (not privileged)."""

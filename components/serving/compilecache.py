"""The engines' compile caches on a bucket of the stack's own, so a restarted pod, a recreated group
(`RecreateGroupOnPodRestart`) or a group a scale-out adds starts from the kernels and programs an earlier start built
instead of building them again.

Every engine pod mounts the bucket's `cache/` folder at CACHE_MOUNT through GKE's Cloud Storage FUSE CSI driver (an
ephemeral CSI volume; the cluster enables the driver, components/cloud/cluster.py), and points each engine's cache
variables below it (GPU_CACHE_ENV, TPU_CACHE_ENV). A bucket, not a disk: every node of every group reads and writes
the same entries at once, a zonal disk attaches read-write to one node only, and the bucket bills only what it holds.
The engines key their entries by configuration, so a changed engine flag writes new entries beside the old.
`pulumi destroy` deletes the bucket with whatever it holds (force_destroy, soft delete off): nothing is left.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from ..cloud.base import Args, Component, StrInput
from ..config import StackConfig
from ..facts import catalog, contract
from ..plan.engines import CACHE_MOUNT, cache_env  # noqa: F401  (the pods' mount and variables)

CACHE_PREFIX = "cache"
"""The bucket folder the pods mount (gcsfuse `only-dir`) and the only one they may write."""
VOLUME = "jit-cache"
SERVICE_ACCOUNT = f"{catalog.GUIDE_NAME}-engine"
"""The engine pods' Kubernetes service account: the Workload Identity principal the bucket grants name. The pods mount
no API token (their automountServiceAccountToken is false, held by the policy pack); the CSI driver requests the
account's token for the mount itself."""
CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
SIDECAR_ANNOTATION = {"gke-gcsfuse/volumes": "true"}
"""The pod annotation that has GKE inject the Cloud Storage FUSE sidecar for the pod's CSI volumes
(https://docs.cloud.google.com/kubernetes-engine/docs/how-to/cloud-storage-fuse-csi-driver-ephemeral)."""
MOUNT_OPTIONS = f"implicit-dirs,only-dir={CACHE_PREFIX},rename-dir-limit=100000"
"""gcsfuse options (https://cloud.google.com/storage/docs/gcsfuse-cli): directories the engines create without
placeholder objects are listed (`implicit-dirs`); only `cache/` is mounted; and a directory of up to 100,000 entries
may be renamed, since the JIT builders move a finished build into place (DeepGEMM's extension calls
`std::filesystem::rename`, vllm/third_party/deep_gemm/_C_extension.abi3.so), which gcsfuse refuses on a flat bucket
with the default limit of 0."""

def bucket_name(cfg: StackConfig) -> str:
    """One bucket per stack (bucket names are global; the cluster name is the stack's own)."""
    return f"{cfg.gcp.project}-{cfg.cluster_name}-cache"


def volume(cfg: StackConfig) -> tuple[k8s.core.v1.VolumeArgs, k8s.core.v1.VolumeMountArgs]:
    """The pod's cache volume and the engine's mount of it."""
    source = k8s.core.v1.CSIVolumeSourceArgs(driver=CSI_DRIVER, volume_attributes={
        "bucketName": bucket_name(cfg), "mountOptions": MOUNT_OPTIONS})
    return (k8s.core.v1.VolumeArgs(name=VOLUME, csi=source),
            k8s.core.v1.VolumeMountArgs(name=VOLUME, mount_path=CACHE_MOUNT))


class CompileCacheArgs(Args):
    config: StackConfig
    namespace: StrInput
    member: StrInput
    """The engine pods' Workload Identity principal (components/cloud/identity.py workload_principal)."""
    labels: dict[str, str]


class CompileCache(Component):
    """The bucket, the engines' service account and its two grants: list and read the whole bucket (gcsfuse lists
    it), write only under `cache/`."""

    def __init__(self, name: str, args: CompileCacheArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("storage", "CompileCache", name, opts)
        cfg = args.config
        bucket = bucket_name(cfg)
        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket", name=bucket, project=cfg.gcp.project, location=cfg.gcp.region,
            uniform_bucket_level_access=True, public_access_prevention="enforced",
            # Destroy deletes it with its contents, and deleted objects are not kept (billed) for a soft-delete window.
            force_destroy=True,
            soft_delete_policy=gcp.storage.BucketSoftDeletePolicyArgs(retention_duration_seconds=0),
            labels={**args.labels, contract.BUCKET_ON_DESTROY_LABEL: "delete"}, opts=self.child())
        self.account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata=k8s.meta.v1.ObjectMetaArgs(name=SERVICE_ACCOUNT, namespace=args.namespace),
            opts=self.child())
        whole = f'resource.name.startsWith("projects/_/buckets/{bucket}")'
        self.grants = [
            gcp.storage.BucketIAMMember(
                f"{name}-reader", bucket=self.bucket.name, role="roles/storage.objectViewer", member=args.member,
                condition=gcp.storage.BucketIAMMemberConditionArgs(
                    title=f"{cfg.cluster_name} engines read the compile cache", expression=whole),
                opts=self.child()),
            gcp.storage.BucketIAMMember(
                f"{name}-writer", bucket=self.bucket.name, role="roles/storage.objectUser", member=args.member,
                condition=gcp.storage.BucketIAMMemberConditionArgs(
                    title=f"{cfg.cluster_name} engines write the compile cache",
                    expression=f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{CACHE_PREFIX}/")'),
                opts=self.child()),
        ]
        self.finish(bucket=self.bucket.name)

"""Checkpoint staging inside `pulumi up`: an Indexed Kubernetes Job of several pods, one per node of the staging
pool, copies the model repository at one commit from the Hugging Face Hub into
gs://<bucket>/<checkpointPrefix><commit>/, with the same code as `python -m tools stage` (shipped in a ConfigMap,
its libraries installed from a hash-pinned lock). Each pod proves a balanced share of the files;
components/plan/staging.py sizes them.

Why a Job on a pool of its own (docs/weights.md): it needs only the cluster and a small CPU pool created
alongside the system pool, so on a first run it copies while the accelerator pools are still being created; it
reuses Workload Identity and the `llm-d-hf-token` Secret; and pulumi-kubernetes waits for a Job to complete
(Complete condition) and fails the update on a Failed one
(https://www.pulumi.com/registry/packages/kubernetes/api-docs/batch/v1/job/), which is what lets hydration
depend on a verified copy. The Hub limits each client address, so the staging pool sits in a subnet of its own
whose NAT gives each node its own address (components/cloud/network.py), one pod per node; the pool scales to zero
once the copy is done.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from ..cloud.base import Args, Component, StrInput
from ..cloud.identity import workload_principal
from ..facts import catalog, contract
from ..plan.staging import POD_CPU
from ..platform import hardening
from . import shipped
from .bucket import whole_bucket

APP_DIR = "/app"
DEPS_DIR = "/deps"
TIMEOUT_S = 8 * 3600
"""How long `pulumi up` waits for the copy (pulumi.com/timeoutSeconds). The expected time is in the plan
summary (staging_model); this leaves room for a Hub far slower than assumed."""
POD_MEMORY = "3Gi"
"""Per pod: about four 16 MiB blocks per file in flight (components/weights/copier/hub.py HubStream, bucket.py
CHUNK_BYTES), hf_xet's download buffers (at most 512 MB, hub.py XET_CONFIG) and the interpreter; the
benchmark's peak RSS is in docs/weights.md."""
LISTER_ROLE = "roles/storage.objectViewer"
"""List and read the bucket: listing is checked on the bucket, so it cannot be limited to a prefix."""
WRITER_ROLE = "roles/storage.objectUser"
"""Create, overwrite and delete objects, granted only under the checkpoint prefix
(https://cloud.google.com/storage/docs/access-control/iam-roles)."""
TAINT_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}
"""GKE node pool taint effects (NodePool API) as Kubernetes spells them in a toleration."""
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
"""Label GKE puts on every node with its pool's name."""
HOSTNAME_LABEL = "kubernetes.io/hostname"
"""Well-known node label (https://kubernetes.io/docs/reference/labels-annotations-taints/#kubernetesiohostname)."""


def install_and_run() -> str:
    """Hash-checked install of exactly the locked wheels, then the copier with the Job's arguments ("$@")."""
    return (f"env -u {contract.HF_TOKEN_KEY} python -m pip install {' '.join(shipped.INSTALL)} "
            f'&& exec python -m tools.live.stage_weights "$@"')


class CheckpointStagingArgs(Args):
    namespace: StrInput
    bucket: StrInput
    """Bucket name."""
    prefix: str
    owner: str
    """The stack the grants are for, in their condition titles (components/weights/bucket.py CheckpointBucketArgs)."""
    """storage.checkpointPrefix: the revision folders go under it."""
    repo_id: str
    revision: StrInput
    """40-hex commit, known now (model.revision) or from HubRevision."""
    workers: int
    """Files each pod copies at once (storage.stagingWorkers)."""
    pods: int
    """Pods of the Indexed Job (staging_model(cfg).pods); they share the files through the copier's leases."""
    project_number: StrInput
    workload_pool: StrInput
    node_pool: StrInput
    """Name of the CPU pool the Job runs on (the staging pool, one node per pod)."""
    tolerations: tuple[tuple[str, str, str], ...] = ()
    """(key, value, effect) of that pool's taints."""
    hf_token_secret: StrInput
    """Name of the Secret holding HF_TOKEN."""
    image: str
    """images.ref(cfg.images, "staging"): the pinned Python image, with its digest when configured."""


class CheckpointStaging(Component):
    """`job` completes only when the destination holds a verified copy; `uri` is that folder."""

    def __init__(self, name: str, args: CheckpointStagingArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("weights", "CheckpointStaging", name, opts)
        self.revision = pulumi.Output.from_input(args.revision)
        self.uri = pulumi.Output.concat("gs://", args.bucket, "/", args.prefix, self.revision, "/")
        self.account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata=k8s.meta.v1.ObjectMetaArgs(name=contract.STAGING_SERVICE_ACCOUNT,
                                                              namespace=args.namespace),
            opts=self.child())
        self.grants = self._grants(name, args)
        self.code = k8s.core.v1.ConfigMap(
            f"{name}-code",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{catalog.GUIDE_NAME}-weights-stager-code",
                                                namespace=args.namespace),
            data=shipped.shipped_code(),
            opts=self.child())
        self.job = self._job(name, args)
        self.finish(uri=self.uri, revision=self.revision, job=self.job.metadata.name)

    def _grants(self, name: str, args: CheckpointStagingArgs) -> list[gcp.storage.BucketIAMMember]:
        namespace = pulumi.Output.from_input(args.namespace)
        member = namespace.apply(lambda ns: workload_principal(
            args.project_number, args.workload_pool, ns, contract.STAGING_SERVICE_ACCOUNT))
        under_prefix = pulumi.Output.concat(
            'resource.name.startsWith("projects/_/buckets/', args.bucket, "/objects/", args.prefix, '")')
        return [
            gcp.storage.BucketIAMMember(
                f"{name}-lister", bucket=args.bucket, role=LISTER_ROLE, member=member,
                condition=gcp.storage.BucketIAMMemberConditionArgs(title=f"{args.owner} lists the checkpoint",
                                                                   expression=whole_bucket(args.bucket)),
                opts=self.child()),
            gcp.storage.BucketIAMMember(
                f"{name}-writer", bucket=args.bucket, role=WRITER_ROLE, member=member,
                condition=gcp.storage.BucketIAMMemberConditionArgs(title=f"{args.owner} writes the checkpoint only",
                                                                   expression=under_prefix),
                opts=self.child()),
        ]

    def _job(self, name: str, args: CheckpointStagingArgs) -> k8s.batch.v1.Job:
        deps, deps_mount = hardening.scratch_volume("deps", DEPS_DIR, "1Gi")
        home, home_mount = hardening.scratch_volume("home", "/tmp", "1Gi")
        code = k8s.core.v1.VolumeArgs(name="code", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
            name=self.code.metadata.name,
            items=[k8s.core.v1.KeyToPathArgs(key=shipped.key(path), path=path) for path in shipped.APP]))
        container = k8s.core.v1.ContainerArgs(
            name="stage-weights",
            image=args.image,
            working_dir=APP_DIR,
            command=["sh", "-c", install_and_run(), "stage-weights"],
            # Each pod proves its own share of the file list (JOB_COMPLETION_INDEX, set by Kubernetes in an
            # Indexed Job); leases keep any file from being copied twice by other copiers on the folder.
            args=["--repo-id", args.repo_id, "--revision", self.revision, "--dest", self.uri,
                  "--workers", str(args.workers), "--shards", str(args.pods), "--progress-seconds", "30"],
            env=[
                k8s.core.v1.EnvVarArgs(name=contract.HF_TOKEN_KEY, value_from=k8s.core.v1.EnvVarSourceArgs(
                    secret_key_ref=k8s.core.v1.SecretKeySelectorArgs(name=args.hf_token_secret,
                                                                     key=contract.HF_TOKEN_KEY))),
                k8s.core.v1.EnvVarArgs(name="PYTHONPATH", value=f"{DEPS_DIR}:{APP_DIR}"),
                k8s.core.v1.EnvVarArgs(name="PYTHONUNBUFFERED", value="1"),
                k8s.core.v1.EnvVarArgs(name="HOME", value="/tmp"),
                k8s.core.v1.EnvVarArgs(name="HF_HUB_DISABLE_TELEMETRY", value="1"),
            ],
            resources=k8s.core.v1.ResourceRequirementsArgs(
                requests={"cpu": str(POD_CPU), "memory": POD_MEMORY}, limits={"memory": POD_MEMORY}),
            security_context=hardening.container_context(),
            volume_mounts=[k8s.core.v1.VolumeMountArgs(name="code", mount_path=APP_DIR, read_only=True),
                           deps_mount, home_mount],
        )
        return k8s.batch.v1.Job(
            f"{name}-job",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                # One Job per commit: a new revision is a new Job (a Job's pod template cannot change).
                name=self.revision.apply(lambda rev: f"{catalog.GUIDE_NAME}-weights-stage-{rev[:12]}"),
                namespace=args.namespace,
                labels=contract.STAGING_LABELS,
                annotations={"pulumi.com/timeoutSeconds": str(TIMEOUT_S)},
            ),
            spec=k8s.batch.v1.JobSpecArgs(
                completion_mode="Indexed",
                completions=args.pods,
                parallelism=args.pods,
                # Per pod: a failed index is started again with the same share; it reads back what it copied
                # and takes over its own leases once they expire.
                backoff_limit=3 * args.pods,
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=contract.STAGING_LABELS),
                    spec=k8s.core.v1.PodSpecArgs(
                        restart_policy="Never",
                        service_account_name=self.account.metadata.name,
                        node_selector={NODE_POOL_LABEL: args.node_pool},
                        # One pod per node: each node leaves from its own NAT address (components/cloud/network.py).
                        affinity=k8s.core.v1.AffinityArgs(pod_anti_affinity=k8s.core.v1.PodAntiAffinityArgs(
                            required_during_scheduling_ignored_during_execution=[k8s.core.v1.PodAffinityTermArgs(
                                label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=contract.STAGING_LABELS),
                                topology_key=HOSTNAME_LABEL)])),
                        tolerations=[k8s.core.v1.TolerationArgs(key=k, operator="Equal", value=v,
                                                                effect=TAINT_EFFECTS[e])
                                     for k, v, e in args.tolerations] or None,
                        security_context=hardening.pod_context(),
                        automount_service_account_token=False,  # Workload Identity needs no API token
                        containers=[container],
                        volumes=[code, deps, home],
                    ),
                ),
            ),
            # The copy can only start once its identity may write the prefix.
            opts=self.child(depends_on=self.grants, custom_timeouts=pulumi.CustomTimeouts(
                create=f"{TIMEOUT_S // 60}m", update=f"{TIMEOUT_S // 60}m")),
        )

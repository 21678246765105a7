"""Regional checkpoint bucket, readable only by the weight-transfer identity."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_gcp as gcp

from ..cloud.base import Args, Component, StrInput
from ..facts import contract

CHECKPOINT_READER_ROLE = "roles/storage.objectViewer"
"""Role the Volume Populator guide grants on the bucket
(https://docs.cloud.google.com/kubernetes-engine/docs/concepts/about-volume-populator)."""
RESULTS_WRITER_ROLE = "roles/storage.objectCreator"
"""Create objects only (inference-perf uploads its reports under timestamped names), and only under the
results prefix: the condition names objects as `projects/_/buckets/<bucket>/objects/<prefix>`, the form
Cloud Storage IAM conditions use."""


class CheckpointBucketArgs(Args):
    name: str
    project: str
    location: str
    """Region of the cluster: the transfer into Hyperdisk ML stays in-region."""
    soft_delete_days: int
    """0 turns soft delete off; otherwise 7-90 days."""
    delete_on_destroy: bool
    """False keeps the bucket (and its 1.56 TB copy) when the stack is destroyed."""
    exists: bool = False
    """Read the bucket instead of creating it: another stack's of the project, or storage.bucketExists."""
    adopt: bool = False
    """The bucket exists and this stack created it (a destroy kept it): import it by its name, its ID
    (https://www.pulumi.com/registry/packages/gcp/api-docs/storage/bucket/#import). Once in the stack's state, the
    import option is a no-op (https://github.com/pulumi/pulumi/blob/master/developer-docs/architecture/import.md)."""
    readers: tuple[StrInput, ...] = ()
    """IAM members granted object read."""
    results_writers: tuple[StrInput, ...] = ()
    """IAM members allowed to create objects under `results_prefix` only."""
    results_prefix: str = "benchmarks/"
    labels: dict[str, str]
    owner: str
    """The stack the grants are for (its cluster name), in each grant's condition title. Pods of every cluster in
    the project share one Workload Identity principal per namespace and service account, and IAM tells bindings
    apart by role, members and condition only: one condition per stack keeps each stack's binding its own, so
    destroying one stack leaves the others' access to the shared bucket in place."""


def whole_bucket(bucket: StrInput) -> pulumi.Output[str]:
    """A condition every request on the bucket and its objects meets (Cloud Storage names them
    `projects/_/buckets/<bucket>` and `.../objects/<name>`): the grant's scope is the unconditional one's."""
    return pulumi.Output.concat('resource.name.startsWith("projects/_/buckets/', bucket, '")')


class CheckpointBucket(Component):
    """The checkpoint copy is expensive to re-stage, so destroy keeps it unless asked otherwise."""

    def __init__(self, name: str, args: CheckpointBucketArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("storage", "CheckpointBucket", name, opts)
        if args.exists:
            # A read resource: Pulumi neither creates nor deletes it.
            self.bucket = gcp.storage.Bucket.get(f"{name}-bucket", args.name, opts=self.child())
        else:
            self.bucket = self._create(name, args)
        self.grants = [
            gcp.storage.BucketIAMMember(
                f"{name}-reader-{i}",
                bucket=self.bucket.name,
                role=CHECKPOINT_READER_ROLE,
                member=member,
                condition=gcp.storage.BucketIAMMemberConditionArgs(
                    title=f"{args.owner} reads the checkpoint", expression=whole_bucket(args.name)),
                opts=self.child(),
            )
            for i, member in enumerate(args.readers)
        ]
        self.grants += [
            gcp.storage.BucketIAMMember(
                f"{name}-results-writer-{i}",
                bucket=self.bucket.name,
                role=RESULTS_WRITER_ROLE,
                member=member,
                # Conditioned on the prefix, so the benchmark can never touch the checkpoint.
                condition=gcp.storage.BucketIAMMemberConditionArgs(
                    title=f"{args.owner} writes benchmark results only",
                    expression=f'resource.name.startsWith("projects/_/buckets/{args.name}/objects/{args.results_prefix}")',
                ),
                opts=self.child(),
            )
            for i, member in enumerate(args.results_writers)
        ]
        self.uri = pulumi.Output.concat("gs://", self.bucket.name)
        self.finish(uri=self.uri)

    def _create(self, name: str, args: CheckpointBucketArgs) -> gcp.storage.Bucket:
        return gcp.storage.Bucket(
            f"{name}-bucket",
            name=args.name,
            project=args.project,
            location=args.location.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            soft_delete_policy=gcp.storage.BucketSoftDeletePolicyArgs(
                retention_duration_seconds=args.soft_delete_days * 86400),
            force_destroy=args.delete_on_destroy,
            labels={**args.labels, contract.BUCKET_ON_DESTROY_LABEL: "delete" if args.delete_on_destroy else "keep"},
            opts=self.child(retain_on_delete=not args.delete_on_destroy, import_=args.name if args.adopt else None),
        )


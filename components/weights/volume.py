"""Weight staging: GKE Volume Populator copies the checkpoint from the bucket into a ReadOnlyMany
Hyperdisk ML volume that every model server mounts at /models
(https://docs.cloud.google.com/kubernetes-engine/docs/concepts/about-volume-populator)."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from ..cloud.base import Args, Component, StrInput
from ..facts import contract

DATA_SOURCE_API = "datalayer.gke.io/v1"


class WeightStagingArgs(Args):
    namespace: StrInput
    zone: str
    """Hyperdisk ML is zonal: the volume must be in the serving zone."""
    checkpoint_uri: StrInput
    """gs://bucket/prefix/<revision>/ (trailing slash: a folder): the staging Job's verified copy."""
    revision: StrInput
    """Commit of the checkpoint; part of the claim's and data source's names."""
    volume_gib: int
    throughput_mibps: int
    hydration_timeout_s: int
    """How long `pulumi up` waits for the claim to bind (population finishes): loading.hydration_timeout_s."""
    labels: dict[str, str]
    """GCP labels of the disk the CSI driver creates, so a disk that outlives its stack can be found."""


def claim_name(revision: StrInput) -> pulumi.Output[str]:
    """One claim per checkpoint revision: a new revision hydrates a new volume beside the old one, model servers
    move to it in a rolling update, and the old claim is deleted after them, so no pod reads half of each."""
    return pulumi.Output.from_input(revision).apply(lambda rev: f"{contract.MODELS_PVC}-{rev[:12]}")


def attributes_class_name(throughput_mibps: int) -> str:
    """The VolumeAttributesClass of one throughput (cluster-scoped, named by its one parameter)."""
    return f"{contract.MODELS_PVC}-hdml-{throughput_mibps}mi"


class WeightStaging(Component):
    """Populated at creation (Immediate binding), once the staging Job has verified the copy in the bucket."""

    def __init__(self, name: str, args: WeightStagingArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("weights", "WeightStaging", name, opts)
        # A service account of its own: the guide warns against reusing the transfer identity.
        self.transfer_account = k8s.core.v1.ServiceAccount(
            f"{name}-transfer-sa",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=contract.TRANSFER_SERVICE_ACCOUNT, namespace=args.namespace),
            opts=self.child(),
        )
        name_of_claim = claim_name(args.revision)
        source_name = name_of_claim.apply(lambda claim: f"{claim}-source")
        self.data_source = k8s.apiextensions.CustomResource(
            f"{name}-source",
            api_version=DATA_SOURCE_API,
            kind="GCPDataSource",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=source_name, namespace=args.namespace),
            spec={"cloudStorage": {"serviceAccountName": self.transfer_account.metadata.name,
                                   "uri": args.checkpoint_uri}},
            opts=self.child(),
        )
        self.storage_class = k8s.storage.v1.StorageClass(
            f"{name}-hdml",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{contract.MODELS_PVC}-hyperdisk-ml"),
            provisioner="pd.csi.storage.gke.io",
            parameters={
                "type": "hyperdisk-ml",
                "provisioned-throughput-on-create": f"{args.throughput_mibps}Mi",
                # PD CSI driver parameter `labels` (gcp-compute-persistent-disk-csi-driver pkg/common/parameters.go).
                "labels": ",".join(f"{key}={value}" for key, value in sorted(args.labels.items())),
            },
            allow_volume_expansion=False,
            reclaim_policy="Delete",
            volume_binding_mode="Immediate",
            allowed_topologies=[k8s.core.v1.TopologySelectorTermArgs(match_label_expressions=[
                k8s.core.v1.TopologySelectorLabelRequirementArgs(key="topology.gke.io/zone", values=[args.zone])])],
            opts=self.child(),
        )
        # The volume's throughput follows the readers on an existing stack: the StorageClass's create-time value
        # reaches only a new disk, so the claim also names a VolumeAttributesClass of that throughput. Its
        # parameters are immutable, hence one class per value; a new value makes the claim name the new class
        # (an in-place update), and the PD CSI driver's ControllerModifyVolume sets the disk's
        # provisionedThroughput through Compute Engine's disks.update (kubernetes-sigs/gcp-compute-persistent-disk-
        # csi-driver pkg/gce-pd-csi-driver/controller.go, pkg/gce-cloud-provider/compute/gce-compute.go
        # updateZonalDisk; hyperdisk-ml is in its --supports-dynamic-throughput-provisioning list,
        # deploy/kubernetes/base/controller/controller.yaml). The one key it takes for that is `throughput`, in Mi
        # (pkg/parameters/parameters.go ExtractModifyVolumeParameters).
        self.attributes_class = k8s.storage.v1.VolumeAttributesClass(
            f"{name}-throughput",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=attributes_class_name(args.throughput_mibps)),
            driver_name="pd.csi.storage.gke.io",
            parameters={"throughput": f"{args.throughput_mibps}Mi"},
            opts=self.child(),
        )
        self.claim = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-pvc",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=name_of_claim,
                namespace=args.namespace,
                annotations={
                    # The claim binds when population completes; that is what model servers need. It does not
                    # wait for the driver to apply its VolumeAttributesClass: whether GKE's managed driver and the
                    # Volume Populator's temporary claim carry a class for hyperdisk-ml is not published, and a
                    # first `pulumi up` must not hang on it. Groups a scale-up in place starts before the change
                    # takes effect are covered by the startup budget's grown term (loading.startup_budget_terms:
                    # the whole lag reading nothing, then the load).
                    "pulumi.com/waitFor": "jsonpath={.status.phase}=Bound",
                    "pulumi.com/timeoutSeconds": str(args.hydration_timeout_s),
                },
            ),
            spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                access_modes=["ReadOnlyMany"],
                storage_class_name=self.storage_class.metadata.name,
                volume_attributes_class_name=self.attributes_class.metadata.name,
                resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": f"{args.volume_gib}Gi"}),
                data_source_ref=k8s.core.v1.TypedObjectReferenceArgs(
                    api_group=DATA_SOURCE_API.split("/")[0], kind="GCPDataSource", name=source_name),
            ),
            # Depending on the data source makes Pulumi delete the claim first: a claim deleted after its
            # source hangs on the populator's temporary claim
            # (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/about-volume-populator).
            opts=self.child(depends_on=[self.data_source]),
        )
        self.finish(claim=self.claim.metadata.name)

"""`storage.*`: the checkpoint bucket, the staging Job's pods and streams, the volume's read rate."""

from __future__ import annotations

import re
from typing import ClassVar, Optional

from pydantic import Field, model_validator

from ..facts import catalog
from .base import Section, _fail, check_bucket_name


class StorageConfig(Section):
    prefix: ClassVar[str] = "storage"
    bucketName: Optional[str] = Field(None, description="Checkpoint bucket (default: <project>-kimi-k3-1-weights).")
    checkpointPrefix: str = Field(
        "moonshotai/Kimi-K3.1-Pro/", description="Folder in the bucket holding the checkpoint.")
    softDeleteDays: int = Field(7, description="Bucket soft-delete retention in days: 0 (off) or 7-90.")
    deleteCheckpointOnDestroy: bool = Field(
        False, description="Let `pulumi destroy` delete the bucket and its 1.56 TB checkpoint copy.")
    bucketExists: bool = Field(
        False, description="Use the bucket as it is (kept by an earlier destroy, or made by another stack): "
                           "the stack then grants access to it but does not create or delete it.")
    volumeSizeGi: int = Field(
        1800, description="Hyperdisk ML volume size in GiB (>= checkpoint + 10% headroom).")
    throughputMiBps: Optional[int] = Field(
        None,
        description="Hyperdisk ML provisioned throughput in MiB/s (default: the least at which the volume no "
                    "longer limits any node's load, docs/weights.md).")
    nodeReadMiBps: Optional[int] = Field(
        None, ge=100, description="Read limit of one serving node from the volume in MiB/s (default: the "
                                  "assumption in components/facts/catalog.py; set it from a measurement).")
    stagingWorkers: int = Field(
        16, ge=1, le=64, description="Files the staging Job copies from the Hugging Face Hub into the bucket at once.")
    stagingPods: Optional[int] = Field(
        None, ge=1, le=catalog.STAGING_MAX_PODS,
        description="Pods of the staging Job, one per staging node and one NAT address each (default: enough for "
                    "the 10-minute target, components/plan/staging.py).")

    @model_validator(mode="after")
    def _check(self) -> StorageConfig:
        if self.bucketName is not None:
            check_bucket_name(self.key("bucketName"), self.bucketName)
        prefix = self.checkpointPrefix
        if re.match(r"[a-z][a-z0-9+.-]*://", prefix):
            _fail(self.key("checkpointPrefix"), prefix, "a folder inside storage.bucketName, not a URI: give the "
                                                       "bucket in storage.bucketName and the folder here, e.g. "
                                                       "'models/kimi/'")
        if not prefix.endswith("/") or prefix.startswith("/"):
            _fail(self.key("checkpointPrefix"), prefix, "a folder path such as 'models/kimi/' "
                                                       "(trailing '/', no leading '/')")
        bad_part = any(part in ("", ".", "..") for part in prefix[:-1].split("/"))
        if bad_part or re.search(r"[\x00-\x1f\x7f#\[\]*?]", prefix) or len(prefix.encode()) > 1024 - 64:
            # Object names: no '.'/'..' segments, control characters or wildcard characters; 1024 bytes in all
            # (https://cloud.google.com/storage/docs/objects#naming), leaving room for the checkpoint's file names.
            _fail(self.key("checkpointPrefix"), prefix, "folder names must not be empty, '.' or '..', nor hold "
                                                       "control or wildcard characters (#[]*?) "
                                                       "(https://cloud.google.com/storage/docs/objects#naming)")
        if self.bucketExists and self.deleteCheckpointOnDestroy:
            _fail(self.key("deleteCheckpointOnDestroy"), True,
                  "a bucket the stack only uses (storage.bucketExists=true) is never deleted by it; set one of them")
        if self.softDeleteDays and not 7 <= self.softDeleteDays <= 90:
            # Cloud Storage accepts 0 or 7-90 days (pulumi_gcp BucketSoftDeletePolicyArgs docstring).
            _fail(self.key("softDeleteDays"), self.softDeleteDays, "must be 0 (off) or 7-90 days")
        min_gib = -(-catalog.KIMI.checkpoint_bytes * 11 // 10 // 2**30)
        if not min_gib <= self.volumeSizeGi <= catalog.HYPERDISK_ML_MAX_GIB:
            _fail(self.key("volumeSizeGi"), self.volumeSizeGi,
                  f"must be {min_gib}-{catalog.HYPERDISK_ML_MAX_GIB} GiB (checkpoint 1.56 TB + 10% headroom)")
        if self.throughputMiBps is not None and not (
                catalog.HYPERDISK_ML_MIN_MIBPS <= self.throughputMiBps <= catalog.HYPERDISK_ML_MAX_MIBPS):
            _fail(self.key("throughputMiBps"), self.throughputMiBps,
                  f"Hyperdisk ML takes {catalog.HYPERDISK_ML_MIN_MIBPS}-{catalog.HYPERDISK_ML_MAX_MIBPS} MiB/s")
        return self

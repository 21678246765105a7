"""Names that one layer creates and another consumes, defined once and imported by both sides."""

from __future__ import annotations

from . import catalog

TRANSFER_SERVICE_ACCOUNT = f"{catalog.GUIDE_NAME}-weights-transfer"
"""Kubernetes service account the Volume Populator transfer Job runs as; its Workload Identity
principal is the only identity granted read on the checkpoint bucket (gke.md §4)."""

MODELS_PVC = f"{catalog.GUIDE_NAME}-models"
"""ReadOnlyMany Hyperdisk ML claim holding the checkpoint (seed post)."""

MODELS_MOUNT_PATH = "/models"
"""Where model servers mount the checkpoint volume read-only (seed post)."""

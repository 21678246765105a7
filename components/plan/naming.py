"""Names and labels shared by every Google Cloud resource of a stack."""

from __future__ import annotations

import re

from ..config import StackConfig
from ..facts import catalog


def label_value(text: str) -> str:
    """GCP label values: lowercase letters, digits, '-' and '_', at most 63 characters."""
    return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]


def resource_labels(cfg: StackConfig, stack: str) -> dict[str, str]:
    """Labels on every billable resource, so a stack's spend and leftovers can be found by label."""
    return {
        "llm-d-guide": catalog.GUIDE_NAME,
        "accelerator-track": cfg.track,
        "pulumi-stack": label_value(stack),
        "managed-by": "pulumi",
        # A forgotten benchmark stack is visible by label: created time + this many hours is overdue.
        "max-lifetime-hours": str(cfg.lifecycle.maxLifetimeHours),
    }

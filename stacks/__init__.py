"""Per-track composition: which components a stack is made of, wired together. No resource details."""

from __future__ import annotations

from components.config import StackConfig


def compose(cfg: StackConfig) -> None:
    """Build the stack for `cfg.track`; the stack's name plays no part in the choice."""
    if cfg.track == "gpu":
        from . import gpu
        gpu.build(cfg)
    else:
        from . import tpu
        tpu.build(cfg)


def summary_lines(cfg: StackConfig) -> list[str]:
    """Figures a user should see before `pulumi up` (printed by the offline plan)."""
    from .base import summary
    return summary(cfg)


def overview(cfg: StackConfig):
    """The reader's summary of what the config decides (components/plan/overview.py), with the dashboard."""
    from .base import overview as build
    return build(cfg)

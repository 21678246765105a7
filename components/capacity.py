"""Sizing computed from the config and the catalog, used by components and the plan summary.

Weight staging (docs/weights.md has the formulas):
- copies read at start-up: every serving replica loads the whole checkpoint once (GPU: prefill + decode
  groups; TPU: slices), all at the same time after `pulumi up`;
- Hyperdisk ML provisioned throughput is a property of the volume, shared by every attached reader, and
  each reader VM is capped (catalog.HYPERDISK_PER_VM_READ_MIBPS), so
  load time = copies x checkpoint / min(throughput, reader nodes x per-VM cap), and
  hydration (one copy written) >= checkpoint / throughput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import catalog
from .config import StackConfig

MIB = 2**20
THROUGHPUT_STEP_MIBPS = 512
"""Default throughput is rounded up to a multiple of this, to keep the figure readable."""


def reader_nodes(cfg: StackConfig) -> int:
    """Nodes that mount the volume and read weights at start-up."""
    if cfg.track == "gpu":
        return cfg.gpu.node_count
    return cfg.tpu.slices * cfg.tpu.hosts_per_slice


def replica_copies(cfg: StackConfig) -> int:
    """How many full copies of the checkpoint are read when the model servers start."""
    if cfg.track == "gpu":
        return cfg.gpu.prefillGroups + cfg.gpu.decodeGroups
    return cfg.tpu.slices


def default_throughput_mibps(copies: int, checkpoint_bytes: int = catalog.KIMI.checkpoint_bytes,
                             target_s: int = catalog.WEIGHT_LOAD_TARGET_SECONDS) -> int:
    """Smallest throughput (rounded up) that loads `copies` checkpoints within the target."""
    needed = copies * checkpoint_bytes / target_s / MIB
    rounded = math.ceil(needed / THROUGHPUT_STEP_MIBPS) * THROUGHPUT_STEP_MIBPS
    return max(catalog.HYPERDISK_ML_MIN_MIBPS, rounded)


@dataclass(frozen=True)
class WeightStaging:
    copies: int
    reader_nodes: int
    throughput_mibps: int
    volume_gib: int
    checkpoint_bytes: int

    @property
    def hydration_s(self) -> float:
        """Lower bound for writing one copy into the volume (the transfer Job may be slower)."""
        return self.checkpoint_bytes / (self.throughput_mibps * MIB)

    @property
    def read_mibps(self) -> int:
        """Aggregate read rate: the volume's throughput, unless the readers' per-VM caps are lower."""
        return min(self.throughput_mibps, self.reader_nodes * catalog.HYPERDISK_PER_VM_READ_MIBPS)

    @property
    def load_s(self) -> float:
        """Time until every replica has read its copy, all reading at once."""
        return self.copies * self.checkpoint_bytes / (self.read_mibps * MIB)


def weight_staging(cfg: StackConfig) -> WeightStaging:
    copies = replica_copies(cfg)
    return WeightStaging(
        copies=copies,
        reader_nodes=reader_nodes(cfg),
        throughput_mibps=cfg.storage.throughputMiBps or default_throughput_mibps(copies),
        volume_gib=cfg.storage.volumeSizeGi,
        checkpoint_bytes=catalog.KIMI.checkpoint_bytes,
    )

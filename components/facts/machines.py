"""Node sizes the scheduler sees: machine capacity, GKE's reservations and what a pool's nodes offer.

One place for the formula and the machine sizes the scheduling check (tools/preview/scheduling.py) uses.

Allocatable = capacity - GKE's kube-reserved - eviction threshold (- pre-allocated hugepages for memory):
https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes ("Node allocatable resources":
CPU: 6% of the first core, 1% of the next core, 0.5% of the next 2 cores, 0.25% of any core above 4;
memory: 255 MiB below 1 GiB, else 25% of the first 4 GiB, 20% of the next 4 GiB, 10% of the next 8 GiB,
6% of the next 112 GiB, 2% above 128 GiB; eviction threshold 100 MiB). GKE 1.37 changes the memory
formula to a minimum of this one and a per-pod figure, so this one is an upper bound of the reservation.
Pre-allocated hugepages leave the node's allocatable memory ("for every huge page reservation, we need to
remove it from allocatable memory", https://github.com/kubernetes/kubernetes/blob/v1.35.0/pkg/kubelet/nodestatus/setters.go).

Memory in Compute Engine's machine tables is read as decimal GB (10^9 bytes): the smaller reading, so a
pod that fits here fits the real node.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import catalog

GIB = 2**30
MIB = 2**20
EVICTION_THRESHOLD_BYTES = 100 * MIB

CPU_TIERS_MILLI = ((1000, 0.06), (1000, 0.01), (2000, 0.005), (None, 0.0025))
MEMORY_TIERS_BYTES = ((4 * GIB, 0.25), (4 * GIB, 0.20), (8 * GIB, 0.10), (112 * GIB, 0.06), (None, 0.02))


def _tiered(amount: float, tiers: tuple[tuple[float | None, float], ...]) -> float:
    reserved, left = 0.0, amount
    for size, rate in tiers:
        part = left if size is None else min(left, size)
        if part <= 0:
            break
        reserved += part * rate
        left -= part
    return reserved


def reserved_cpu_milli(vcpus: int) -> int:
    return int(_tiered(vcpus * 1000, CPU_TIERS_MILLI) + 0.999)


def reserved_memory_bytes(memory_bytes: int) -> int:
    if memory_bytes < GIB:
        return 255 * MIB
    return int(_tiered(memory_bytes, MEMORY_TIERS_BYTES) + 0.999)


@dataclass(frozen=True)
class Machine:
    machine_type: str
    vcpus: int
    memory_bytes: int
    arch: str
    """`kubernetes.io/arch` of its nodes."""
    source: str
    extended: tuple[tuple[str, int], ...] = ()
    """Device-plugin resources a node offers (nvidia.com/gpu, google.com/tpu)."""


def _gb(value: float) -> int:
    return int(value * 10**9)


GENERAL_PURPOSE = "https://cloud.google.com/compute/docs/general-purpose-machines"
DISK_TYPES = "https://cloud.google.com/compute/docs/disks#disk-types"


@dataclass(frozen=True)
class CpuSeries:
    """A machine series the CPU pools (system, weights transfer) may use: its predefined `standard` shapes and
    the boot disk type the pool gives its nodes (one the series boots from)."""

    series: str
    vcpus: tuple[int, ...]
    gb_per_vcpu: int
    boot_disk: str
    source: str

    def machine_types(self) -> tuple[str, ...]:
        return tuple(f"{self.series}-standard-{n}" for n in self.vcpus)


CPU_SERIES: dict[str, CpuSeries] = {s.series: s for s in (
    # Shapes as the on-demand price table lists them (components/facts/prices.py CPU_MACHINE_HOUR, read from
    # https://cloud.google.com/compute/vm-instance-pricing), 4 GB per vCPU in both standard series
    # (GENERAL_PURPOSE); both boot from Persistent Disk, so pd-balanced (DISK_TYPES).
    CpuSeries("n2", (2, 4, 8, 16, 32), 4, "pd-balanced", f"{GENERAL_PURPOSE} (N2 standard)"),
    CpuSeries("c3", (4, 8, 22, 44, 88), 4, "pd-balanced", f"{GENERAL_PURPOSE} (C3 standard)"),
)}
HYPERDISK_ONLY_SERIES = ("n4", "c4", "c4a", "c4d")
"""Series that attach Hyperdisk only, so a pd-balanced boot disk fails at node creation
(https://cloud.google.com/compute/docs/disks/hyperdisks, machine series support); the CPU pools have no shapes for
them in CPU_SERIES yet."""


def cpu_series(machine_type: str) -> CpuSeries | None:
    """The series of a machine type CPU_SERIES lists, else None."""
    series = CPU_SERIES.get(machine_type.split("-", 1)[0])
    return series if series and machine_type in series.machine_types() else None


MACHINES: dict[str, Machine] = {m.machine_type: m for m in (
    *(Machine(machine_type, n, _gb(n * series.gb_per_vcpu), "amd64",
              f"{series.source}: {n} vCPU, {n * series.gb_per_vcpu} GB")
      for series in CPU_SERIES.values() for n, machine_type in zip(series.vcpus, series.machine_types(), strict=True)),
    *(Machine(g.machine_type, g.vcpus, _gb(g.host_memory_gb), "arm64",
              "components/facts/catalog.py GPU_MACHINES (Grace CPU, Arm)",
              extended=(("nvidia.com/gpu", g.gpus_per_node),))
      for g in catalog.GPU_MACHINES.values()),
    Machine(catalog.IRONWOOD.machine_type, catalog.IRONWOOD.vcpus, _gb(catalog.IRONWOOD.host_memory_gb), "amd64",
            "components/facts/catalog.py IRONWOOD", extended=(("google.com/tpu", catalog.IRONWOOD.chips_per_host),)),
)}


@dataclass(frozen=True)
class Allocatable:
    cpu_milli: int
    memory_bytes: int
    extended: dict[str, int]
    """Extended resources and hugepages (bytes for hugepages-*)."""


def allocatable(machine: Machine, hugepages_2m: int = 0) -> Allocatable:
    hugepage_bytes = hugepages_2m * 2 * MIB
    memory = (machine.memory_bytes - reserved_memory_bytes(machine.memory_bytes) - EVICTION_THRESHOLD_BYTES
              - hugepage_bytes)
    extended = dict(machine.extended)
    if hugepage_bytes:
        extended["hugepages-2Mi"] = hugepage_bytes
    return Allocatable(machine.vcpus * 1000 - reserved_cpu_milli(machine.vcpus), memory, extended)

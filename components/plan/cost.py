"""Estimated hourly cost of a stack, by resource, from components.facts.prices and `kimi-k3-1:cost.*` overrides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..config import StackConfig
from ..facts import catalog, prices
from ..facts.machines import MACHINES
from . import capacity, loading, timeline
from .staging import staging_addresses


@dataclass(frozen=True)
class CostLine:
    item: str
    usd_per_hour: Optional[float]
    """None when no price is known: the estimate says which config key to set."""
    basis: str


def _priced(override: Optional[float], table: prices.Price) -> Optional[float]:
    return override if override is not None else table.usd


def hourly_costs(cfg: StackConfig) -> list[CostLine]:
    lines: list[CostLine] = []
    if cfg.track == "gpu":
        nodes = cfg.gpu.node_count
        node = _priced(cfg.cost.price("gpuNodeHourUsd"), prices.GPU_NODE_HOUR)
        lines.append(CostLine(f"{nodes} x {cfg.gpu.spec.machine_type}", node and node * nodes,
                              "kimi-k3-1:cost.gpuNodeHourUsd" if node is None else f"{node:g} $/node-hour"))
    else:
        chips = cfg.tpu.slices * cfg.tpu.chips_per_slice
        chip = _priced(cfg.cost.price("tpuChipHourUsd"), prices.TPU_CHIP_HOUR)
        lines.append(CostLine(f"{chips} {catalog.IRONWOOD.generation} chips", chip and chip * chips,
                              "kimi-k3-1:cost.tpuChipHourUsd" if chip is None else f"{chip:g} $/chip-hour"))
    cpu_nodes = cfg.systemPool.nodeCount + cfg.transferPool.nodeCount
    override = cfg.cost.price("cpuNodeHourUsd")
    for pool, spec in (("system", cfg.systemPool), ("weights-transfer", cfg.transferPool)):
        if not spec.nodeCount:
            continue
        table = prices.cpu_node_hour(spec.machineType)
        cpu = _priced(override, table)
        basis = ("kimi-k3-1:cost.cpuNodeHourUsd" if cpu is None
                 else f"{cpu:g} $/node-hour, " + ("kimi-k3-1:cost.cpuNodeHourUsd" if override is not None
                                                  else table.source))
        lines.append(CostLine(f"{spec.nodeCount} x {spec.machineType} ({pool})", cpu and cpu * spec.nodeCount, basis))
    staging = capacity.weight_staging(cfg)
    disk_capacity, disk_throughput = prices.hyperdisk_ml_monthly(staging.volume_gib, staging.throughput_mibps)
    lines.append(CostLine(f"Hyperdisk ML {staging.volume_gib} GiB capacity", disk_capacity / prices.HOURS_PER_MONTH,
                          prices.HYPERDISK_ML_CAPACITY.source))
    lines.append(CostLine(f"Hyperdisk ML {staging.throughput_mibps} MiB/s throughput",
                          disk_throughput / prices.HOURS_PER_MONTH, prices.HYPERDISK_ML_THROUGHPUT.source))
    checkpoint_gb = catalog.KIMI.checkpoint_bytes / 1e9
    lines.append(CostLine(f"bucket, {checkpoint_gb:,.0f} GB checkpoint",
                          checkpoint_gb * prices.GCS_STANDARD_REGIONAL.usd / prices.HOURS_PER_MONTH,
                          prices.GCS_STANDARD_REGIONAL.source))
    accelerator_nodes = cfg.gpu.node_count if cfg.track == "gpu" else cfg.tpu.slices * cfg.tpu.hosts_per_slice
    boot_gb = accelerator_nodes * catalog.BOOT_DISK_GB_ACCELERATOR + cpu_nodes * catalog.BOOT_DISK_GB_CPU
    lines.append(CostLine(f"boot disks, {boot_gb:,} GB", boot_gb * prices.BOOT_DISK.usd / prices.HOURS_PER_MONTH,
                          prices.BOOT_DISK.source))
    lines.append(CostLine("GKE cluster fee", prices.GKE_CLUSTER_HOUR.usd, prices.GKE_CLUSTER_HOUR.source))
    vms = cpu_nodes + accelerator_nodes
    nat = min(vms * prices.NAT_GATEWAY_VM_HOUR.usd, prices.NAT_GATEWAY_MAX_HOUR)
    lines.append(CostLine(f"Cloud NAT gateway ({vms} VMs, before data processing)", nat,
                          prices.NAT_GATEWAY_VM_HOUR.source))
    # The staging nodes run only while the copy does (the pool scales to zero); its addresses stay reserved.
    addresses = staging_addresses(cfg)
    lines.append(CostLine(f"{addresses} staging NAT addresses", addresses * prices.NAT_ADDRESS_HOUR.usd,
                          prices.NAT_ADDRESS_HOUR.source))
    return lines


def total(lines: list[CostLine]) -> tuple[float, bool]:
    """(sum of known prices, whether every line had one)."""
    known = [line.usd_per_hour for line in lines if line.usd_per_hour is not None]
    return sum(known), len(known) == len(lines)


def cost_per_million_tokens(usd_per_hour: float, output_tokens_per_second: float) -> float:
    """What a million generated tokens cost at the measured throughput while the stack runs."""
    return usd_per_hour / (output_tokens_per_second * 3600) * 1e6


def headline(lines: list[CostLine]) -> str:
    """The priced total and, as prominently, every item without a price and the key that gives it one:
    a total that silently left out the accelerators would understate the stack many times over."""
    amount, _ = total(lines)
    unpriced = [f"{line.item} unpriced: set {line.basis}" for line in lines if line.usd_per_hour is None]
    return f"${amount:,.2f}/h" + "".join(f" + {item}" for item in unpriced)


def price_basis(cfg: StackConfig) -> str:
    """Whose list prices the estimate uses: the table's region, said plainly when the stack is elsewhere."""
    if cfg.gcp.region == prices.TABLE_REGION:
        return f"list prices of {prices.TABLE_DATE}"
    return (f"{prices.TABLE_REGION} list prices of {prices.TABLE_DATE}, not {cfg.gcp.region}'s: set "
            f"kimi-k3-1:cost.* to yours")


def summary_lines(cfg: StackConfig) -> list[str]:
    lines = hourly_costs(cfg)
    out = [f"cost estimate ({price_basis(cfg)}): {headline(lines)}"]
    for line in lines:
        price = "price unknown, set " + line.basis if line.usd_per_hour is None else f"${line.usd_per_hour:,.2f}/h"
        out.append(f"  {line.item}: {price}")
    unpriced = prices.NOT_PRICED + (prices.ENGINE_IMAGE_NOT_PRICED if loading.builds_engine_image(cfg) else ())
    out.append(f"  not in the estimate (usage-billed): {'; '.join(unpriced)}")
    return out


def per_slice(cfg: StackConfig) -> tuple[Optional[float], float, bool]:
    """(accelerators of one slice $/h or None if unpriced, shared $/h of everything else, shared complete):
    the stack costs slices x the first + the second."""
    lines = hourly_costs(cfg)
    accelerators, shared = lines[0], lines[1:]
    slices = capacity.serving_slices(cfg)
    amount, complete = total(shared)
    return (None if accelerators.usd_per_hour is None else accelerators.usd_per_hour / slices), amount, complete


def slice_increment(cfg: StackConfig) -> tuple[float, bool]:
    """($/h one more slice adds besides its accelerators, whether every item of it is priced): the stack priced
    with slices + 1 less the stack as configured, so what grows with slices (boot disks, NAT per VM, the volume's
    throughput for more readers) is counted and what does not (CPU pools, cluster fee, bucket) is not."""
    section = "gpu" if cfg.track == "gpu" else "tpu"
    current = getattr(cfg, section)
    bigger = cfg.model_copy(update={section: current.model_copy(update={"slices": current.slices + 1})})
    now, grown = total(hourly_costs(cfg)[1:]), total(hourly_costs(bigger)[1:])
    return grown[0] - now[0], now[1] and grown[1]


BILLED_TYPES = ("gcp:container/cluster:Cluster", "gcp:container/nodePool:NodePool")
"""What bills by the hour while `pulumi up` runs: the cluster fee and the node pools (disks and addresses are small
beside them and are priced in the hourly estimate)."""


def node_pool_rate(cfg: StackConfig, resource: dict[str, Any]) -> Optional[float]:
    """$/h of one node pool of resources.json, None when its machine has no price (A4X Max has no list price)."""
    inputs = resource.get("inputs", {})
    nodes = inputs.get("nodeCount") or inputs.get("initialNodeCount") or 0
    machine = (inputs.get("nodeConfig") or {}).get("machineType", "")
    if cfg.track == "gpu" and machine == cfg.gpu.spec.machine_type:
        price = cfg.cost.price("gpuNodeHourUsd") or prices.GPU_NODE_HOUR.usd
    elif machine in MACHINES and MACHINES[machine].extended and cfg.track == "tpu":
        chip = cfg.cost.price("tpuChipHourUsd") or prices.TPU_CHIP_HOUR.usd
        price = chip and chip * dict(MACHINES[machine].extended).get("google.com/tpu", 0)
    else:
        price = cfg.cost.price("cpuNodeHourUsd") or prices.cpu_node_hour(machine).usd
    return None if price is None else price * nodes


def pool_nodes(resource: dict[str, Any]) -> tuple[int, str]:
    """(nodes, machine type) of one node pool of resources.json."""
    inputs = resource.get("inputs", {})
    return inputs.get("nodeCount") or inputs.get("initialNodeCount") or 0, \
        (inputs.get("nodeConfig") or {}).get("machineType", "")


def held_rate(cfg: StackConfig, nodes: dict[str, int]) -> tuple[float, dict[str, int]]:
    """($/h, unpriced machine type -> nodes) of the nodes a cluster already holds (machine type -> nodes), priced as
    node_pool_rate prices a pool of them."""
    rate, unpriced = 0.0, {}
    for machine, count in nodes.items():
        billed = node_pool_rate(cfg, {"inputs": {"nodeCount": count, "nodeConfig": {"machineType": machine}}})
        if billed is None:
            unpriced[machine] = count
        else:
            rate += billed
    return rate, unpriced


def unpriced_nodes(resources: list[dict[str, Any]], names: list[str]) -> str:
    """`32 a4x-maxgpu-4g-metal nodes (gpu-0, gpu-2)`: the unpriced pools among `names`, as nodes per machine."""
    by_name = {r["name"]: r for r in resources}
    counts: dict[str, int] = {}
    for name in names:
        nodes, machine = pool_nodes(by_name[name])
        counts[machine] = counts.get(machine, 0) + nodes
    return " + ".join(f"{n} {m} nodes" for m, n in counts.items()) + f" ({', '.join(names)})"


def spend_until(cfg: StackConfig, resources: list[dict[str, Any]], at: float, finish: dict[str, float],
                skip: str = "") -> tuple[float, float, list[str]]:
    """(dollars spent by `at` seconds into the first up, $/h billing then, unpriced pools) over the cluster and
    the node pools that finished before `at`, each billed from its finish (components/plan/timeline.py durations)."""
    spent, rate, unpriced = 0.0, 0.0, []
    for r in resources:
        if r["name"] == skip or r["type"] not in BILLED_TYPES or finish[r["name"]] > at:
            continue
        billed = prices.GKE_CLUSTER_HOUR.usd if r["type"] == BILLED_TYPES[0] else node_pool_rate(cfg, r)
        if billed is None:
            unpriced.append(r["name"])
            continue
        spent += billed * (at - finish[r["name"]]) / 3600
        rate += billed
    return spent, rate, unpriced


def first_answer_lines(cfg: StackConfig, resources: list[dict[str, Any]]) -> list[str]:
    """What the first `pulumi up` costs until the stack serves: each billed resource from the minute it exists
    (its finish on the plan's timeline) to the time to serving."""
    finish, _ = timeline.finish_times(resources, lambda r, start, done: timeline.step(cfg, r).seconds)
    serving = timeline.critical_path(cfg, resources).serving_s
    spent, _, unpriced = spend_until(cfg, resources, serving, finish)
    by_name = {r["name"]: r for r in resources}

    def node_hours(name: str) -> str:
        inputs = by_name[name].get("inputs", {})
        nodes = inputs.get("nodeCount") or inputs.get("initialNodeCount") or 0
        machine = (inputs.get("nodeConfig") or {}).get("machineType", "")
        return f"{nodes * (serving - finish[name]) / 3600:.1f} {machine} node-hours ({name})"

    left_out = "".join(f" + {node_hours(name)} unpriced" for name in unpriced)
    return [f"until the first answer (first up, {serving / 60:.1f} min): ${spent:,.2f} for the cluster and the "
            f"priced node pools{left_out}, each from the minute it exists (cost.first_answer_lines)"]

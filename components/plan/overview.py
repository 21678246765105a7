"""The plan's summary for a reader: a screen per stack, grouped, a unit on every figure, no names from the code.

`python -m tools plan` prints it by default (and writes `overview.txt`); `--detail` prints the full summary
(`summary.txt`), which keeps every term, source and function a figure comes from. Both come from the same plan
modules. To add a figure: `Overview.add(<section>, line)` where the figure is known (here for what the config
decides, tools/preview/render.py for what only the rendered plan knows). tests/tools/preview/test_overview.py holds
the line budget and the units.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..config import StackConfig
from ..facts import catalog
from . import autoscaling, capacity, cost, kvblocks, limits, loading, prefixcache, staging

WARNINGS, CREATED, CAPACITY, TIME, COST, LIMITS = (
    "warnings", "what will be created", "capacity", "time", "cost", "limits")
SECTIONS = (WARNINGS, CREATED, CAPACITY, TIME, COST, LIMITS)
"""Printed in this order; an empty section is left out."""
MAX_LINES = 40
"""A screen: the default view of one stack, title included, stays under it (the test holds it)."""


@dataclass
class Overview:
    title: str
    sections: dict[str, list[str]] = field(default_factory=lambda: {name: [] for name in SECTIONS})

    def add(self, section: str, *lines: str, at: int | None = None) -> None:
        """Lines at the end of the section, or from position `at`."""
        if section not in self.sections:
            raise KeyError(f"no overview section {section!r} (one of: {', '.join(SECTIONS)})")
        where = self.sections[section]
        where[len(where) if at is None else at:len(where) if at is None else at] = lines

    def lines(self) -> list[str]:
        out = [self.title]
        for name, lines in self.sections.items():
            if lines:
                out += [f"  {name}:", *(f"    {line}" for line in lines)]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "sections": [{"name": n, "lines": ls} for n, ls in self.sections.items() if ls]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Overview:
        overview = cls(data["title"])
        for section in data["sections"]:
            overview.add(section["name"], *section["lines"])
        return overview


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def usd(amount: float) -> str:
    return f"${amount:,.2f}"


def build(cfg: StackConfig) -> Overview:
    """What the stack's config decides; the rendered plan adds the rest, limits among it (tools/preview/render.py)."""
    overview = Overview(f"Kimi K3.1 Pro on {'A4X Max GPUs' if cfg.track == 'gpu' else 'Ironwood TPUs'}: cluster "
                        f"{cfg.cluster_name} in {cfg.gcp.region} (zone {cfg.gcp.zone})")
    overview.add(WARNINGS, *(w.removeprefix("warning: ") for w in cfg.warnings))
    overview.add(CREATED, *created_lines(cfg))
    overview.add(CAPACITY, *capacity_lines(cfg))
    overview.add(TIME, *time_lines(cfg))
    overview.add(COST, *cost_lines(cfg))
    return overview


def created_lines(cfg: StackConfig) -> list[str]:
    """The parts a platform engineer would name: pools with their machines, storage, the serving shape."""
    vol = capacity.weight_staging(cfg)
    if cfg.track == "gpu":
        g = cfg.gpu
        accelerators = (f"accelerators: {g.node_count} {g.spec.machine_type} nodes "
                        f"({g.node_count * g.spec.gpus_per_node} GPUs) in {g.slices} NVL72 "
                        f"{'rack' if g.slices == 1 else 'racks'}, one node pool per rack")
        serving = (f"serving: vLLM, {g.prefillGroups} prefill replicas of {g.prefillNodesPerGroup} nodes + "
                   f"{g.decodeGroups} decode {'replica' if g.decodeGroups == 1 else 'replicas'} of "
                   f"{g.decodeNodesPerGroup} nodes per rack, KV moved prefill to decode over RDMA")
    else:
        t = cfg.tpu
        accelerators = (f"accelerators: {t.slices} tpu7x {t.topology} slices = {t.slices * t.hosts_per_slice} "
                        f"{catalog.IRONWOOD.machine_type} hosts ({t.slices * t.chips_per_slice} chips), one node "
                        "pool per slice")
        serving = (f"serving: {'vLLM-TorchTPU' if t.engine == 'vllm-torchtpu' else t.engine}, one engine per slice "
                   f"({t.hosts_per_slice} hosts, {t.chips_per_slice} chips)")
    cpu = [f"{p.nodeCount} {p.machineType} {'node' if p.nodeCount == 1 else 'nodes'} ({name})"
           for name, p in (("system", cfg.systemPool), ("weights transfer", cfg.transferPool)) if p.nodeCount]
    pods = staging.staging_pods(cfg)
    cpu.append(f"{pods} {staging.MACHINE_TYPE} nodes (checkpoint copy, back to 0 nodes after it)")
    kept = "deleted" if cfg.storage.deleteCheckpointOnDestroy else "kept"
    return [
        accelerators,
        "CPU node pools: " + ", ".join(cpu),
        serving + ("; scaled by KEDA on the router's load" if cfg.autoscaling_on else ""),
        f"weights: bucket gs://{cfg.bucket_name} ({catalog.KIMI.checkpoint_bytes / 1e12:.2f} TB, {kept} on destroy, "
        f"shared by the project's stacks) filling a Hyperdisk ML volume of {vol.volume_gib:,} GiB at "
        f"{vol.throughput_mibps:,} MiB/s",
    ]


def capacity_lines(cfg: StackConfig) -> list[str]:
    s = capacity.slice_capacity(cfg)
    c = capacity.decode_capacity(cfg)
    where = "in the decode replicas" if cfg.track == "gpu" else f"in {s.slices * s.replicas} replicas"
    lines = [f"full-context sessions ({cfg.context_length:,} tokens each), whole stack: "
             f"{s.slices * s.sessions_hbm:,} sessions in HBM + {s.slices * s.sessions_host:,} sessions in host DRAM "
             f"{where}"]
    if cfg.track == "gpu":
        lines.append(f"prefix cache of the prefill replicas: {s.slices * s.prefix_sessions_hbm:,} sessions in HBM + "
                     f"{s.slices * s.prefix_sessions_host:,} sessions in host DRAM")
    bench = prefixcache.shape_capacity(cfg, prefixcache.router_shape(cfg))
    lines.append(f"the benchmark's multi-turn sessions kept warm per engine: {bench.hbm_sessions_per_engine} sessions "
                 f"in HBM, {bench.host_sessions_per_engine} sessions with host DRAM ({bench.sessions_per_replica:,} "
                 f"sessions per {'prefill replica' if cfg.track == 'gpu' else 'replica'}); the router assumes each "
                 f"engine prefills {capacity.peak_prefill_throughput(cfg):,} tokens a second")
    running = c.max_running if cfg.track == "gpu" else min(c.max_running, kvblocks.TPU_MAX_NUM_SEQS)
    lines.append(f"per engine: at most {running:,} requests running at once, {c.sequences_per_engine} "
                 f"{'session' if c.sequences_per_engine == 1 else 'sessions'} at full context in HBM; KV block "
                 f"{c.block_tokens:,} tokens")
    lines.append(start_margin_line(cfg))
    if cfg.autoscaling_on:
        env = autoscaling.envelope(cfg, autoscaling.roles(cfg))
        unit = "nodes" if cfg.track == "gpu" else "hosts"
        shape = ", ".join(f"{r.name} {r.min} to {r.max} replicas" if r.min != r.max
                          else f"{r.name} {r.min} {'replica' if r.min == 1 else 'replicas'}" for r in env.roles)
        lines.append(f"autoscaling: {shape}; {env.nodes_min} {unit} and {env.sessions_min:,} sessions in HBM at "
                     f"the least, {env.nodes_max} {unit} and {env.sessions_max:,} sessions at the most")
    else:
        lines.append("autoscaling: off, the serving replicas keep the configured shape")
    return lines


def start_margin_line(cfg: StackConfig) -> str:
    """How much non-weight memory each role may use before its engine refuses to start (its KV pool must hold one
    request at the served context), against what the plan assumes."""
    device = "GPU" if cfg.track == "gpu" else "TensorCore"
    roles = ((("prefill", capacity.serving_capacity(cfg)), ("decode", capacity.decode_capacity(cfg)))
             if cfg.track == "gpu" else (("engines", capacity.serving_capacity(cfg)),))
    ceilings = ", ".join(f"{c.start_ceiling_non_weight_bytes / 1e9:.1f} GB per {device} ({role})" for role, c in roles)
    assumed = sorted({f"{c.non_weight_bytes_per_device / 1e9:.1f} GB" for _, c in roles})
    return (f"start margin: the engines start while non-weight memory stays under {ceilings}; the plan assumes "
            f"{' to '.join(assumed)}")


def time_lines(cfg: StackConfig) -> list[str]:
    model = staging.staging_model(cfg)
    vol = capacity.weight_staging(cfg)
    load = loading.load_model(cfg)
    group = loading.group_start(cfg)
    lines = [
        f"checkpoint copy from the Hugging Face Hub: {minutes(model.seconds)} "
        f"({minutes(staging.proof_readback_seconds(cfg))} to re-verify when the bucket holds it already)",
        f"volume fill from the bucket: at least {minutes(vol.hydration_s)}; weight load: {minutes(load.load_s)} "
        f"per replica (target {catalog.WEIGHT_LOAD_TARGET_SECONDS // 60} min)",
        f"engine start: {loading.ENGINE_START_S[cfg.track] // 60} min (assumed); pulumi waits up to "
        f"{loading.ready_timeout_s(cfg) // 60} min for the serving replicas",
        f"a serving replica's start: {minutes(group.first_s)} the first time, {minutes(group.warm_s)} warm (a restart "
        f"or a replica added later: compile caches kept in the stack's cache bucket, "
        f"{loading.COLD_COMPILE_S[cfg.track] // 60} min of compiling assumed saved)",
    ]
    if cfg.autoscaling_on:
        add, _ = autoscaling.time_to_add_s(cfg)
        lines.append(f"one more replica serving, once autoscaling asks for it: {minutes(add)}")
    return lines


def cost_lines(cfg: StackConfig) -> list[str]:
    items = cost.hourly_costs(cfg)
    accelerators, rest = items[0], items[1:]
    amount, _ = cost.total(rest)
    head = (f"accelerators {usd(accelerators.usd_per_hour)}/h" if accelerators.usd_per_hour is not None
            else f"accelerators unpriced (set {accelerators.basis})")
    biggest = sorted((i for i in rest if i.usd_per_hour), key=lambda i: -(i.usd_per_hour or 0))[:3]
    return [
        f"while it runs: {head} + the rest {usd(amount)}/h ({cost.price_basis(cfg)})",
        "largest of the rest: " + ", ".join(f"{item_name(i.item)} {usd(i.usd_per_hour or 0)}/h" for i in biggest),
        "not in the estimate: usage-billed items (the checkpoint copy's nodes while they copy, NAT data, egress, "
        "monitoring ingestion)",
    ]


def item_name(item: str) -> str:
    """A cost line's item for the reader: `1 x c3-standard-44 (weights-transfer)` -> `weights-transfer node`."""
    if item.endswith(")") and " x " in item:
        count, rest = item.split(" x ", 1)
        pool = rest.rsplit("(", 1)[1].rstrip(")")
        return f"{pool} ({count} {'node' if count == '1' else 'nodes'})"
    return item.replace(", ", " (", 1) + ")" if ", " in item else item


def limit_lines(found: Iterable[limits.Limit], shown_from: float = 0.5, verdict: str = "") -> list[str]:
    """Caps the stack uses at least half of, then how many more are below half (the detail view lists them), and a
    verdict that closes the section."""
    found = list(found)
    near = [lim for lim in found if lim.demand >= shown_from * lim.cap]
    lines = [f"{what}: {lim.demand:,} of {lim.cap:,} {unit}" for lim in near
             for what, unit in [lim.name.split(": ", 1)]]
    rest = len(found) - len(near)
    tail = [f"{rest} more {'cap' if rest == 1 else 'caps'} used under {shown_from:.0%}"] if rest else []
    tail += [verdict] if verdict else []
    if tail:
        lines.append("; ".join(tail) + " (--detail lists each)")
    return lines

"""`tpu.*`: the Ironwood track's slices, topology and engine."""

from __future__ import annotations

import re
from typing import ClassVar, Literal, Optional

from pydantic import Field, model_validator

from ..facts import catalog, imageref
from .base import Section, _check_reservation, _fail


class TpuConfig(Section):
    prefix: ClassVar[str] = "tpu"
    track: ClassVar[Optional[str]] = "tpu"
    topology: str = Field(
        "2x2x4", description="Ironwood slice topology per node pool (seed: 2x2x4 = 16 chips on 4 hosts).")
    slices: int = Field(2, ge=1, le=8, description="Slices = node pools = engine replicas (seed: 2).")
    reservation: Optional[str] = Field(None, description="Specific reservation name for the slices.")
    reservationHosts: Optional[int] = Field(
        None, ge=1, description="Optional: tpu7x VMs your reservation holds; when set, tpu.slices x hosts per "
                                "slice must fit in it.")
    reservationProject: Optional[str] = Field(
        None, description="Project owning a shared reservation (default: gcp.project).")
    spot: bool = Field(False, description="Use Spot capacity instead of a reservation.")
    tensorParallel: int = Field(
        32, ge=1, description="Tensor-parallel ranks per engine: every TensorCore of the slice with "
                              "tpu.launch=tp-across-hosts (seed: 32 on 2x2x4); a divisor of a host's 8 with "
                              "dp-across-hosts.")
    launch: Literal["tp-across-hosts", "dp-across-hosts"] = Field(
        "tp-across-hosts", description="vLLM-TorchTPU's multi-host layout. tp-across-hosts: one engine per slice, TP "
                                       "over every host with --nnodes and the mp backend (the wheel's "
                                       "prepare_mp_multihost_env; no released run uses it). dp-across-hosts: the "
                                       "released GKE launcher's layout, data-parallel engines across the hosts with "
                                       "TP inside each (--data-parallel-size-local per host; "
                                       "prepare_mp_multihost_dp_env), "
                                       "experts over every rank of the slice.")
    expertParallel: int = Field(
        8, ge=1, description="SGLang-TorchTPU --ep-size (seed: 8); must divide tpu.tensorParallel. vLLM-TorchTPU has "
                             "no separate size: --enable-expert-parallel spreads the experts over all TP ranks.")
    memFractionPercent: int = Field(
        85, ge=50, le=95, description="Share of each TensorCore's HBM the engine may use, in percent (vLLM "
                                      "--gpu-memory-utilization; SGLang --mem-fraction-static).")
    hicacheRatio: int = Field(
        2, ge=1, le=8, description="Host-DRAM KV tier as a multiple of the HBM KV pool (seed: HiCache ratio 2); "
                                   "vLLM-TorchTPU gets it in bytes as TPURaidenOffloadingConnector cpu_bytes_to_use.")
    engine: Literal["vllm-torchtpu", "sglang-torchtpu"] = Field(
        "vllm-torchtpu", description="vllm-torchtpu: the pinned vLLM-TorchTPU release (registers Kimi K3 for TPU); "
                                     "sglang-torchtpu: an UNRELEASED SGLang-on-TorchTPU build from tpu.sglangImage.")
    sglangImage: Optional[str] = Field(
        None, description="Image of an SGLang-TorchTPU build you supply (required for tpu.engine=sglang-torchtpu; "
                          "no public release exists).")

    def check_active(self) -> None:
        """Rules that apply only when the TPU track is deployed (the CLI hands every stack all defaults)."""
        if self.topology not in catalog.TPU_MULTIHOST_TOPOLOGIES:
            shape = re.fullmatch(r"([0-9]+)x([0-9]+)x([0-9]+)", self.topology)
            if shape and catalog.topology_chips(self.topology) <= catalog.IRONWOOD.chips_per_host:
                why = "a single-host slice: it takes no workload policy, and one host cannot hold the model"
            elif shape:
                why = "this program has no source-backed Ironwood node-pool and engine layout for this shape yet"
            else:
                why = "an Ironwood topology is <x>x<y>x<z> chips"
            _fail(self.key("topology"), self.topology,
                  f"{why}; it deploys the multi-host topologies {', '.join(catalog.TPU_MULTIHOST_TOPOLOGIES)}")
        devices = self.chips_per_slice * catalog.IRONWOOD.tensorcores_per_chip
        per_host = catalog.IRONWOOD.chips_per_host * catalog.IRONWOOD.tensorcores_per_chip
        if self.launch == "dp-across-hosts" and self.engine != "vllm-torchtpu":
            _fail(self.key("launch"), self.launch, "tpu.launch=dp-across-hosts is vLLM-TorchTPU's layout; "
                                                   "tpu.engine=sglang-torchtpu takes tp-across-hosts")
        if self.launch == "dp-across-hosts" and per_host % self.tensorParallel:
            field = self.blame("tensorParallel", "launch")
            _fail(self.key(field), getattr(self, field),
                  f"tpu.launch=dp-across-hosts runs tensor parallelism inside each host: tpu.tensorParallel "
                  f"({self.tensorParallel}) must divide a host's {catalog.IRONWOOD.chips_per_host} chips x "
                  f"{catalog.IRONWOOD.tensorcores_per_chip} TensorCores = {per_host} (set 8, as the launcher runs "
                  "a host)")
        if self.launch == "tp-across-hosts" and self.tensorParallel != devices:
            field = self.blame("tensorParallel", "topology", "launch")
            _fail(self.key(field), getattr(self, field),
                  f"a {self.topology} slice has {self.chips_per_slice} chips x "
                  f"{catalog.IRONWOOD.tensorcores_per_chip} TensorCores = {devices} devices; tpu.tensorParallel "
                  f"({self.tensorParallel}) must be {devices} with tpu.launch=tp-across-hosts (or a divisor of "
                  f"{per_host} with dp-across-hosts)")
        if self.tensorParallel % self.expertParallel:
            field = self.blame("expertParallel", "tensorParallel")
            _fail(self.key(field), getattr(self, field),
                  f"tpu.expertParallel ({self.expertParallel}) must divide tpu.tensorParallel ({self.tensorParallel})")
        if self.engine == "sglang-torchtpu" and not self.sglangImage:
            _fail(self.key("sglangImage"), None, "tpu.engine=sglang-torchtpu needs the image of your SGLang-TorchTPU "
                                                 "build (no public release exists)")
        if self.engine == "sglang-torchtpu" and not re.search(r"@sha256:[0-9a-f]{64}$", self.sglangImage or ""):
            # Every image runs by digest (the policy pack refuses any other): a tag could name other bytes tomorrow.
            _fail(self.key("sglangImage"), self.sglangImage, "pin your build by its sha256 digest: "
                                                             "<registry>/<path>[:tag]@sha256:<64 hex> (`crane digest "
                                                             "<image>` prints it)")
        if self.spot and self.reservation:
            _fail(self.key("spot"), self.spot, "choose either tpu.reservation or tpu.spot, not both")
        if not self.spot and not self.reservation:
            _fail(self.key("reservation"), None, "Ironwood capacity comes from a reservation: set "
                                                  "tpu.reservation, or tpu.spot=true for Spot capacity")
        if self.spot and self.reservationProject is not None:
            _fail(self.key("reservationProject"), self.reservationProject,
                  "tpu.spot=true uses no reservation; unset tpu.reservationProject")
        if self.spot and self.reservationHosts is not None:
            _fail(self.key("reservationHosts"), self.reservationHosts,
                  "tpu.spot=true uses no reservation; unset tpu.reservationHosts")
        hosts = self.slices * self.hosts_per_slice
        if self.reservationHosts is not None and hosts > self.reservationHosts:
            field = self.blame("slices", "reservationHosts", "topology")
            _fail(self.key(field), getattr(self, field),
                  f"{self.slices} slices x {self.hosts_per_slice} hosts = {hosts} tpu7x VMs, but the reservation "
                  f"holds {self.reservationHosts} (tpu.reservationHosts); use at most "
                  f"{self.reservationHosts // self.hosts_per_slice} slices")

    @property
    def chips_per_slice(self) -> int:
        return catalog.topology_chips(self.topology)

    @property
    def hosts_per_slice(self) -> int:
        return self.chips_per_slice // catalog.IRONWOOD.chips_per_host

    @model_validator(mode="after")
    def _check(self) -> TpuConfig:
        if not re.fullmatch(r"[0-9]+x[0-9]+x[0-9]+", self.topology):
            _fail(self.key("topology"), self.topology, "an Ironwood topology is <x>x<y>x<z> chips, e.g. '2x2x4'")
        if self.sglangImage is not None and (problem := imageref.reference_problem(self.sglangImage)):
            _fail(self.key("sglangImage"), self.sglangImage, problem)
        _check_reservation(self)
        return self

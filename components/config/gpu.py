"""`gpu.*`: the A4X Max track's machines, slices, racks and the engines' parallel layout as the user sets it
(components/plan/parallel.py derives the rest once)."""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

from pydantic import Field, model_validator

from ..facts import catalog
from .base import Section, _check_reservation, _fail


class GpuConfig(Section):
    prefix: ClassVar[str] = "gpu"
    track: ClassVar[Optional[str]] = "gpu"
    machine: Literal["a4x-max", "a4x"] = Field(
        "a4x-max", description="a4x-max (GB300, default) or a4x (GB200 fallback).")
    reservation: Optional[str] = Field(
        None, description="Specific reservation name (A4X machines are reservation-only).")
    reservationProject: Optional[str] = Field(
        None, description="Project owning a shared reservation (default: gcp.project).")
    reservationBlock: Optional[str] = Field(None, description="Optional reservation block name.")
    reservationSubBlocks: list[str] = Field(
        [], description="Optional reservation sub-blocks (NVL72 racks), one per slice in order; needs "
                        "reservationBlock. Unset: Compute Engine picks a rack of the reservation for each slice.")
    slices: int = Field(
        1, ge=1, le=16, description="Serving units: each slice is a complete prefill/decode set on its own NVL72 "
                                    "rack (one node pool per slice), all behind one router.")
    prefillGroups: int = Field(3, ge=1, le=16, description="Prefill LeaderWorkerSet groups (seed: 3P).")
    decodeGroups: int = Field(1, ge=1, le=16, description="Decode LeaderWorkerSet groups (seed: 1D).")
    prefillNodesPerGroup: int = Field(4, ge=1, le=18, description="Nodes per prefill group (4 GPUs each).")
    decodeNodesPerGroup: int = Field(4, ge=1, le=18, description="Nodes per decode group (4 GPUs each).")
    tensorParallel: int = Field(
        1, ge=1, description="vLLM TP per engine; each pod runs GPUs/TP data-parallel engines (llm-d DP+EP form).")
    gpuMemoryPercent: int = Field(90, ge=50, le=98, description="vLLM --gpu-memory-utilization, in percent.")
    prefillMoeBackend: Literal["deep_gemm_mega_moe", "auto"] = Field(
        "deep_gemm_mega_moe", description="vLLM --moe-backend of the prefill engines: deep_gemm_mega_moe (DeepGEMM "
                                          "MegaMoE, as llm-d's GB200 DeepSeek-V4 pods run both roles) or auto "
                                          "(vLLM picks its kernel); compare the two with a benchmark run.")
    decodeMoeBackend: Literal["deep_gemm_mega_moe", "auto"] = Field(
        "deep_gemm_mega_moe", description="vLLM --moe-backend of the decode engines (see prefillMoeBackend).")
    hostOffloadPercent: int = Field(
        50, ge=0, le=80, description="Share of each node's Grace DRAM given to the KV offload tier, in percent.")

    @property
    def spec(self) -> catalog.GpuMachine:
        return catalog.GPU_MACHINES[self.machine]

    @property
    def slice_nodes(self) -> int:
        """Nodes of one slice (one rack's node pool): every prefill and decode group of it."""
        return self.prefillGroups * self.prefillNodesPerGroup + self.decodeGroups * self.decodeNodesPerGroup

    @property
    def node_count(self) -> int:
        """GPU nodes of the whole stack, every slice."""
        return self.slices * self.slice_nodes

    @model_validator(mode="after")
    def _check(self) -> GpuConfig:
        _check_reservation(self)
        return self

    def check_active(self) -> None:
        """Rules between keys, for a GPU stack only (a TPU stack's gpu.* keys are refused as having no effect)."""
        if self.slice_nodes > catalog.NVL72_MAX_NODES:
            field = self.blame("prefillNodesPerGroup", "prefillGroups", "decodeNodesPerGroup", "decodeGroups")
            _fail(self.key(field), getattr(self, field),
                  f"a slice of {self.prefillGroups}x{self.prefillNodesPerGroup} prefill + {self.decodeGroups}x"
                  f"{self.decodeNodesPerGroup} decode = {self.slice_nodes} pods x {self.spec.gpus_per_node} GPUs = "
                  f"{self.slice_nodes * self.spec.gpus_per_node} GPUs; one NVL72 domain holds "
                  f"{catalog.NVL72_MAX_NODES} nodes, {catalog.NVL72_MAX_NODES * self.spec.gpus_per_node} GPUs "
                  "(add gpu.slices instead)")
        for role in ("prefill", "decode"):
            nodes = getattr(self, f"{role}NodesPerGroup")
            ep = nodes * self.spec.gpus_per_node  # vLLM: EP = TP x DP = every GPU of the group
            if catalog.KIMI.routed_experts % ep:
                fits = [n for n in range(1, catalog.NVL72_MAX_NODES + 1)
                        if catalog.KIMI.routed_experts % (n * self.spec.gpus_per_node) == 0]
                _fail(self.key(f"{role}NodesPerGroup"), nodes,
                      f"{ep} expert-parallel ranks do not divide the {catalog.KIMI.routed_experts} routed experts "
                      f"(EP = TP x DP: https://github.com/vllm-project/vllm/blob/0170256/docs/serving/"
                      f"expert_parallel_deployment.md); use one of {', '.join(map(str, fits))} nodes")
        if self.spec.gpus_per_node % self.tensorParallel:
            _fail(self.key("tensorParallel"), self.tensorParallel,
                  f"must divide the {self.spec.gpus_per_node} GPUs of a node (one pod runs GPUs/TP engines)")
        self._check_racks()

    def _check_racks(self) -> None:
        """Each slice needs a rack of its own: the DisaggregatedSet's placement (components/serving/modelservers.py
        PLACEMENT) admits one slice per NVL72 sub-block, so two slices' pools in one sub-block wedge the second."""
        key, blocks = self.key("reservationSubBlocks"), self.reservationSubBlocks
        if blocks and not self.reservationBlock:
            _fail(key, blocks, "naming sub-blocks needs gpu.reservationBlock too (the block that holds them)")
        if len(set(blocks)) != len(blocks):
            _fail(key, blocks, "each slice needs its own NVL72 rack: name every sub-block once")
        if blocks and len(blocks) < self.slices:
            field = self.blame("slices", "reservationSubBlocks")
            _fail(self.key(field), getattr(self, field),
                  f"gpu.slices = {self.slices} needs one sub-block per slice; gpu.reservationSubBlocks names "
                  f"{len(blocks)} (name {self.slices}, or lower gpu.slices to {len(blocks)})")
        if not blocks and self.slices > 1 and 2 * self.slice_nodes <= catalog.NVL72_MAX_NODES:
            _fail(self.key("slices"), self.slices,
                  f"slices of {self.slice_nodes} nodes: Compute Engine may place two slices' pools in one "
                  f"{catalog.NVL72_MAX_NODES}-node sub-block, where placement admits only one slice; name one "
                  f"sub-block per slice in gpu.reservationSubBlocks")

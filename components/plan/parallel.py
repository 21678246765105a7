"""The engines' parallel layout, derived once from the stack's settings: for each kind of replica (a GPU prefill or
decode group, a TPU slice) its nodes, the devices each node drives, the tensor-parallel size, the data-parallel
engines per node and per replica, and the expert-parallel size. Readers take a `RoleLayout` from `layout(cfg)`
instead of re-deriving it from cfg.gpu or cfg.tpu.

The relations, as the engines define them:
- GPU (vLLM 0.33.0 in llm-d's DP+EP form): one pod per node runs GPUs/TP data-parallel engines
  (`--data-parallel-size-local`), the group's engines are nodes x that, and expert parallelism spans every GPU of the
  group: EP = TP x DP (https://github.com/vllm-project/vllm/blob/0170256/docs/serving/expert_parallel_deployment.md).
- TPU (vLLM-TorchTPU 0.29.0), by tpu.launch: tp-across-hosts, one engine per slice over all its hosts, TP = the
  slice's devices; dp-across-hosts, the released GKE launcher's layout, 8 / TP data-parallel engines on each host and
  TP inside it. Either way `--enable-expert-parallel` spreads the experts over every rank of the slice
  (ep_size = dp x pcp x tp).
The settings' own checks (components/config/gpu.py, tpu.py) refuse the layouts these relations cannot hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config import StackConfig
from ..facts import catalog

RoleName = Literal["prefill", "decode", "slice"]


@dataclass(frozen=True)
class RoleLayout:
    """One kind of replica: a GPU prefill or decode group, or a TPU slice."""

    role: RoleName
    groups: int
    """Replicas of this kind in one slice (GPU: gpu.prefillGroups or gpu.decodeGroups; TPU: 1)."""
    nodes: int
    """Nodes (pods) of one replica."""
    devices_per_node: int
    """Devices one pod drives: a node's GPUs, or a TPU host's share of the slice's TensorCores."""
    tensor_parallel: int

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def engines_per_node(self) -> int:
        """Data-parallel engines one pod runs (GPU: GPUs / TP; TPU dp-across-hosts: 8 / TP); 0 where one engine spans
        several nodes (TPU tp-across-hosts)."""
        return self.devices_per_node // self.tensor_parallel

    @property
    def engines(self) -> int:
        """Data-parallel engines of one replica (`--data-parallel-size`)."""
        return self.devices // self.tensor_parallel

    @property
    def expert_parallel(self) -> int:
        """Expert-parallel ranks: every device of the replica (EP = TP x DP), as vLLM and vLLM-TorchTPU place the
        experts; an SGLang-TorchTPU build takes its own `--ep-size` (tpu.expertParallel), which the capacity
        figures do not use."""
        return self.devices


@dataclass(frozen=True)
class ParallelLayout:
    track: str
    slices: int
    roles: tuple[RoleLayout, ...]
    """GPU: prefill, then decode; TPU: the slice."""

    def role(self, name: str) -> RoleLayout:
        """`prefill` or `decode` on GPU; on TPU every role is the slice."""
        if self.track != "gpu":
            return self.roles[0]
        return next(r for r in self.roles if r.role == name)

    @property
    def tensor_parallel(self) -> int:
        return self.roles[0].tensor_parallel

    @property
    def engines_per_node(self) -> int:
        """GPU: the data-parallel engines of one pod (the same in both roles)."""
        return self.roles[0].engines_per_node


def layout(cfg: StackConfig) -> ParallelLayout:
    if cfg.track == "gpu":
        g = cfg.gpu
        return ParallelLayout("gpu", g.slices, tuple(
            RoleLayout(role, groups, nodes, g.spec.gpus_per_node, g.tensorParallel)
            for role, groups, nodes in (("prefill", g.prefillGroups, g.prefillNodesPerGroup),
                                        ("decode", g.decodeGroups, g.decodeNodesPerGroup))))
    t = cfg.tpu
    per_host = catalog.IRONWOOD.chips_per_host * catalog.IRONWOOD.tensorcores_per_chip
    return ParallelLayout(cfg.track, t.slices, (
        RoleLayout("slice", 1, t.hosts_per_slice, per_host, t.tensorParallel),))

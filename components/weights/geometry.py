"""The staged revision's `config.json` against the geometry the plan was computed with, checked at `pulumi up`
before any accelerator exists: a checkpoint the pinned engine does not register, or whose layers differ from the
`model.*` keys (block size, KV capacity and router sizing all derive from them), stops with one line naming the
key to set.

A Pulumi dynamic resource like components/weights/revision.py: its provider runs from a serialized copy, so the class is
self-contained and marked as defined in `__main__`. Only `create` touches the network (one small file from the
Hub); under the offline plan's mocks it never runs.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi.dynamic

from ..cloud.base import Args, StrInput
from ..config import StackConfig
from .revision import _by_value


class _CheckGeometry(pulumi.dynamic.ResourceProvider):
    """create: read config.json at the revision and compare; diff: a new revision or new expectations re-check."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        config = self.fetch(props["repoId"], props["revision"], props.get("token") or None)
        problem = self.compare(config, props["expected"], props["registered"], props["engine"])
        if problem:
            raise Exception(problem)
        return pulumi.dynamic.CreateResult(id_=f"{props['repoId']}@{props['revision']}",
                                           outs={k: v for k, v in props.items() if k != "token"})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        keys = ("repoId", "revision", "expected", "registered", "engine")
        moved = [k for k in keys if olds.get(k) != news.get(k)]
        return pulumi.dynamic.DiffResult(changes=bool(moved), replaces=moved, delete_before_replace=True)

    @staticmethod
    def fetch(repo_id: str, revision: str, token: Optional[str]) -> dict[str, Any]:
        import json

        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError

        try:
            path = hf_hub_download(repo_id, "config.json", revision=revision, token=token)
        except HfHubHTTPError as err:
            raise Exception(f"could not read config.json of {repo_id}@{revision}: {str(err).splitlines()[0]}") from None
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)

    @classmethod
    def observed(cls, config: dict[str, Any]) -> dict[str, Any]:
        """The `model.*` keys as the checkpoint states them (Kimi K3 family layout: `text_config` inside a
        multimodal wrapper; `linear_attn_config` lists the KDA and full-attention layers)."""
        text = config.get("text_config") or config
        linear = text.get("linear_attn_config") or {}
        found: dict[str, Any] = {"architecture": (config.get("architectures") or [None])[0]}
        if "kv_lora_rank" in text and "qk_rope_head_dim" in text:
            found["mlaLatentDim"] = text["kv_lora_rank"] + text["qk_rope_head_dim"]
        for key, field in (("kdaHeads", "num_heads"), ("kdaHeadDim", "head_dim"),
                           ("kdaConvKernel", "short_conv_kernel_size")):
            if field in linear:
                found[key] = linear[field]
        for key, field in (("kdaLayers", "kda_layers"), ("mlaLayers", "full_attn_layers")):
            if isinstance(linear.get(field), list):
                found[key] = len(linear[field])
        # Absent means 0: vLLM's KimiLinearConfig default (vllm/transformers_utils/configs/kimi_linear.py).
        found["mtpLayers"] = text.get("num_nextn_predict_layers") or 0
        return found

    @classmethod
    def compare(cls, config: dict[str, Any], expected: dict[str, Any], registered: list[str],
                engine: str) -> Optional[str]:
        """One line for the first difference, or None."""
        found = cls.observed(config)
        architecture = found["architecture"]
        if architecture not in registered:
            return (f"the checkpoint's config.json names architecture {architecture!r}, which {engine} does not "
                    f"register ({', '.join(sorted(registered))}): serve a checkpoint it registers or pin another "
                    "engine")
        for key, value in expected.items():
            if key not in found:
                return (f"config.json has no {key} (kimi-k3-1:model.{key}); the plan was computed with {value}: "
                        "check that model.repoId is a Kimi K3 family checkpoint")
            if key == "mtpLayers" and found[key] < 1:
                return (f"config.json text_config.num_nextn_predict_layers is {found[key]}: the checkpoint has no MTP "
                        "layers for model.speculative=mtp (vLLM needs 1 or more): use off or dflash")
            if found[key] != value:
                return (f"config.json gives {found[key]} where the plan was computed with {value}: set "
                        f"kimi-k3-1:model.{key} to {found[key]} (pulumi config set model.{key} {found[key]})")
        return None


_by_value(_CheckGeometry)


def expected_geometry(cfg: StackConfig) -> dict[str, Any]:
    m = cfg.model
    return {"architecture": m.architecture, "mlaLatentDim": m.mlaLatentDim, "kdaHeads": m.kdaHeads,
            "kdaHeadDim": m.kdaHeadDim, "kdaConvKernel": m.kdaConvKernel, "kdaLayers": m.kdaLayers,
            "mlaLayers": m.mlaLayers,
            # MTP layers matter only to the MTP drafter (components/plan/engines.py check_mtp).
            **({"mtpLayers": m.mtpLayers} if m.speculative == "mtp" else {})}


class CheckpointGeometryArgs(Args):
    repo_id: str
    revision: StrInput
    token: pulumi.Output
    config: StackConfig


class CheckpointGeometry(pulumi.dynamic.Resource, module="kimi", name="CheckpointGeometry"):
    """Exists once the staged revision's config.json matched; accelerator pools wait for it."""

    def __init__(self, name: str, args: CheckpointGeometryArgs, opts: Optional[pulumi.ResourceOptions] = None):
        from ..plan.engines import registered_architectures

        engine, registered = registered_architectures(args.config)
        super().__init__(_CheckGeometry(), name, {
            "repoId": args.repo_id, "revision": args.revision, "token": args.token,
            "expected": expected_geometry(args.config), "registered": sorted(registered), "engine": engine,
        }, pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["token"])))

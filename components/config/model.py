"""`model.*`: the repository and revision served, context length, KV-cache dtype, speculative decoding, and the
geometry the plan assumes until the staged config.json is checked."""

from __future__ import annotations

import re
from typing import ClassVar, Literal, Optional

from pydantic import Field, model_validator

from ..facts import catalog, contract
from .base import Section, _fail


class ModelConfig(Section):
    prefix: ClassVar[str] = "model"
    repoId: str = Field(catalog.KIMI.hf_id,
                        description="Hugging Face repository the staging Job copies into the bucket.")
    revision: Optional[str] = Field(
        None, description="Commit of repoId to stage and serve (40 hex characters; default: `main` as the first "
                          "`pulumi up` finds it, then kept until you set one).")
    contextLength: Optional[int] = Field(
        None, description="Served context length (default: 1048576 on gpu, 491520 = 480K on tpu as the seed says).")
    path: str = Field(contract.MODELS_MOUNT_PATH, description="Checkpoint folder inside the pods (the volume's mount).")
    kvCacheDtype: Literal["fp8", "bf16"] = Field("fp8", description="KV cache element type (seed: FP8).")
    speculative: Literal["off", "mtp", "nextn", "dflash"] = Field(
        "off", description="Speculative decoding: the model's MTP head, a NEXTN or DFlash drafter, or off.")
    speculativeTokens: int = Field(3, ge=1, le=8, description="Draft tokens per step.")
    draftModelPath: Optional[str] = Field(None, description="Drafter checkpoint under /models (nextn, dflash).")
    architecture: str = Field(
        "KimiK3ForConditionalGeneration",
        description="config.json `architectures[0]` of the checkpoint; the pinned engine must register it "
                    "(Kimi K3 family: https://huggingface.co/moonshotai/Kimi-K3/blob/main/config.json).")
    mlaLatentDim: int = Field(
        576, ge=1, description="MLA cache elements per token per layer: text_config kv_lora_rank + qk_rope_head_dim "
                               "(Kimi K3: 512 + 64).")
    kdaHeads: int = Field(96, ge=1, description="KDA heads: text_config.linear_attn_config.num_heads (Kimi K3: 96).")
    kdaHeadDim: int = Field(
        128, ge=1, description="KDA head dimension: text_config.linear_attn_config.head_dim (Kimi K3: 128).")
    kdaConvKernel: int = Field(
        4, ge=2,
        description="KDA short convolution: text_config.linear_attn_config.short_conv_kernel_size (Kimi K3: 4).")
    kdaLayers: int = Field(
        69, ge=1, description="KDA layers: len(text_config.linear_attn_config.kda_layers) (Kimi K3: 69).")
    mlaLayers: int = Field(
        24, ge=1, description="MLA layers: len(text_config.linear_attn_config.full_attn_layers) (Kimi K3: 24).")
    mtpLayers: int = Field(
        0, ge=0, le=8,
        description="MTP layers the checkpoint ships: text_config.num_nextn_predict_layers (vLLM's KimiLinearConfig "
                    "takes 0 when config.json omits it); model.speculative=mtp needs at least 1, and `pulumi up` "
                    "checks the value against the revision's config.json.")
    kdaStateDtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="KDA recurrent state element type (vLLM --mamba-ssm-cache-dtype; float32 is its "
                               "default and the only one vLLM-TorchTPU 0.29.0 uses).")

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if not re.fullmatch(r"[A-Za-z0-9][-_.A-Za-z0-9]{0,95}/[A-Za-z0-9][-_.A-Za-z0-9]{0,95}", self.repoId):
            _fail(self.key("repoId"), self.repoId, "a Hugging Face repository id such as 'moonshotai/Kimi-K3.1-Pro'")
        if self.revision is not None and not re.fullmatch(r"[0-9a-f]{40}", self.revision):
            _fail(self.key("revision"), self.revision,
                  "a full 40-character lowercase commit hash (branch and tag names move, so they are not accepted; "
                  "leave it unset to stage the commit `main` points to now)")
        limit = catalog.KIMI.max_positions
        if self.contextLength is not None and not 1024 <= self.contextLength <= limit:
            _fail(self.key("contextLength"), self.contextLength,
                  f"must be 1024-{limit} (the model's max_position_embeddings)")
        if self.path.rstrip("/") != contract.MODELS_MOUNT_PATH:
            _fail(self.key("path"), self.path, f"the checkpoint is the weights volume's root, mounted at "
                                               f"{contract.MODELS_MOUNT_PATH} in every pod; any other folder points "
                                               f"the engine away from the weights")
        if self.speculative in ("nextn", "dflash"):
            if not self.draftModelPath:
                _fail(self.key("draftModelPath"), None, f"model.speculative={self.speculative} needs the drafter's "
                                                        f"folder under {self.path}/")
            parts = self.draftModelPath.split("/")
            if not self.draftModelPath.startswith(self.path.rstrip("/") + "/") or ".." in parts or "." in parts \
                    or "" in parts[1:-1] or self.draftModelPath.rstrip("/") == self.path.rstrip("/"):
                _fail(self.key("draftModelPath"), self.draftModelPath,
                      f"must be a folder inside the read-only weights volume, without '.' or '..' segments, "
                      f"e.g. {self.path}/drafter")
        return self

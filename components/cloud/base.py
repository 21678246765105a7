"""Shared ComponentResource plumbing."""

from __future__ import annotations

from typing import Any, Optional, Union

import pulumi
from pydantic import BaseModel, ConfigDict

TYPE_PACKAGE = "kimi"
"""Package part of this project's component type tokens (`kimi:<module>:<Type>`)."""


class Component(pulumi.ComponentResource):
    """A ComponentResource whose children are parented to it; `finish()` registers its outputs."""

    def __init__(self, module: str, type_name: str, name: str, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(f"{TYPE_PACKAGE}:{module}:{type_name}", name, None, opts)
        self.name = name

    def child(self, **kwargs: Any) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, **kwargs)

    def finish(self, **outputs: Any) -> None:
        self.register_outputs(outputs)


StrInput = Union[str, pulumi.Output]
"""A string known now or an Output of one (pulumi.Input[str] without the Awaitable arm pydantic cannot check)."""


class Args(BaseModel):
    """Base of every component's args model: immutable, and accepting Outputs where a field says so."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

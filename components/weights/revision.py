"""The commit of the model repository a stack serves when `model.revision` is unset: `main` as the first
`pulumi up` finds it, then kept in the stack's state, so a later push to `main` changes nothing until the
user sets `model.revision` (the resource is then dropped and the configured commit used).

A Pulumi dynamic resource (https://www.pulumi.com/docs/iac/concepts/resources/dynamic-providers/): its
provider runs in its own process from a serialized copy, so the class below is self-contained and marked
as defined in `__main__`, which makes dill serialize it by value (pulumi/pulumi#7453, #7755). Only `create`
touches the network; under the offline plan's mocks it never runs.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi.dynamic

from ..cloud.base import Args


class _ResolveMain(pulumi.dynamic.ResourceProvider):
    """create: ask the Hub which commit `main` is; diff: only another repository changes the answer."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        revision = self.resolve(props["repoId"], props.get("token") or None)
        return pulumi.dynamic.CreateResult(id_=f"{props['repoId']}@{revision}",
                                           outs={"repoId": props["repoId"], "revision": revision})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        moved = olds.get("repoId") != news.get("repoId")
        return pulumi.dynamic.DiffResult(changes=moved, replaces=["repoId"] if moved else [],
                                         delete_before_replace=False)

    @staticmethod
    def resolve(repo_id: str, token: Optional[str]) -> str:
        # Errors as huggingface_hub types them (utils/_http.py hf_raise_for_status), in one line each.
        from huggingface_hub import HfApi
        from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

        api = HfApi(token=token)
        try:
            sha = api.model_info(repo_id, revision="main", timeout=60).sha
        except GatedRepoError:
            raise Exception(f"{repo_id} is gated and the hfToken has no access to it: accept the model's license "
                            f"at {api.endpoint}/{repo_id} with the token's account") from None
        except RepositoryNotFoundError:
            raise Exception(f"repository {repo_id} was not found: check model.repoId (a gated or private "
                            "repository also answers this way without a valid hfToken)") from None
        except HfHubHTTPError as err:
            raise Exception(f"could not resolve {repo_id}@main: {str(err).splitlines()[0]}") from None
        if not sha or len(sha) != 40:
            raise Exception(f"the Hub returned no commit for {repo_id}@main")
        return sha


def _by_value(cls: type) -> type:
    """dill saves classes and functions of `__main__` by value, and those of importable modules by reference,
    which the provider process could not resolve (it does not have this checkout on its path)."""
    cls.__module__ = "__main__"
    for member in vars(cls).values():
        function = getattr(member, "__func__", member)
        if callable(function) and hasattr(function, "__module__"):
            function.__module__ = "__main__"
    return cls


_by_value(_ResolveMain)


class HubRevisionArgs(Args):
    repo_id: str
    token: pulumi.Output
    """Secret Output of the Hugging Face token (gated repositories answer only with one)."""


class HubRevision(pulumi.dynamic.Resource, module="kimi", name="HubRevision"):
    """`revision`: the 40-hex commit `main` pointed to when this resource was created."""

    revision: pulumi.Output[str]

    def __init__(self, name: str, args: HubRevisionArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(_ResolveMain(), name, {"repoId": args.repo_id, "token": args.token, "revision": None},
                         pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                             additional_secret_outputs=["token"])))

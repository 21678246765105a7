"""vLLM 0.33.0's own API-router registration against the flags the GPU prefill engines get: the router's token
producer calls `/v1/completions/render` and `/v1/chat/completions/render` on them (components/router/router.py
token_producer), which `vllm serve` serves only with `--enable-scale-out`."""

from __future__ import annotations

from components.plan import engines

RENDER_PATHS = {"/v1/completions/render", "/v1/chat/completions/render"}


def _serve_args(argv: list[str]):
    """What vLLM's own frontend options make of the command's render flags (`FrontendArgs.add_cli_args`, the group
    `vllm serve` registers, vllm/entrypoints/common/cli_args.py); the engine options need a device platform, which
    this CPU machine lacks, and the rest of the command holds shell variables the parser cannot read here."""
    from vllm.entrypoints.common.cli_args import FrontendArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    wanted = [a for a in argv if a in ("--enable-scale-out", "--disable-scale-out")]
    return FrontendArgs.add_cli_args(FlexibleArgumentParser()).parse_args(wanted)


def _registered(argv: list[str]) -> dict[str, str]:
    """Route path -> handler name after vLLM registers its scale-out routers for those args
    (vllm/entrypoints/scale_out/factories.py register_scale_out_api_routers)."""
    from fastapi import FastAPI
    from vllm.entrypoints.scale_out.factories import register_scale_out_api_routers

    app = FastAPI()
    app.state.args = _serve_args(argv)
    register_scale_out_api_routers(app, ("generate",))
    return {route.path: route.endpoint.__name__ for route in _routes(app.routes) if route.path in RENDER_PATHS}


def _routes(routes):
    """Every route, the routers FastAPI includes lazily (its `_IncludedRouter`) opened up."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _routes(inner.routes)
        elif getattr(route, "path", None):
            yield route


def test_the_prefill_engines_serve_render(gpu_cfg):
    routes = _registered(list(engines.vllm_command(gpu_cfg, "prefill").argv))
    assert set(routes) == RENDER_PATHS
    assert "disabled_scale_out" not in routes.values(), routes


def test_without_the_flag_vllm_refuses_render(gpu_cfg):
    """The check above can fail: the same command without the flag gets vLLM's 403 stub on both paths."""
    argv = [a for a in engines.vllm_command(gpu_cfg, "prefill").argv if a != "--enable-scale-out"]
    routes = _registered(argv)
    assert set(routes) == RENDER_PATHS and set(routes.values()) == {"disabled_scale_out"}

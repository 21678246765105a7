"""The TPU pods' `vllm serve` argv through vLLM 0.29.0's own engine-argument parser as vLLM-TorchTPU 0.29.0 ships it
(vllm/engine/arg_utils.py `AsyncEngineArgs.add_cli_args`, which `vllm serve`'s make_arg_parser extends): every flag
of both ranks is one the release knows with a value it accepts (an unknown flag or choice exits before the engine
starts), and the values the multi-host start and Raiden depend on arrive as the pods mean them. The pod's shell
variables (LEADER_IP, LWS_WORKER_INDEX) are given values; nothing else is changed."""

from __future__ import annotations

import pytest

from components.plan import engines

VALUES = {engines.LEADER_IP: "10.0.0.1", engines.WORKER_INDEX: "1", engines.START_RANK: "1",
          engines.POD_IP: "10.0.0.2"}


def _argv(cfg, rank: str) -> list[str]:
    argv = list(engines.vllm_torchtpu_command(cfg, rank).argv)
    assert argv[:2] == ["vllm", "serve"]
    out = []
    for token in argv[2:]:
        for name, value in VALUES.items():
            token = token.replace(name, value)
        out.append(token)
    assert not [t for t in out if "$" in t], out
    return out


FRONTEND = {"--port": True, "--headless": False, "--tool-call-parser": True, "--enable-auto-tool-choice": False,
            "--disable-access-log-for-endpoints": True, "--api-server-count": True}
"""The pods' flags `vllm serve` adds beside the engine's (flag -> takes a value): FrontendArgs and make_arg_parser in
vllm/entrypoints/launchers/cli_args.py:105,111,255,276,387,394 of the 0.29.0 wheel. That module imports the HTTP server
(fastapi), which this tier does not install, so the engine's own parser reads the rest and these are held apart."""


def _parse(argv: list[str], monkeypatch):
    """The engine's arguments as vLLM 0.29.0's AsyncEngineArgs parser reads them (the model positional as
    make_arg_parser takes it); what it leaves must be FRONTEND's flags exactly."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.platforms import current_platform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # The parser builds a default DeviceConfig (no flag the pods pass) from the platform's torch device, and this CPU
    # torch has no TPU device type (torch_tpu is not installed): the CPU one stands in for that default only.
    monkeypatch.setattr(current_platform, "device_type", "cpu", raising=False)
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    parser.add_argument("model_tag", nargs="?")
    args, rest = parser.parse_known_args(argv)
    i, left = 0, []
    while i < len(rest):
        assert rest[i] in FRONTEND, f"{rest[i]}: not a flag of vLLM 0.29.0's engine or frontend"
        left.append(rest[i])
        i += 2 if FRONTEND[rest[i]] else 1
    return args, left


@pytest.mark.parametrize("rank", ["leader", "worker"])
def test_the_release_parses_every_ranks_argv(tpu_cfg, rank, monkeypatch):
    args, frontend = _parse(_argv(tpu_cfg, rank), monkeypatch)
    assert ("--headless" in frontend) == (rank == "worker")
    assert args.model_tag == tpu_cfg.model.path
    assert (args.nnodes, args.node_rank) == (tpu_cfg.tpu.hosts_per_slice, 1)
    assert args.master_addr == "10.0.0.1"
    transfer = args.kv_transfer_config
    assert transfer.kv_connector == "TPURaidenOffloadingConnector", transfer
    assert transfer.kv_connector_extra_config["store_server_ip"] == "10.0.0.1"


def test_an_unknown_flag_or_value_is_refused(tpu_cfg, monkeypatch):
    """The check above can fail: a flag the release does not have, or a value outside a flag's choices."""
    with pytest.raises(AssertionError, match="--no-such-engine-flag"):
        _parse([*_argv(tpu_cfg, "leader"), "--no-such-engine-flag"], monkeypatch)
    with pytest.raises(SystemExit):
        _parse([*_argv(tpu_cfg, "leader"), "--kv-cache-dtype", "fp3"], monkeypatch)


@pytest.mark.parametrize("rank", ["leader", "worker"])
def test_the_release_parses_the_released_launchers_layout(rank, monkeypatch):
    """tpu.launch=dp-across-hosts: the launcher's multi-host DP flags arrive as meant, and vLLM 0.29.0's own
    `EngineArgs` turns them into this host's DP rank (the head 0; host 1 from its start rank) with TP inside it."""
    from tests.engine_support import stack_config

    cfg = stack_config("tpu", **{"tpu.launch": "dp-across-hosts", "tpu.tensorParallel": "8"})
    args, frontend = _parse(_argv(cfg, rank), monkeypatch)
    assert ("--headless" in frontend) == (rank == "worker")
    assert ("--api-server-count" in frontend) == (rank == "leader")
    assert (args.data_parallel_size, args.data_parallel_size_local, args.tensor_parallel_size) == (4, 1, 8)
    assert args.data_parallel_address == "10.0.0.1" and args.nnodes == 1
    assert args.data_parallel_start_rank == (1 if rank == "worker" else None)
    assert args.kv_transfer_config.kv_connector_extra_config["store_server_ip"] == "10.0.0.2"

"""vLLM-TorchTPU 0.29.0's start-up checks run on what the TPU pods pass (docs/engine-preconditions.md TPU-MH-4,
TPU-MH-7, TPU-PREFIX-1, TPU-RAIDEN-7, TPU-PRIVACY-1): the multi-host bootstrap that names every rank's slice-builder
port, the rendezvous it runs first, the platform's refusals for prefix caching and offloading on the hybrid, and
vLLM's usage-stats switch. The pods' flags come from components/plan/engines.py's command and environment, never a
figure the engine is meant to check."""

from __future__ import annotations

import ast
import socket
import sys
import textwrap
import threading
import types
from pathlib import Path

import pytest

from components.facts import catalog
from components.plan import engines, loading
from tests.engine_support import USAGE_STATS_SWITCHES, record, usage_stats_enabled
from tests.engine_tpu.test_torchtpu_code import _k3_config_dir


def _flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def _free_port_pair() -> int:
    """A loopback port whose successor is free too (the rendezvous listens on master port + 1)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise RuntimeError("no two adjacent free loopback ports")


# --------------------------------------------------------------------------- multi-host bootstrap
def test_every_rank_listens_on_a_port_the_pods_declare(tpu_cfg, monkeypatch):
    """`prepare_mp_multihost_env` (vllm_torchtpu/distributed/tpu_mp_multihost.py) on vLLM 0.29.0's own
    ParallelConfig of the pods' `--tensor-parallel-size` and `--nnodes`: each host's hosts run their rendezvous for
    real on loopback (a TCPStore on master port + 1, the engine's `_rendezvous_host_ips`, one thread per host), then
    the leader's bootstrap publishes TORCH_TPU_SLICEBUILDER_ADDRESSES. Every host's ports are 8070 + its ranks: the
    ports the pods declare (components/serving/modelservers.py tpu_ports, checked on the rendered pods by
    TPU-MH-4). One stand-in: the ICI topology lookup (`get_tpu_multihost_topology` asks torch_tpu's hardware
    scan, not installable here), which decides nothing about ports."""
    from vllm.config import ParallelConfig
    from vllm_torchtpu import envs as tpu_envs
    from vllm_torchtpu.distributed import tpu_mp_multihost as mh

    argv = engines.vllm_torchtpu_command(tpu_cfg, "leader").argv
    nnodes, tp = int(_flag(argv, "--nnodes")), int(_flag(argv, "--tensor-parallel-size"))
    master = _free_port_pair()
    monkeypatch.setattr(mh, "_RENDEZVOUS_TIMEOUT_S", 30)  # bounded here; the engine's is 300 s (TPU-MH-7)
    assert mh._rendezvous_port(master) == master + 1 == master + 1  # TPU-MH-3: no override in the pods' env
    results: dict[int, tuple[list[str], str]] = {}
    errors: list[BaseException] = []

    def host(index: int) -> None:
        try:
            results[index] = mh._rendezvous_host_ips(num_peers=nnodes, peer_index=index, master_addr="127.0.0.1",
                                                      port=mh._rendezvous_port(master), key_prefix="hosts")
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=host, args=(i,), daemon=True) for i in range(nnodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and len(results) == nnodes, errors
    host_ips, session = results[0]
    assert all(r == (host_ips, session) for r in results.values()), "the hosts disagree on the rendezvous"

    stub = types.ModuleType("vllm_torchtpu.platforms.tpu_platform")
    stub.get_tpu_multihost_topology = lambda chips: tpu_cfg.tpu.topology
    monkeypatch.setitem(sys.modules, "vllm_torchtpu.platforms.tpu_platform", stub)
    monkeypatch.setattr(mh, "_rendezvous_host_ips", lambda **_: ([f"10.0.0.{i + 1}" for i in range(nnodes)], session))
    for name in ("TORCH_TPU_SLICEBUILDER_ADDRESSES", "TORCH_TPU_TOPOLOGY", "TPU_NUM_HOSTS", "NODE_RANK",
                 "TORCH_TPU_XPROF_SESSION_ID", "MASTER_ADDR", "MASTER_PORT", mh._DONE_SENTINEL):
        monkeypatch.delenv(name, raising=False)
    config = ParallelConfig(tensor_parallel_size=tp, nnodes=nnodes, node_rank=0, master_addr="127.0.0.1",
                            master_port=master)
    mh.prepare_mp_multihost_env(config)

    import os

    addresses = os.environ["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")
    per_host: dict[str, set[int]] = {}
    for address in addresses:
        ip, port = address.rsplit(":", 1)
        per_host.setdefault(ip, set()).add(int(port))
    ranks = catalog.IRONWOOD.chips_per_host * catalog.IRONWOOD.tensorcores_per_chip
    declared = {tpu_envs.TORCH_TPU_BASE_PORT + i for i in range(ranks)}
    assert config.local_world_size == ranks == tp // nnodes
    assert len(addresses) == tp and all(ports == declared for ports in per_host.values()), per_host
    record(f"TPU slice builders (prepare_mp_multihost_env after a loopback rendezvous of {nnodes} hosts on master "
           f"port + 1): {len(addresses)} addresses, ports {min(declared)}-{max(declared)} on each host = "
           f"{config.local_world_size} ranks per host (local_world_size), {catalog.IRONWOOD.chips_per_host} chips "
           f"x {catalog.IRONWOOD.tensorcores_per_chip} TensorCores; rendezvous timeout "
           f"{loading.TPU_RENDEZVOUS_TIMEOUT_S} s in the wheel")


def test_the_released_launchers_layout_binds_the_ports_the_pods_declare(tpu_cfg, monkeypatch):
    """tpu.launch=dp-across-hosts: `prepare_mp_multihost_dp_env` (tpu_mp_multihost.py) on vLLM 0.29.0's own
    ParallelConfig of a worker host's flags (its start rank, the leader's address and RPC port): the DP groups' ports it
    fixes on every host are the ones the leader pod declares (engines.DP_MASTER_PORTS), its rendezvous is the RPC port
    + 1, and every host's slice builders are 8070 + its 8 ranks (world size x local engines). The rendezvous itself is
    the one run for real above; here it answers with four addresses, and the topology lookup is stood in as above."""
    from vllm.config import ParallelConfig
    from vllm_torchtpu import envs as tpu_envs
    from vllm_torchtpu.distributed import tpu_mp_multihost as mh

    from components.facts import contract
    from tests.engine_support import stack_config

    cfg = stack_config("tpu", **{"tpu.launch": "dp-across-hosts", "tpu.tensorParallel": "8"})
    argv = engines.vllm_torchtpu_command(cfg, "worker").argv
    rpc = int(_flag(argv, "--data-parallel-rpc-port"))
    seen = {}

    def rendezvous(**kwargs):
        seen.update(kwargs)
        return [f"10.0.0.{i + 1}" for i in range(kwargs["num_peers"])], "1"

    stub = types.ModuleType("vllm_torchtpu.platforms.tpu_platform")
    stub.get_tpu_multihost_topology = lambda chips: cfg.tpu.topology
    monkeypatch.setitem(sys.modules, "vllm_torchtpu.platforms.tpu_platform", stub)
    monkeypatch.setattr(mh, "_rendezvous_host_ips", rendezvous)
    for name in ("TORCH_TPU_SLICEBUILDER_ADDRESSES", "TORCH_TPU_TOPOLOGY", "TORCH_TPU_XPROF_SESSION_ID",
                 mh._DP_DONE_SENTINEL):
        monkeypatch.delenv(name, raising=False)
    config = ParallelConfig(tensor_parallel_size=int(_flag(argv, "--tensor-parallel-size")),
                            data_parallel_size=int(_flag(argv, "--data-parallel-size")),
                            data_parallel_size_local=int(_flag(argv, "--data-parallel-size-local")),
                            data_parallel_rank=1, data_parallel_master_ip="127.0.0.1", data_parallel_rpc_port=rpc,
                            enable_expert_parallel=True)
    assert mh.prepare_mp_multihost_dp_env(config, config.world_size_across_dp) is True

    import os

    assert seen["port"] == rpc + 1 == contract.TPU_MASTER_PORT + 1 and seen["peer_index"] == 1
    assert config._data_parallel_master_port_list == [contract.TPU_MASTER_PORT + 100 + i
                                                      for i in range(engines.DP_MASTER_PORTS)]
    per_host: dict[str, set[int]] = {}
    for address in os.environ["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(","):
        ip, port = address.rsplit(":", 1)
        per_host.setdefault(ip, set()).add(int(port))
    assert len(per_host) == cfg.tpu.hosts_per_slice
    assert all(ports == {tpu_envs.TORCH_TPU_BASE_PORT + i for i in range(8)} for ports in per_host.values())
    record(f"TPU dp-across-hosts (prepare_mp_multihost_dp_env on a worker's flags): DP groups on "
           f"{config._data_parallel_master_port_list[0]}-{config._data_parallel_master_port_list[-1]}, rendezvous on "
           f"{seen['port']}, slice builders 8070-8077 on each of {len(per_host)} hosts")


def test_the_rendezvous_timeout_is_the_wheels_constant():
    """TPU-MH-7 rests on `_RENDEZVOUS_TIMEOUT_S` being 300 and read from no variable."""
    from vllm_torchtpu.distributed import tpu_mp_multihost as mh

    source = Path(mh.__file__).read_text()
    assert mh._RENDEZVOUS_TIMEOUT_S == loading.TPU_RENDEZVOUS_TIMEOUT_S
    assert "_RENDEZVOUS_TIMEOUT_S = 300\n" in source and "environ" not in source.split("_RENDEZVOUS_TIMEOUT_S", 2)[1]
    assert engines.HEAD_RESOLVE_S + engines.HEAD_RESOLVE_RETRY_S < mh._RENDEZVOUS_TIMEOUT_S


# --------------------------------------------------------------------------- the platform's refusals
def _platform_checks():
    """The statements of `TpuPlatform.check_and_update_config` (vllm_torchtpu/platforms/tpu_platform.py) that decide
    prefix caching and offloading on a hybrid model, compiled from the wheel's own source: the module imports
    torch_tpu (CPython 3.12 only, requirements-engines-tpu.in), so it cannot be imported whole here, and these
    statements read nothing from it."""
    import vllm_torchtpu

    path = Path(vllm_torchtpu.__file__).parent / "platforms" / "tpu_platform.py"
    source = path.read_text()
    tree = ast.parse(source)
    [platform] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TpuPlatform"]
    [method] = [n for n in platform.body if isinstance(n, ast.FunctionDef) and n.name == "check_and_update_config"]
    names = {"model_config", "cache_config", "is_hybrid", "transfer_config", "is_decode_bench", "kv_transfer_config"}
    kept = []
    for node in method.body:
        text = ast.get_source_segment(source, node)
        if isinstance(node, ast.Assign) and {getattr(t, "id", None) for t in node.targets} <= names:
            kept.append(text)
        elif isinstance(node, ast.If) and ("enable_prefix_caching" in ast.get_source_segment(source, node.test)
                                           or ast.get_source_segment(source, node.test)
                                           == "kv_transfer_config is not None"):
            kept.append(text)
    assert len(kept) == 8, f"{path.name}: the statements moved ({len(kept)} found); read the release again"
    body = textwrap.indent("\n".join(textwrap.dedent(t) for t in kept), "    ")
    return f"def run(vllm_config):\n{body}\n", path


def _unified_kv_layout_enabled():
    """`unified_kv_layout_enabled` (vllm_torchtpu/platforms/tpu_block_size_utils.py L42-53) delegates to
    gdn_pool_layout's `unified_kv_layout_enabled_for_architecture`: the module itself is behind the platforms package,
    which imports torch_tpu."""
    from vllm_torchtpu.gdn_pool_layout import unified_kv_layout_enabled_for_architecture

    return lambda vllm_config: unified_kv_layout_enabled_for_architecture(vllm_config.model_config.architecture)


def _vllm_config(cfg, tmp_path, argv: tuple[str, ...], mamba_cache_mode: str):
    import json

    from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig, ParallelConfig, VllmConfig

    model_dir, _ = _k3_config_dir(cfg, tmp_path)
    kv = json.loads(_flag(argv, "--kv-transfer-config").replace(engines.LEADER_IP, "192.0.2.10"))
    return VllmConfig(
        model_config=ModelConfig(model=model_dir, skip_tokenizer_init=True, max_model_len=cfg.context_length),
        cache_config=CacheConfig(block_size=int(_flag(argv, "--block-size")),
                                 cache_dtype=_flag(argv, "--kv-cache-dtype"), mamba_cache_mode=mamba_cache_mode,
                                 enable_prefix_caching="--enable-prefix-caching" in argv),
        parallel_config=ParallelConfig(tensor_parallel_size=int(_flag(argv, "--tensor-parallel-size")),
                                       enable_expert_parallel=True),
        kv_transfer_config=KVTransferConfig(**kv), device_config=DeviceConfig(device="cpu"))


@pytest.mark.parametrize("change", [None, "mamba-cache-mode none", "mamba-cache-mode all", "align lost",
                                    "pool off", "pool off, no prefix caching"])
def test_prefix_caching_and_offload_start_on_the_pods_settings(tpu_cfg, tmp_path, monkeypatch, change):
    """TPU-PREFIX-1 and TPU-RAIDEN-7: the platform's own statements pass on the leader's flags and the pods'
    environment. Align mode: vLLM 0.29.0's `MambaModelConfig.verify_and_update_config` resolves the mode to `align`
    for Kimi K3 whatever the flag says once prefix caching is on (`none` -> `align`; `all` -> `align` for a model
    without Mamba prefix-caching support, vllm/model_executor/models/config.py L609-640), and the platform refuses any
    other mode that reached it ("align lost": set after the config is built). The unified pool: off, the platform
    refuses prefix caching first and, without prefix caching, the Raiden offload."""
    argv = engines.vllm_torchtpu_command(tpu_cfg, "leader").argv
    env = dict(engines.vllm_torchtpu_env(tpu_cfg))
    mode = _flag(argv, "--mamba-cache-mode")
    if change and change.startswith("mamba-cache-mode "):
        mode = change.split()[-1]
    if change and change.startswith("pool off"):
        env[engines.UNIFIED_BLOCK_POOL_ENV] = "0"
    if change == "pool off, no prefix caching":
        argv = tuple(a for a in argv if a != "--enable-prefix-caching")
        mode = "none"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, path = _platform_checks()
    namespace = {"unified_kv_layout_enabled": _unified_kv_layout_enabled()}
    exec(compile(code, str(path), "exec"), namespace)  # noqa: S102 - the wheel's own statements
    vllm_config = _vllm_config(tpu_cfg, tmp_path, argv, mode)
    assert vllm_config.model_config.is_hybrid
    if "--enable-prefix-caching" in argv:
        assert vllm_config.cache_config.mamba_cache_mode == "align", change
    if change == "align lost":
        vllm_config.cache_config.mamba_cache_mode = "all"
    expected = {"align lost": "mamba_cache_mode='align'", "pool off": "requires the unified KV pool",
                "pool off, no prefix caching": "unified block pool"}.get(change)
    if expected is None:
        namespace["run"](vllm_config)
        if change is None:
            record(f"TPU start (tpu_platform.py check_and_update_config's hybrid statements on the leader's flags): "
                   f"prefix caching with --mamba-cache-mode {mode} and {engines.UNIFIED_BLOCK_POOL_ENV}="
                   f"{env[engines.UNIFIED_BLOCK_POOL_ENV]}, {json_connector(argv)} offload: accepted; the pool off: "
                   "refused (prefix caching, then the offload); a mode other than align: refused")
    else:
        with pytest.raises((NotImplementedError, ValueError), match=expected):
            namespace["run"](vllm_config)


def json_connector(argv: tuple[str, ...]) -> str:
    import json

    return json.loads(_flag(argv, "--kv-transfer-config"))["kv_connector"]


# --------------------------------------------------------------------------- usage stats
def test_usage_stats_are_off_on_the_pods_environment(monkeypatch, tmp_path):
    """TPU-PRIVACY-1: vLLM 0.29.0's `is_usage_stats_enabled` (the gate of `report_usage_stats`, which the TPU worker
    calls at start) is false under the pods' environment and true without it; each of the two switches alone is
    enough."""
    pods = dict(engines.ENGINE_PRIVACY_ENV)
    assert {"VLLM_NO_USAGE_STATS", "DO_NOT_TRACK"} <= pods.keys()
    assert usage_stats_enabled(monkeypatch, tmp_path, pods) is False
    assert usage_stats_enabled(monkeypatch, tmp_path, {}) is True, "the gate is open without the pods' switches"
    for name, value in pods.items():
        if name not in USAGE_STATS_SWITCHES:
            continue
        assert usage_stats_enabled(monkeypatch, tmp_path, {name: value}) is False, name
    record("TPU usage stats (vLLM 0.29.0 is_usage_stats_enabled on the pods' env): off; on without it")

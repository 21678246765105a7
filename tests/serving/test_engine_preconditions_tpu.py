"""The TPU rows of docs/engine-preconditions.md: what vLLM-TorchTPU 0.29.0 asserts, reads or binds on its start-up
path (the released wheels) and what the engine's released mp launcher sets, checked against the rendered leader and
worker pods of every slice (tests/preconditions.py). Each check reads the pods; each `breaks` takes exactly that
precondition out of a copy of them."""

from __future__ import annotations

import json
import re

from components.facts import catalog
from components.plan import engines
from tests import preconditions as pc

ENGINE = "vllm-tpu"
CONTROLLER_PORT = 51515
"""raiden_store.py:134 `_DEFAULT_CONTROLLER_PORT` (+ local DP rank 0, :2304-2306)."""
DEFAULT_REGISTRATION_TIMEOUT_S = 120
"""raiden_store.py:321-324: RAIDEN_EXPECTED_WORKERS_TIMEOUT_S defaults to 120 s."""
SLICE_BUILDER_BASE = 8070
"""envs.py:974 TORCH_TPU_BASE_PORT default; tpu_mp_multihost.py:160-166 adds the local rank."""
RENDEZVOUS_TIMEOUT_S = 300
"""tpu_mp_multihost.py:66 `_RENDEZVOUS_TIMEOUT_S`, a constant."""
UNIFIED_POOL = "TPU_VLLM_ENABLE_UNIFIED_BLOCK_POOL"
DEFAULT_ENGINE_READY_TIMEOUT_S = 600
"""vllm/envs.py:796-798 (vLLM 0.29.0 in the vllm-torchtpu wheel)."""
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
"""torch_tpu/_tcmalloc_check.py:141-148 (torch-tpu 0.2.0): the library its warning asks to preload."""
LAUNCHER_ENV = {
    # mp_multihost_entry.sh@be9c868 (engines.MP_LAUNCHER), line: (variable, value), as the launcher writes them.
    63: ("MEGASCALE_COORDINATOR_ADDRESS", ""),
    64: ("MEGASCALE_NUM_SLICES", ""),
    65: ("MEGASCALE_PORT", ""),
    66: ("MEGASCALE_SLICE_ID", ""),
    67: ("TPU_PROCESS_ADDRESSES", ""),
    68: ("TPU_PROCESS_PORT", ""),
    69: ("TPU_WORKER_HOSTNAMES", ""),
    71: ("TPU_MULTIHOST_BACKEND", "mp"),
    73: ("TPU_SKIP_MDS_QUERY", "1"),
}
"""Held here as read from the launcher, not imported from components/plan/engines.py, so a change there must be a
change here too."""


def _engines(objs: pc.Objects) -> list[tuple[str, dict]]:
    found = pc.containers(objs, ENGINE)
    ranks = {where.split("/")[1] for where, _ in found}
    assert ranks == {"leader", "worker"}, f"TPU ranks {sorted(ranks)}, expected leader and worker"
    return found


def _exports(script: str) -> list[tuple[str, str]]:
    """(name, value) of every `export NAME=VALUE` line before the engine starts, in order (bash-unquoted)."""
    found = []
    for line in script.split("\nexec ", 1)[0].splitlines():
        match = re.fullmatch(r"export ([A-Z_][A-Z0-9_]*)=(.*)", line.strip())
        if match:
            value = match.group(2)
            found.append((match.group(1), value[1:-1] if value[:1] in "'\"" and value[-1:] == value[:1] else value))
    return found


def _extra(container: dict) -> dict:
    return pc.json_flag(container, "--kv-transfer-config").get("kv_connector_extra_config", {})


def _resolves_leader(script: str) -> bool:
    """The script sets LEADER_IP from `getent hosts ${LWS_LEADER_ADDRESS}` before the engine starts."""
    before = script.split("\nexec ", 1)[0]
    return bool(re.search(r'LEADER_IP="\$\(getent hosts "\$\{LWS_LEADER_ADDRESS\}" \| awk', before))


def _leader_ports(objs: pc.Objects) -> set[int]:
    return {p["containerPort"] for where, c in _engines(objs) if where.split("/")[1] == "leader"
            for p in c.get("ports", [])}


def _edit_extra(objs: pc.Objects, edit) -> None:
    def change(text: str) -> str:
        def rewrite(match: re.Match) -> str:
            config = json.loads(match.group(1).replace('\\"', '"'))
            edit(config["kv_connector_extra_config"])
            return '--kv-transfer-config "' + json.dumps(config, separators=(",", ":")).replace('"', '\\"') + '"'
        return re.sub(r'--kv-transfer-config "((?:[^"\\]|\\.)*)"', rewrite, text, count=1)
    pc.edit_script(objs, ENGINE, change)


# --------------------------------------------------------------------------- render endpoint
def _render_service(objs: pc.Objects) -> dict:
    from components.router import router

    [service] = [o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == router.RENDER_SERVICE]
    return service


def _serve_workers(objs: pc.Objects) -> None:
    """Give the headless worker pods the leader's serving labels, so the render Service selects them too."""
    for obj in objs:
        if obj["kind"] == "LeaderWorkerSet":
            template = obj["spec"]["leaderWorkerTemplate"]
            template["workerTemplate"]["metadata"]["labels"].update(
                template["leaderTemplate"]["metadata"]["labels"])


@pc.row("TPU-RENDER-1", breaks=_serve_workers)
def _render_on_serving_hosts(objs):
    service = _render_service(objs)
    selector, [port] = service["spec"]["selector"], service["spec"]["ports"]
    selected = []
    for obj in objs:
        if obj["kind"] == "LeaderWorkerSet":
            for rank, key in (("leader", "leaderTemplate"), ("worker", "workerTemplate")):
                template = obj["spec"]["leaderWorkerTemplate"][key]
                labels = template["metadata"].get("labels", {})
                if all(labels.get(k) == v for k, v in selector.items()):
                    selected += [(rank, c) for c in template["spec"]["containers"] if c["name"] == ENGINE]
    assert selected, f"the render Service selects no engine pod ({selector})"
    for rank, engine in selected:
        flags = pc.flags(engine)
        assert "--headless" not in flags, f"{rank}: the render Service sends to a --headless host (no API server)"
        target, bound = port.get("targetPort", port["port"]), int(flags["--port"])
        names = {p["name"] for p in engine.get("ports", []) if p["containerPort"] == bound}
        assert target == bound or target in names, f"{rank}: the render Service targets {target!r}, the engine " \
                                                   f"serves on {bound}"


# --------------------------------------------------------------------------- Raiden host-DRAM offload
@pc.row("TPU-RAIDEN-1", breaks=lambda objs: _edit_extra(objs, lambda extra: extra.pop("cpu_bytes_to_use")))
def _pool_bytes(objs):
    for where, c in _engines(objs):
        assert int(_extra(c).get("cpu_bytes_to_use") or 0) > 0, f"{where}: no cpu_bytes_to_use"


def _dp_across_hosts(container: dict) -> bool:
    """The released launcher's layout (tpu.launch=dp-across-hosts): data-parallel engines per host, no --nnodes."""
    return "--data-parallel-size-local" in pc.flags(container)


@pc.row("TPU-RAIDEN-2", breaks=lambda objs: _edit_extra(objs, lambda extra: extra.pop("store_server_ip")))
def _every_rank_names_the_leader(objs):
    """The controller's host: the leader's scheduler, or under dp-across-hosts each host's own engine."""
    for where, c in _engines(objs):
        address = _extra(c).get("store_server_ip", "")
        host = engines.POD_IP if _dp_across_hosts(c) else engines.LEADER_IP
        assert address == host, \
            f"{where}: store_server_ip {address!r}; workers would dial {address or '127.0.0.1'}, not {host}"
        assert _resolves_leader(pc.script(c)), f"{where}: LEADER_IP is not resolved from the leader's name"


@pc.row("TPU-RAIDEN-3", breaks=lambda objs: _edit_extra(objs, lambda extra: extra.update(raiden_controller_port=6000)))
def _controller_port_declared(objs):
    ports = {int(_extra(c).get("raiden_controller_port", CONTROLLER_PORT)) for _, c in _engines(objs)}
    assert len(ports) == 1, f"ranks dial different controller ports {sorted(ports)}"
    for where, c in _engines(objs):
        if _dp_across_hosts(c):  # a controller per local engine, on every host
            local = int(pc.flags(c)["--data-parallel-size-local"])
            wanted = {next(iter(ports)) + i for i in range(local)}
            declared = {p["containerPort"] for p in c.get("ports", [])}
            assert wanted <= declared, f"{where}: controller ports {sorted(wanted - declared)} not declared"
    assert ports <= _leader_ports(objs), f"controller port {ports} is not a port the leader declares"


@pc.row("TPU-RAIDEN-4", breaks=lambda objs: pc.drop_env(objs, ENGINE, "RAIDEN_EXPECTED_WORKERS_TIMEOUT_S"))
def _registration_timeout(objs):
    for where, c in _engines(objs):
        timeout = int(pc.env(c).get("RAIDEN_EXPECTED_WORKERS_TIMEOUT_S") or DEFAULT_REGISTRATION_TIMEOUT_S)
        assert timeout > DEFAULT_REGISTRATION_TIMEOUT_S, \
            f"{where}: registration timeout {timeout} s is the default, not sized to the slowest host's pool"


@pc.row("TPU-RAIDEN-5", breaks=lambda objs: pc.set_env(objs, ENGINE, "RAIDEN_SHM_KEY", "kv"))
def _no_shm_pool(objs):
    for where, c in _engines(objs):
        assert not pc.env(c).get("RAIDEN_SHM_KEY"), f"{where}: RAIDEN_SHM_KEY set (the connector refuses it)"


@pc.row("TPU-RAIDEN-6", breaks=lambda objs: [c["securityContext"]["capabilities"].pop("add")
                                              for _, c in pc.containers(objs, ENGINE)])
def _ipc_lock(objs):
    for where, c in _engines(objs):
        added = ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        assert "IPC_LOCK" in added, f"{where}: no IPC_LOCK for the pinned host pool"


# --------------------------------------------------------------------------- mp multi-host start
@pc.row("TPU-MH-1", breaks=lambda objs: pc.edit_script(objs, ENGINE, lambda s: s.replace(
    "export TPU_PROCESS_PORT=''\n", "")))
def _launcher_environment(objs):
    """The launcher's environment, line by line, in its order."""
    expected = [LAUNCHER_ENV[line] for line in sorted(LAUNCHER_ENV)]
    for where, c in _engines(objs):
        exported = [e for e in _exports(pc.script(c)) if e[0] in dict(expected)]
        assert exported == expected, f"{where}: exports {exported}, the launcher's are {expected}"
        assert not set(dict(expected)) & set(pc.env(c)), f"{where}: the pod env sets a launcher variable again"


@pc.row("TPU-MH-2", breaks=lambda objs: pc.set_flag(objs, ENGINE, "--master-addr", "${LWS_LEADER_ADDRESS}"))
def _master_is_an_address(objs):
    for where, c in _engines(objs):
        flag = "--data-parallel-address" if _dp_across_hosts(c) else "--master-addr"
        assert pc.flags(c).get(flag) == engines.LEADER_IP, f"{where}: {flag} is not the resolved IP"
        assert _resolves_leader(pc.script(c)), f"{where}: LEADER_IP is not resolved from the leader's name"


@pc.row("TPU-MH-3", breaks=lambda objs: [c.update(ports=[p for p in c["ports"] if p.get("name") != "rendezvous"])
                                          for _, c in pc.containers(objs, ENGINE)])
def _rendezvous_port(objs):
    """Beside the coordination port: `--master-port`, or under dp-across-hosts `--data-parallel-rpc-port`."""
    masters = {int(pc.flags(c).get("--data-parallel-rpc-port") or pc.flags(c)["--master-port"])
               for _, c in _engines(objs)}
    assert len(masters) == 1
    needed = {masters.pop() + 1}
    for where, c in _engines(objs):
        assert "TORCH_TPU_MP_RENDEZVOUS_PORT" not in pc.env(c), f"{where}: rendezvous port overridden"
    assert needed <= _leader_ports(objs), f"the leader declares no rendezvous port {needed}"


@pc.row("TPU-MH-4", breaks=lambda objs: [c.update(ports=[p for p in c["ports"] if p.get("name") != "slice-7"])
                                          for _, c in pc.containers(objs, ENGINE)])
def _slice_builder_ports(objs):
    """One port per rank the host runs: TP / --nnodes ranks (vLLM's `local_world_size`), each a TensorCore."""
    for where, c in _engines(objs):
        flags = pc.flags(c)
        ranks = int(flags["--tensor-parallel-size"]) // int(flags.get("--nnodes") or 1) * int(
            flags.get("--data-parallel-size-local") or 1)
        assert ranks == catalog.IRONWOOD.chips_per_host * catalog.IRONWOOD.tensorcores_per_chip, \
            f"{where}: {ranks} ranks per host, the host has {catalog.IRONWOOD.chips_per_host} chips x " \
            f"{catalog.IRONWOOD.tensorcores_per_chip} TensorCores"
        wanted = {SLICE_BUILDER_BASE + i for i in range(ranks)}
        declared = {p["containerPort"] for p in c.get("ports", [])}
        assert wanted <= declared, f"{where}: slice-builder ports {sorted(wanted - declared)} not declared"


@pc.row("TPU-MH-5", breaks=lambda objs: pc.edit_script(objs, ENGINE, lambda s: s.replace(
    'export VLLM_HOST_IP="${POD_IP}"\n', "")))
def _host_ip(objs):
    for where, c in _engines(objs):
        assert ("VLLM_HOST_IP", "${POD_IP}") in _exports(pc.script(c)), f"{where}: VLLM_HOST_IP is not the pod IP"
        assert pc.env(c).get("POD_IP") == {"fieldRef": {"fieldPath": "status.podIP"}}, f"{where}: no POD_IP"


@pc.row("TPU-MH-6", breaks=lambda objs: pc.edit_script(objs, ENGINE, lambda s: s.replace("ulimit -c 0\n", "")))
def _no_core_dumps(objs):
    for where, c in _engines(objs):
        assert "ulimit -c 0" in pc.script(c).split("\nexec ", 1)[0].splitlines(), f"{where}: core dumps stay on"


@pc.row("TPU-MH-7", breaks=lambda objs: [o["spec"].update(startupPolicy="LeaderReady")
                                          for o in objs if o["kind"] == "LeaderWorkerSet"])
def _hosts_meet_within_the_rendezvous(objs):
    """Every host reaches the rendezvous within its fixed 300 s: workers start with the leader, not once it is ready
    (it is ready only after the rendezvous), and no host spends longer than that resolving the head."""
    for obj in objs:
        if obj["kind"] == "LeaderWorkerSet":
            policy = obj["spec"].get("startupPolicy")
            assert policy == "LeaderCreated", f"{obj['metadata']['name']}: startupPolicy {policy!r}: workers " \
                                              "must start with the leader, not once it is ready"
    for where, c in _engines(objs):
        preamble = pc.script(c).split("\nexec ", 1)[0]
        [bound] = re.findall(r"deadline=\$\(\(SECONDS \+ ([0-9]+)\)\)", preamble)
        [retry] = re.findall(r"^\s*sleep ([0-9]+)$", preamble, re.M)
        assert int(bound) + int(retry) < RENDEZVOUS_TIMEOUT_S, \
            f"{where}: a host may still be resolving the head {bound} + {retry} s after the others start, the " \
            f"rendezvous gives up after {RENDEZVOUS_TIMEOUT_S} s"


# --------------------------------------------------------------------------- prefix caching, offload, engine start
@pc.row("TPU-PREFIX-1", breaks=lambda objs: pc.set_env(objs, ENGINE, UNIFIED_POOL, "0"))
def _align_mode_and_unified_pool(objs):
    for where, c in _engines(objs):
        flags = pc.flags(c)
        if "--enable-prefix-caching" not in flags:
            continue
        assert flags.get("--mamba-cache-mode") == "align", \
            f"{where}: prefix caching with --mamba-cache-mode {flags.get('--mamba-cache-mode')!r} (the platform " \
            "refuses anything but align on the hybrid)"
        assert pc.env(c).get(UNIFIED_POOL) == "1", f"{where}: prefix caching without {UNIFIED_POOL}=1"


@pc.row("TPU-RAIDEN-7", breaks=lambda objs: pc.drop_env(objs, ENGINE, UNIFIED_POOL))
def _offload_on_the_unified_pool(objs):
    for where, c in _engines(objs):
        if pc.json_flag(c, "--kv-transfer-config")["kv_connector"] == "TPURaidenOffloadingConnector":
            assert pc.env(c).get(UNIFIED_POOL) == "1", \
                f"{where}: Raiden offload on the hybrid with {UNIFIED_POOL}={pc.env(c).get(UNIFIED_POOL)!r}"


@pc.row("TPU-READY-1", breaks=lambda objs: pc.drop_env(objs, ENGINE, "VLLM_ENGINE_READY_TIMEOUT_S"))
def _engine_ready_timeout(objs):
    leaders = [(where, c) for where, c in _engines(objs) if where.split("/")[1] == "leader"]
    for where, c in leaders:
        probe = c["startupProbe"]
        budget = probe["periodSeconds"] * probe["failureThreshold"]
        value = int(pc.env(c).get("VLLM_ENGINE_READY_TIMEOUT_S") or DEFAULT_ENGINE_READY_TIMEOUT_S)
        assert value >= budget, f"{where}: the API server gives its engine {value} s, the probe allows {budget} s"
    for where, c in _engines(objs):
        assert pc.env(c).get("VLLM_ENGINE_READY_TIMEOUT_S") == pc.env(leaders[0][1]).get(
            "VLLM_ENGINE_READY_TIMEOUT_S"), f"{where}: another engine-ready timeout than the leader's"


# --------------------------------------------------------------------------- what leaves the pods, the allocator
@pc.row("TPU-PRIVACY-1", breaks=lambda objs: [pc.drop_env(objs, ENGINE, name) for name in pc.USAGE_STATS_OFF])
def _usage_stats_off(objs):
    for where, c in _engines(objs):
        pc.assert_usage_stats_off(where, c)


@pc.row("TPU-PRIVACY-2", breaks=lambda objs: pc.add_hub_token(objs, ENGINE))
def _hub_off(objs):
    for where, c in _engines(objs):
        pc.assert_hub_off(where, c)


@pc.row("TPU-ALLOC-1", breaks=lambda objs: pc.drop_env(objs, ENGINE, "LD_PRELOAD"))
def _tcmalloc_preloaded(objs):
    for where, c in _engines(objs):
        preload = (pc.env(c).get("LD_PRELOAD") or "").split(":")
        assert TCMALLOC in preload, f"{where}: LD_PRELOAD {preload} does not load {TCMALLOC}"


test_tpu_precondition_holds = pc.holds_test("TPU")

"""Model servers in the plan: every engine flag exists in the pinned release, JSON keys are the ones
the engine accepts, and the topology agrees with the node pools."""

from __future__ import annotations

import json

import pytest

from components.facts import catalog, contract
from components.facts.versions import SGLANG_TORCHTPU_FLAGS_VERSION, VLLM, VLLM_TORCHTPU
from components.plan.engines import UNRELEASED_FLAG_VALUES
from tests import engine_facts as facts
from tests.conftest import Plan

NODE_POOL = "gcp:container/nodePool:NodePool"


def manifest(plan: Plan, kind: str) -> dict:
    [found] = [m for m in plan.manifests if m["kind"] == kind]
    return found


def engine_scripts(plan: Plan) -> list[tuple[str, list[str]]]:
    """(where, argv) of every generated engine command in the plan."""
    commands = []
    for m in plan.manifests:
        for where, container in facts.containers(m):
            if container.get("command") == ["/bin/bash", "-c"] and "exec " in container["args"][0]:
                commands.append((where, facts.exec_argv(container["args"][0])))
    return commands


def flag_table(shared, argv: list[str], track: str) -> tuple[dict, bool]:
    """The parser dump for the engine this argv launches, and whether unreleased seed values are allowed."""
    folder = shared / "engine-flags"
    if argv[:2] == ["vllm", "serve"] and track == "gpu":
        return facts.parser_flags(folder / f"vllm-{VLLM.version}.tsv"), False
    if argv[:2] == ["vllm", "serve"]:  # the file name is not a vLLM version: load it by name (its README)
        return facts.parser_flags(folder / f"vllm-torchtpu-{VLLM_TORCHTPU.version}.tsv"), False
    if argv[:3] == ["python3", "-m", "sglang.launch_server"]:
        return facts.parser_flags(folder / f"sglang-{SGLANG_TORCHTPU_FLAGS_VERSION}.tsv"), True
    raise AssertionError(f"unknown engine command {argv[:3]}")


PLANS = {"gpu": "gpu", "tpu": "tpu", "gateway": "gpu", "sglang": "tpu", "spec": "gpu", "tpu-bf16": "tpu"}


@pytest.fixture(scope="module")
def all_plans(plans, variants) -> dict[str, Plan]:
    return {name: plans[name] if name in plans else variants[name] for name in PLANS}


@pytest.mark.parametrize("name", PLANS)
def test_every_engine_flag_exists_in_the_pinned_release(all_plans, shared, name):
    commands = engine_scripts(all_plans[name])
    assert commands, "no engine command found"
    for where, argv in commands:
        table, unreleased = flag_table(shared, argv, PLANS[name])
        for flag, value in facts.split_flags(argv):
            known = table.get(flag) or table.get(facts.canonical(flag))
            if unreleased and (flag, value) in UNRELEASED_FLAG_VALUES:
                continue
            assert known, f"{where}: {flag} is not a flag of the pinned engine"
            if known.choices and value is not None:
                assert value in known.choices, f"{where}: {flag} {value} not in {known.choices}"


def test_tpu_runs_vllm_torchtpu_by_default_and_sglang_only_when_chosen(all_plans, variants, shared):
    """No sglang-jax anywhere; the unreleased SGLang build goes beyond the 0.5.23 parser only with the listed seed
    values, and the default engine carries none of them."""
    for name in PLANS:
        for where, argv in engine_scripts(all_plans[name]):
            assert "sgl_jax.launch_server" not in argv, where
    for where, argv in engine_scripts(all_plans["tpu"]):
        assert argv[:2] == ["vllm", "serve"], where
    argv = engine_scripts(variants["sglang"])[0][1]
    table = facts.parser_flags(shared / "engine-flags" / f"sglang-{SGLANG_TORCHTPU_FLAGS_VERSION}.tsv")
    beyond = {(f, v) for f, v in facts.split_flags(argv)
              if f in table and table[f].choices and v is not None and v not in table[f].choices}
    assert beyond == UNRELEASED_FLAG_VALUES
    default = dict(facts.split_flags(engine_scripts(all_plans["tpu"])[0][1]))
    assert not {(f, default.get(f)) for f, _ in UNRELEASED_FLAG_VALUES} & UNRELEASED_FLAG_VALUES


@pytest.mark.parametrize("name", ["gpu", "spec", "gateway"])
def test_vllm_json_flags_use_only_accepted_keys(all_plans, shared, name):
    engines_md = shared / "reference" / "engines.md"
    top = facts.vllm_kv_transfer_keys(engines_md, VLLM.version)
    offload = facts.offloading_extra_keys(engines_md)
    for where, argv in engine_scripts(all_plans[name]):
        flags = dict(facts.split_flags(argv))
        transfer = json.loads(flags["--kv-transfer-config"])
        assert set(transfer) <= top, where
        children = transfer["kv_connector_extra_config"]["connectors"]
        assert [c["kv_connector"] for c in children] == ["NixlConnector", "OffloadingConnector"]
        for child in children:
            assert set(child) <= top, where
        assert set(children[1]["kv_connector_extra_config"]) <= offload
        if "--speculative-config" in flags:
            assert set(json.loads(flags["--speculative-config"])) <= facts.vllm_speculative_keys(engines_md)


@pytest.mark.parametrize("name", ["tpu", "tpu-bf16"])
def test_tpu_vllm_json_flags_use_only_accepted_keys(all_plans, shared, name):
    """The Raiden offloading connector takes the byte budget and the leader's controller
    address and port, the keys vllm_torchtpu/offload/raiden_store.py reads from kv_connector_extra_config
    (:2186 cpu_bytes_to_use, :2255 store_server_ip, :2305 raiden_controller_port)."""
    engines_md = shared / "reference" / "engines.md"
    for where, argv in engine_scripts(all_plans[name]):
        flags = dict(facts.split_flags(argv))
        transfer = json.loads(flags["--kv-transfer-config"])
        assert set(transfer) <= facts.vllm_kv_transfer_keys(engines_md, VLLM.version) | {"kv_connector_module_path"}
        assert transfer["kv_connector"] == "TPURaidenOffloadingConnector", where
        assert transfer["kv_connector_module_path"] == "vllm_torchtpu.offload.raiden_connector"
        assert set(transfer["kv_connector_extra_config"]) == {"cpu_bytes_to_use", "store_server_ip",
                                                               "raiden_controller_port"}


def test_routing_sidecar_flags(gpu, shared):
    allowed, connectors = facts.sidecar_flags(shared / "reference" / "llm-d.md")
    ds = manifest(gpu, "DisaggregatedSet")
    decode = next(r for r in ds["spec"]["roles"] if r["name"] == "decode")
    pod = decode["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    [sidecar] = pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    flags = dict(facts.split_flags(sidecar["args"]))
    assert set(flags) <= allowed
    assert flags["--kv-connector"] in connectors
    vllm_port = dict(facts.split_flags(facts.exec_argv(pod["containers"][0]["args"][0])))["--port"]
    assert flags["--model-server-port"] == vllm_port == str(contract.DECODE_ENGINE_PORT)
    assert flags["--port"] == str(contract.MODEL_SERVER_PORT)


# ----------------------------------------------------------------------------------------- topology
def test_pd_topology_fills_the_gpu_pool(gpu):
    ds = manifest(gpu, "DisaggregatedSet")
    roles = {r["name"]: dict(r["spec"]) for r in ds["spec"]["roles"]}
    # Each role's replicas are its RoleScaler's, which its ScaledObject keeps within min..max (the pool holds max).
    most = {m["spec"]["scaleTargetRef"]["name"].rsplit("-", 1)[1]: m["spec"]["maxReplicaCount"]
            for m in gpu.manifests if m["kind"] == "ScaledObject"}
    assert "replicas" not in roles["prefill"] and (most["prefill"], most["decode"]) == (3, 1)
    for name, spec in roles.items():
        spec["replicas"] = most[name]
    pool = gpu.one(NODE_POOL, "gpu-0")["inputs"]
    pods = gpus = 0
    for spec in roles.values():
        group = spec["leaderWorkerTemplate"]
        pod = group["workerTemplate"]["spec"]
        per_pod = int(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        pods += spec["replicas"] * group["size"]
        gpus += spec["replicas"] * group["size"] * per_pod
        accelerator = pool["nodeConfig"]["guestAccelerators"][0]["type"]
        assert pod["nodeSelector"]["cloud.google.com/gke-accelerator"] == accelerator
        assert spec["rolloutStrategy"]["rollingUpdateConfiguration"]["maxSurge"] == 0
    assert pods == pool["nodeCount"]
    assert gpus == pool["nodeCount"] * pool["nodeConfig"]["guestAccelerators"][0]["count"]


def test_vllm_parallelism_maps_the_seed_onto_dp_x_ep(gpu):
    """Seed "TP=16, EP=8": vLLM derives EP = TP x DP; a 16-GPU group runs TP=1 x DP=16, so EP=16 (engines.md §1.2)."""
    ds = manifest(gpu, "DisaggregatedSet")
    for role in ds["spec"]["roles"]:
        group = role["spec"]["leaderWorkerTemplate"]
        argv = facts.exec_argv(group["workerTemplate"]["spec"]["containers"][0]["args"][0])
        flags = dict(facts.split_flags(argv))
        assert "--enable-expert-parallel" in flags and "--data-parallel-multi-port-external-lb" in flags
        tp, dp, local = (int(flags[k]) for k in ("--tensor-parallel-size", "--data-parallel-size",
                                                 "--data-parallel-size-local"))
        ep = tp * dp
        assert ep == group["size"] * catalog.GPU_MACHINES["a4x-max"].gpus_per_node == 16
        assert local * tp == catalog.GPU_MACHINES["a4x-max"].gpus_per_node
        assert catalog.KIMI.routed_experts % ep == 0, "experts must divide evenly over EP ranks"
        assert flags["--block-size"] == "11392"  # the engine-effective block (tests/plan/test_kvblocks.py)


def test_tpu_topology_fills_two_slices(tpu):
    lws = manifest(tpu, "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    pools = [p["inputs"] for p in tpu.of_type(NODE_POOL) if p["parent"] == "tpu"]
    chips_in_pools = sum(p["nodeCount"] * catalog.IRONWOOD.chips_per_host for p in pools)
    # Created at the autoscaler's minimum; its ScaledObject may take it to one engine per slice.
    [scaled] = [m for m in tpu.manifests if m["kind"] == "ScaledObject"]
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": "leaderworkerset.x-k8s.io/v1",
                                                "kind": "LeaderWorkerSet", "name": lws["metadata"]["name"]}
    most = scaled["spec"]["maxReplicaCount"]
    pods = most * template["size"]
    per_pod = int(template["leaderTemplate"]["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"])
    assert (lws["spec"]["replicas"], most, template["size"], per_pod) == (1, 2, 4, 4)
    assert pods * per_pod == chips_in_pools == 32
    assert lws["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"] == \
        "cloud.google.com/gke-nodepool", "one replica per slice node pool"
    topologies = {p["placementPolicy"]["tpuTopology"] for p in pools}
    for key in ("leaderTemplate", "workerTemplate"):
        selector = template[key]["spec"]["nodeSelector"]
        assert selector["cloud.google.com/gke-tpu-topology"] in topologies
        argv = facts.exec_argv(template[key]["spec"]["containers"][0]["args"][0])
        flags = dict(facts.split_flags(argv))
        devices = catalog.topology_chips(selector["cloud.google.com/gke-tpu-topology"]) * \
            catalog.IRONWOOD.tensorcores_per_chip
        # One engine per slice as the vLLM-TorchTPU Kimi K3 nightly runs it: TP over every TensorCore, EP over all.
        assert flags["--tensor-parallel-size"] == str(devices) and "--enable-expert-parallel" in flags
        assert (flags["--nnodes"], flags["--node-rank"]) == (str(template["size"]), "${LWS_WORKER_INDEX}")
        assert flags["--master-addr"] == "${LEADER_IP}"  # resolved from the leader name (engines.py)
        assert ("--headless" in flags) == (key == "workerTemplate"), "workers run headless, the leader serves"
        assert "--language-model-only" in flags and flags["--mamba-cache-mode"] == "align"
        assert "--enable-prefix-caching" in flags
        assert flags["--max-model-len"] == str(480 * 1024)
        assert flags["--kv-cache-dtype"] == "fp8"
        assert (flags["--reasoning-parser"], flags["--tool-call-parser"]) == ("kimi_k3", "kimi_k3")
        cpu_bytes = json.loads(flags["--kv-transfer-config"])["kv_connector_extra_config"]["cpu_bytes_to_use"]
        # The post's HiCache ratio 2: twice the slice's HBM KV pool (18.68e9 B per rank after weights and the
        # nightly's non-weight HBM, tests/plan/test_capacity.py), in bytes.
        assert cpu_bytes == pytest.approx(2 * 32 * 18_683_107_737.6, rel=1e-9)


# ----------------------------------------------------------------------------------------- pods
@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_pods_mount_the_weights_read_only_and_wait_long_enough(plans, stack):
    plan = plans[stack]
    kind = "DisaggregatedSet" if stack == "gpu" else "LeaderWorkerSet"
    served = manifest(plan, kind)
    annotations = served["metadata"]["annotations"]
    wait_for = json.loads(annotations["pulumi.com/waitFor"])
    if stack == "gpu":  # every role's ready replicas, read from status.roleStatuses (llm-d.md §3.1)
        # autoscaled roles (scaling.mode External) start at the RoleScaler's seed, 1
        assert wait_for == [f'jsonpath={{.status.roleStatuses[?(@.name=="{r["name"]}")].readyReplicas}}='
                            f'{r["spec"].get("replicas", 1)}' for r in served["spec"]["roles"]]
        assert all(r["scaling"] == {"mode": "External"} for r in served["spec"]["roles"])
    else:
        assert wait_for == ["condition=Available", f'jsonpath={{.status.readyReplicas}}={served["spec"]["replicas"]}']
    wait_s = int(annotations["pulumi.com/timeoutSeconds"])
    pvc = manifest(plan, "PersistentVolumeClaim")["metadata"]["name"]
    for where, container in facts.containers(served):
        if container["name"] in ("routing-proxy", "tpu-node-setup"):  # not engines
            continue
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == contract.MODELS_MOUNT_PATH)
        assert mount["readOnly"] is True, where
        flags = dict(facts.split_flags(facts.exec_argv(container["args"][0])))
        assert contract.MODELS_MOUNT_PATH in (flags.get("--model-path"), facts.exec_argv(container["args"][0])[2])
        if "--headless" in flags:  # a headless vLLM worker serves no HTTP: its leader's probes cover the group
            assert "startupProbe" not in container, where
        else:
            startup = container["startupProbe"]
            # The budget itself follows the modelled load time (tests/plan/test_loading.py); pulumi waits longer
            # than it.
            assert wait_s > startup["periodSeconds"] * startup["failureThreshold"], where
        env = {e["name"]: e for e in container["env"]}
        # The weights, config and tokenizer are on the volume: the engine never reads the Hub, so no token
        # (the staging Job keeps it, tests/weights/) and the Hub off (components/serving/modelservers.py
        # ENGINE_PRIVACY_ENV).
        assert "HF_TOKEN" not in env and not container.get("envFrom"), where
        assert env["HF_HUB_OFFLINE"]["value"] == "1", where
    volumes = [v for role_or_pod in [served] for v in _volumes(role_or_pod)]
    assert all(v["persistentVolumeClaim"] == {"claimName": pvc, "readOnly": True}
               for v in volumes if "persistentVolumeClaim" in v)


def _volumes(node) -> list[dict]:
    found = []
    if isinstance(node, dict):
        found += node.get("volumes") or []
        for value in node.values():
            found += _volumes(value)
    elif isinstance(node, list):
        for value in node:
            found += _volumes(value)
    return found


def test_gpu_pods_claim_the_compute_domain_and_rdma(gpu):
    domain = manifest(gpu, "ComputeDomain")
    rdma = manifest(gpu, "ResourceClaimTemplate")
    ds = manifest(gpu, "DisaggregatedSet")
    for role in ds["spec"]["roles"]:
        pod = role["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        templates = {c["resourceClaimTemplateName"] for c in pod["resourceClaims"]}
        assert templates == {domain["spec"]["channel"]["resourceClaimTemplate"]["name"], rdma["metadata"]["name"]}
        claims = {c["name"] for c in pod["containers"][0]["resources"]["claims"]}
        assert claims == {c["name"] for c in pod["resourceClaims"]}
        assert pod["nodeSelector"]["gke.networks.io/accelerator-network-profile"] == "auto"
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_cpu_offload_fits_the_pod_and_the_node(gpu):
    ds = manifest(gpu, "DisaggregatedSet")
    machine = catalog.GPU_MACHINES["a4x-max"]
    for role in ds["spec"]["roles"]:
        pod = role["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        flags = dict(facts.split_flags(facts.exec_argv(pod["containers"][0]["args"][0])))
        offload = json.loads(flags["--kv-transfer-config"])["kv_connector_extra_config"]["connectors"][1]
        per_node = offload["kv_connector_extra_config"]["cpu_bytes_to_use"] * int(flags["--data-parallel-size-local"])
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"]
        assert per_node <= int(shm.removesuffix("Gi")) * 2**30, "the offload tier is mmap'ed in /dev/shm"
        memory = int(pod["containers"][0]["resources"]["requests"]["memory"].removesuffix("Gi")) * 2**30
        assert int(shm.removesuffix("Gi")) * 2**30 <= memory <= machine.host_memory_gb * 1e9


def test_no_pod_opens_a_kv_events_port(all_plans):
    """No engine publishes KV events (components/plan/engines.py; tests/router/test_router.py
    test_kv_events_have_a_consumer),
    so no serving pod declares a port for them and no engine reads the pod address a KV-events topic named."""
    for name, plan in all_plans.items():
        for where, container in (c for m in plan.manifests for c in facts.containers(m)):
            assert not [p for p in container.get("ports") or [] if p.get("name", "").startswith("kv-events")], where
        for where, argv in engine_scripts(plan):
            assert "--kv-events-config" not in dict(facts.split_flags(argv)), (name, where)


def test_speculative_decoding_on_gpu(variants):
    for _, argv in engine_scripts(variants["spec"]):
        value = dict(facts.split_flags(argv))["--speculative-config"]
        assert json.loads(value) == {"method": "dflash", "model": "/models/dflash", "num_speculative_tokens": 3}


def test_committed_stacks_leave_speculation_off(gpu, tpu):
    for plan in (gpu, tpu):
        for _, argv in engine_scripts(plan):
            flags = dict(facts.split_flags(argv))
            assert "--speculative-config" not in flags and "--speculative-algorithm" not in flags


def test_nixl_roles_follow_the_pd_roles(gpu):
    """Prefill produces KV for NIXL to send, decode consumes it (llm-d.md §3.3)."""
    ds = manifest(gpu, "DisaggregatedSet")
    for role in ds["spec"]["roles"]:
        container = role["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
        transfer = json.loads(dict(facts.split_flags(facts.exec_argv(container["args"][0])))["--kv-transfer-config"])
        connectors = transfer["kv_connector_extra_config"]["connectors"]
        nixl = next(c for c in connectors if c["kv_connector"] == "NixlConnector")
        assert nixl["kv_role"] == {"prefill": "kv_producer", "decode": "kv_consumer"}[role["name"]]


def _shell_value(preamble: list[str], name: str, env: dict[str, int]) -> int:
    """Evaluate `NAME=$(( expr ))` from a pod script's preamble with the given variables."""
    import re

    for line in preamble:
        match = re.fullmatch(rf"{name}=\$\(\( (.+) \)\)", line)
        if match:
            expression = match.group(1)
            for var, value in {**env}.items():
                expression = re.sub(rf"\b{var}\b", str(value), expression)
            assert re.fullmatch(r"[\d\s*+-]+", expression), expression
            return int(eval(expression, {"__builtins__": {}}))  # integer arithmetic only, checked above
    raise AssertionError(f"{name} is not set in the script")


def test_each_pod_listens_on_its_own_declared_ports(gpu):
    """vLLM adds the global DP rank to VLLM_NIXL_SIDE_CHANNEL_PORT
    (vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py at v0.33.0:
    `envs.VLLM_NIXL_SIDE_CHANNEL_PORT + parallel_config.data_parallel_index`, which vllm/config/parallel.py sets to
    the data-parallel rank). With each script's bases, every pod's engines land on exactly the ports it declares."""
    ds = manifest(gpu, "DisaggregatedSet")
    for role in ds["spec"]["roles"]:
        group = role["spec"]["leaderWorkerTemplate"]
        for template in ("leaderTemplate", "workerTemplate"):
            container = (group.get(template) or group["workerTemplate"])["spec"]["containers"][0]
            script = container["args"][0]
            preamble = [line.removeprefix("export ") for line in script.splitlines() if "=$((" in line]
            flags = dict(facts.split_flags(facts.exec_argv(script)))
            local = int(flags["--data-parallel-size-local"])
            declared = {name: {p["containerPort"] for p in container["ports"] if p["name"].startswith(name)}
                        for name in ("nixl",)}
            assert all(declared.values()), declared
            env = {e["name"] for e in container["env"]}
            assert "VLLM_NIXL_SIDE_CHANNEL_PORT" not in env, "the script sets the per-pod base"
            for worker in range(group["size"]):
                start = _shell_value(preamble, "START_RANK", {"LWS_WORKER_INDEX": worker})
                ranks = [start + local_rank for local_rank in range(local)]  # global DP ranks of this pod
                nixl_base = _shell_value(preamble, "VLLM_NIXL_SIDE_CHANNEL_PORT", {"START_RANK": start})
                assert {nixl_base + rank for rank in ranks} == declared["nixl"], (role["name"], worker)
                assert flags["--data-parallel-start-rank"] == "${START_RANK}"


def test_no_role_depends_on_deepep(gpu):
    """R580+ drivers, which GB300 needs, crash DeepEP's high-throughput kernels
    (https://github.com/llm-d/llm-d/blob/aa259bf/guides/wide-ep/modelserver/gpu/vllm-deepseek-r1-0528/gke/README.md),
    and DeepEP v2 is not shown to be in the arm64 image: both roles run K3's MegaMoE, which the vLLM wheel carries
    (docs/seed-vs-reality.md, docs/engine-preconditions.md GPU-MOE rows)."""
    ds = manifest(gpu, "DisaggregatedSet")
    for role in ds["spec"]["roles"]:
        container = role["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
        flags = dict(facts.split_flags(facts.exec_argv(container["args"][0])))
        assert not (flags.get("--all2all-backend") or "").startswith("deepep"), role["name"]
        assert flags["--moe-backend"] == "deep_gemm_mega_moe", role["name"]


def test_tpu_pods_declare_what_the_engine_binds(tpu):
    """Leader: HTTP, the --nnodes master port and the rendezvous next to it, the Raiden controller; every
    host: one TorchTPU slice-builder port per rank it runs, a TensorCore each: 8 on a 4-chip Ironwood host
    (vllm_torchtpu/distributed/tpu_mp_multihost.py `local_world_size`)."""
    template = manifest(tpu, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    flags = dict(facts.split_flags(facts.exec_argv(leader["args"][0])))
    master = int(flags["--master-port"])
    ranks = catalog.IRONWOOD.chips_per_host * catalog.IRONWOOD.tensorcores_per_chip
    assert int(flags["--tensor-parallel-size"]) // int(flags["--nnodes"]) == ranks == 8
    slices = {8070 + i for i in range(ranks)}
    assert {p["containerPort"] for p in leader["ports"]} == {int(flags["--port"]), master, master + 1,
                                                             51515, *slices}
    assert {p["containerPort"] for p in worker["ports"]} == slices
    assert "readinessProbe" in leader and "readinessProbe" not in worker, "headless workers serve no HTTP"


def test_tpu_host_memory_breakdown_is_in_the_summary(plans):
    """Every term of a TPU host's memory has its figure (modelservers.TpuHostMemory) and the summary shows the sum
    against the node's allocatable; the shm term is the engine's multi-host recipe's `--shm-size=128G`."""
    from components.plan import capacity
    from components.serving import modelservers
    from tests.config.test_config import parse

    cfg = parse("tpu")
    need = modelservers.tpu_host_memory(capacity.serving_capacity(cfg).host_bytes_per_node)
    assert need.shm == 128 and need.total == need.pool + need.shm + need.compiled + need.processes
    assert need.processes == 8 * modelservers.TPU_RANK_RESIDENT_GIB + modelservers.TPU_FRONTEND_GIB
    [line] = [x for x in plans["tpu"].summary.splitlines() if "TPU pod memory per host" in x]
    assert f"{need.total} GiB = offload pool {need.pool} + /dev/shm {need.shm}" in line
    assert "fits tpu7x-standard-4t allocatable" in line
    assert f"the pod requests and limits {need.total} GiB, /dev/shm {need.shm} GiB" in line


def test_tpu_pod_memory_and_shm_follow_the_breakdown(plans):
    """Request, limit and the memory-backed /dev/shm of every TPU engine pod are the breakdown's (the kubelet charges
    a memory emptyDir to the pod, so the limit holds it); the scheduling proof holds them against the node."""
    from components.plan import capacity
    from components.serving import modelservers
    from tests.config.test_config import parse

    need = modelservers.tpu_host_memory(capacity.serving_capacity(parse("tpu")).host_bytes_per_node)
    [lws] = [m for m in plans["tpu"].manifests if m["kind"] == "LeaderWorkerSet"]
    for template in ("leaderTemplate", "workerTemplate"):
        spec = lws["spec"]["leaderWorkerTemplate"][template]["spec"]
        [engine] = spec["containers"]
        assert engine["resources"]["requests"]["memory"] == engine["resources"]["limits"]["memory"] == \
            f"{need.total}Gi"
        [shm] = [v for v in spec["volumes"] if v["name"] == "dshm"]
        assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{need.shm}Gi"}


def test_the_tpu_launch_switch_runs_the_released_launchers_layout(plans):
    """tpu.launch=dp-across-hosts (with tpu.tensorParallel=8): every host runs its data-parallel engine with TP inside
    it, as vLLM-TorchTPU's released GKE launcher does (mp_multihost_entry.sh: --data-parallel-size/-local/-address/
    -rpc-port; the head one API server; the others --headless from --data-parallel-start-rank); no --nnodes. Each host
    declares its 8 ranks' slice builders and its engine's Raiden controller (its scheduler runs there, so the ranks dial
    the pod's own address); the leader the RPC port, the rendezvous beside it and the DP groups' ports. The default
    stays the --nnodes layout, and the summary says which released run each follows."""
    from components.plan import capacity, engines, parallel
    from components.serving import modelservers
    from tests.config.test_config import parse

    cfg = parse("tpu", tpu__launch="dp-across-hosts", tpu__tensorParallel=8)
    replica = parallel.layout(cfg).role("slice")
    assert (replica.engines, replica.engines_per_node, replica.expert_parallel) == (4, 1, 32)
    for rank in ("leader", "worker"):
        command = engines.vllm_torchtpu_command(cfg, rank)
        flags = dict(facts.split_flags(list(command.argv)))
        assert "--nnodes" not in flags and "--master-addr" not in flags
        assert (flags["--data-parallel-size"], flags["--data-parallel-size-local"], flags["--tensor-parallel-size"],
                flags["--data-parallel-address"], flags["--data-parallel-rpc-port"]) == (
            "4", "1", "8", engines.LEADER_IP, str(contract.TPU_MASTER_PORT))
        if rank == "worker":
            assert "--headless" in flags and flags["--data-parallel-start-rank"] == engines.START_RANK
            assert "START_RANK=$(( LWS_WORKER_INDEX * 1 ))" in command.preamble
        else:
            assert flags["--api-server-count"] == "1" and "--headless" not in flags
        extra = json.loads(flags["--kv-transfer-config"])["kv_connector_extra_config"]
        assert extra["store_server_ip"] == engines.POD_IP
        assert extra["cpu_bytes_to_use"] == capacity.tpu_offload_bytes_per_engine(cfg)
        ports = {p.name: p.container_port for p in modelservers.tpu_ports(cfg, rank)}
        assert {ports[f"slice-{i}"] for i in range(8)} == set(range(8070, 8078))
        assert ports["raiden-0"] == engines.RAIDEN_CONTROLLER_PORT
        if rank == "leader":
            master = contract.TPU_MASTER_PORT
            assert (ports["master"], ports["rendezvous"]) == (master, master + 1)
            assert {ports[f"dp-group-{i}"] for i in range(5)} == {master + 100 + i for i in range(5)}
    # Four engines of TP=8 each hold a pool of their own.
    assert capacity.serving_capacity(cfg).kv_groups == 4
    summary = plans["tpu"].summary
    assert "TPU launch (tpu.launch=tp-across-hosts)" in summary and "a path no released run takes" in summary
    assert "tpu.launch=dp-across-hosts with tpu.tensorParallel=8 switches" in summary

"""Model servers in the plan: every engine flag exists in the pinned release, JSON keys are the ones
the engine accepts, and the topology agrees with the node pools."""

from __future__ import annotations

import json

import pytest

from components import catalog, contract
from components.engines import DAY0_FLAG_VALUES
from components.versions import SGLANG_DAY0_FLAGS_VERSION, SGLANG_JAX, VLLM
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


def flag_table(shared, argv: list[str]) -> tuple[dict, bool]:
    """The parser dump for the engine this argv launches, and whether day-0 values are allowed."""
    folder = shared / "engine-flags"
    if argv[:2] == ["vllm", "serve"]:
        return facts.parser_flags(folder / f"vllm-{VLLM.version}.tsv"), False
    if argv[:3] == ["python3", "-m", "sgl_jax.launch_server"]:
        return facts.parser_flags(folder / f"sglang-jax-main-{SGLANG_JAX.commit}.txt"), False
    if argv[:3] == ["python3", "-m", "sglang.launch_server"]:
        return facts.parser_flags(folder / f"sglang-{SGLANG_DAY0_FLAGS_VERSION}.tsv"), True
    raise AssertionError(f"unknown engine command {argv[:3]}")


PLANS = ["gpu", "tpu", "gateway", "day0", "spec", "tpu-spec"]


@pytest.fixture(scope="module")
def all_plans(plans, variants) -> dict[str, Plan]:
    return {name: plans[name] if name in plans else variants[name] for name in PLANS}


@pytest.mark.parametrize("name", PLANS)
def test_every_engine_flag_exists_in_the_pinned_release(all_plans, shared, name):
    commands = engine_scripts(all_plans[name])
    assert commands, "no engine command found"
    for where, argv in commands:
        table, day0 = flag_table(shared, argv)
        for flag, value in facts.split_flags(argv):
            known = table.get(flag) or table.get(facts.canonical(flag))
            if day0 and (flag, value) in DAY0_FLAG_VALUES:
                continue
            assert known, f"{where}: {flag} is not a flag of the pinned engine"
            if known.choices and value is not None:
                assert value in known.choices, f"{where}: {flag} {value} not in {known.choices}"


def test_day0_flags_are_exactly_the_documented_exceptions(variants, shared):
    """The day-0 profile may only go beyond the 0.5.23 parser with the listed seed values."""
    argv = engine_scripts(variants["day0"])[0][1]
    table = facts.parser_flags(shared / "engine-flags" / f"sglang-{SGLANG_DAY0_FLAGS_VERSION}.tsv")
    beyond = {(f, v) for f, v in facts.split_flags(argv)
              if f in table and table[f].choices and v is not None and v not in table[f].choices}
    assert beyond == DAY0_FLAG_VALUES
    # The release profile carries none of them.
    release = dict(facts.split_flags(engine_scripts(variants["tpu-spec"])[0][1]))
    assert not {(f, release.get(f)) for f, _ in DAY0_FLAG_VALUES} & DAY0_FLAG_VALUES


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
        events = json.loads(flags["--kv-events-config"])
        assert set(events) <= facts.vllm_kv_events_keys(engines_md)
        if "--speculative-config" in flags:
            assert set(json.loads(flags["--speculative-config"])) <= facts.vllm_speculative_keys(engines_md)


@pytest.mark.parametrize("name", ["tpu", "day0", "tpu-spec"])
def test_sglang_kv_events_keys(all_plans, shared, name):
    keys = facts.sglang_kv_events_keys(shared / "reference" / "engines.md")
    for _, argv in engine_scripts(all_plans[name]):
        events = json.loads(dict(facts.split_flags(argv))["--kv-events-config"])
        assert set(events) <= keys
        assert events["publisher"] == "zmq", "SGLang publishes only with publisher=zmq (engines.md §2.4)"


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
    roles = {r["name"]: r["spec"] for r in ds["spec"]["roles"]}
    assert (roles["prefill"]["replicas"], roles["decode"]["replicas"]) == (3, 1)
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
        assert "--enable-expert-parallel" in flags and "--data-parallel-hybrid-lb" in flags
        tp, dp, local = (int(flags[k]) for k in ("--tensor-parallel-size", "--data-parallel-size",
                                                 "--data-parallel-size-local"))
        ep = tp * dp
        assert ep == group["size"] * catalog.GPU_MACHINES["a4x-max"].gpus_per_node == 16
        assert local * tp == catalog.GPU_MACHINES["a4x-max"].gpus_per_node
        assert catalog.KIMI.routed_experts % ep == 0, "experts must divide evenly over EP ranks"
        assert flags["--block-size"] == str(contract.KV_BLOCK_TOKENS)


def test_tpu_topology_fills_two_slices(tpu):
    lws = manifest(tpu, "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    pools = [p["inputs"] for p in tpu.of_type(NODE_POOL) if p["parent"] == "tpu"]
    chips_in_pools = sum(p["nodeCount"] * catalog.IRONWOOD.chips_per_host for p in pools)
    pods = lws["spec"]["replicas"] * template["size"]
    per_pod = int(template["leaderTemplate"]["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"])
    assert (lws["spec"]["replicas"], template["size"], per_pod) == (2, 4, 4)
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
        assert (flags["--tp-size"], flags["--ep-size"]) == (str(devices), "8")
        assert flags["--nnodes"] == str(template["size"])
        assert flags["--page-size"] == str(contract.KV_BLOCK_TOKENS)
        assert flags["--context-length"] == str(480 * 1024)
        assert flags["--kv-cache-dtype"] == "fp8_e4m3"
        assert flags["--hicache-ratio"] == "2"


# ----------------------------------------------------------------------------------------- pods
@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_pods_mount_the_weights_read_only_and_wait_long_enough(plans, stack):
    plan = plans[stack]
    kind = "DisaggregatedSet" if stack == "gpu" else "LeaderWorkerSet"
    served = manifest(plan, kind)
    annotations = served["metadata"]["annotations"]
    wait_for = json.loads(annotations["pulumi.com/waitFor"])
    if stack == "gpu":  # every role's ready replicas, read from status.roleStatuses (llm-d.md §3.1)
        assert wait_for == [f'jsonpath={{.status.roleStatuses[?(@.name=="{r["name"]}")].readyReplicas}}='
                            f'{r["spec"]["replicas"]}' for r in served["spec"]["roles"]]
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
        startup = container["startupProbe"]
        # The budget itself follows the modelled load time (tests/test_loading.py); pulumi waits longer than it.
        assert wait_s > startup["periodSeconds"] * startup["failureThreshold"], where
        env = {e["name"]: e for e in container["env"]}
        assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "llm-d-hf-token", "key": "HF_TOKEN"}
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


def test_kv_events_reach_the_declared_ports(gpu, tpu):
    for plan in (gpu, tpu):
        for _, argv in engine_scripts(plan):
            events = json.loads(dict(facts.split_flags(argv))["--kv-events-config"])
            assert events["topic"].startswith(contract.KV_EVENTS_TOPIC_PREFIX)
            assert events["topic"].endswith(f":{contract.MODEL_SERVER_PORT}@{catalog.KIMI.hf_id}")
    for _, container in facts.containers(manifest(gpu, "DisaggregatedSet")):
        if container["name"] == "vllm":
            ports = {p["containerPort"] for p in container["ports"]}
            assert contract.KV_EVENTS_PORT in ports


@pytest.mark.parametrize("name,engine_flag,expected", [
    ("spec", "--speculative-config", {"method": "dflash", "model": "/models/dflash", "num_speculative_tokens": 3}),
    ("tpu-spec", "--speculative-algorithm", "NEXTN"),
    ("day0", "--speculative-draft-model-path", "/models/nextn"),
])
def test_speculative_decoding_per_engine(variants, name, engine_flag, expected):
    for _, argv in engine_scripts(variants[name]):
        value = dict(facts.split_flags(argv))[engine_flag]
        assert (json.loads(value) if isinstance(expected, dict) else value) == expected
    if name == "tpu-spec":
        assert "--speculative-draft-model-path" not in dict(facts.split_flags(engine_scripts(variants[name])[0][1]))


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


def test_each_pod_publishes_kv_events_on_its_own_declared_ports(gpu):
    """vLLM adds the global DP rank to the endpoint port (engines.md §1.4): with the script's base every pod's
    engines land on exactly the container ports it declares."""
    ds = manifest(gpu, "DisaggregatedSet")
    for role in ds["spec"]["roles"]:
        group = role["spec"]["leaderWorkerTemplate"]
        container = group["workerTemplate"]["spec"]["containers"][0]
        script = container["args"][0]
        preamble = [line for line in script.splitlines() if "=$((" in line]
        flags = dict(facts.split_flags(facts.exec_argv(script)))
        local = int(flags["--data-parallel-size-local"])
        declared = {p["containerPort"] for p in container["ports"] if p["name"].startswith("kv-events")}
        for worker in range(group["size"]):
            start = _shell_value(preamble, "START_RANK", {"LWS_WORKER_INDEX": worker})
            base = _shell_value(preamble, "KV_EVENTS_BASE", {"START_RANK": start})
            ports = {base + start + local_rank for local_rank in range(local)}  # port + global DP rank
            assert ports == declared, (role["name"], worker)
            assert flags["--data-parallel-start-rank"] == "${START_RANK}"

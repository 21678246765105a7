"""The GPU rows of docs/engine-preconditions.md: what vLLM 0.33.0 asserts, reads or binds on its start-up path,
checked against the rendered prefill and decode pods (tests/preconditions.py). Each check reads the pods; each
`breaks` takes exactly that precondition out of a copy of them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from components.facts import catalog
from tests import preconditions as pc

ENGINE = "vllm"
HMA_CONNECTORS = frozenset({"MultiConnector", "NixlConnector", "OffloadingConnector"})
"""Connectors of the pods' kv-transfer-config that implement SupportsHMA in vLLM 0.33.0
(multi_connector.py:133, nixl/connector.py:78, offloading_connector.py:53)."""
SM100_ACCELERATORS = frozenset({"nvidia-gb300", "nvidia-gb200"})
"""GKE accelerator labels of the catalog's Blackwell (compute capability 10.x) machines."""


def _engines(objs: pc.Objects) -> list[tuple[str, dict]]:
    found = pc.containers(objs, ENGINE)
    roles = {where.split("/")[1] for where, _ in found}
    assert roles == {"prefill", "decode"}, f"engine roles {sorted(roles)}, expected prefill and decode"
    return found


def _roles(objs: pc.Objects) -> Iterator[tuple[str, dict, dict]]:
    """(role, leaderWorkerTemplate, engine container) of every DisaggregatedSet role."""
    for obj in objs:
        if obj["kind"] == "DisaggregatedSet":
            for role in obj["spec"]["roles"]:
                template = role["spec"]["leaderWorkerTemplate"]
                [container] = [c for c in template["workerTemplate"]["spec"]["containers"] if c["name"] == ENGINE]
                yield role["name"], template, container


def _kv_transfer(container: dict) -> dict:
    return pc.json_flag(container, "--kv-transfer-config")


def _children(config: dict) -> list[dict]:
    return config.get("kv_connector_extra_config", {}).get("connectors", [])


def _shell_value(script: str, name: str, env: dict[str, int]) -> int:
    """Evaluate `[export ]NAME=$(( expr ))` of a pod script with the given variables (integer arithmetic only)."""
    match = re.search(rf"^(?:export )?{name}=\$\(\( (.+) \)\)$", script, re.M)
    assert match, f"{name} is not set in the script"
    expression = match.group(1)
    for var, value in env.items():
        expression = re.sub(rf"\b{var}\b", str(value), expression)
    assert re.fullmatch(r"[\d\s*+-]+", expression), expression
    return int(eval(expression, {"__builtins__": {}}))  # digits and + - * only, checked above


def _append_flags(*tokens: str):
    return lambda objs: pc.edit_script(objs, ENGINE, lambda text: re.sub(
        r"^(exec .*?)$", lambda m: m.group(1) + " " + " ".join(tokens), text, count=1, flags=re.M))


def _replace(old: str, new: str):
    return lambda objs: pc.edit_script(objs, ENGINE, lambda text: text.replace(old, new))


# --------------------------------------------------------------------------- NIXL connector
@pc.row("GPU-NIXL-1", breaks=lambda objs: pc.drop_env(objs, ENGINE, "VLLM_SSM_CONV_STATE_LAYOUT"))
def _conv_state_layout(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        value = pc.env(container).get("VLLM_SSM_CONV_STATE_LAYOUT")
        assert value == "DS", f"{where}: VLLM_SSM_CONV_STATE_LAYOUT={value!r}, the NIXL worker asserts DS"


@pc.row("GPU-NIXL-2", breaks=_replace("--enable-hybrid-kv-cache-manager", "--disable-hybrid-kv-cache-manager"))
def _hybrid_manager_on(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        flags = pc.flags(container)
        assert "--enable-hybrid-kv-cache-manager" in flags, f"{where}: the hybrid KV-cache manager is not pinned on"
        assert "--disable-hybrid-kv-cache-manager" not in flags, f"{where}: the hybrid KV-cache manager is off"


@pc.row("GPU-NIXL-3", breaks=_replace('"kv_connector":"OffloadingConnector"', '"kv_connector":"LMCacheConnectorV1"'))
def _every_connector_supports_hma(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        config = _kv_transfer(container)
        names = {config["kv_connector"], *(child["kv_connector"] for child in _children(config))}
        assert names <= HMA_CONNECTORS, f"{where}: {sorted(names - HMA_CONNECTORS)} do not support the hybrid manager"


@pc.row("GPU-NIXL-4", breaks=lambda objs: pc.drop_env(objs, ENGINE, "VLLM_NIXL_SIDE_CHANNEL_HOST"))
def _side_channel_host(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        value = pc.env(container).get("VLLM_NIXL_SIDE_CHANNEL_HOST")
        assert value == {"fieldRef": {"fieldPath": "status.podIP"}}, \
            f"{where}: VLLM_NIXL_SIDE_CHANNEL_HOST={value!r}; unset, the engine advertises localhost"


@pc.row("GPU-NIXL-5", breaks=_replace("VLLM_NIXL_SIDE_CHANNEL_PORT=$(( 5600 ", "VLLM_NIXL_SIDE_CHANNEL_PORT=$(( 5700 "))
def _side_channel_ports(objs: pc.Objects) -> None:
    _ports_follow_the_dp_rank(objs, "VLLM_NIXL_SIDE_CHANNEL_PORT", "nixl")


def _ports_follow_the_dp_rank(objs: pc.Objects, base: str, port_name: str) -> None:
    """Engine `i` of the pod at worker index `w` binds base(w) + its global DP rank (start(w) + i): every worker's
    set must be the ports its pod declares."""
    for role, template, container in _roles(objs):
        script, local = pc.script(container), int(pc.flags(container)["--data-parallel-size-local"])
        declared = {p["containerPort"] for p in container.get("ports", []) if p["name"].startswith(port_name)}
        for worker in range(template["size"]):
            start = _shell_value(script, "START_RANK", {"LWS_WORKER_INDEX": worker})
            first = _shell_value(script, base, {"START_RANK": start})
            bound = {first + start + i for i in range(local)}
            assert bound == declared, f"{role} worker {worker}: engines bind {sorted(bound)}, pod declares " \
                                      f"{sorted(declared)}"


# --------------------------------------------------------------------------- KV transfer config
@pc.row("GPU-KVX-1", breaks=_replace('"kv_role":"kv_both","kv_connector_extra_config":{"cpu',
                                     '"kv_connector_extra_config":{"cpu'))
def _kv_roles(objs: pc.Objects) -> None:
    valid = {"kv_producer", "kv_consumer", "kv_both"}
    for where, container in _engines(objs):
        config = _kv_transfer(container)
        for connector in (config, *_children(config)):
            assert connector.get("kv_role") in valid, f"{where}: {connector['kv_connector']} kv_role " \
                                                      f"{connector.get('kv_role')!r}, not one of {sorted(valid)}"
        nixl = next(c for c in _children(config) if c["kv_connector"] == "NixlConnector")
        expected = "kv_producer" if where.split("/")[1] == "prefill" else "kv_consumer"
        assert nixl["kv_role"] == expected, f"{where}: NixlConnector is {nixl['kv_role']}, the role is {expected}"


# --------------------------------------------------------------------------- CPU offload
@pc.row("GPU-OFFLOAD-1", breaks=_replace('"cpu_bytes_to_use":', '"cpu_bytes":'))
def _offload_bytes(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        [offload] = [c for c in _children(_kv_transfer(container)) if c["kv_connector"] == "OffloadingConnector"]
        extra = offload.get("kv_connector_extra_config", {})
        assert extra.get("spec_name", "CPUOffloadingSpec") == "CPUOffloadingSpec", f"{where}: {extra['spec_name']}"
        assert int(extra.get("cpu_bytes_to_use") or 0) > 0, f"{where}: cpu_bytes_to_use missing or zero"


# --------------------------------------------------------------------------- MoE: MegaMoE, all-to-all
MEGA_MOE = "deep_gemm_mega_moe"


def _mega_moe_engines(objs: pc.Objects) -> list[tuple[str, dict]]:
    """The engines that run MegaMoE (gpu.prefillMoeBackend / gpu.decodeMoeBackend)."""
    return [(where, c) for where, c in _engines(objs) if pc.flags(c).get("--moe-backend") == MEGA_MOE]


@pc.row("GPU-MOE-1", breaks=lambda objs: pc.drop_flag(objs, ENGINE, "--enable-expert-parallel"))
def _mega_moe_needs_ep(objs: pc.Objects) -> None:
    for where, container in _mega_moe_engines(objs):
        assert "--enable-expert-parallel" in pc.flags(container), \
            f"{where}: Kimi K3 MegaMoE requires --enable-expert-parallel"


@pc.row("GPU-MOE-2", breaks=lambda objs: pc.set_flag(objs, ENGINE, "--tensor-parallel-size", "3"))
def _experts_divide(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        flags = pc.flags(container)
        ep = int(flags["--data-parallel-size"]) * int(flags["--tensor-parallel-size"])
        assert catalog.KIMI.routed_experts % ep == 0, \
            f"{where}: {catalog.KIMI.routed_experts} experts do not divide over EP size {ep}"


def _set_accelerator(objs: pc.Objects, value: str) -> None:
    for _, spec in pc.pod_specs(objs):
        if any(c["name"] == ENGINE for c in spec["containers"]):
            spec["nodeSelector"]["cloud.google.com/gke-accelerator"] = value


@pc.row("GPU-MOE-3", breaks=lambda objs: _set_accelerator(objs, "nvidia-h200-141gb"))
def _sm100(objs: pc.Objects) -> None:
    for where, spec in pc.pod_specs(objs):
        if any(c["name"] == ENGINE for c in spec["containers"]):
            accelerator = spec.get("nodeSelector", {}).get("cloud.google.com/gke-accelerator")
            assert accelerator in SM100_ACCELERATORS, f"{where}: {accelerator!r} is no SM100-family GPU"


def _drop_channel_claim(objs: pc.Objects) -> None:
    from components.facts import contract

    for _, spec in pc.pod_specs(objs):
        spec["resourceClaims"] = [c for c in spec.get("resourceClaims", [])
                                  if c.get("resourceClaimTemplateName") != contract.COMPUTE_DOMAIN_CHANNEL_TEMPLATE]


@pc.row("GPU-MOE-5", breaks=_drop_channel_claim)
def _mega_moe_across_nodes_has_a_channel(objs: pc.Objects) -> None:
    from components.facts import contract

    sizes = {role: template["size"] for role, template, _ in _roles(objs)}
    for where, spec in pc.pod_specs(objs):
        [engine] = [c for c in spec["containers"] if c["name"] == ENGINE] or [None]
        if engine is None or pc.flags(engine).get("--moe-backend") != MEGA_MOE or sizes[where.split("/")[1]] < 2:
            continue
        claims = {c["name"] for c in spec.get("resourceClaims", [])
                  if c.get("resourceClaimTemplateName") == contract.COMPUTE_DOMAIN_CHANNEL_TEMPLATE}
        assert claims, f"{where}: MegaMoE's symmetric buffer spans nodes and no ComputeDomain channel is claimed"
        used = {c["name"] for c in engine.get("resources", {}).get("claims", [])}
        assert claims & used, f"{where}: the engine container does not use the ComputeDomain channel claim"


MEGA_MOE_CONFIG_KEYS = ("hidden_act", "routed_expert_hidden_size", "use_grouped_topk", "num_expert_group",
                        "topk_group")
"""The model-config keys Kimi K3's MegaMoE checks (vllm/models/kimi_k3/nvidia/model.py:383-417)."""


@pc.row("GPU-MOE-6", breaks=_append_flags("--hf-overrides", "'{\"text_config\":{\"num_expert_group\":8}}'"))
def _mega_moe_model_keys_unchanged(objs: pc.Objects) -> None:
    for where, container in _mega_moe_engines(objs):
        raw = pc.flags(container).get("--hf-overrides")
        if raw is None:
            continue
        overrides = json.loads(raw)
        touched = {key for key in MEGA_MOE_CONFIG_KEYS
                   if key in overrides or key in overrides.get("text_config", {})}
        assert not touched, f"{where}: --hf-overrides changes {sorted(touched)}, which Kimi K3 MegaMoE checks"


@pc.row("GPU-MOE-4", breaks=lambda objs: pc.set_flag(objs, ENGINE, "--all2all-backend", "deepep_v2"))
def _no_deepep(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        backend = pc.flags(container).get("--all2all-backend") or "allgather_reducescatter"
        assert not backend.startswith("deepep"), f"{where}: --all2all-backend {backend} needs deep_ep in the image"


# --------------------------------------------------------------------------- loader and expert-weight filter
def _drop_gpu_request(objs: pc.Objects) -> None:
    for _, container in pc.containers(objs, ENGINE):
        for key in ("requests", "limits"):
            container["resources"][key].pop("nvidia.com/gpu", None)


@pc.row("GPU-LOAD-1", breaks=_drop_gpu_request)
def _instanttensor_on_cuda(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        if pc.flags(container).get("--load-format") == "instanttensor":
            limits = container["resources"]["limits"]
            assert int(limits.get("nvidia.com/gpu", 0)) > 0, f"{where}: InstantTensor requires NVIDIA GPUs"


@pc.row("GPU-LOAD-2", breaks=_append_flags("--enable-eplb"))
def _weight_filter_applies(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        flags = pc.flags(container)
        assert "--enable-ep-weight-filter" in flags, f"{where}: every rank would read every expert"
        assert "--enable-expert-parallel" in flags and "--enable-eplb" not in flags, \
            f"{where}: the expert-weight filter is skipped without EP or with EPLB"


# --------------------------------------------------------------------------- multi-node data-parallel start
@pc.row("GPU-DP-1", breaks=_append_flags("--data-parallel-hybrid-lb"))
def _multi_port_lb(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        flags = pc.flags(container)
        local, size = int(flags.get("--data-parallel-size-local") or 0), int(flags["--data-parallel-size"])
        assert "--data-parallel-multi-port-external-lb" in flags, f"{where}: no --data-parallel-multi-port-external-lb"
        for refused in ("--data-parallel-hybrid-lb", "--data-parallel-external-lb"):
            assert refused not in flags, f"{where}: {refused} with --data-parallel-multi-port-external-lb"
        assert flags.get("--api-server-count") in (None, "1"), f"{where}: multi-port needs one API server"
        assert 2 <= local < size and size % local == 0, \
            f"{where}: multi-port needs 2 <= --data-parallel-size-local ({local}) dividing {size}"


def _ports(container: dict) -> dict[int, str]:
    return {p["containerPort"]: p.get("name", "") for p in container.get("ports", [])}


def _overlap_supervisor(objs: pc.Objects) -> None:
    """The supervisor on the prefill engines' second port."""
    [(_, container), *_] = [(w, c) for w, c in pc.containers(objs, ENGINE) if "/prefill/" in w]
    pc.set_flag(objs, ENGINE, "--data-parallel-supervisor-port", str(int(pc.flags(container)["--port"]) + 1))


@pc.row("GPU-DP-5", breaks=_overlap_supervisor)
def _one_port_per_engine(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        flags = pc.flags(container)
        base, local = int(flags["--port"]), int(flags["--data-parallel-size-local"])
        supervisor = int(flags.get("--data-parallel-supervisor-port") or 9256)
        ranks = [base + i for i in range(local)]
        declared = _ports(container)
        missing = [port for port in ranks if port not in declared]
        assert not missing, f"{where}: engine port(s) {missing} not declared"
        assert supervisor not in ranks, f"{where}: supervisor port {supervisor} among the engines' {ranks}"
        assert supervisor in declared, f"{where}: supervisor port {supervisor} not declared"
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            asked = container[probe]["httpGet"]["port"]
            assert asked == supervisor, f"{where}: {probe} asks port {asked}, not the supervisor's {supervisor}"


def _sidecar(objs: pc.Objects) -> list[tuple[str, dict, dict]]:
    """(where, sidecar, engine) of every decode pod."""
    found = []
    for where, spec in pc.pod_specs(objs):
        sidecars = [c for c in spec.get("initContainers", []) or [] if c["name"] == "routing-proxy"]
        engine = [c for c in spec.get("containers", []) if c["name"] == ENGINE]
        if sidecars and engine:
            found.append((where, sidecars[0], engine[0]))
    assert found, "no decode pod with a routing sidecar"
    return found


def _sidecar_one_rank(objs: pc.Objects) -> None:
    for _, sidecar, _ in _sidecar(objs):
        sidecar["args"] = [a for a in sidecar["args"] if not a.startswith("--data-parallel-size")]


@pc.row("GPU-DP-6", breaks=_sidecar_one_rank)
def _sidecar_forwards_every_engine(objs: pc.Objects) -> None:
    for where, sidecar, engine in _sidecar(objs):
        args = dict(a.removeprefix("--").split("=", 1) for a in sidecar["args"] if "=" in a)
        local = int(pc.flags(engine)["--data-parallel-size-local"])
        size = int(args.get("data-parallel-size", 1))
        assert size == local, f"{where}: the sidecar forwards {size} engine port(s) of {local}"
        assert int(args["model-server-port"]) == int(pc.flags(engine)["--port"]), f"{where}: sidecar and engine ports"
        base = int(args["port"])
        missing = [base + i for i in range(local) if base + i not in _ports(sidecar)]
        assert not missing, f"{where}: sidecar port(s) {missing} not declared"
        assert "POD_IP" in pc.env(sidecar), f"{where}: the sidecar binds its rank listeners on POD_IP"


@pc.row("GPU-DP-2", breaks=lambda objs: pc.drop_flag(objs, ENGINE, "--data-parallel-address"))
def _dp_address(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        address = pc.flags(container).get("--data-parallel-address")
        assert address == "${LWS_LEADER_ADDRESS}", f"{where}: --data-parallel-address {address!r}, not the leader"


@pc.row("GPU-DP-3", breaks=lambda objs: pc.set_flag(objs, ENGINE, "--data-parallel-size", "8"))
def _dp_ranks(objs: pc.Objects) -> None:
    for role, template, container in _roles(objs):
        flags = pc.flags(container)
        local, size = int(flags["--data-parallel-size-local"]), int(flags["--data-parallel-size"])
        assert size == template["size"] * local, f"{role}: DP {size} != {template['size']} pods x {local}"
        assert flags["--data-parallel-start-rank"] == "${START_RANK}", f"{role}: start rank not from the script"
        starts = [_shell_value(pc.script(container), "START_RANK", {"LWS_WORKER_INDEX": w})
                  for w in range(template["size"])]
        assert starts == [w * local for w in range(template["size"])], f"{role}: start ranks {starts}"


@pc.row("GPU-DP-4", breaks=lambda objs: pc.set_env(objs, ENGINE, "VLLM_ENGINE_READY_TIMEOUT_S", "600"))
def _engine_ready_timeout(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        probe = container["startupProbe"]
        budget = probe["periodSeconds"] * probe["failureThreshold"]
        value = int(pc.env(container).get("VLLM_ENGINE_READY_TIMEOUT_S") or 600)
        assert value >= budget, f"{where}: the API server gives its engines {value} s, the probe allows {budget} s"


# --------------------------------------------------------------------------- prefix caching on the hybrid
@pc.row("GPU-PREFIX-1", breaks=lambda objs: pc.drop_flag(objs, ENGINE, "--enable-prefix-caching"))
def _align_mode(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        flags = pc.flags(container)
        mode = flags.get("--mamba-cache-mode")
        assert mode == "align", f"{where}: --mamba-cache-mode {mode}"
        assert "--enable-prefix-caching" in flags, f"{where}: without prefix caching vLLM resets align to none"


@pc.row("GPU-PREFIX-2", breaks=_append_flags("--no-enable-chunked-prefill"))
def _chunked_prefill(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        assert "--no-enable-chunked-prefill" not in pc.flags(container), \
            f"{where}: chunked prefill is required for Mamba prefix caching"


@pc.row("GPU-PREFIX-3", breaks=_append_flags("--disable-chunked-mm-input"))
def _chunked_mm_input(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        assert "--disable-chunked-mm-input" not in pc.flags(container), \
            f"{where}: align mode asserts chunked multimodal input"


# --------------------------------------------------------------------------- batch limits
DEFAULT_BATCHED_TOKENS = 16384
"""vLLM 0.33.0's `max_num_batched_tokens` for the API server on a >= 160 GiB GPU (arg_utils.py:2973-2978)."""


@pc.row("GPU-BATCH-1", breaks=lambda objs: pc.set_flag(objs, ENGINE, "--max-num-batched-tokens", "32"))
def _token_budget_holds_the_batch(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        flags = pc.flags(container)
        seqs = int(flags["--max-num-seqs"])
        tokens = int(flags.get("--max-num-batched-tokens") or DEFAULT_BATCHED_TOKENS)
        assert tokens >= seqs, f"{where}: max_num_batched_tokens {tokens} < max_num_seqs {seqs}"


@pc.row("GPU-BATCH-2", breaks=lambda objs: pc.set_flag(objs, ENGINE, "--max-num-seqs", "1024"))
def _batch_within_the_blocks(objs: pc.Objects) -> None:
    from components.plan import capacity
    from tests.config.test_config import parse

    cfg = parse("gpu")
    blocks = {"prefill": capacity.serving_capacity(cfg).blocks_per_engine,
              "decode": capacity.decode_capacity(cfg).blocks_per_engine}
    for where, container in _engines(objs):
        seqs = int(pc.flags(container)["--max-num-seqs"])
        role = where.split("/")[1]
        assert seqs <= blocks[role], f"{where}: --max-num-seqs {seqs} > the engine's {blocks[role]} KV cache blocks " \
                                     "(each FULL-graph decode request of a Mamba-type model needs one)"


# --------------------------------------------------------------------------- start: one request fits, /dev/shm
@pc.row("GPU-KVFIT-1", breaks=lambda objs: pc.set_flag(objs, ENGINE, "--gpu-memory-utilization", "0.80"))
def _one_request_fits_with_the_assumed_non_weight_memory(objs: pc.Objects) -> None:
    """What is left per GPU after the weights and one --max-model-len request's blocks (+ the null block), from the
    pod's own flags, must exceed the non-weight memory the plan assumes (tests/engine/test_vllm_kv_cache.py holds
    the one-request pool to vLLM's planner)."""
    from components.plan import capacity
    from tests.config.test_config import parse

    cfg = parse("gpu")
    groups = capacity.kv_cache_groups(cfg)
    for where, container in _engines(objs):
        flags = pc.flags(container)
        length, block = int(flags["--max-model-len"]), int(flags["--block-size"])
        usable = float(flags.get("--gpu-memory-utilization") or 0.9) * cfg.gpu.spec.hbm_gb_per_gpu * 1e9
        blocks = groups.attention_groups * -(-length // block) + groups.state_groups * groups.state_blocks_per_request
        pool = (blocks + 1) * groups.bytes_per_block
        ceiling = usable - capacity.weights_held_per_device(cfg, where.split("/")[1]).total - pool
        assumed = capacity.non_weight_bytes(cfg)
        assert ceiling > assumed, f"{where}: one {length:,}-token request needs a {pool / 1e9:.1f} GB pool; the " \
                                  f"engine would start only below {ceiling / 1e9:.1f} GB of non-weight memory per " \
                                  f"GPU, {assumed / 1e9:.0f} GB assumed"


MQ_BYTES_PER_ENGINE = 16 * 2**20 * 10 + 24 * 2**20 * 10
"""Each engine's two shared-memory queues in /dev/shm: the executor's broadcast queue (VLLM_MQ_MAX_CHUNK_BYTES_MB
16 MiB x 10 chunks, vllm/v1/executor/multiproc_executor.py:165,178) and its worker's response queue (MessageQueue
defaults 24 MiB x 10, vllm/distributed/device_communicators/shm_broadcast.py:503-504; multiproc_executor.py:725)."""


def _quantity(text: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return float(text[:-2]) * units[text[-2:]] if text[-2:] in units else float(text)


def _shrink_shm(objs: pc.Objects) -> None:
    for _, spec in pc.pod_specs(objs):
        for volume in spec.get("volumes", []):
            if volume["name"] == "dshm":
                volume["emptyDir"]["sizeLimit"] = "2Gi"


@pc.row("GPU-SHM-1", breaks=_shrink_shm)
def _shm_holds_the_offload_regions(objs: pc.Objects) -> None:
    for where, spec in pc.pod_specs(objs):
        engines = [c for c in spec["containers"] if c["name"] == ENGINE]
        if not engines:
            continue
        [engine] = engines
        [offload] = [c for c in _children(_kv_transfer(engine)) if c["kv_connector"] == "OffloadingConnector"]
        local = int(pc.flags(engine)["--data-parallel-size-local"])
        need = local * (int(offload["kv_connector_extra_config"]["cpu_bytes_to_use"]) + MQ_BYTES_PER_ENGINE)
        [shm] = [v for v in spec.get("volumes", []) if v["name"] == "dshm"]
        assert shm["emptyDir"].get("medium") == "Memory", f"{where}: /dev/shm is not memory-backed"
        size = _quantity(shm["emptyDir"]["sizeLimit"])
        assert size >= need, f"{where}: /dev/shm {size / 2**30:.1f} GiB < {need / 2**30:.1f} GiB for {local} " \
                             "engines' offload regions and queues"
        limit = _quantity(engine["resources"]["limits"]["memory"])
        assert limit > size, f"{where}: the memory limit {limit / 2**30:.0f} GiB does not cover /dev/shm"


# --------------------------------------------------------------------------- render endpoint (scale-out routes)
def _render_service(objs: pc.Objects) -> dict:
    from components.router import router

    [service] = [o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == router.RENDER_SERVICE]
    return service


def _retarget_render(objs: pc.Objects) -> None:
    _render_service(objs)["spec"]["selector"]["llm-d.ai/role"] = "decode"


@pc.row("GPU-SCALEOUT-1", breaks=_retarget_render)
def _render_pods_enable_scale_out(objs: pc.Objects) -> None:
    service = _render_service(objs)
    selector, [port] = service["spec"]["selector"], service["spec"]["ports"]
    selected = []
    for obj in objs:
        if obj["kind"] != "DisaggregatedSet":
            continue
        for role in obj["spec"]["roles"]:
            template = role["spec"]["leaderWorkerTemplate"]["workerTemplate"]
            labels = template["metadata"].get("labels", {})
            if all(labels.get(k) == v for k, v in selector.items()):
                [engine] = [c for c in template["spec"]["containers"] if c["name"] == ENGINE]
                selected.append((role["name"], engine))
    assert selected, f"the render Service selects no engine pod ({selector})"
    for role, engine in selected:
        assert "--enable-scale-out" in pc.flags(engine), f"{role}: the render Service sends to an engine without " \
                                                         "--enable-scale-out (render answers 403)"
        target, bound = port.get("targetPort", port["port"]), int(pc.flags(engine)["--port"])
        names = {p["name"] for p in engine.get("ports", []) if p["containerPort"] == bound}
        assert target == bound or target in names, f"{role}: the render Service targets {target!r}, the engine " \
                                                   f"serves on {bound}"


# --------------------------------------------------------------------------- speculative decoding (when on)
@pc.row("GPU-SPEC-1", plan="spec", breaks=lambda objs: pc.edit_script(
    objs, ENGINE, lambda text: re.sub(r'"model":"[^"]*",', "", text)))
def _draft_model(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        config = pc.json_flag(container, "--speculative-config")
        if config.get("method") in ("mtp", "dspark") or config.get("num_speculative_tokens") is None:
            continue
        model = config.get("model")
        assert model, f"{where}: {config['method']} with num_speculative_tokens needs a draft model"
        mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
        assert any(model == m or model.startswith(m.rstrip("/") + "/") for m in mounts), \
            f"{where}: draft model {model} is on no volume the engine mounts"


# --------------------------------------------------------------------------- what leaves the pods
@pc.row("GPU-PRIVACY-1", breaks=lambda objs: [pc.drop_env(objs, ENGINE, name) for name in pc.USAGE_STATS_OFF])
def _usage_stats_off(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        pc.assert_usage_stats_off(where, container)


@pc.row("GPU-PRIVACY-2", breaks=lambda objs: pc.add_hub_token(objs, ENGINE))
def _hub_off(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        pc.assert_hub_off(where, container)


test_gpu_precondition_holds = pc.holds_test("GPU")


@pc.row("GPU-PREFIX-4", breaks=lambda objs: pc.set_flag(objs, ENGINE, "--prefix-match-unit", "100"))
def _prefix_match_unit_divides_the_block(objs: pc.Objects) -> None:
    for where, container in _engines(objs):
        flags = pc.flags(container)
        unit, block = flags.get("--prefix-match-unit"), int(flags["--block-size"])
        assert unit is not None, f"{where}: no --prefix-match-unit: hits land on whole {block}-token blocks"
        assert block % int(unit) == 0, f"{where}: --prefix-match-unit {unit} does not divide the block {block}"

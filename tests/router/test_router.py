"""The router in the plan: chart, layered values, scheduling config, and its wiring to the model servers."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from components.facts.versions import ROUTER_VERSION
from components.plan import capacity, engines, kvblocks
from components.router import router
from tests import engine_facts as facts
from tests.config.test_config import parse
from tests.conftest import VARIANTS, Plan

CHART = "kubernetes:helm.sh/v4:Chart"


def router_chart(plan: Plan) -> dict:
    return plan.one(CHART, "router-chart")["inputs"]


def epp_config(plan: Plan) -> dict:
    epp = router_chart(plan)["values"]["router"]["epp"]
    return yaml.safe_load(epp["pluginsCustomConfig"][epp["pluginsConfigFile"]])


def pod_templates(plan: Plan) -> list[tuple[str, dict]]:
    """(name, pod template) of every serving pod template in the plan's model-server objects."""
    found = []
    for m in plan.manifests:
        if m["kind"] == "DisaggregatedSet":
            for role in m["spec"]["roles"]:
                found.append((role["name"], role["spec"]["leaderWorkerTemplate"]["workerTemplate"]))
        if m["kind"] == "LeaderWorkerSet":
            for key in ("leaderTemplate", "workerTemplate"):
                found.append((key, m["spec"]["leaderWorkerTemplate"][key]))
    return found


@pytest.fixture(scope="module")
def llm_d_md(shared) -> str:
    return (shared / "reference" / "llm-d.md").read_text()


@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_chart_reference_and_release(plans, llm_d_md, stack):
    chart = router_chart(plans[stack])
    assert f"ROUTER_STANDALONE_CHART={chart['chart']}" in llm_d_md
    assert chart["version"] == ROUTER_VERSION == "v0.10.0"
    assert chart["name"] == "kimi-k3-1", "release name gives the EPP service kimi-k3-1-epp (seed smoke check)"
    assert chart["namespace"] == "kimi-k3-1"


def test_gateway_mode(variants, llm_d_md):
    plan = variants["gateway"]
    chart = router_chart(plan)
    assert f"ROUTER_GATEWAY_CHART={chart['chart']}" in llm_d_md
    # The chart's `provider.name: gke` policies break a CRD rule (tests/test_crd_cel.py); the program makes them.
    assert "provider" not in chart["values"]
    policies = {m["kind"]: m for m in plan.program_manifests if m["apiVersion"] == "networking.gke.io/v1"}
    assert set(policies) == {"HealthCheckPolicy", "GCPBackendPolicy"}
    for policy in policies.values():
        assert policy["spec"]["targetRef"] == {"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                               "name": chart["name"]}
    check = policies["HealthCheckPolicy"]["spec"]["default"]["config"]["httpHealthCheck"]
    assert (check["portSpecification"], check["port"]) == ("USE_FIXED_PORT", 8000)
    gateway = next(m for m in plan.manifests if m["kind"] == "Gateway")
    route = next(m for m in plan.manifests if m["kind"] == "HTTPRoute")
    assert gateway["spec"]["gatewayClassName"] == "gke-l7-rilb"
    assert route["spec"]["parentRefs"] == [{"name": gateway["metadata"]["name"]}]
    [backend] = route["spec"]["rules"][0]["backendRefs"]
    assert (backend["kind"], backend["name"]) == ("InferencePool", chart["name"])
    gateway_resource = next(r for r in plan.resources if r["name"] == "router-gateway")
    assert "net-proxy-only" in gateway_resource["dependsOn"], "regional gateways need the proxy-only subnet"
    assert "router-chart" in next(r for r in plan.resources if r["name"] == "router-route")["dependsOn"]


@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_match_labels_select_exactly_the_serving_pods(plans, stack):
    plan = plans[stack]
    match = router_chart(plan)["values"]["router"]["modelServers"]["matchLabels"]
    selected = {name for name, template in pod_templates(plan)
                if match.items() <= template["metadata"]["labels"].items()}
    if stack == "gpu":
        assert selected == {"prefill", "decode"}  # every pod of the P/D groups serves (DP hybrid LB)
    else:
        assert selected == {"leaderTemplate"}, "on TPU only rank-0 leaders serve the API"


@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_target_ports_are_the_serving_ports(plans, stack):
    plan = plans[stack]
    values = router_chart(plan)["values"]["router"]
    targets = {p["number"] for p in values["modelServers"]["targetPorts"]}
    match = values["modelServers"]["matchLabels"]
    for _, template in pod_templates(plan):
        if not match.items() <= template["metadata"]["labels"].items():
            continue
        spec = template["spec"]
        # decode: the routing sidecar (a native sidecar init container) takes the port
        serving = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"] or \
            spec["containers"]
        ports = {p["containerPort"] for c in serving for p in c.get("ports", [])}
        assert targets <= ports


@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_block_size_matches_the_engine(plans, stack):
    plan = plans[stack]
    [producer] = [p for p in epp_config(plan)["plugins"] if p["type"] == "approx-prefix-cache-producer"]
    from tests.serving.test_modelservers import engine_scripts

    sizes, units = set(), set()
    for _, argv in engine_scripts(plan):
        flags = dict(facts.split_flags(argv))
        sizes.add(int(flags.get("--block-size") or flags["--page-size"]))
        units.add(int(flags.get("--prefix-match-unit") or flags.get("--block-size") or flags["--page-size"]))
    # The engine-effective block (tests/plan/test_kvblocks.py), not the 128 asked for; the router hashes in the unit
    # the engines' hits land on: GPU's --prefix-match-unit inside it, TPU's block.
    assert sizes == {{"gpu": 11_392, "tpu": 1_024}[stack]}
    assert units == {producer["parameters"]["blockSizeTokens"]} == {{"gpu": 128, "tpu": 1_024}[stack]}
    assert all(size % unit == 0 for size in sizes for unit in units)


@pytest.mark.parametrize("stack,blocks", [("gpu", 6 * 1_026_176 // 128), ("tpu", (10 * 208_896 + 2048) // 1024)])
def test_prefix_cache_sized_by_the_capacity_model(plans, stack, blocks):
    """The hand-worked figures of tests/plan/test_prefixcache.py (docs/capacity.md) reach the router, in its blocks:
    the most any session shape keeps per engine, long sessions in host DRAM (GPU: 6 sessions of 1,026,176 reused
    tokens, in 128-token blocks; TPU: 10 of the 200K sessions, 208,896 tokens each beside the 2,048 they share)."""
    [producer] = [p for p in epp_config(plans[stack])["plugins"] if p["type"] == "approx-prefix-cache-producer"]
    params = producer["parameters"]
    assert params["autoTune"] is False, "autoTune would count HBM blocks only (llm-d.md §2.3)"
    assert params["lruCapacityPerServer"] == blocks
    assert f"lruCapacityPerServer {params['lruCapacityPerServer']:,}" in plans[stack].summary


REGISTERED_SINCE_FACT_SHEET = {
    # Plugin types the fact sheet's list lacks, each registered by the pinned router's EPP runner.
    "topology-extractor": "llm-d-router v0.10.0 cmd/epp/runner/runner.go (exttopology, "
                          "pkg/epp/framework/plugins/datalayer/extractor/topology/extractor.go)",
    "topology-affinity-filter": "llm-d-router v0.10.0 cmd/epp/runner/runner.go: "
                                "Register(topologyaffinityfilter.FilterType, StabilityAlpha, ...)",
    "utilization-detector": "llm-d-router v0.10.0 cmd/epp/runner/runner.go L716: "
                            "Register(utilization.UtilizationDetectorType, StabilityBeta, ...) (flow control's "
                            "saturation detector, pkg/epp/framework/plugins/flowcontrol/saturationdetector/"
                            "utilization)",
}


@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_scheduling_config(plans, llm_d_md, stack):
    config = epp_config(plans[stack])
    assert "registers only `llm-d.ai/v1alpha1`" in llm_d_md
    assert config["apiVersion"] == "llm-d.ai/v1alpha1" and config["kind"] == "EndpointPickerConfig"
    known = set(re.findall(r"`([a-z]+(?:-[a-z]+)+)`", llm_d_md.split("### 2.2", 1)[1].split("### 2.3", 1)[0]))
    known |= set(REGISTERED_SINCE_FACT_SHEET)
    types = [p["type"] for p in config["plugins"]]
    assert set(types) <= known, f"unknown plugin types {set(types) - known}"
    names = {p.get("name", p["type"]) for p in config["plugins"]}
    profiles = {p["name"]: [ref["pluginRef"] for ref in p["plugins"]] for p in config["schedulingProfiles"]}
    assert all(ref in names for refs in profiles.values() for ref in refs)
    [affinity] = [p for p in config["plugins"] if p["type"] == "prefix-cache-affinity-filter"]
    assert affinity["parameters"]["peakPrefillThroughput"] == capacity.peak_prefill_throughput(parse(stack))
    if stack == "gpu":
        assert profiles == {"prefill": ["prefill-filter", "same-slice-prefill", "prefix-cache-affinity-filter",
                                        "token-load-scorer"],
                            "decode": ["decode-filter", "active-request-scorer"]}
        [handler] = [p for p in config["plugins"] if p["type"] == "disagg-profile-handler"]
        assert handler["parameters"] == {"deciders": {"prefill": "always-disagg-pd-decider"}}
    else:
        assert profiles == {"default": ["prefix-cache-affinity-filter", "token-load-scorer"]}


@pytest.mark.parametrize("stack,engine", [("gpu", "vllm"), ("tpu", "vllm")])
def test_values_layers(plans, variants, stack, engine):
    values = router_chart(plans[stack])["values"]
    router = values["router"]
    # base
    assert router["epp"]["replicas"] == 1, "exact in-flight token accounting needs one EPP"
    assert router["epp"]["image"]["tag"].startswith(ROUTER_VERSION + "@sha256:"), \
        "the chart's default tag is the moving `main`: the pinned one, by its digest"
    assert router["inferencePool"]["failureMode"] == "FailOpen"
    # monitoring: metrics readable by our PodMonitoring
    assert router["monitoring"]["prometheus"]["auth"]["enabled"] is False
    # track
    assert router["modelServers"]["type"] == engine
    assert router["extraServicePorts"] == [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8081}]
    quiet = router_chart(variants["quiet"])["values"]["router"]
    assert "monitoring" not in quiet and quiet["epp"]["replicas"] == 1


@pytest.mark.parametrize("name,endpoint", [("bench", "http://kimi-k3-1-epp:80"), ("gateway", "http://10.0.0.10")])
def test_calibration_job(variants, name, endpoint):
    """Standalone: the router Service on the port its chart exposes; gateway mode: the configured address."""
    plan = variants[name]
    job = next(m for m in plan.manifests if m["kind"] == "Job" and "calibration" in m["metadata"]["name"])
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ENDPOINT"] == endpoint
    # llm-d's method divides the engines' prefill chunk by the median TTFT: the two must agree. Decode engines
    # (their own 512-token budget, components/plan/engines.py DECODE_BATCHED_TOKENS) run no prefill the router sends.
    from components.facts import contract
    from tests.serving.test_modelservers import engine_scripts

    chunks = {flags.get("--max-num-batched-tokens") for flags in (dict(facts.split_flags(argv))
                                                                  for _, argv in engine_scripts(plan))
              if flags.get("--port") != str(contract.DECODE_ENGINE_PORT)}
    assert chunks - {None} == {env["CHUNK_TOKENS"]}
    # The loaded waves send one chunk per router endpoint: every prefill engine's port of every prefill pod.
    ports = {flags.get("--port") for flags in (dict(facts.split_flags(argv)) for _, argv in engine_scripts(plan))
             if flags.get("--port") != str(contract.DECODE_ENGINE_PORT)} - {None}
    assert int(env["ROUTER_ENDPOINTS"]) >= len(ports) >= 1
    values = router_chart(plan)["values"]["router"]
    if name == "bench":
        port = values["extraServicePorts"][0]["port"]
        assert endpoint == f"http://{router_chart(plan)['name']}-epp:{port}"
    else:
        assert "extraServicePorts" not in values, "gateway mode has no router Service to send load to"
    job_resource = next(r for r in plan.resources
                        if r["inputs"].get("kind") == "Job" and "calibration" in r["inputs"]["metadata"]["name"])
    component = plan.named(job_resource["parent"])
    assert {"vllm", "router-chart"} <= set(component["dependsOn"]) | {
        plan.named(d)["parent"] for d in component["dependsOn"]}


# --------------------------------------------------------------------------- KV events and the prefix model
def kv_event_publishers(plan: Plan) -> list[str]:
    """Engine commands that publish KV-cache events: vLLM with `enable_kv_cache_events` and a publisher other than
    `null` (vllm/config/kv_events.py: the flag alone publishes nothing), SGLang with any publisher (engines.md)."""
    from tests.serving.test_modelservers import engine_scripts

    found = []
    for where, argv in engine_scripts(plan):
        raw = dict(facts.split_flags(argv)).get("--kv-events-config")
        if raw is None:
            continue
        events = json.loads(raw)
        vllm = argv[:2] == ["vllm", "serve"]
        if events.get("publisher", "null") != "null" and (events.get("enable_kv_cache_events") or not vllm):
            found.append(where)
    return found


def kv_event_consumers(plan: Plan) -> list[str]:
    """Router plugins that subscribe to KV-cache events (router.KV_EVENT_CONSUMERS, cited there)."""
    return [p["type"] for p in epp_config(plan)["plugins"] if p["type"] in router.KV_EVENT_CONSUMERS]


WIRING_PLANS = ("gpu", "tpu", "gateway", "sglang", "spec", "tpu-bf16")
"""Plans whose engines and router configs differ: the committed stacks and conftest VARIANTS."""


def wiring_plan(plans, variants, name: str) -> Plan:
    return plans[name] if name in plans else variants[name]


def wiring_config(name: str):
    """The config the plan was rendered from: a committed stack, or a variant's base stack with its changes."""
    base, changes = (name, {}) if name in ("gpu", "tpu") else VARIANTS[name]
    return parse(base, **{key.replace(".", "__"): value for key, value in changes.items()})


def test_the_wiring_detectors_can_fail():
    """The two detectors below see a publisher and a consumer when there is one."""
    fake = Plan.__new__(Plan)
    events = '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557"}'
    fake.manifests = [{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{
        "name": "vllm", "command": ["/bin/bash", "-c"],
        "args": [f"set -eu\nexec vllm serve /models --kv-events-config '{events}'\n"]}]}}]
    assert kv_event_publishers(fake)
    config = {"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
              "plugins": [{"type": "precise-prefix-cache-producer"}], "schedulingProfiles": []}
    fake.resources = [{"type": CHART, "name": "router-chart", "inputs": {"values": {"router": {"epp": {
        "pluginsConfigFile": "x.yaml", "pluginsCustomConfig": {"x.yaml": yaml.safe_dump(config)}}}}}}]
    assert kv_event_consumers(fake) == ["precise-prefix-cache-producer"]


@pytest.mark.parametrize("name", WIRING_PLANS)
def test_kv_events_have_a_consumer(plans, variants, name):
    """Either a router plugin consumes the engines' KV events or no engine publishes them (issue 31): a publisher
    without a subscriber spends engine work and an open port on nothing, a subscriber without a publisher predicts
    from an empty index."""
    plan = wiring_plan(plans, variants, name)
    publishers, consumers = kv_event_publishers(plan), kv_event_consumers(plan)
    assert bool(publishers) == bool(consumers), (
        f"engines publishing KV events: {publishers or 'none'}; router plugins consuming them: {consumers or 'none'}")


@pytest.mark.parametrize("name", WIRING_PLANS)
def test_router_blocks_are_the_engines_blocks(plans, variants, name):
    """The prefix model counts in the block components/plan/kvblocks.py computes once for the plan's config, the
    same block every engine command passes and the summary prints (no restated figure)."""
    from tests.serving.test_modelservers import engine_scripts

    plan, cfg = wiring_plan(plans, variants, name), wiring_config(name)
    block, unit = kvblocks.block_rule(cfg).block_tokens, engines.prefix_match_unit(cfg)
    [producer] = [p for p in epp_config(plan)["plugins"] if p["type"] == router.PREFIX_PRODUCER]
    params = producer["parameters"]
    assert params["blockSizeTokens"] == unit and block % unit == 0
    assert params["maxPrefixBlocksToMatch"] == -(-cfg.context_length // unit)
    sizes = {int(dict(facts.split_flags(argv)).get("--block-size") or dict(facts.split_flags(argv))["--page-size"])
             for _, argv in engine_scripts(plan)}
    assert sizes == {block}
    assert f"blocks of {unit} tokens per endpoint" in plan.summary


@pytest.mark.parametrize("name", WIRING_PLANS)
def test_tokens_come_from_the_engine_the_router_routes_to(plans, variants, name):
    """Real token IDs: a `token-producer` (vllm backend) calls the render Service, which selects exactly the pods
    whose engine serves /v1/completions/render on the Service's target port; SGLang has no render endpoint, so the
    router keeps its byte estimate there and no Service is made."""
    plan, cfg = wiring_plan(plans, variants, name), wiring_config(name)
    producers = [p for p in epp_config(plan)["plugins"] if p["type"] == router.TOKEN_PRODUCER]
    services = [m for m in plan.program_manifests
                if m["kind"] == "Service" and m["metadata"]["name"] == router.RENDER_SERVICE]
    if cfg.track == "tpu" and cfg.tpu.engine != "vllm-torchtpu":
        assert not producers and not services
        return
    [producer], [service] = producers, services
    params = producer["parameters"]
    [port] = service["spec"]["ports"]
    assert params["vllm"]["url"] == f"http://{router.RENDER_SERVICE}:{port['port']}"
    selector = service["spec"]["selector"]
    selected = [(where, template) for where, template in pod_templates(plan)
                if selector.items() <= template["metadata"]["labels"].items()]
    assert selected, "the render Service selects no serving pod"
    for where, template in selected:
        engine = next(c for c in template["spec"]["containers"] if c.get("command") == ["/bin/bash", "-c"])
        argv = facts.exec_argv(engine["args"][0])
        flags = dict(facts.split_flags(argv))
        assert flags["--port"] == str(port["targetPort"]), where
        assert flags["--served-model-name"] == params["modelName"], where
        if cfg.track == "gpu":  # vLLM 0.33.0 registers render only with --enable-scale-out (engines.render_flags)
            assert "--enable-scale-out" in flags, where
        assert port["targetPort"] in {p["containerPort"] for p in engine.get("ports", [])}, where

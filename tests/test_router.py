"""The router in the plan: chart, layered values, scheduling config, and its wiring to the model servers."""

from __future__ import annotations

import re

import pytest
import yaml

from components import contract
from components.versions import ROUTER_VERSION
from tests import engine_facts as facts
from tests.conftest import Plan
from tests.test_config import parse

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
    from tests.test_modelservers import engine_scripts

    sizes = set()
    for _, argv in engine_scripts(plan):
        flags = dict(facts.split_flags(argv))
        sizes.add(int(flags.get("--block-size") or flags["--page-size"]))
    # The engine-effective block (tests/test_kvblocks.py), not the 128 asked for.
    assert sizes == {producer["parameters"]["blockSizeTokens"]} == {{"gpu": 11_392, "tpu": 1_024}[stack]}
    assert contract.KV_BLOCK_TOKENS not in sizes


@pytest.mark.parametrize("stack,blocks", [("gpu", 981), ("tpu", 888)])
def test_prefix_cache_sized_by_the_capacity_model(plans, stack, blocks):
    """The hand-worked figures of tests/test_capacity.py (docs/capacity.md) reach the router."""
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
    assert affinity["parameters"]["peakPrefillThroughput"] == parse(stack).router.peakPrefillThroughput
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
    assert router["epp"]["image"]["tag"] == ROUTER_VERSION, "the chart's default tag is the moving `main`"
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
    # llm-d's method divides the engines' prefill chunk by the median TTFT: the two must agree.
    from tests.test_modelservers import engine_scripts

    chunks = {dict(facts.split_flags(argv)).get("--max-num-batched-tokens") for _, argv in engine_scripts(plan)}
    assert chunks - {None} == {env["CHUNK_TOKENS"]}
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

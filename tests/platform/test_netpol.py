"""NetworkPolicies of the model namespace: both plans deny ingress by default and allow exactly the matrix this
test derives from the label-and-port contract; the rendered pods carry the labels the policies select and listen
on the ports they open; variants (gateway, SGLang build, no monitoring) change the matrix the way they should."""

from __future__ import annotations

from typing import Any

import pytest

from components.config import parse_config
from components.facts import catalog, contract
from components.plan import engines
from tests.conftest import STACKS, stack_document
from tools.preview.scan import pod_templates

NETPOL = "NetworkPolicy"
ALL_PORTS = frozenset({"*"})
PRIVATE = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")


def config(stack: str):
    raw = {k.split(":", 1)[1]: v for k, v in stack_document(stack)["config"].items()
           if k.startswith("kimi-k3-1:") and not isinstance(v, dict)}
    return parse_config({k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in raw.items()})


# --------------------------------------------------------------------------- canonical forms
def selector(spec: dict[str, Any] | None) -> tuple:
    spec = spec or {}
    return (tuple(sorted((spec.get("matchLabels") or {}).items())),
            tuple(sorted(e["key"] for e in spec.get("matchExpressions") or [] if e["operator"] == "Exists")))


def peer(entry: dict[str, Any]) -> tuple:
    if "ipBlock" in entry:
        return ("cidr", entry["ipBlock"]["cidr"], tuple(entry["ipBlock"].get("except") or ()))
    namespace = (entry.get("namespaceSelector") or {}).get("matchLabels", {}).get("kubernetes.io/metadata.name")
    return ("pods", namespace, selector(entry.get("podSelector")))


def ports(rule: dict[str, Any]) -> frozenset:
    if not rule.get("ports"):
        return ALL_PORTS
    return frozenset((p["port"], p.get("protocol", "TCP"), p.get("endPort")) for p in rule["ports"])


def matrix(manifests: list[dict[str, Any]]) -> set[tuple]:
    """(direction, selected pods, peer, ports) for every rule of every allow policy."""
    found = set()
    for policy in (m for m in manifests if m["kind"] == NETPOL):
        target = selector(policy["spec"]["podSelector"])
        for direction, key, peers in (("in", "ingress", "from"), ("out", "egress", "to")):
            for rule in policy["spec"].get(key) or []:
                for entry in rule[peers]:
                    found.add((direction, target, peer(entry), ports(rule)))
    return found


def labels(mapping: dict[str, str]) -> tuple:
    return (tuple(sorted(mapping.items())), ())


def pods(mapping: dict[str, str], namespace: str | None = None) -> tuple:
    return ("pods", namespace, labels(mapping))


def tcp(*numbers) -> frozenset:
    return frozenset((n, "TCP", None) for n in numbers)


# --------------------------------------------------------------------------- the expected matrix
def expected_matrix(stack: str, api_server: set[str]) -> set[tuple]:
    """Restated from the contract, independently of components/platform/netpol.py."""
    cfg = config(stack)
    engine = "vllm" if cfg.track == "gpu" or cfg.tpu.engine == "vllm-torchtpu" else "sglang"
    serving = labels(contract.SERVING_LABELS)
    servers = labels({"llm-d.ai/guide": catalog.GUIDE_NAME, "llm-d.ai/engine-type": engine})
    router = ((), (contract.ROUTER_MODE_LABEL,))
    clients = labels(contract.LOAD_CLIENT_LABELS)
    bench = labels({**contract.LOAD_CLIENT_LABELS, **contract.BENCHMARK_NAME_LABEL})
    gmp = pods({"app.kubernetes.io/name": "collector"}, "gmp-system")
    dns = pods({"k8s-app": "kube-dns"}, "kube-system")
    # GPU: every engine of a pod is a router endpoint on its own port, with its own /metrics (decode engines behind
    # the routing sidecar's listeners on the same endpoint ports).
    local = engines.engines_per_pod(cfg)
    endpoints = tcp(*contract.engine_ports(contract.MODEL_SERVER_PORT, local)) if cfg.track == "gpu" \
        else tcp(contract.MODEL_SERVER_PORT)
    metrics = endpoints | tcp(*contract.engine_ports(contract.DECODE_ENGINE_PORT, local)) if cfg.track == "gpu" \
        else tcp(contract.MODEL_SERVER_PORT)
    # No KV-events ports: no engine publishes them (tests/router/test_router.py test_kv_events_have_a_consumer).
    to_serving = metrics | endpoints
    dns_ports = frozenset({(53, "UDP", None), (53, "TCP", None)})
    public = ("cidr", "0.0.0.0/0", PRIVATE)
    rows = {
        ("in", serving, ("pods", None, router), to_serving),
        ("out", router, ("pods", None, serving), to_serving),
        ("in", servers, ("pods", None, servers), ALL_PORTS),
        ("out", servers, ("pods", None, servers), ALL_PORTS),
        ("in", router, ("pods", None, clients), tcp(contract.ROUTER_PROXY_PORT)),
        ("out", clients, ("pods", None, router), tcp(contract.ROUTER_PROXY_PORT)),
        ("in", serving, gmp, metrics),
        ("in", router, gmp, tcp(contract.ROUTER_METRICS_PORT)),
        *(("out", who, dns, dns_ports) for who in (servers, router, clients)),
        *(("out", router, ("cidr", cidr, ()), tcp(443)) for cidr in api_server),
        ("out", bench, ("cidr", "169.254.169.254/32", ()), tcp(80)),
        ("out", bench, ("cidr", "169.254.169.252/32", ()), tcp(988)),
        ("out", bench, public, tcp(443)),
    }
    # No engine pod reaches the internet: the TPU engine runs the stack's build and installs nothing at start.
    return rows


def api_server_cidrs(found: set[tuple]) -> set[str]:
    router = ((), (contract.ROUTER_MODE_LABEL,))
    return {p[1] for d, t, p, ps in found if d == "out" and t == router and p[0] == "cidr" and ps == tcp(443)}


@pytest.mark.parametrize("stack", STACKS)
def test_default_deny_then_the_contract_matrix(plans, stack):
    namespace = config(stack).kubernetes.namespace
    # The model namespace's policies (KEDA's own namespace has its own: test_keda_namespace_is_default_deny).
    manifests = [m for m in plans[stack].manifests
                 if m["kind"] != NETPOL or m["metadata"]["namespace"] == namespace]
    policies = [m for m in manifests if m["kind"] == NETPOL]
    deny = [p for p in policies if p["spec"]["podSelector"] == {} and p["spec"]["policyTypes"] == ["Ingress"]
            and not p["spec"].get("ingress")]
    assert len(deny) == 1 and all(p["metadata"]["namespace"] == namespace for p in policies)
    found = matrix(manifests)
    api = api_server_cidrs(found)
    assert len(api) == 2 and all(c.endswith("/32") for c in api)  # the control plane's private and public address
    assert found == expected_matrix(stack, api)


def _pod_templates(plan) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """(labels, pod spec) of every pod template the program creates (the extraction tools/preview/scan.py uses)."""
    return [(meta.get("labels") or {}, spec) for manifest in plan.manifests
            for _, meta, spec in pod_templates(manifest)]


def _selects(rule_selector: tuple, pod_labels: dict[str, str]) -> bool:
    match, exists = rule_selector
    return all(pod_labels.get(k) == v for k, v in match) and all(k in pod_labels for k in exists)


@pytest.mark.parametrize("stack", STACKS)
def test_pods_carry_the_selected_labels_and_listen_on_the_opened_ports(plans, stack):
    """Every router-facing container port of a serving pod is opened to the router, every PodMonitoring port to
    Managed Prometheus, and every model-server pod is in the peer set."""
    plan = plans[stack]
    found = matrix(plan.manifests)
    router = ((), (contract.ROUTER_MODE_LABEL,))
    opened = {p for d, t, peer_, ps in found if d == "in" and peer_ == ("pods", None, router) for p in ps}
    engine_pods = [(lbl, spec) for lbl, spec in _pod_templates(plan) if lbl.get("llm-d.ai/engine-type")]
    assert engine_pods
    for pod_labels, spec in engine_pods:
        peers = [t for d, t, peer_, ps in found if d == "in" and ps == ALL_PORTS and _selects(t, pod_labels)]
        assert peers, f"model-server pod {pod_labels} is in no peer rule"
        if not _selects(selector({"matchLabels": contract.SERVING_LABELS}), pod_labels):
            continue
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            for port in container.get("ports", []):
                if port["name"] in ("http", "serve"):
                    assert (port["containerPort"], "TCP", None) in opened or any(
                        p[0] <= port["containerPort"] <= (p[2] or p[0]) for p in opened if isinstance(p[0], int)), \
                        f"{container['name']} port {port} is not open to the router"
    gmp = pods({"app.kubernetes.io/name": "collector"}, "gmp-system")
    scraped = {(t, p[0]) for d, t, peer_, ps in found if d == "in" and peer_ == gmp for p in ps}
    for monitor in (m for m in plan.manifests if m["kind"] == "PodMonitoring"):
        target = selector(monitor["spec"]["selector"])
        for endpoint in monitor["spec"]["endpoints"]:
            assert any(port == endpoint["port"] and set(t[0]) <= set(target[0]) and set(t[1]) <= set(target[1])
                       for t, port in scraped), f"{monitor['metadata']['name']} scrapes a port the policy closes"


def test_load_jobs_are_admitted_by_the_router_and_write_only_where_allowed(variants):
    plan = variants["bench"]
    jobs = [(lbl, spec) for lbl, spec in _pod_templates(plan) if spec.get("restartPolicy") == "Never"
            and not _selects(labels(contract.STAGING_LABELS), lbl)]  # the checkpoint copy is no load client
    assert len(jobs) == 2
    assert all(_selects(labels(contract.LOAD_CLIENT_LABELS), lbl) for lbl, _ in jobs)
    bench = [lbl for lbl, _ in jobs if _selects(labels(contract.BENCHMARK_NAME_LABEL), lbl)]
    assert len(bench) == 1  # only the benchmark reaches Cloud Storage


def test_gateway_mode_admits_the_gateway_proxies_and_health_checks(variants):
    found = matrix(variants["gateway"].manifests)
    cfg = config("gpu")
    serving = labels(contract.SERVING_LABELS)
    router = ((), (contract.ROUTER_MODE_LABEL,))
    proxies = ("cidr", cfg.network.proxyOnlyCidr, ())
    assert ("in", serving, proxies, tcp(*contract.engine_ports(contract.MODEL_SERVER_PORT, 4))) in found
    assert ("in", router, proxies, tcp(contract.EPP_EXT_PROC_PORT)) in found
    assert {p[1] for d, t, p, _ in found if d == "in" and p[0] == "cidr" and t == serving} == {
        cfg.network.proxyOnlyCidr, "35.191.0.0/16", "130.211.0.0/22"}
    clients = labels(contract.LOAD_CLIENT_LABELS)
    assert ("out", clients, ("cidr", cfg.network.nodesCidr, ()), tcp(80)) in found


def test_prebuilt_tpu_engines_have_no_internet_egress_and_monitoring_off_drops_scrapes(variants):
    # The model namespace's pods (KEDA's operator reaches Google's APIs from its own namespace, tested above).
    model = [m for m in variants["sglang"].manifests if m["kind"] != NETPOL or m["metadata"]["namespace"] != "keda"]
    public = [row for row in matrix(model) if row[2][:2] == ("cidr", "0.0.0.0/0")]
    assert [row[1] for row in public] == [labels({**contract.LOAD_CLIENT_LABELS, **contract.BENCHMARK_NAME_LABEL})]
    quiet = matrix(variants["quiet"].manifests)
    assert not [row for row in quiet if row[2][1] == "gmp-system"]
    assert {m["metadata"]["namespace"] for m in variants["quiet"].manifests if m["kind"] == NETPOL} == {"llm-d-kimi"}


@pytest.mark.parametrize("stack", STACKS)
def test_keda_namespace_is_default_deny_with_one_allow_per_component(plans, stack):
    """KEDA's namespace: ingress denied, then the control plane to the metrics API (6443) and the webhooks (9443),
    the metrics API to the operator's gRPC (9666); egress to the API server and DNS, the operator also to the
    metadata server and Google's APIs (Managed Prometheus) over 443 (components/platform/autoscaler.py)."""
    policies = {m["metadata"]["name"]: m["spec"] for m in plans[stack].manifests
                if m["kind"] == NETPOL and m["metadata"]["namespace"] == "keda"}
    assert sorted(policies) == ["keda-default-deny", "keda-metrics-apiserver", "keda-operator", "keda-webhooks"]
    assert policies["keda-default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    ports = {name: sorted(p["port"] for r in spec.get("ingress", []) for p in r["ports"])
             for name, spec in policies.items() if name != "keda-default-deny"}
    assert ports == {"keda-metrics-apiserver": [6443], "keda-operator": [9666], "keda-webhooks": [9443]}
    egress = {name: sorted({p["port"] for r in spec["egress"] for p in r["ports"]})
              for name, spec in policies.items() if name != "keda-default-deny"}
    assert egress == {"keda-operator": [53, 80, 443, 988],
                      "keda-metrics-apiserver": [53, 443, 9666], "keda-webhooks": [53, 443]}

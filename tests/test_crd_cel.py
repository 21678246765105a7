"""The CRDs' CEL validation rules hold for every custom resource of the plans (the program's and the charts'),
evaluated with a real CEL engine (tests/cel.py); the evaluator itself rejects what the API server would."""

from __future__ import annotations

import copy

import pytest

from tests import cel
from tests.conftest import STACKS, Plan

VARIANTS_WITH_CRS = ("gateway", "quiet", "gpu2", "gpu3", "tpu4")


def outcomes(plan: Plan, shared) -> dict[str, cel.Outcome]:
    found = {}
    for manifest in plan.manifests:
        outcome = cel.evaluate(manifest, shared / "crds")
        if outcome is not None:
            found[f"{manifest['kind']}/{manifest['metadata']['name']}"] = outcome
    return found


def _check(found: dict[str, cel.Outcome]) -> None:
    failed = {k: o.failed for k, o in found.items() if o.failed}
    unevaluable = {k: o.unevaluable for k, o in found.items() if o.unevaluable}
    assert not failed, failed
    assert not unevaluable, f"rules that could not be evaluated (not counted as passing): {unevaluable}"


@pytest.mark.parametrize("stack", STACKS)
def test_custom_resources_satisfy_their_crd_rules(plans, shared, stack):
    found = outcomes(plans[stack], shared)
    _check(found)
    assert sum(len(o.passed) for o in found.values()) > 0, "some rules really ran"


@pytest.mark.parametrize("name", VARIANTS_WITH_CRS)
def test_variant_custom_resources_satisfy_their_crd_rules(variants, shared, name):
    found = outcomes(variants[name], shared)
    _check(found)


def test_gateway_rules_run_on_gateway_route_and_health_check(variants, shared):
    """Gateway API and GKE policy CRDs carry most rules; they must actually be evaluated, not skipped."""
    found = outcomes(variants["gateway"], shared)
    ran = {key.split("/")[0] for key, o in found.items() if o.passed}
    assert {"Gateway", "HTTPRoute", "HealthCheckPolicy", "InferencePool"} <= ran, ran


def _one(plan: Plan, kind: str) -> dict:
    return copy.deepcopy(next(m for m in plan.manifests if m["kind"] == kind))


def test_evaluator_rejects_a_broken_http_route(variants, shared):
    route = _one(variants["gateway"], "HTTPRoute")
    # Gateway API: a PathPrefix match value must start with '/'.
    route["spec"]["rules"][0]["matches"][0]["path"]["value"] = "no-leading-slash"
    outcome = cel.evaluate(route, shared / "crds")
    assert outcome.failed, "the path rule must fail"


def test_evaluator_rejects_duplicate_gateway_listeners(variants, shared):
    gateway = _one(variants["gateway"], "Gateway")
    gateway["spec"]["listeners"].append(copy.deepcopy(gateway["spec"]["listeners"][0]))
    outcome = cel.evaluate(gateway, shared / "crds")
    assert outcome.failed and any("name" in f.lower() for f in outcome.failed), outcome.failed


def test_evaluator_rejects_a_bad_pod_monitoring(plans, shared):
    monitoring = _one(plans["gpu"], "PodMonitoring")
    endpoint = monitoring["spec"]["endpoints"][0]
    endpoint["interval"] = "10s"
    endpoint["timeout"] = "30s"  # GMP: the scrape timeout must not exceed the interval
    outcome = cel.evaluate(monitoring, shared / "crds")
    assert outcome.failed, outcome.passed


def test_unknown_function_is_unevaluable_not_passing():
    schema = {"type": "object", "x-kubernetes-validations": [{"rule": "self.x.isFancy()", "message": "fancy"}],
              "properties": {"x": {"type": "string"}}}
    outcome = cel.Outcome()
    cel._walk(schema, {"x": "a"}, "", outcome)
    assert outcome.unevaluable and not outcome.passed and not outcome.failed


def test_transition_rules_are_reported_apart():
    schema = {"type": "object", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}]}
    outcome = cel.Outcome()
    cel._walk(schema, {"x": "a"}, "", outcome)
    assert outcome.on_update_only and not outcome.passed


def test_kubernetes_library_functions():
    assert cel._is_url("https://example.com/a") and cel._is_url("/absolute/path")
    assert not cel._is_url("relative/path") and not cel._is_url("https://example.com/#frag")
    assert [str(p) for p in cel._split("a,b,c", ",")] == ["a", "b", "c"]


def test_defaults_are_applied_before_rules():
    schema = {"type": "object", "properties": {"mode": {"type": "string", "default": "On"}},
              "x-kubernetes-validations": [{"rule": "self.mode == 'On'"}]}
    outcome = cel.Outcome()
    cel._walk(schema, cel.apply_defaults(schema, {}), "", outcome)
    assert outcome.passed and not outcome.failed


def test_gateway_charts_own_health_check_policy_is_rejected(variants, shared):
    """Why the program makes the GKE policies itself: with `provider.name: gke` the gateway chart's
    HealthCheckPolicy sets `port` without `portSpecification`, which the CRD's rule rejects."""
    from tools.preview import helm_render

    entry = copy.deepcopy(next(r for r in variants["gateway"].resources if r["name"] == "router-chart"))
    entry["inputs"]["values"]["provider"] = {"name": "gke"}
    rendered = helm_render.render_chart(entry)
    [policy] = [o for o in rendered.objects if o["kind"] == "HealthCheckPolicy"]
    outcome = cel.evaluate(policy, shared / "crds")
    assert any("port and portName must be unset" in f for f in outcome.failed), outcome.failed

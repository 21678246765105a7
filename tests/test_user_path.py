"""The README's path from an empty project to a first answer: its offline commands run, the stack outputs it
names exist, and the cost headline names every unpriced item."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, STACKS, stack_document

README = (ROOT / "README.md").read_text()
RUN_IT = README.split("## Run it for real", 1)[1].split("\n## ", 1)[0]


def test_every_tool_the_readme_runs_answers_help_offline():
    commands = sorted(set(re.findall(r"python -m\s+tools\s+([a-z][\w-]*)", README)))
    assert "ask" in commands
    assert not re.findall(r"python -m\s+tools\.\w+", README), "the README runs tools through the CLI"
    for command in commands:
        proc = subprocess.run([sys.executable, "-m", "tools", command, "--help"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})  # no pulumi, kubectl or gcloud
        assert proc.returncode == 0, (command, proc.stderr[-500:])
        assert proc.stdout.startswith(f"usage: python -m tools {command} "), (command, proc.stdout[:200])


ROLE_FOR_TYPE = {
    # Each kind of Google Cloud resource the program creates -> the README role that lets `pulumi up` create it.
    "gcp:projects/service:Service": "roles/serviceusage.serviceUsageAdmin",
    "gcp:compute/network:Network": "roles/compute.networkAdmin",
    "gcp:compute/subnetwork:Subnetwork": "roles/compute.networkAdmin",
    "gcp:compute/router:Router": "roles/compute.networkAdmin",
    "gcp:compute/routerNat:RouterNat": "roles/compute.networkAdmin",
    "gcp:compute/address:Address": "roles/compute.networkAdmin",
    "gcp:compute/resourcePolicy:ResourcePolicy": "roles/compute.instanceAdmin.v1",
    "gcp:container/cluster:Cluster": "roles/container.admin",
    "gcp:container/nodePool:NodePool": "roles/container.admin",
    "gcp:serviceaccount/account:Account": "roles/iam.serviceAccountAdmin",
    "gcp:projects/iAMMember:IAMMember": "roles/resourcemanager.projectIamAdmin",
    "gcp:storage/bucket:Bucket": "roles/storage.admin",
    "gcp:storage/bucketIAMMember:BucketIAMMember": "roles/storage.admin",
    "gcp:monitoring/dashboard:Dashboard": "roles/monitoring.editor",
    "gcp:monitoring/alertPolicy:AlertPolicy": "roles/monitoring.editor",
    "gcp:artifactregistry/repository:Repository": "roles/artifactregistry.admin",
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember": "roles/artifactregistry.admin",
}
OTHER_ROLES = {
    # Not a gcp: resource, but `pulumi up` still runs it: the TPU engine image's build
    # (components/serving/engineimage.py).
    "command:local:Command": "roles/cloudbuild.builds.editor",
}


def test_readme_roles_cover_every_resource_the_stacks_create(plans, variants):
    """A new kind of resource without a row in the README's roles table would fail a first `pulumi up`."""
    created = {r["type"] for plan in (*plans.values(), variants["bench"], variants["gateway"])
               for r in plan.resources if r["type"].startswith("gcp:") and r["type"] != "pulumi:providers:gcp"}
    unlisted = created - set(ROLE_FOR_TYPE)
    assert not unlisted, f"add the role that creates {sorted(unlisted)} to README's roles table and here"
    others = {r["type"] for plan in plans.values() for r in plan.resources if r["type"] in OTHER_ROLES}
    assert others == set(OTHER_ROLES)
    table = RUN_IT.split("| role | needed for |", 1)[1].split("\n\n", 1)[0]
    for role in set(ROLE_FOR_TYPE.values()) | set(OTHER_ROLES.values()) | {"roles/iam.serviceAccountUser"}:
        assert f"| `{role}` |" in table, role


def test_every_make_target_the_readme_uses_exists():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))
    used = set(re.findall(r"\bmake ([\w-]+)", README))
    assert used and used <= targets, used - targets


def _virtualenvs_make_test_builds() -> dict[str, str]:
    """Each virtualenv `make test` needs (its `.installed` stamps among the target's prerequisites) -> the size the
    Makefile announces before building it ("about N GB")."""
    makefile = (ROOT / "Makefile").read_text()
    folder = dict(re.findall(r"^(\w+_VENV|VENV)\s*\?=\s*(\S+)$", makefile, flags=re.M))
    stamp = {name: folder[venv] for name, venv in re.findall(r"^(\w*STAMP)\s*:=\s*\$\((\w+)\)/\.installed$",
                                                               makefile, flags=re.M)}
    [prerequisites] = re.findall(r"^test:(.*)$", makefile, flags=re.M)
    built = {stamp[name] for name in re.findall(r"\$\((\w*STAMP)\)", prerequisites)}
    sizes = {}
    for name, venv in stamp.items():
        recipe = makefile.split(f"$({name}):", 1)[1].split("\n\n", 1)[0]
        sizes[venv] = re.search(r"about ([\d.]+ GB)", recipe).group(1)
    return {venv: sizes[venv] for venv in built if venv != folder["VENV"]}


def test_the_readme_names_every_virtualenv_make_test_builds():
    """The quick start's measured set-up: every virtualenv `make test` builds besides .venv, with the size the
    Makefile announces before building it, and how many there are."""
    built = _virtualenvs_make_test_builds()
    assert len(built) >= 4, built
    cost = " ".join(README.split("**Set-up, measured**", 1)[1].split("\n\n", 1)[0].split())
    for venv, size in built.items():
        assert re.search(rf"`{re.escape(venv)}` \({re.escape(size)}\)", cost), (venv, size, cost)
    words = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}
    assert f"`make test` adds {words[len(built)]} virtualenvs" in cost, cost


def test_outputs_the_readme_names_exist(plans, variants):
    listed = RUN_IT.split("After `up`, the outputs a user needs:", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`(\w+)`", listed)) | set(re.findall(r"\(this is `(\w+)`\)", RUN_IT))
    standalone = set(plans["gpu"].outputs)
    gateway = set(variants["gateway"].outputs)
    assert {"kubeconfigCommand", "routerPortForward", "gatewayAddressCommand", "askCommand", "hourlyCost"} <= named
    assert named <= standalone | gateway, named - standalone - gateway


@pytest.mark.parametrize("stack", STACKS)
def test_kubeconfig_command_uses_the_dns_endpoint(plans, stack):
    command = plans[stack].outputs["kubeconfigCommand"]
    project = stack_document(stack)["config"]["kimi-k3-1:gcp.project"]
    assert command == (f"gcloud container clusters get-credentials kimi-k3-1-{stack} --location us-central1 "
                       f"--project {project} --dns-endpoint")


def test_router_is_reached_per_mode(plans, variants):
    standalone = plans["gpu"].outputs
    assert standalone["routerPortForward"] == "kubectl port-forward -n kimi-k3-1 svc/kimi-k3-1-epp 8080:80"
    assert standalone["routerEndpoint"] == "http://kimi-k3-1-epp.kimi-k3-1.svc.cluster.local:80"
    gateway = variants["gateway"].outputs
    assert "routerPortForward" not in gateway
    assert gateway["gatewayAddressCommand"].startswith("kubectl get gateway llm-d-inference-gateway -n kimi-k3-1 ")


@pytest.mark.parametrize("stack", STACKS)
def test_cost_headline_names_every_unpriced_item(plans, stack):
    summary = plans[stack].summary.splitlines()
    headline = next(line for line in summary if "cost estimate" in line)
    unpriced = [line.strip().split(": price unknown")[0] for line in summary if ": price unknown" in line]
    accelerators = "a4x-maxgpu-4g-metal" if stack == "gpu" else "tpu7x chips"
    assert any(accelerators in item for item in unpriced), unpriced
    for item in unpriced:
        assert f"{item} unpriced: set kimi-k3-1:cost." in headline, (item, headline)
    assert plans[stack].outputs["hourlyCost"] == headline.split(": ", 1)[1]
    # The CPU pools have a public list price, so they are priced.
    assert not any("n2-standard-8" in item or "c3-standard-44" in item for item in unpriced)


def test_fully_priced_headline_has_no_unpriced_part(variants):
    headline = variants["bench"].outputs["hourlyCost"]
    assert re.fullmatch(r"\$[\d,]+\.\d\d/h", headline), headline

"""The GitHub Actions workflows: actionlint passes (and catches errors), and their shape holds.

preview.yml: the offline plan and tests on every pull request, a `pulumi preview` (with the policy pack)
of every stack, commented on same-repository PRs, under a read-only identity. teardown.yml: `pulumi
destroy` on demand or nightly (only the stacks it is told to), under a destroy-capable identity that
only the protected `teardown` environment can use, then the leftover listing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
LINTER = ROOT / "tools" / "actionlint.sh"
SKIPPED = "actionlint: skipped: "

# The secrets the workflows read, as the README lists them: one identity each for preview and teardown.
PREVIEW_IDENTITY = {"GCP_PREVIEW_WORKLOAD_IDENTITY_PROVIDER", "GCP_PREVIEW_SERVICE_ACCOUNT"}
TEARDOWN_IDENTITY = {"GCP_TEARDOWN_WORKLOAD_IDENTITY_PROVIDER", "GCP_TEARDOWN_SERVICE_ACCOUNT"}
SECRETS = PREVIEW_IDENTITY | TEARDOWN_IDENTITY | {"PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "HF_TOKEN"}
# Inputs and env vars that carry a credential, a backend or a project: only ever a secret or a variable.
SENSITIVE_KEYS = {"workload_identity_provider", "service_account", "credentials_json", "project_id", "cloud-url",
                  "github-token", "token", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_ACCESS_TOKEN", "PULUMI_BACKEND_URL",
                  "GOOGLE_CREDENTIALS", "GOOGLE_APPLICATION_CREDENTIALS", "HF_TOKEN", *PREVIEW_IDENTITY,
                  *TEARDOWN_IDENTITY}
REFERENCE = re.compile(r"^\$\{\{ (secrets|vars)\.[A-Z][A-Z0-9_]* \}\}$")
# Concrete values (placeholders such as `gs://<bucket>` in comments do not match).
LEAKS = {
    "workload identity provider": re.compile(r"projects/\d+/locations/"),
    "service account email": re.compile(r"[a-z][a-z0-9-]+@[a-z][a-z0-9-]+\.iam\.gserviceaccount\.com"),
    "bucket URL": re.compile(r"gs://[a-z0-9][a-z0-9._-]+"),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "service account key file": re.compile(r'"type":\s*"service_account"'),
    "Google API key": re.compile(r"AIza[0-9A-Za-z_-]{35}"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36}\b"),
    "Pulumi access token": re.compile(r"\bpul-[0-9a-f]{40}\b"),
}


def run_linter(*files: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(LINTER), *map(str, files)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def skip_if_unavailable(proc: subprocess.CompletedProcess) -> None:
    for line in proc.stdout.splitlines():
        if line.startswith(SKIPPED):
            pytest.skip(line)


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def triggers(workflow: dict[str, Any]) -> dict[str, Any]:
    # YAML 1.1 reads the bare key `on` as the boolean True.
    return workflow.get("on", workflow.get(True))


def pulumi_steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if s.get("uses", "").startswith("pulumi/actions@")]


def command_steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in pulumi_steps(job) if "command" in s.get("with", {})]


def is_true(value: Any) -> bool:
    return str(value).lower() == "true"


def walk(node: Any, key: str = ""):
    """Every (key, scalar) pair in a parsed workflow."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, str(k))
    elif isinstance(node, list):
        for v in node:
            yield from walk(v, key)
    else:
        yield key, node


# --- actionlint -----------------------------------------------------------------------------------


def test_actionlint_passes():
    proc = run_linter()
    skip_if_unavailable(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"actionlint: ok ({len(list(WORKFLOWS.glob('*.y*ml')))} file(s))" in proc.stdout


def test_actionlint_catches_errors(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("""\
on:
  schedule:
    - cron: "61 2 * * *"
jobs:
  a:
    runs-on: ubuntu-24.04
    permissions:
      id-tokn: write
    steps:
      - id: one
        run: echo "${{ github.event.pull_request.title }}"
      - if: steps.onee.outcome == 'failure'
        run: echo retry
""")
    proc = run_linter(broken)
    skip_if_unavailable(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for expected in ("invalid CRON format", 'unknown permission scope "id-tokn"', "potentially untrusted",
                     'property "onee" is not defined'):
        assert expected in proc.stdout, proc.stdout


def test_actionlint_refuses_missing_files(tmp_path):
    # A typo'd path must fail, not pass on zero files.
    proc = run_linter(tmp_path / "absent.yml")
    assert proc.returncode == 2 and "no such file" in proc.stderr


# --- preview.yml ----------------------------------------------------------------------------------


def test_preview_runs_on_pull_requests_with_an_offline_job_for_forks():
    wf = load("preview.yml")
    assert "pull_request" in triggers(wf)
    assert "pull_request_target" not in triggers(wf), "never run PR code with secrets from forks"
    assert {"offline", "preview"} <= wf["jobs"].keys()
    offline = wf["jobs"]["offline"]
    assert "if" not in offline and "needs" not in offline, "the offline job runs on every PR, forks included"
    assert "secrets." not in yaml.safe_dump(offline)
    runs = [s.get("run", "") for s in offline["steps"]]
    assert "make plan" in runs and "make test" in runs
    assert runs.index("make inference-perf") < runs.index("make test"), "the benchmark-config tests need it"
    python = next(s for s in offline["steps"] if s.get("uses", "").startswith("actions/setup-python@"))
    # 3.12 the default (listed last): the inference-perf release the tests load needs it
    # (requirements-inference-perf.txt); 3.11 for the engine tiers, whose CPU torch is a cp311 wheel.
    assert str(python["with"]["python-version"]).split() == ["3.11", "3.12"]
    tests = next(s for s in offline["steps"] if s.get("run") == "make test")
    assert tests["env"]["ENGINE_PYTHON"] == "python3.11"
    # The CPU torch's source is declared where it is locked, so a user's `make test` finds it too, not by a variable.
    assert set(tests["env"]) == {"ENGINE_PYTHON"}
    assert "\n--index-url https://download.pytorch.org/whl/cpu\n" in (ROOT / "requirements-torch-cpu.txt").read_text()


def test_preview_needs_secrets_and_a_same_repository_pr():
    jobs = load("preview.yml")["jobs"]
    preview = jobs["preview"]
    same_repo = "github.event.pull_request.head.repo.full_name == github.repository"
    assert same_repo in preview["if"] and same_repo in jobs[preview["needs"]]["if"]
    assert preview["permissions"] == {"contents": "read", "id-token": "write", "pull-requests": "write"}


def step_script(workflow: str, job: str, step_id: str) -> dict[str, Any]:
    return next(s for s in load(workflow)["jobs"][job]["steps"] if s.get("id") == step_id)


def run_step(step: dict[str, Any], folder: Path, stacks: list[str], **env: str) -> tuple[int, str, str]:
    """Run a workflow step's bash script in `folder` holding Pulumi.<stack>.yaml files; returns (exit code,
    the `stacks=` it wrote to GITHUB_OUTPUT, its output)."""
    if not shutil.which("jq"):
        pytest.skip("jq is not installed (the runners have it)")
    for stack in stacks:
        (folder / f"Pulumi.{stack}.yaml").write_text("config: {}\n")
    output = folder / "github_output"
    output.write_text("")
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step["run"]], cwd=folder, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(output), **env})
    written = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return proc.returncode, written.get("stacks", ""), proc.stdout + proc.stderr


def test_preview_matrix_is_every_stack_file_found_at_run_time(tmp_path):
    """No list of stack names in the workflow: a user's own Pulumi.<name>.yaml is previewed too."""
    jobs = load("preview.yml")["jobs"]
    assert jobs["preview"]["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.gate.outputs.stacks) }}"
    assert jobs["gate"]["outputs"]["stacks"] == "${{ steps.stacks.outputs.stacks }}"
    code, stacks, log = run_step(step_script("preview.yml", "gate", "stacks"), tmp_path, ["gpu", "tpu", "team.a"])
    assert code == 0, log
    assert json.loads(stacks) == ["gpu", "team.a", "tpu"]


def test_preview_passes_the_policy_pack():
    (step,) = command_steps(load("preview.yml")["jobs"]["preview"])
    assert step["with"]["policyPacks"] == "policy"
    assert (ROOT / "policy" / "PulumiPolicy.yaml").is_file()
    assert "EnforcementLevel.MANDATORY" in (ROOT / "policy" / "__main__.py").read_text()


def test_preview_comments_a_pulumi_preview_of_each_stack():
    job = load("preview.yml")["jobs"]["preview"]
    (step,) = command_steps(job)
    inputs = step["with"]
    assert inputs["command"] == "preview"
    assert inputs["stack-name"] == "${{ matrix.stack }}"
    assert is_true(inputs["comment-on-pr"]) and is_true(inputs["refresh"]) and is_true(inputs["diff"])
    assert inputs["cloud-url"] == "${{ secrets.PULUMI_BACKEND_URL }}"
    assert step["env"]["PULUMI_CONFIG_PASSPHRASE"] == "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"
    uses = [s.get("uses", "") for s in job["steps"]]
    auth = uses.index(next(u for u in uses if u.startswith("google-github-actions/auth@")))
    gcloud = next(s for s in job["steps"] if s.get("uses", "").startswith("google-github-actions/setup-gcloud@"))
    assert "gke-gcloud-auth-plugin" in gcloud["with"]["install_components"]
    assert auth < uses.index(step["uses"]), "authenticate before pulumi runs"
    assert any("make plan" in s.get("run", "") for s in job["steps"][:auth]), ".venv is built before the preview"


def test_preview_gives_the_stack_its_token_from_a_secret_not_the_stack_file():
    """Committed stack files hold no `secure:` value; the runner sets hfToken from HF_TOKEN, through stdin so the
    token is not on a command line, before the preview runs."""
    job = load("preview.yml")["jobs"]["preview"]
    steps = job["steps"]
    (preview,) = command_steps(job)
    setter = next(i for i, s in enumerate(steps) if "pulumi config set --secret hfToken" in s.get("run", ""))
    assert steps[setter]["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    assert '| pulumi config set --secret hfToken --stack "$STACK"' in steps[setter]["run"]
    assert setter < steps.index(preview)
    gate = next(s for s in load("preview.yml")["jobs"]["gate"]["steps"] if s.get("id") == "check")
    assert "HF_TOKEN" in gate["run"] and gate["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"


# --- teardown.yml ---------------------------------------------------------------------------------


def test_teardown_is_manual_and_scheduled():
    on = triggers(load("teardown.yml"))
    inputs = on["workflow_dispatch"]["inputs"]
    assert inputs["stack"]["required"] is True and inputs["confirm"]["required"] is True
    assert inputs["stack"]["type"] == "string", "any Pulumi.<stack>.yaml, checked by the select job"
    assert on["schedule"] and all("cron" in entry for entry in on["schedule"])


@pytest.mark.parametrize(("event", "env", "expected"), [
    ("schedule", {}, []),                                           # nothing by default
    ("schedule", {"TEARDOWN_STACKS": ""}, []),
    ("schedule", {"TEARDOWN_STACKS": "none"}, []),
    ("schedule", {"TEARDOWN_STACKS": "gpu"}, ["gpu"]),
    ("schedule", {"TEARDOWN_STACKS": "gpu,tpu"}, ["gpu", "tpu"]),
    ("workflow_dispatch", {"STACK": "tpu", "CONFIRM": "tpu"}, ["tpu"]),
    ("schedule", {"TEARDOWN_STACKS": "gpu,nope"}, None),             # unknown stack: error, nothing destroyed
    ("workflow_dispatch", {"STACK": "tpu", "CONFIRM": "gpu"}, None),  # confirmation mismatch
])
def test_teardown_destroys_only_the_stacks_it_is_told_to(tmp_path, event, env, expected):
    code, stacks, log = run_step(step_script("teardown.yml", "select", "pick"), tmp_path, ["gpu", "tpu"],
                                 EVENT=event, **env)
    if expected is None:
        assert code != 0 and not stacks, log
    else:
        assert code == 0, log
        assert json.loads(stacks) == expected


def test_teardown_lists_leftovers_after_the_destroy():
    steps = load("teardown.yml")["jobs"]["destroy"]["steps"]
    last_destroy = max(i for i, s in enumerate(steps) if s.get("with", {}).get("command") == "destroy")
    listing = [i for i, s in enumerate(steps) if "-m tools leftovers" in s.get("run", "")]
    assert listing and listing[0] > last_destroy
    assert steps[listing[0]]["if"].startswith("always()"), "also after a failed destroy"
    assert (ROOT / "tools" / "live" / "leftovers.py").is_file()


def test_teardown_runs_in_a_protected_environment():
    jobs = load("teardown.yml")["jobs"]
    assert jobs["destroy"]["environment"] == "teardown"
    for name, job in jobs.items():
        if set(re.findall(r"secrets\.([A-Z0-9_]+)", yaml.safe_dump(job))) & TEARDOWN_IDENTITY:
            assert job.get("environment") == "teardown", f"{name} reads the teardown identity outside the environment"


def test_preview_and_teardown_use_different_identities():
    def identity(workflow: str, job: str) -> set[str]:
        (auth,) = [s for s in load(workflow)["jobs"][job]["steps"]
                   if s.get("uses", "").startswith("google-github-actions/auth@")]
        return {REFERENCE.match(v) and v.split("secrets.")[1].split()[0] for v in auth["with"].values()}

    assert identity("preview.yml", "preview") == PREVIEW_IDENTITY
    assert identity("teardown.yml", "destroy") == TEARDOWN_IDENTITY
    assert not set(re.findall(r"secrets\.([A-Z0-9_]+)", (WORKFLOWS / "preview.yml").read_text())) & TEARDOWN_IDENTITY


def test_teardown_destroys_and_keeps_the_stack():
    job = load("teardown.yml")["jobs"]["destroy"]
    steps = command_steps(job)
    assert steps and all(s["with"]["command"] == "destroy" for s in steps)
    for step in steps:
        assert step["with"]["stack-name"] == "${{ matrix.stack }}"
        assert is_true(step["with"]["refresh"]) and not is_true(step["with"]["remove"])
        assert step["env"]["PULUMI_CONFIG_PASSPHRASE"] == "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"
    first, retry = steps
    assert first.get("continue-on-error") is True
    assert "PULUMI_K8S_DELETE_UNREACHABLE" not in first["env"], "a reachable cluster's objects are deleted"
    assert retry["env"]["PULUMI_K8S_DELETE_UNREACHABLE"] == "true"
    assert retry["if"] == f"steps.{first['id']}.outcome == 'failure'"
    assert job["strategy"]["fail-fast"] is False
    assert job["permissions"] == {"contents": "read", "id-token": "write"}


def test_preview_and_teardown_never_overlap_on_a_stack():
    preview = load("preview.yml")["jobs"]["preview"]["concurrency"]
    destroy = load("teardown.yml")["jobs"]["destroy"]["concurrency"]
    assert preview["group"] == destroy["group"] and "matrix.stack" in preview["group"]
    assert preview["cancel-in-progress"] is False and destroy["cancel-in-progress"] is False


# --- both -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["preview.yml", "teardown.yml"])
def test_permissions_default_to_none(name):
    wf = load(name)
    assert wf["permissions"] == {}
    assert all("permissions" in job for job in wf["jobs"].values())


@pytest.mark.parametrize("name", ["preview.yml", "teardown.yml"])
def test_actions_are_pinned(name):
    for key, value in walk(load(name)):
        if key == "uses":
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+|[0-9a-f]{40})", value), value


def test_pulumi_cli_matches_the_sdk_pin():
    sdk = re.search(r"^pulumi==(\S+)$", (ROOT / "requirements.in").read_text(), flags=re.M).group(1)
    for name in ("preview.yml", "teardown.yml"):
        workflow = load(name)
        assert workflow["env"]["PULUMI_VERSION"] == sdk, "one CLI version per workflow, equal to the SDK pin"
        versions = {str(v) for k, v in walk(workflow) if k == "pulumi-version"}
        assert versions == {"${{ env.PULUMI_VERSION }}"}


@pytest.mark.parametrize("name", ["preview.yml", "teardown.yml"])
def test_no_hardcoded_project_or_credentials(name):
    text = (WORKFLOWS / name).read_text()
    for what, pattern in LEAKS.items():
        assert not pattern.search(text), f"{name} hardcodes a {what}: {pattern.search(text).group(0)}"
    for stack_file in ROOT.glob("Pulumi.*.yaml"):
        config = yaml.safe_load(stack_file.read_text())["config"]
        project = config.get("kimi-k3-1:gcp.project")
        assert not project or project not in text, f"{name} names the project of {stack_file.name}"
    for key, value in walk(yaml.safe_load(text)):
        if key in SENSITIVE_KEYS:
            assert REFERENCE.match(str(value)), f"{name}: {key} must come from secrets.* or vars.*, not {value!r}"
        if key == "run":
            assert "secrets." not in value, f"{name}: pass secrets to scripts through env, not inline"
    assert set(re.findall(r"secrets\.([A-Z0-9_]+)", text)) <= SECRETS


# --- the offline plan diff (preview.yml) ------------------------------------------------------------------


def step(job: dict[str, Any], key: str) -> dict[str, Any]:
    return next(s for s in job["steps"] if key in (s.get("id"), s.get("name")))


def test_offline_job_diffs_the_plan_against_the_base_branch():
    offline = load("preview.yml")["jobs"]["offline"]
    checkout = offline["steps"][0]
    assert checkout["uses"].startswith("actions/checkout@") and checkout["with"]["fetch-depth"] >= 2
    runs = [s.get("run", "") for s in offline["steps"]]
    diff = step(offline, "diff")
    assert runs.index("make plan") < offline["steps"].index(diff) < runs.index("make test")
    assert "-m tools diff HEAD^1 build/plan" in diff["run"] and "$GITHUB_STEP_SUMMARY" in diff["run"]
    assert diff.get("continue-on-error") is True
    assert offline["outputs"]["plan-diff"] == "${{ steps.diff.outputs.comment }}"


def test_plan_diff_comment_is_one_comment_for_same_repository_prs_only():
    from tools.preview.plan_diff import COMMENT_MARKER

    job = load("preview.yml")["jobs"]["plan-diff-comment"]
    assert job["needs"] == "offline" and job["permissions"] == {"pull-requests": "write"}
    assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
    assert not any("uses" in s for s in job["steps"]), "posts the offline job's text; checks out no PR code"
    assert f"marker='{COMMENT_MARKER}'" in job["steps"][0]["run"]


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


def _fake_python(folder: Path, fails: bool) -> None:
    """A stand-in `.venv/bin/python` for the step's shell: writes a report where --out and --comment say."""
    bin_dir = folder / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(f"""#!/usr/bin/env bash
{"echo 'error: rendering HEAD^1 failed: boom' >&2; exit 2" if fails else ""}
while (($#)); do
  case $1 in
    --out) echo '# Offline plan diff: report' >"$2"; shift ;;
    --comment) printf '<!-- kimi-k3-1 offline plan diff -->\\n# Offline plan diff: report\\n' >"$2"; shift ;;
  esac
  shift
done
""")
    (bin_dir / "python").chmod(0o755)
    (folder / "build").mkdir()


@pytest.mark.parametrize("fails", [False, True])
def test_diff_step_writes_the_job_summary_and_the_comment_output(tmp_path, fails):
    _fake_python(tmp_path, fails)
    summary, output = tmp_path / "summary.md", tmp_path / "output.txt"
    script = step(load("preview.yml")["jobs"]["offline"], "diff")["run"]
    proc = _bash(script, tmp_path, {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output)})
    assert proc.returncode == 0, proc.stderr
    text = summary.read_text()
    assert text.startswith("# Offline plan diff")
    assert ("boom" in text and "::warning::" in proc.stdout) if fails else text == "# Offline plan diff: report\n"
    name, delimiter = re.match(r"^(comment)<<(plan-diff-[0-9a-f]{32})\n", output.read_text()).groups()
    body = output.read_text().split("\n", 1)[1].rsplit(delimiter, 1)[0]
    assert body.startswith("<!-- kimi-k3-1 offline plan diff -->\n# Offline plan diff")


@pytest.mark.parametrize("existing", ["", "4242"])
def test_comment_step_edits_its_comment_in_place(tmp_path, existing):
    """The comment step with a fake `gh`: PATCH the marked comment if there is one, else POST a new one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "gh.log"
    (bin_dir / "gh").write_text(f"""#!/usr/bin/env bash
echo "$*" >>{log}
if [[ $* == *--paginate* ]]; then [[ -n "{existing}" ]] && echo {existing}; fi
exit 0
""")
    (bin_dir / "gh").chmod(0o755)
    script = load("preview.yml")["jobs"]["plan-diff-comment"]["steps"][0]["run"]
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "GH_TOKEN": "t", "REPO": "o/r", "PR": "7",
           "BODY": "<!-- kimi-k3-1 offline plan diff -->\n# report"}
    proc = _bash(script, tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("api --paginate repos/o/r/issues/7/comments --jq")
    expected = ("api --method PATCH repos/o/r/issues/comments/4242 -F body=@body.md" if existing
                else "api --method POST repos/o/r/issues/7/comments -F body=@body.md")
    assert calls[1:] == [expected]
    assert (tmp_path / "body.md").read_text() == env["BODY"] + "\n"


def readme_section(title: str) -> str:
    return (ROOT / "README.md").read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def table_roles(section: str) -> set[str]:
    return set(re.findall(r"^\| `(roles/[\w.]+)`", section, flags=re.M))


def test_teardown_identity_can_delete_every_kind_of_resource_and_nothing_more():
    """The teardown account's table names the role that deletes each kind of resource the stacks create
    (tests/test_user_path.py keeps that mapping in step with the plan), plus reads; no owner/editor."""
    from tests.test_user_path import ROLE_FOR_TYPE

    roles = table_roles(readme_section("Tear down"))
    deleting = set(ROLE_FOR_TYPE.values()) - {"roles/serviceusage.serviceUsageAdmin"}  # destroy leaves APIs on
    assert deleting <= roles, f"missing in README 'Tear down': {sorted(deleting - roles)}"
    assert not roles & {"roles/owner", "roles/editor", "roles/serviceusage.serviceUsageAdmin"}


def test_preview_identity_gets_read_roles_only():
    roles = table_roles(readme_section("Preview in pull requests"))
    assert roles == {"roles/viewer", "roles/iam.securityReviewer", "roles/container.viewer",
                     "roles/storage.objectViewer", "roles/iam.workloadIdentityUser"}
    assert all(r.endswith(("viewer", "Viewer", "Reviewer", "workloadIdentityUser")) for r in roles)


# --- release -----------------------------------------------------------------------------------------
def test_a_release_is_a_version_tag_checked_against_the_project_and_its_changelog():
    wf = load("release.yml")
    assert triggers(wf) == {"push": {"tags": ["v*"]}}, "only a pushed v* tag releases"
    assert wf["permissions"] == {}
    (job,) = wf["jobs"].values()
    assert job["permissions"] == {"contents": "write"}
    runs = [s.get("run", "") for s in job["steps"]]
    check = next(i for i, run in enumerate(runs) if "python -m tools release-notes \"$TAG\"" in run)
    publish = next(i for i, run in enumerate(runs) if run.startswith("gh release create \"$TAG\" --verify-tag"))
    assert check < publish and "--notes-file build/release-notes.md" in runs[publish]
    for key, value in walk(wf):
        if key == "uses":
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+|[0-9a-f]{40})", value), value


def test_the_release_notes_are_the_changelog_section_of_the_project_version():
    import tomllib

    from tools.preview import release_notes as release

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert release.notes(changelog, version), f"CHANGELOG.md has no section for {version}"
    assert "## [Unreleased]" in changelog, "where changes wait for the next release"
    run = lambda *args: subprocess.run([sys.executable, "-m", "tools", *args], cwd=ROOT, capture_output=True,  # noqa: E731
                                       text=True, timeout=60)
    good = run("release-notes", f"v{version}")
    assert good.returncode == 0 and good.stdout == release.notes(changelog, version)
    for tag in (f"v{version}.1", version, "v" + "9" * 500):
        bad = run("release-notes", tag)
        assert bad.returncode == 1 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1, bad.stderr
    assert release.notes("## [1.0.0]\n\n## [0.9.0]\n- x\n", "1.0.0") is None, "an empty section is no notes"
    assert run("--version").stdout == f"python -m tools {version}\n"


def test_the_licence_is_apache_2_and_declared():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")

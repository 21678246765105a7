"""The TPU engine image, built once by the stack: vLLM-TorchTPU publishes no release image, so `pulumi up` builds
one with Cloud Build from the hash-pinned lock (components/locks/vllm-torchtpu.txt, CPU torch, no CUDA wheels) into
an Artifact Registry repository the stack owns, and the TPU pods run the build's digest (`image@sha256:...`).

Why an image and not a wheelhouse in the bucket: a serving pod then reaches no package index at all, every host and
every restart runs the same bytes (the kubelet verifies the digest), the node's image cache makes a restart cost no
download, and the pre-pull DaemonSet (components/serving/prepull.py) takes the pull off the critical path; an offline
install from a wheelhouse would still unpack 1.2 GB into every pod at every start, on the startup probe's clock.

The build is a `command:local:Command` (pulumi-command, components/facts/versions.py PULUMI_COMMAND): pulumi-gcp has no
resource that runs a build (`cloudbuild.Trigger` only registers one, runnable from a source repository). It runs
`gcloud builds submit` as a service account of its own (least privilege: push to this repository, write its logs,
read its source under `engine-image/` of the stack's bucket), and it is idempotent: the image's tag is the sha256 of
what it is made of (`build_inputs`: the lock's, the Dockerfile's and the build config's sha256 and the base image),
a tag that already exists is not built again, and the command re-runs only when those inputs change. `pulumi
destroy` deletes the repository and so every image in it (a repository is deleted with its packages, "ensure that
any packages that you want to keep are available in another location",
https://cloud.google.com/artifact-registry/docs/repositories/delete-repos); the source archive goes with the bucket,
kept or deleted as `storage.deleteCheckpointOnDestroy` says.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

import pulumi
import pulumi_command as command
import pulumi_gcp as gcp

from ..cloud.base import Args, Component, StrInput

LOCKS = Path(__file__).resolve().parents[1] / "locks"
LOCK = LOCKS / "vllm-torchtpu.txt"
DOCKERFILE = LOCKS / "Dockerfile"
BUILD_CONFIG = LOCKS / "cloudbuild.yaml"
IMAGE_NAME = "vllm-torchtpu"
SOURCE_PREFIX = "engine-image/"
"""Where `gcloud builds submit` stages the build's source (the lock and the Dockerfile) in the stack's bucket."""
LOCK_LABEL = "kimi-k3-1.lock-sha256"
"""The image label that carries the lock's sha256 (components/locks/Dockerfile)."""
INPUTS_LABEL = "kimi-k3-1.inputs-sha256"
"""The image label that carries the sha256 of `build_inputs` (the tag's hex), for whoever inspects the image; what
the build command trusts is Cloud Build's own record of the build (`build_script`), which a registry writer cannot
forge."""

POD_COMMANDS = ("bash", "getent", "awk", "vllm")
"""What the TPU pods' script runs (components/serving/modelservers.py: `/bin/bash -c`, the leader lookup with getent and
awk, `exec vllm serve`); the Dockerfile's last check fails the build when one is not on PATH. `vllm` is the
console script of the vllm-torchtpu wheel (its entry_points.txt: `vllm = vllm.entrypoints.cli.main:main`)."""
TORCH_AUTOLOAD_ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"
"""torch-tpu registers itself under `torch.backends` (its entry_points.txt: `torch_tpu = torch_tpu._loader:load`),
so a bare `import torch` loads it (https://docs.pytorch.org/tutorials/unstable/python_extension_autoload.html); the
build's check turns that off, the pods keep it on."""

BUILDER_ROLES = {
    "repository": "roles/artifactregistry.writer",
    "project": "roles/logging.logWriter",
    "source": "roles/storage.objectViewer",
}
"""What the build's service account needs: push to the one repository (https://cloud.google.com/artifact-registry/
docs/access-control#roles), write the build's logs, which a build run as a user-specified service account must send
to Cloud Logging or a bucket of the user's (https://cloud.google.com/build/docs/securing-builds/
configure-user-specified-service-accounts), and read its own source objects (limited by an IAM condition)."""
NODE_PULL_ROLE = "roles/artifactregistry.reader"
"""The nodes pull the image as their service account: read on this repository only."""


def lock_sha256(text: Optional[str] = None) -> str:
    return hashlib.sha256((LOCK.read_text() if text is None else text).encode()).hexdigest()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_inputs(base_image: str, step_image: str) -> list[str]:
    """What the image is made of: the lock's, the Dockerfile's and the build config's sha256, and the base image.
    They are the build command's triggers, and their sha256 is the image's tag."""
    return [lock_sha256(), file_sha256(DOCKERFILE), file_sha256(BUILD_CONFIG), base_image, step_image]


def image_tag(base_image: str, step_image: str) -> str:
    """`inputs-<sha256 of build_inputs>`: a changed Dockerfile, base or builder gets a new tag, never the old image."""
    return "inputs-" + hashlib.sha256("\n".join(build_inputs(base_image, step_image)).encode()).hexdigest()


def repository_id(cluster_name: str) -> str:
    return f"{cluster_name}-engine"


def repository_path(region: str, project: str, cluster_name: str) -> str:
    """`REGION-docker.pkg.dev/PROJECT/REPOSITORY` (https://cloud.google.com/artifact-registry/docs/docker/names)."""
    return f"{region}-docker.pkg.dev/{project}/{repository_id(cluster_name)}"


SUBMIT_TRIES = 3
"""Submissions of the build at most. A build refused within SUBMIT_RETRY_WINDOW_S of its submission never ran its
install: on the first `up` that is the service account and grants created a moment before, which IAM takes up to
minutes to honour ("typically ... 2 minutes", https://cloud.google.com/iam/docs/access-change-propagation), so it is
submitted again after SUBMIT_RETRY_WAIT_S; a build that ran longer failed for itself and is not retried."""
SUBMIT_RETRY_WINDOW_S = 240
SUBMIT_RETRY_WAIT_S = 60
FAILURE_PREFIX = "engine image build failed: "
"""The one line the command's stderr ends with when it fails (what `pulumi up` shows last)."""


def build_script() -> str:
    """The build command: reuse the lock's tag if it exists and provably is this stack's build of these inputs,
    else submit the build; print the digest only (the command's stdout is the digest the pods run; gcloud's own
    output goes to stderr).

    Provenance: a digest is adopted (the tag found before a build, or pushed meanwhile by an interrupted earlier
    build) only if Cloud Build's record says a SUCCESS build of this project and region, run as the stack's builder
    account with substitution _INPUTS_SHA256 = the tag's hex (the sha256 of the lock, Dockerfile, build config and
    base: `build_inputs`), produced that digest (https://cloud.google.com/sdk/gcloud/reference/builds/list; Build
    `results.images[].digest`, `substitutions`, `serviceAccount`: https://cloud.google.com/build/docs/api/reference/
    rest/v1/projects.builds). An image pushed under the tag by anything else (a registry writer, another build) is
    refused with one line naming it; the tag is immutable, so it is not rebuilt over. Flags:
    https://cloud.google.com/sdk/gcloud/reference/builds/submit (`--service-account` takes
    `projects/PROJECT/serviceAccounts/EMAIL`; `--suppress-logs`), https://cloud.google.com/sdk/gcloud/reference/
    artifacts/docker/images/describe (`image_summary.digest`) and `--quiet` (never prompt: the command has no
    terminal; https://cloud.google.com/sdk/gcloud/reference#--quiet).

    Rerun after an interrupted `up` (Ctrl-C ends gcloud, not the build it submitted, and the command is recorded
    as not created): the tag is looked up again first, and a submission that fails because an earlier build pushed
    the tag meanwhile (the repository's tags are immutable) takes that build's digest. Every failure exits non-zero
    with one line, FAILURE_PREFIX + gcloud's own last ERROR line + what to do; gcloud's other output is dropped
    (it would land in the command's recorded stderr). tests/serving/test_supply_chain.py runs it against a fake
    gcloud."""
    return "\n".join([
        "set -euo pipefail",
        'image="$REPOSITORY/' + IMAGE_NAME + ':$TAG"',
        'fail() { echo "' + FAILURE_PREFIX + '$*" >&2; exit 1; }',
        "command -v gcloud >/dev/null || fail 'gcloud is not on PATH: install the Google Cloud CLI "
        "(https://cloud.google.com/sdk/docs/install) and run pulumi up again'",
        'digest() { gcloud artifacts docker images describe "$image" --project "$PROJECT" --quiet '
        "--format='value(image_summary.digest)' 2>/dev/null; }",
        'want="${TAG#inputs-} projects/$PROJECT/serviceAccounts/$BUILDER"',
        'built_here() { got=$(gcloud builds list --project "$PROJECT" --region "$REGION" --quiet --limit 1 '
        '--filter "status=SUCCESS AND results.images.digest:$1" '
        """--format 'value[separator=" "](substitutions._INPUTS_SHA256,serviceAccount)' 2>/dev/null) || got=""; """
        '[ "$got" = "$want" ]; }',
        'adopt() { case "$1" in sha256:????????????????????????????????????????????????????????????????) ;; '
        '*) fail "no digest for $image: $1";; esac',
        '  built_here "$1" || fail "$image exists with digest $1, but no successful Cloud Build of project '
        '$PROJECT in $REGION, run as $BUILDER from these inputs (_INPUTS_SHA256=${TAG#inputs-}), produced it: it was '
        'pushed by something else and is not run; delete it (gcloud artifacts docker images delete $image --project '
        '$PROJECT --delete-tags) and run pulumi up again"; }',
        'found=$(digest) || found=""',
        'if [ -n "$found" ]; then adopt "$found"; fi',
        "log=$(mktemp); trap 'rm -f \"$log\"' EXIT",
        "try=0",
        'while [ -z "$found" ]; do',
        "  try=$((try + 1)); start=$SECONDS; status=0",
        '  gcloud builds submit . --project "$PROJECT" --region "$REGION" --config cloudbuild.yaml '
        '--service-account "projects/$PROJECT/serviceAccounts/$BUILDER" '
        '--gcs-source-staging-dir "gs://$BUCKET/' + SOURCE_PREFIX + 'source" --suppress-logs --quiet '
        '--substitutions "_IMAGE=$image,_BASE=$BASE,_LOCK_SHA256=$LOCK_SHA256,_INPUTS_SHA256=${TAG#inputs-},'
        '_STEP=$STEP" '
        '>"$log" 2>&1 || status=$?',
        "  why=$(grep '^ERROR:' \"$log\" | tail -n 1 | cut -c1-300) || why=''",
        '  found=$(digest) || found=""',
        '  if [ -n "$found" ]; then adopt "$found"; break; fi',
        '  if [ "$status" = 0 ]; then fail "the build succeeded but $image has no digest: '
        'gcloud artifacts docker images list $REPOSITORY --project $PROJECT"; fi',
        f'  if [ "$try" -ge {SUBMIT_TRIES} ] || [ $((SECONDS - start)) -ge {SUBMIT_RETRY_WINDOW_S} ]; then',
        '    fail "gcloud builds submit exited $status (try $try${why:+, $why}): its log is in Cloud Logging, '
        'gcloud builds list --project $PROJECT --region $REGION --limit 3; fix it and run pulumi up again"',
        "  fi",
        f'  echo "build refused after $((SECONDS - start)) s (new service account or grants not in effect yet?): '
        f'submitting again in {SUBMIT_RETRY_WAIT_S} s" >&2',
        f"  sleep {SUBMIT_RETRY_WAIT_S}",
        "done",
        'case "$found" in sha256:????????????????????????????????????????????????????????????????) ;; '
        '*) fail "no digest for $image: $found";; esac',
        'printf %s "$found"',
    ])


BUILD_INTERPRETER = ("/bin/bash", "-c")
BUILD_ENVIRONMENT = ("PROJECT", "REGION", "REPOSITORY", "BASE", "LOCK_SHA256", "TAG", "BUILDER", "BUCKET", "STEP")
"""What the build command reads from its environment (`build_script`); components/checks/declared.py declares the
same."""


class EngineImageArgs(Args):
    project: str
    region: str
    cluster_name: str
    base_image: str
    """The Python 3.12 base (components/plan/images.py `tpu-engine`), by digest."""
    step_image: str
    """The build's one step, Google's Docker builder (components/plan/images.py `build-step`), by digest: Cloud Build
    takes substitutions in its steps (https://cloud.google.com/build/docs/configuring-builds/substitute-variable-values),
    so the build config names it `${_STEP}` and the policy pack sees it in the command's environment."""
    bucket: StrInput
    """The stack's bucket: the build's source is staged under `SOURCE_PREFIX`."""
    node_member: StrInput
    """The node service account's IAM member: it pulls the image."""
    labels: dict[str, str]


class EngineImage(Component):
    """Artifact Registry repository, the build's identity and grants, the build; `image` is `repo@sha256:...`."""

    def __init__(self, name: str, args: EngineImageArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("engineimage", "EngineImage", name, opts)
        self.repository = gcp.artifactregistry.Repository(
            f"{name}-repo",
            project=args.project,
            location=args.region,
            repository_id=repository_id(args.cluster_name),
            format="DOCKER",
            description="The TPU engine image, built by the kimi-k3-1 stack from its hash-pinned lock",
            # Tags name a lock; a tag that moved would no longer be the lock it names.
            docker_config=gcp.artifactregistry.RepositoryDockerConfigArgs(immutable_tags=True),
            labels=args.labels,
            opts=self.child(),
        )
        self.builder = gcp.serviceaccount.Account(
            f"{name}-builder",
            account_id=f"{args.cluster_name}-build",
            display_name=f"Cloud Build of the TPU engine image of {args.cluster_name}",
            project=args.project,
            opts=self.child(),
        )
        self.grants: list[pulumi.Resource] = [
            gcp.artifactregistry.RepositoryIamMember(
                f"{name}-push", project=args.project, location=args.region, repository=self.repository.name,
                role=BUILDER_ROLES["repository"], member=self.builder.member, opts=self.child()),
            gcp.projects.IAMMember(
                f"{name}-logs", project=args.project, role=BUILDER_ROLES["project"], member=self.builder.member,
                opts=self.child()),
            gcp.storage.BucketIAMMember(
                f"{name}-source", bucket=args.bucket, role=BUILDER_ROLES["source"], member=self.builder.member,
                condition=gcp.storage.BucketIAMMemberConditionArgs(
                    title="engine-image-source-only",
                    expression=pulumi.Output.concat('resource.name.startsWith("projects/_/buckets/', args.bucket,
                                                    f'/objects/{SOURCE_PREFIX}")')),
                opts=self.child()),
        ]
        self.pull = gcp.artifactregistry.RepositoryIamMember(
            f"{name}-pull", project=args.project, location=args.region, repository=self.repository.name,
            role=NODE_PULL_ROLE, member=args.node_member, opts=self.child())
        repository = repository_path(args.region, args.project, args.cluster_name)
        lock = lock_sha256()
        self.build = command.local.Command(
            f"{name}-build",
            create=build_script(),
            interpreter=list(BUILD_INTERPRETER),
            # Relative to the program's directory, where `pulumi up` runs it: no machine's own path in the state.
            dir=str(LOCKS.relative_to(LOCKS.parents[1])),
            environment=dict(zip(BUILD_ENVIRONMENT, (
                args.project, args.region, repository, args.base_image, lock,
                image_tag(args.base_image, args.step_image), self.builder.email, args.bucket, args.step_image),
                strict=True)),
            # Re-run only when what the image is made of changes.
            triggers=build_inputs(args.base_image, args.step_image),
            opts=self.child(depends_on=[*self.grants, self.repository]),
        )
        self.digest = self.build.stdout
        self.image = pulumi.Output.concat(repository, f"/{IMAGE_NAME}@", self.build.stdout)
        self.finish(image=self.image, repository=self.repository.name)

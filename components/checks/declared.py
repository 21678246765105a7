"""What the program declares it creates: the contract the policy pack (policy/rules.py) enforces deny by default.

Every resource type, every workload and each of its containers (images, privileges, host access, volumes and
their modes, secrets, resource claims, what it may run at start), every ConfigMap (and the repository files a
code-carrying one must hold byte for byte), every IAM grant, every RBAC permission that reaches secrets or
workloads, every address a NetworkPolicy lets pods reach, and the network and node settings of the cloud side.
What is not declared here is refused. An exemption (privileged, a host namespace, a host path, root) belongs to
one container of one workload, named by kind, object name and container name, never to an image: two workloads
that share an image share nothing else.

The components build their objects from these entries where the entry is the object's own fact (the start-time
installs, the TPU host-setup container's privilege, the staging Job's code files), so declaration and rendering
cannot drift; names are regular expressions over the names the components render (`{guide}` is
`catalog.GUIDE_NAME`, `{ns}` the object's own namespace). docs/security.md describes the model and how to declare
a new workload.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Optional

from ..facts import catalog, contract, versions
from ..plan import images
from ..platform import hardening
from ..weights import shipped

ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- names
CLUSTER_NAME = "[a-z](?:[-a-z0-9]*[a-z0-9])?"
"""Any cluster name (components/config/base.py GCE_NAMING), which every cloud name of a stack starts with."""
HOST_FIELDS = frozenset({"hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"})
"""Pod fields that share a namespace with the node or between containers (PodSpec, Kubernetes API reference)."""


def pattern(template: str) -> str:
    """A name template as a regular expression: `{guide}` -> the guide name, `{rev}` -> a 12-hex revision,
    `{cluster}` -> a cluster name (the stack's, derived from its name or set as cluster.name: any Compute Engine
    name), `{ns}` kept for the namespace the object sits in (filled per object by `matches`)."""
    return template.replace("{guide}", re.escape(catalog.GUIDE_NAME)).replace("{rev}", "[0-9a-f]{12}") \
        .replace("{cluster}", CLUSTER_NAME)


@cache
def _compiled(template: str, namespace: str) -> re.Pattern[str]:
    return re.compile(pattern(template).replace("{ns}", re.escape(namespace)))


def matches(template: str, name: str, namespace: str = "") -> bool:
    return _compiled(template, namespace).fullmatch(name) is not None


# --------------------------------------------------------------------------- start-time installs
STAGING_INSTALL = shipped.INSTALL
"""`pip install` arguments of the staging Job (components/weights/shipped.py INSTALL)."""


INSTALLERS = frozenset({"pip", "pip3", "uv", "easy_install", "conda", "mamba", "apt-get", "apt", "apk", "dnf",
                        "yum", "npm", "curl", "wget"})
"""Programs that fetch and install code; `python -m pip` counts as `pip`. An installer runs only with the exact
arguments a container declares, and never sees a secret (`env -u` every secret variable)."""


# --------------------------------------------------------------------------- workloads
@dataclass(frozen=True)
class Container:
    """One container of a workload and everything it may do."""

    name: str
    images: frozenset[str]
    """Image repositories (components/platform/hardening.py `repository`), any tag or digest of them."""
    programs: frozenset[str] = frozenset()
    """Executables it may start: `command[0]`, or every command of a `sh -c` script; an entry of several words is a
    prefix of the command line (`python -m tools.live.stage_weights`: that module, not any Python). Empty: the
    image's entrypoint only (no `command`)."""
    shells: frozenset[str] = frozenset()
    """Shells it may start with `-c SCRIPT`; the script's commands must be `programs` (or shell builtins)."""
    installs: tuple[tuple[str, ...], ...] = ()
    """Exact argument lists of each `pip install` it may run at start."""
    privileged: bool = False
    capabilities: frozenset[str] = frozenset()
    """Capabilities it may add."""
    root: bool = False
    """May run as UID 0 (or without runAsNonRoot)."""
    writable_root: bool = False
    """May run without a read-only root filesystem."""
    restricted: bool = True
    """Must carry the restricted profile (components/platform/hardening.py `container_context`): charts' containers that
    set nothing are declared `restricted=False` and may still not set anything unsafe."""
    host_paths: frozenset[str] = frozenset()
    """Host paths it may mount."""
    writable_volumes: frozenset[str] = frozenset()
    """Volumes it may mount read-write; every other volume mounts read-only. emptyDirs are always writable."""
    secrets: frozenset[tuple[str, str]] = frozenset()
    """(Secret, key) pairs its environment may reference."""
    claims: frozenset[str] = frozenset()
    """Pod resource claims it may use (`resources.claims[].name`)."""
    image_pattern: Optional[str] = None
    """With no `images`: the image's repository must match this regular expression (the stack's own build)."""
    digest_required: bool = False
    """The image must be pinned by digest (`repo@sha256:<64 hex>`): a tag could name other bytes."""
    image_from: Optional[str] = None
    """With no `images`: the image must be one that a container of this name (a user-named engine) runs in the same
    stack (the pre-pull of the SGLang image)."""
    reason: str = ""


@dataclass(frozen=True)
class Workload:
    """A pod-bearing object: its kind, its name (a template, `pattern`), namespace, and its containers."""

    kind: str
    name: str
    containers: tuple[Container, ...]
    namespace: Optional[str] = None
    """A literal namespace; None: the model namespace (any namespace the program labels as the guide's)."""
    host: frozenset[str] = frozenset()
    """Host or shared namespaces (`HOST_FIELDS`) its pods may use."""
    service_account: Optional[str] = None
    """Template of the service account its pods run as; None: the namespace's default account, with no token."""
    api_token: bool = False
    """Its pods may mount a Kubernetes API token (an operator or controller that watches the API)."""
    claim_templates: frozenset[str] = frozenset()
    """Templates of the ResourceClaimTemplates its pods may claim."""
    volumes: Mapping[str, str] = field(default_factory=dict)
    """Volume name -> source kind (`configMap`, `secret`, `emptyDir`, `persistentVolumeClaim`, `hostPath`)."""
    source: str = ""

    def container(self, name: str) -> Optional[Container]:
        return next((c for c in self.containers if c.name == name), None)


def _repos(*references: str) -> frozenset[str]:
    from ..platform.hardening import repository

    return frozenset(repository(r) for r in references)


def _epp_image() -> str:
    registry, repository, tag = versions.EPP_IMAGE
    return f"{registry}/{repository}:{tag}"


SHELL_BUILTINS = frozenset({"set", "export", "exec", "echo", "true", "false", "test", "[", "cd", "wait", "exit",
                            "local", "read", "shift", "printf", "sleep", "unset", ":", "return",
                            "break", "continue", "ulimit"})
"""Commands a declared shell script may run without naming them: they start no other program and run no string as
code (`eval`, `trap`, `source` and `.` do, so they are not here)."""

HF_SECRET = (contract.HF_TOKEN_SECRET, contract.HF_TOKEN_KEY)
SECRET_ENV_NAMES = frozenset({contract.HF_TOKEN_KEY, "HUGGING_FACE_HUB_TOKEN"})
"""Environment variables the program fills from a Secret only (`valueFrom.secretKeyRef`), never with a plain `value`:
the Hugging Face token under the name huggingface_hub reads and its older alias."""

VLLM_GPU = Container(
    "vllm", _repos(versions.VLLM.image), programs=frozenset({"vllm", "find"}), shells=frozenset({"/bin/bash"}),
    privileged=True, root=True, writable_root=True, restricted=False,
    host_paths=frozenset({"/home/kubernetes/bin/nvidia"}), writable_volumes=frozenset({"nvidia", "jit-cache"}),
    claims=frozenset({"compute-domain-channel", "rdma"}),
    reason="DeepEP/NVSHMEM GPU-initiated communication needs a privileged container on GKE; CUDA IPC across the "
           "engines of a pod and the NVL72 domain needs the host IPC and PID namespaces; the GKE-installed NVIDIA "
           "driver is mounted from the host (llm-d docs/infrastructure/providers/gke/README.md and "
           "guides/models/deepseek-v4/modelserver/gpu/vllm/base/disaggregatedset.yaml@6b047cf, "
           "https://github.com/llm-d/llm-d)")
ROUTING_SIDECAR = Container("routing-proxy", _repos(versions.ROUTING_SIDECAR_IMAGE))

TPU_NODE_SETUP = Container(
    "tpu-node-setup", _repos(versions.STAGING_IMAGE), shells=frozenset({"/bin/sh"}), privileged=True, root=True,
    writable_root=True, restricted=False,
    reason="raises vm.max_map_count and the vfio DMA entry limit on the TPU host before the engine maps its host "
           "KV pool: node-wide kernel settings a container can only write privileged (llm-d guides/tiered-prefix-"
           "cache/modelserver/tpu/base/vllm/multi-host/patch-vllm.yaml@54523a5, https://github.com/llm-d/llm-d/"
           "blob/54523a5/guides/tiered-prefix-cache/modelserver/tpu/base/vllm/multi-host/patch-vllm.yaml)")
VLLM_TPU = Container(
    "vllm-tpu", frozenset(), image_pattern=images.BUILT_TPU_ENGINE, digest_required=True,
    # ulimit, getent and awk: the released launcher's lines (no core dumps, the head resolved; engines.py). No
    # installer: the image the stack builds from the hash-pinned lock carries the engine
    # (components/serving/engineimage.py).
    programs=frozenset({"vllm", "ulimit", "getent", "awk"}),
    shells=frozenset({"/bin/bash"}), root=True, writable_root=True,
    restricted=False, capabilities=frozenset({"IPC_LOCK"}),
    writable_volumes=frozenset({"jit-cache"}),
    reason="the stack's engine image (Python 3.12 base) runs as root (components/platform/hardening.py ROOT_IMAGES); "
           "never privileged. IPC_LOCK: the Raiden offload store locks its host pool, as the engine's Raiden recipes "
           "run it (components/platform/hardening.py TPU_ENGINE_CAPABILITIES)")
SGLANG_TPU = Container(
    "sglang", frozenset(), programs=frozenset({"python3 -m sglang.launch_server"}), shells=frozenset({"/bin/bash"}),
    root=True,
    writable_root=True, restricted=False,
    reason="a user-supplied SGLang-TorchTPU image (tpu.sglangImage): any repository, never privileged")
"""`images` empty: the user names the image (config `tpu.sglangImage`), so only its privileges are declared."""

DRA_PLUGIN_TEMPLATE = ("templates/kubeletplugin.yaml, https://github.com/NVIDIA/k8s-dra-driver-gpu/blob/v25.8.0/"
                       "deployments/helm/nvidia-dra-driver-gpu/templates/kubeletplugin.yaml")
MODEL_VOLUMES = {"models": "persistentVolumeClaim", "dshm": "emptyDir"}

WORKLOADS: tuple[Workload, ...] = (
    Workload("DisaggregatedSet", "{ns}-vllm", (VLLM_GPU, ROUTING_SIDECAR), host=frozenset({"hostIPC", "hostPID"}),
             claim_templates=frozenset({contract.RDMA_CLAIM_TEMPLATE, contract.COMPUTE_DOMAIN_CHANNEL_TEMPLATE}),
             volumes={**MODEL_VOLUMES, "nvidia": "hostPath", "jit-cache": "csi"},
             service_account="{guide}-engine",
             source="components/serving/modelservers.py (jit-cache: the engines' compile caches on the stack's cache "
                    "bucket, components/serving/compilecache.py)"),
    Workload("LeaderWorkerSet", "{ns}-vllm-tpu", (TPU_NODE_SETUP, VLLM_TPU),
             volumes={**MODEL_VOLUMES, "jit-cache": "csi"}, service_account="{guide}-engine",
             source="components/serving/modelservers.py (jit-cache: components/serving/compilecache.py)"),
    Workload("LeaderWorkerSet", "{ns}-sglang", (TPU_NODE_SETUP, SGLANG_TPU), volumes=MODEL_VOLUMES,
             source="components/serving/modelservers.py"),
    Workload("DaemonSet", "{guide}-engine-image-prepull", (
        Container("hold", _repos(versions.VLLM.image), programs=frozenset({"sleep"})),
        Container("hold", frozenset(), programs=frozenset({"sleep"}), image_pattern=images.BUILT_TPU_ENGINE,
                  digest_required=True),
        Container("hold", frozenset(), programs=frozenset({"sleep"}), image_from="sglang")),
        source="components/serving/prepull.py"),
    Workload("Job", "{guide}-weights-stage-{rev}", (
        Container("stage-weights", _repos(versions.STAGING_IMAGE),
                  programs=frozenset({"python -m tools.live.stage_weights"}),
                  shells=frozenset({"sh"}), installs=(STAGING_INSTALL,), secrets=frozenset({HF_SECRET}),
                  writable_volumes=frozenset({"deps", "home"})),),
        service_account=contract.STAGING_SERVICE_ACCOUNT,
        volumes={"code": "configMap", "deps": "emptyDir", "home": "emptyDir"}, source="components/weights/staging.py"),
    Workload("Job", "{guide}-calibration", (
        Container("calibrate", _repos(versions.CALIBRATION_IMAGE),
                  programs=frozenset({"python3 /calibration/calibrate.py"})),),
        volumes={"script": "configMap", "scratch": "emptyDir", "tmp": "emptyDir"},
        source="components/router/router.py"),
    Workload("Job", "{guide}-inference-perf", (
        Container("inference-perf", _repos(versions.INFERENCE_PERF_IMAGE), programs=frozenset({"inference-perf"}),
                  writable_volumes=frozenset({"scratch"})),),
        service_account="{guide}-benchmark", volumes={"config": "configMap", "models": "persistentVolumeClaim",
                                                     "scratch": "emptyDir"},
        source="components/serving/benchmark.py"),
    Workload("Deployment", "{guide}-epp", (
        Container("epp", _repos(_epp_image()), restricted=False, writable_root=True),
        Container("envoy-proxy", _repos(versions.ENVOY_PROXY_IMAGE), programs=frozenset({"envoy"}),
                  restricted=False, writable_root=True)),
        service_account="{guide}-epp", api_token=True, volumes={"config": "configMap",
                                                               "plugins-config-volume": "configMap"},
        source="llm-d-router chart (components/router/router.py): the EPP watches pods and InferencePools"),
    Workload("Deployment", "platform-lws-controller-manager", (
        Container("manager", _repos(versions.LWS_IMAGE), programs=frozenset({"/manager"}), restricted=False),),
        namespace="lws-system", service_account="platform-lws-controller-manager", api_token=True,
        volumes={"manager-config": "configMap", "cert": "secret"},
        source="LWS chart (components/platform/namespace.py): the controller creates the serving pods"),
    *(Workload("Deployment", deployment, (
        Container(deployment, _repos(versions.KEDA_IMAGES[image]), programs=frozenset({program}),
                  restricted=False),),
        namespace=catalog.KEDA_NAMESPACE, service_account=account, api_token=True,
        volumes={"certificates": "secret"},
        source="KEDA chart 2.20.2 (components/platform/autoscaler.py): the operator reconciles ScaledObjects and "
               "serves their metrics, the metrics API server answers the HPA, the webhooks validate ScaledObjects")
      for deployment, image, program, account in (
          ("keda-operator", "keda", "/keda", "keda-operator"),
          ("keda-operator-metrics-apiserver", "keda-metrics-apiserver", "/keda-adapter", "keda-metrics-server"),
          ("keda-admission-webhooks", "keda-webhooks", "/keda-admission-webhooks", "keda-webhook"))),
    Workload("Deployment", "nvidia-dra-driver-gpu-controller", (
        Container("compute-domain", _repos(versions.NVIDIA_DRA_DRIVER_IMAGE),
                  programs=frozenset({"compute-domain-controller"}), restricted=False, writable_root=True),),
        namespace="nvidia-dra-driver-gpu", service_account="[a-z0-9-]+-service-account-controller", api_token=True,
        source="nvidia-dra-driver-gpu chart (components/platform/dra.py)"),
    Workload("DaemonSet", "nvidia-dra-driver-gpu-kubelet-plugin", (
        Container("init-container", _repos(versions.NVIDIA_DRA_DRIVER_IMAGE), shells=frozenset({"bash"}),
                  programs=frozenset({"/usr/bin/kubelet-plugin-prestart.sh"}), privileged=True, root=True,
                  writable_root=True, restricted=False, host_paths=frozenset({"/home/kubernetes/bin"}),
                  writable_volumes=frozenset({"driver-root-parent"}),
                  reason="waits for the host's GPU driver under its root (nvidia-dra-driver-gpu chart "
                         f"{DRA_PLUGIN_TEMPLATE})"),
        Container("compute-domains", _repos(versions.NVIDIA_DRA_DRIVER_IMAGE), shells=frozenset({"bash"}),
                  programs=frozenset({"cp", "sed", "mount", "compute-domain-kubelet-plugin"}), privileged=True,
                  root=True, writable_root=True, restricted=False,
                  host_paths=frozenset({"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins",
                                        "/var/run/cdi", "/home/kubernetes/bin/nvidia"}),
                  writable_volumes=frozenset({"plugins-registry", "plugins", "cdi"}),
                  reason="writes CDI specs on the host and registers with the kubelet's plugin socket "
                         f"(nvidia-dra-driver-gpu chart {DRA_PLUGIN_TEMPLATE})")),
        namespace="nvidia-dra-driver-gpu", service_account="[a-z0-9-]+-service-account-kubeletplugin", api_token=True,
        volumes={"plugins-registry": "hostPath", "plugins": "hostPath", "cdi": "hostPath",
                 "driver-root-parent": "hostPath", "driver-root": "hostPath"},
        source="nvidia-dra-driver-gpu chart (components/platform/dra.py)"),
    Workload("DaemonSet", "asapd-lite", (
        Container("asapd-lite", _repos(versions.ASAPD_LITE_IMAGE), shells=frozenset({"/bin/bash"}),
                  programs=frozenset({"/usr/local/bin/run_asapd_lite.sh", "ip", "awk", "grep"}), privileged=True,
                  root=True, writable_root=True, restricted=False,
                  host_paths=frozenset({"/sys", "/proc", "/etc/udev/rules.d", "/run/udev", "/run/asapd-lite",
                                        "/var/log/google/asapd-lite", "/var/lib/google/asapd-lite",
                                        "/etc/systemd/system", "/run/systemd"}),
                  writable_volumes=frozenset({"sys", "proc", "udev-rules", "run-udev", "run-asapd", "log", "state",
                                              "systemd-units", "run-systemd"}),
                  reason="initializes the MRDMA NICs of A4X Max bare-metal nodes: host links, udev and systemd units "
                         "(Cluster Toolkit examples/gke-a4x-max-bm/asapd-lite-installer.yaml, https://github.com/"
                         "GoogleCloudPlatform/cluster-toolkit @1047080375afbb44da4b596be314634e7486af4a)"),),
        namespace="kube-system", host=frozenset({"hostNetwork", "hostPID"}),
        volumes={"sys": "hostPath", "proc": "hostPath", "udev-rules": "hostPath", "run-udev": "hostPath",
                 "run-asapd": "hostPath", "log": "hostPath", "state": "hostPath", "systemd-units": "hostPath",
                 "run-systemd": "hostPath", "hugepages": "emptyDir"},
        source="components/platform/dra.py"),
)
"""Every workload the program runs. docs/security.md has the matrix; a pod of any other object is refused."""


def workloads(kind: str, name: str, namespace: str) -> list[Workload]:
    """The declared workloads an object of `kind` named `name` in `namespace` may be."""
    return [w for w in WORKLOADS if w.kind == kind and matches(w.name, name, namespace)
            and (w.namespace is None or w.namespace == namespace)]


SYSTEM_NAMESPACES = frozenset({"lws-system", "nvidia-dra-driver-gpu", "kube-system", catalog.KEDA_NAMESPACE})
"""Namespaces of the platform's controllers; every other Namespace the program creates is the model namespace,
which carries the guide label and a default-deny ingress policy."""
GUARDED_SYSTEM_NAMESPACES = frozenset({catalog.KEDA_NAMESPACE})
"""Platform namespaces with a default-deny ingress policy of the program's (components/platform/autoscaler.py): the
policy pack holds them to it."""
MODEL_NAMESPACE_LABEL = "llm-d.ai/guide"


# --------------------------------------------------------------------------- ConfigMaps
@dataclass(frozen=True)
class ConfigMapDecl:
    name: str
    """Name template."""
    code: Optional[Mapping[str, str]] = None
    """Data key -> what it must hold byte for byte (ConfigMaps that carry code or a lock): a repository file
    (`path/to/file`) or a module's text constant (`components.module:NAME`); None: plain configuration of a chart
    or a component (not executed)."""
    text: Optional[Callable[[str], str]] = None
    """How a source becomes the text the ConfigMap holds, where it is not the file's or the constant's own text
    (the staging Job's files: components/weights/shipped.py pod_text)."""

    def expected(self) -> dict[str, str]:
        return {key: (self.text or _text)(source) for key, source in (self.code or {}).items()}


def _text(source: str) -> str:
    if ":" in source:
        import importlib

        module, _, attribute = source.partition(":")
        return str(getattr(importlib.import_module(module), attribute))
    return (ROOT / source).read_text()


CONFIGMAPS: tuple[ConfigMapDecl, ...] = (
    ConfigMapDecl("{guide}-weights-stager-code", {shipped.key(pod): source for pod, source in shipped.APP.items()},
                  shipped.pod_text),
    ConfigMapDecl("{guide}-calibration", {"calibrate.py": "components.router.router:CALIBRATION_SCRIPT"}),
    ConfigMapDecl("{guide}-inference-perf-config"),
    ConfigMapDecl("{guide}-epp"),
    ConfigMapDecl("envoy"),
    ConfigMapDecl("platform-lws-manager-config"),
)


# --------------------------------------------------------------------------- IAM grants
WI_PRINCIPAL = (r"principal://iam\.googleapis\.com/projects/[0-9]+/locations/global/workloadIdentityPools/"
                r"[a-z0-9.-]+\.svc\.id\.goog/subject/ns/[a-z0-9-]+/sa/")
NODE_SA = r"serviceAccount:[a-z0-9-]+-nodes@[a-z0-9-]+\.iam\.gserviceaccount\.com"
BUILD_SA = r"serviceAccount:[a-z0-9-]+-build@[a-z0-9-]+\.iam\.gserviceaccount\.com"
"""The TPU engine image's Cloud Build identity (components/serving/engineimage.py)."""
REPO_GRANT = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"
KEDA_SA = r"serviceAccount:[a-z0-9-]+-keda@[a-z0-9-]+\.iam\.gserviceaccount\.com"
"""KEDA's operator's Google identity (components/platform/autoscaler.py)."""
ACTS_AS: dict[tuple[str, str], str] = {(catalog.KEDA_NAMESPACE, "keda-operator"): KEDA_SA}
"""Kubernetes service accounts that act as a Google service account (annotation iam.gke.io/gcp-service-account),
and the account they may name: KEDA's operator, whose stack-owned account keeps its grant apart from every other
stack's in the project (a grant to the shared Workload Identity principal would not be)."""


@dataclass(frozen=True)
class Grant:
    """One IAM grant the program makes: the grant resource type, the role, and the member (a regex)."""

    type: str
    role: str
    member: str
    reason: str
    folder: Optional[str] = None
    """A bucket grant limited by an IAM condition to objects under this folder of its bucket (the condition must
    say so, `resource.name.startsWith("projects/_/buckets/<bucket>/objects/<folder>")`)."""
    per_stack: bool = False
    """The grant carries an IAM condition of its own stack (components/weights/bucket.py CheckpointBucketArgs.owner):
    a Workload Identity principal is the same in every cluster of the project, and IAM removes a binding by role,
    members and condition, so without one a destroy of any stack would take this stack's access away."""


GRANTS: tuple[Grant, ...] = (
    Grant("gcp:projects/iAMMember:IAMMember", "roles/container.defaultNodeServiceAccount", NODE_SA,
          "the least-privilege role GKE documents for node service accounts (logging, monitoring)"),
    Grant("gcp:storage/bucketIAMMember:BucketIAMMember", "roles/storage.objectViewer",
          WI_PRINCIPAL + re.escape(contract.TRANSFER_SERVICE_ACCOUNT), "the Volume Populator reads the checkpoint",
          per_stack=True),
    Grant("gcp:storage/bucketIAMMember:BucketIAMMember", "roles/storage.objectViewer",
          WI_PRINCIPAL + re.escape(contract.STAGING_SERVICE_ACCOUNT), "the staging Job lists the bucket",
          per_stack=True),
    Grant("gcp:storage/bucketIAMMember:BucketIAMMember", "roles/storage.objectUser",
          WI_PRINCIPAL + re.escape(contract.STAGING_SERVICE_ACCOUNT),
          "the staging Job writes the checkpoint folder (limited by an IAM condition)", per_stack=True),
    Grant("gcp:storage/bucketIAMMember:BucketIAMMember", "roles/storage.objectCreator",
          WI_PRINCIPAL + re.escape(f"{catalog.GUIDE_NAME}-benchmark"),
          "the benchmark Job writes its results folder (limited by an IAM condition)", per_stack=True),
    Grant("gcp:storage/bucketIAMMember:BucketIAMMember", "roles/storage.objectViewer",
          WI_PRINCIPAL + re.escape(f"{catalog.GUIDE_NAME}-engine"),
          "the engines list and read their compile caches (the stack's cache bucket, "
          "components/serving/compilecache.py)",
          per_stack=True),
    Grant("gcp:storage/bucketIAMMember:BucketIAMMember", "roles/storage.objectUser",
          WI_PRINCIPAL + re.escape(f"{catalog.GUIDE_NAME}-engine"),
          "the engines write their compile caches under cache/ of the stack's cache bucket (limited by an IAM "
          "condition)", folder="cache/", per_stack=True),
    Grant(REPO_GRANT, "roles/artifactregistry.writer", BUILD_SA,
          "the TPU engine image's build pushes to the stack's one repository (components/serving/engineimage.py)"),
    Grant("gcp:projects/iAMMember:IAMMember", "roles/logging.logWriter", BUILD_SA,
          "a build run as its own service account writes its logs to Cloud Logging"),
    Grant("gcp:storage/bucketIAMMember:BucketIAMMember", "roles/storage.objectViewer", BUILD_SA,
          "the build reads its source archive (limited by an IAM condition to engine-image/)",
          folder="engine-image/"),
    Grant(REPO_GRANT, "roles/artifactregistry.reader", NODE_SA,
          "the TPU nodes pull the engine image from the stack's repository"),
    Grant("gcp:projects/iAMMember:IAMMember", "roles/monitoring.viewer", KEDA_SA,
          "KEDA's operator reads the router's metrics from Managed Prometheus for the ScaledObjects "
          "(components/platform/autoscaler.py)"),
    Grant("gcp:serviceaccount/iAMMember:IAMMember", "roles/iam.workloadIdentityUser",
          r"serviceAccount:[a-z0-9-]+\.svc\.id\.goog\[" + re.escape(f"{catalog.KEDA_NAMESPACE}/keda-operator") + r"\]",
          "KEDA's operator's Kubernetes account acts as the stack's KEDA service account (Workload Identity)"),
)

# --------------------------------------------------------------------------- RBAC
SENSITIVE_RESOURCES = frozenset({"secrets", "pods/exec", "pods/attach", "pods/portforward", "serviceaccounts/token",
                                 "nodes/proxy", "certificatesigningrequests/approval", "*"})
SENSITIVE_VERBS = frozenset({"*", "escalate", "bind", "impersonate"})
"""Permissions that read credentials, run code in other pods, or grant more (Kubernetes RBAC good practices,
https://kubernetes.io/docs/concepts/security/rbac-good-practices/): a role holds one only if declared here."""


@dataclass(frozen=True)
class RoleDecl:
    name: str
    """Role or ClusterRole name template."""
    permissions: frozenset[tuple[str, str]]
    """(resource, verb) sensitive pairs it may hold."""
    reason: str


ROLES: tuple[RoleDecl, ...] = (
    RoleDecl("platform-lws-manager-role", frozenset({("secrets", v) for v in ("get", "list", "update", "watch")}),
             "the LWS controller rotates its own webhook serving certificate (lws chart config/rbac/role.yaml)"),
    RoleDecl("platform-lws-disaggregatedset-admin-role", frozenset({("disaggregatedsets", "*")}),
             "the chart's aggregated admin role for DisaggregatedSets (bound by nobody here)"),
    RoleDecl("keda-operator", frozenset({("secrets", v) for v in ("list", "watch")}),
             "KEDA's operator resolves TriggerAuthentications that name Secrets (KEDA chart 2.20.2 "
             "templates/manager/clusterrole.yaml); the stack's only TriggerAuthentication uses Workload Identity"),
    RoleDecl("keda-operator-certs", frozenset({("secrets", v) for v in ("get", "create", "update")}),
             "KEDA's operator rotates its own serving certificates in its namespace (--enable-cert-rotation, "
             "templates/manager/minimal-rbac.yaml)"),
)

ALLOWED_SUBJECT_KINDS = frozenset({"ServiceAccount"})
"""RBAC bindings bind service accounts only: no users or groups."""


@dataclass(frozen=True)
class BindingDecl:
    """A RoleBinding or ClusterRoleBinding by name template, and exactly the (namespace, name) service accounts it
    binds (templates; a RoleBinding's subject without a namespace is in the binding's own)."""

    name: str
    subjects: frozenset[tuple[str, str]]
    reason: str


LWS_CONTROLLER = frozenset({("lws-system", "platform-lws-controller-manager")})
DRA_CONTROLLER = frozenset({("nvidia-dra-driver-gpu", "gpu-devices-dra-driver-nvidia-dra-driver-gpu-service-account-"
                                                      "controller")})
DRA_PLUGIN = frozenset({("nvidia-dra-driver-gpu", "gpu-devices-dra-driver-nvidia-dra-driver-gpu-service-account-"
                                                  "kubeletplugin")})
KEDA_OPERATOR = frozenset({(catalog.KEDA_NAMESPACE, "keda-operator")})
KEDA_METRICS = frozenset({(catalog.KEDA_NAMESPACE, "keda-metrics-server")})
BINDINGS: tuple[BindingDecl, ...] = (
    BindingDecl("platform-lws-manager-rolebinding", LWS_CONTROLLER, "the LWS controller (lws chart config/rbac)"),
    BindingDecl("platform-lws-proxy-rolebinding", LWS_CONTROLLER, "the LWS controller's metrics auth proxy"),
    BindingDecl("platform-lws-leader-election-rolebinding", LWS_CONTROLLER, "the LWS controller's leader election"),
    BindingDecl("platform-lws-prometheus-k8s", frozenset({("monitoring", "prometheus-k8s"),
                                                          ("monitoring", "prometheus-operator")}),
                "the lws chart lets the Prometheus operator's accounts read its metrics (prometheus_role_binding; "
                "no such accounts exist on GKE with Managed Prometheus, so it grants nobody)"),
    BindingDecl("{guide}-epp-sa", frozenset({("{ns}", "{guide}-epp")}), "the router's EPP reads its InferencePool"),
    BindingDecl("{guide}-epp-non-sa", frozenset({("{ns}", "{guide}-epp")}), "the router's EPP watches pods"),
    BindingDecl("compute-domain-daemon-role-binding-nvidia-dra-driver-gpu",
                frozenset({("nvidia-dra-driver-gpu", "compute-domain-daemon-service-account")}),
                "the NVIDIA DRA driver's ComputeDomain daemons"),
    BindingDecl("nvidia-dra-driver-gpu-clusterrole-binding-controller-nvidia-dra-driver-gpu", DRA_CONTROLLER,
                "the NVIDIA DRA driver's controller"),
    BindingDecl("nvidia-dra-driver-gpu-role-binding-controller", DRA_CONTROLLER, "the NVIDIA DRA driver's controller"),
    BindingDecl("nvidia-dra-driver-gpu-clusterrole-binding-kubeletplugin-nvidia-dra-driver-gpu", DRA_PLUGIN,
                "the NVIDIA DRA driver's kubelet plugin"),
    BindingDecl("nvidia-dra-driver-gpu-role-binding-kubeletplugin", DRA_PLUGIN,
                "the NVIDIA DRA driver's kubelet plugin"),
    # KEDA 2.20.2's chart (components/platform/autoscaler.py): templates/manager/, metrics-server/, webhooks/.
    BindingDecl("keda-operator", KEDA_OPERATOR, "KEDA's operator: its role in its namespace and, with "
                "watchNamespace, in the model namespace where the ScaledObjects are"),
    BindingDecl("keda-operator-certs", KEDA_OPERATOR, "KEDA's operator rotates its serving certificates"),
    BindingDecl("keda-operator-minimal", KEDA_OPERATOR, "KEDA's operator's cluster-wide minimum (CRDs, webhooks)"),
    BindingDecl("keda-operator-system-auth-delegator", KEDA_METRICS,
                "KEDA's metrics API server delegates authentication to the kube-apiserver"),
    BindingDecl("keda-operator-auth-reader", KEDA_METRICS,
                "KEDA's metrics API server reads the apiserver's authentication config (kube-system)"),
    BindingDecl("keda-operator-hpa-controller-external-metrics",
                frozenset({("kube-system", "horizontal-pod-autoscaler")}),
                "the HPA controller reads KEDA's external metrics (the ScaledObjects' HPAs)"),
    BindingDecl("keda-operator-webhook", frozenset({(catalog.KEDA_NAMESPACE, "keda-webhook")}),
                "KEDA's admission webhooks read the objects they validate"),
)
"""Every binding the plans hold and exactly whom it binds: an extra subject, from any namespace, is refused."""

WEBHOOK_SERVICES = frozenset({("lws-system", "lws-webhook-service"),
                              (catalog.KEDA_NAMESPACE, "keda-admission-webhooks")})
"""The in-cluster Services an admission webhook may call (the LWS controller's): never a URL, never another Service."""

IMAGE_REPOSITORIES = frozenset(hardening.repository(image.reference) for image in images.IMAGES.values())
"""Every registry/repository an image of the stacks may come from: the pinned ones (components/plan/images.py)."""
BUILT_ENGINE_REPOSITORY = images.BUILT_TPU_ENGINE
"""The stack's own TPU engine build (a pattern here; the whole-stack check holds it to the plan's one Artifact
Registry repository, policy/stack.py)."""
IMAGE_DIGEST = r"sha256:[0-9a-f]{64}"
"""Every image runs by this: `registry/repository[:tag]@sha256:<64 hex>` (a tag beside the digest is ignored by the
runtime and kept for the reader)."""

BUCKET_DISPOSITIONS = {"keep": False, "delete": True}
"""A created bucket's `contract.BUCKET_ON_DESTROY_LABEL` -> its `forceDestroy`: a kept bucket (the default: the staged
1.56 TB checkpoint outlives the stack) is never force-destroyable; one the stack deletes
(`storage.deleteCheckpointOnDestroy`) must be, or `pulumi destroy` fails on its objects and leaves it billing. A bucket
without the label, or with another value, is refused."""
SOFT_DELETE_SECONDS = (0, 7 * 86400, 90 * 86400)
"""Soft-delete retention a bucket may declare: 0 (off) or 7-90 days, what Cloud Storage accepts (pulumi_gcp
BucketSoftDeletePolicyArgs) and `storage.softDeleteDays` offers."""

ENGINE_BASE = images.IMAGES["tpu-engine"].reference
"""The TPU engine image's base (components/plan/images.py `tpu-engine`): the build command's BASE is this tag with its
digest (`images.tpuEngineDigest`, else its registry's)."""
ENGINE_STEP = images.IMAGES["build-step"].reference
"""The engine build's one Cloud Build step (components/plan/images.py `build-step`), with its digest likewise."""

# --------------------------------------------------------------------------- NetworkPolicy address peers
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")
PUBLIC_INTERNET = ("0.0.0.0/0", PRIVATE_RANGES)
"""The one internet peer a policy may name: everything but private and link-local ranges."""


@dataclass(frozen=True)
class AddressPeer:
    """An ipBlock peer a NetworkPolicy may name: a literal CIDR, the public internet, one host, or a private range."""

    cidr: Optional[str]
    """None: any single address (/32: the API server); `PRIVATE`: any range inside the private ranges (a
    subnet of the stack's VPC, which config sets)."""
    ports: frozenset[int]
    excluded: tuple[str, ...] = ()


PRIVATE = "private"
PRIVATE_MIN_PREFIX = 20
"""A `PRIVATE` peer is one of the stack's subnets (proxy-only /23, nodes /20 by default): no wider than this."""
METADATA = AddressPeer("169.254.169.254/32", frozenset({80}))
GKE_METADATA = AddressPeer("169.254.169.252/32", frozenset({988}))
INTERNET_HTTPS = AddressPeer("0.0.0.0/0", frozenset({443}), PRIVATE_RANGES)
ONE_HOST_HTTPS = AddressPeer(None, frozenset({443}))
HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")
"""Google Cloud load balancer health-check sources (https://cloud.google.com/load-balancing/docs/health-check-concepts
#ip-ranges), also in components/platform/netpol.py."""
SERVING_PORTS = frozenset(contract.engine_ports(
    contract.MODEL_SERVER_PORT, max(m.gpus_per_node for m in catalog.GPU_MACHINES.values())))
"""A serving pod's router endpoints: one port per engine, at most one engine per GPU of a node."""
EPP_PORTS = frozenset({contract.EPP_EXT_PROC_PORT, contract.EPP_GRPC_HEALTH_PORT})

EGRESS: dict[str, tuple[AddressPeer, ...]] = {
    # KEDA (components/platform/autoscaler.py): the API server; the operator also Workload Identity tokens and
    # Managed Prometheus' query API (monitoring.googleapis.com).
    "keda-operator": (ONE_HOST_HTTPS, METADATA, GKE_METADATA, INTERNET_HTTPS),
    "keda-metrics-apiserver": (ONE_HOST_HTTPS,),
    "keda-webhooks": (ONE_HOST_HTTPS,),
    "{guide}-benchmark": (METADATA, GKE_METADATA, INTERNET_HTTPS),
    "{guide}-vllm-pods": (),
    "{guide}-router": (ONE_HOST_HTTPS,),
    "{guide}-weights-staging": (METADATA, GKE_METADATA, INTERNET_HTTPS),
    "{guide}-calibration": (METADATA, GKE_METADATA),
    "{guide}-load-clients": (AddressPeer(PRIVATE, frozenset({80})),),
}
"""NetworkPolicy name -> the address peers its egress rules may name (components/platform/netpol.py)."""
NETWORK_POLICIES: dict[str, tuple[str, ...]] = {
    "keda-default-deny": ("Ingress",),
    "keda-operator": ("Ingress", "Egress"),
    "keda-metrics-apiserver": ("Ingress", "Egress"),
    "keda-webhooks": ("Ingress", "Egress"),
    "{guide}-default-deny-ingress": ("Ingress",),
    "{guide}-serving": ("Ingress",),
    "{guide}-router": ("Ingress", "Egress"),
    "{guide}-vllm-pods": ("Ingress", "Egress"),
    "{guide}-sglang-pods": ("Ingress", "Egress"),
    "{guide}-load-clients": ("Egress",),
    "{guide}-benchmark": ("Egress",),
}
"""Every NetworkPolicy (components/platform/netpol.py) and the directions it restricts: dropping `Egress` from one frees
its pods' egress, so the types are declared, not just the rules."""
INGRESS_ADDRESSES: dict[str, tuple[AddressPeer, ...]] = {
    # The kube-apiserver calls KEDA's external metrics API (for the HPA) and its admission webhook.
    "keda-metrics-apiserver": (AddressPeer(None, frozenset({6443})),),
    "keda-webhooks": (AddressPeer(None, frozenset({9443})),),
    "{guide}-serving": (AddressPeer(PRIVATE, SERVING_PORTS),
                        *(AddressPeer(c, SERVING_PORTS) for c in HEALTH_CHECK_RANGES)),
    "{guide}-router": (AddressPeer(PRIVATE, EPP_PORTS), *(AddressPeer(c, EPP_PORTS) for c in HEALTH_CHECK_RANGES)),
}
"""Gateway mode only: the proxy-only subnet's proxies and the health checkers reach the serving pods and the EPP;
load clients reach the Gateway's internal address (components/platform/netpol.py)."""


# --------------------------------------------------------------------------- commands run at `pulumi up`
@dataclass(frozen=True)
class CommandDecl:
    """A `command:local:Command` the program runs on the machine of `pulumi up`: its exact script, interpreter,
    directory (relative to the repository) and environment names; no delete or update command of its own."""

    script: str
    interpreter: tuple[str, ...]
    dir: str
    environment: frozenset[str]
    reason: str


def commands() -> tuple[CommandDecl, ...]:
    """The one command: the TPU engine image's build (components/serving/engineimage.py builds it from the same
    facts)."""
    from ..serving import engineimage

    return (CommandDecl(engineimage.build_script(), engineimage.BUILD_INTERPRETER,
                        str(engineimage.LOCKS.relative_to(ROOT)), frozenset(engineimage.BUILD_ENVIRONMENT),
                        "builds the TPU engine image once per lock with Cloud Build and prints its digest"),)


# --------------------------------------------------------------------------- resource types
TYPES = frozenset({
    "pulumi:providers:gcp", "pulumi:providers:kubernetes",
    "command:local:Command", "gcp:artifactregistry/repository:Repository", REPO_GRANT,
    "gcp:compute/address:Address", "gcp:compute/network:Network", "gcp:compute/resourcePolicy:ResourcePolicy",
    "gcp:compute/router:Router", "gcp:compute/routerNat:RouterNat", "gcp:compute/subnetwork:Subnetwork",
    "gcp:container/cluster:Cluster", "gcp:container/nodePool:NodePool", "gcp:monitoring/alertPolicy:AlertPolicy",
    "gcp:monitoring/dashboard:Dashboard", "gcp:projects/iAMMember:IAMMember", "gcp:projects/service:Service",
    "gcp:serviceaccount/account:Account", "gcp:serviceaccount/iAMMember:IAMMember", "gcp:storage/bucket:Bucket",
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration",
    # KEDA's chart renders its CRDs as templates and registers its external metrics API (the HPA reads it).
    "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
    "kubernetes:apiregistration.k8s.io/v1:APIService",
    "kubernetes:keda.sh/v1alpha1:ScaledObject", "kubernetes:keda.sh/v1alpha1:TriggerAuthentication",
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy",
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding",
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
    "kubernetes:apps/v1:DaemonSet", "kubernetes:apps/v1:Deployment", "kubernetes:batch/v1:Job",
    "kubernetes:core/v1:ConfigMap", "kubernetes:core/v1:Namespace", "kubernetes:core/v1:PersistentVolumeClaim",
    "kubernetes:core/v1:ResourceQuota", "kubernetes:core/v1:Secret", "kubernetes:core/v1:Service",
    "kubernetes:core/v1:ServiceAccount", "kubernetes:datalayer.gke.io/v1:GCPDataSource",
    "kubernetes:disaggregatedset.x-k8s.io/v1:DisaggregatedSet", "kubernetes:gateway.networking.k8s.io/v1:Gateway",
    "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute", "kubernetes:helm.sh/v4:Chart",
    "kubernetes:inference.networking.k8s.io/v1:InferencePool", "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet",
    "kubernetes:monitoring.googleapis.com/v1:PodMonitoring", "kubernetes:networking.gke.io/v1:GCPBackendPolicy",
    "kubernetes:networking.gke.io/v1:HealthCheckPolicy", "kubernetes:networking.k8s.io/v1:NetworkPolicy",
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
    "kubernetes:rbac.authorization.k8s.io/v1:Role", "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
    "kubernetes:resource.k8s.io/v1:DeviceClass", "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate",
    "kubernetes:resource.nvidia.com/v1beta1:ComputeDomain", "kubernetes:storage.k8s.io/v1:StorageClass",
    "kubernetes:storage.k8s.io/v1:VolumeAttributesClass",
    "pulumi-python:dynamic/kimi:CheckpointGeometry", "pulumi-python:dynamic/kimi:HubRevision",
})
"""Resource types the program creates (besides its own `kimi:` components, which create nothing themselves). Any
other type (a firewall rule, a forwarding rule, an Ingress, a PersistentVolume, a service-account key) is refused."""
COMPONENT_PREFIX = "kimi:"

# --------------------------------------------------------------------------- volumes
@dataclass(frozen=True)
class ClaimDecl:
    name: str
    access_modes: tuple[str, ...]
    reason: str


CLAIMS: tuple[ClaimDecl, ...] = (
    ClaimDecl("{guide}-models-{rev}", ("ReadOnlyMany",),
              "the hydrated checkpoint: one Hyperdisk ML volume many nodes read and none writes"),
)
STORAGE_CLASSES = {"{guide}-models-hyperdisk-ml": ("pd.csi.storage.gke.io", "hyperdisk-ml")}
"""StorageClass name -> (provisioner, disk type)."""
VOLUME_ATTRIBUTES_CLASSES = {"{guide}-models-hdml-[0-9]+mi": ("pd.csi.storage.gke.io", ("throughput",))}
"""VolumeAttributesClass name -> (CSI driver, the parameters it may set): the checkpoint volume's throughput only
(components/weights/volume.py)."""
CLAIM_TEMPLATES: dict[str, str] = {
    contract.RDMA_CLAIM_TEMPLATE: "mrdma.google.com",
}
"""ResourceClaimTemplate name -> the one DeviceClass its requests may name; none may ask for adminAccess."""

# --------------------------------------------------------------------------- cloud network and nodes
NODE_SCOPES = frozenset({"https://www.googleapis.com/auth/cloud-platform"})
"""OAuth scopes of every node: cloud-platform, with access decided by IAM (the GKE hardening guide,
https://cloud.google.com/kubernetes-engine/docs/how-to/hardening-your-cluster#use_least_privilege_sa)."""
NODE_METADATA: dict[str, str] = {}
"""Instance metadata node pools may set: none (GKE sets disable-legacy-endpoints itself)."""
NAT_SOURCE = "LIST_OF_SUBNETWORKS"
NAT_SUBNETS = ("{cluster}-nodes", "{cluster}-staging")
"""Cloud NAT translates only these subnets (by name), never every subnet of the region."""
SUBNET_PURPOSES = frozenset({"REGIONAL_MANAGED_PROXY"})
"""Subnet purposes besides a plain subnet: the proxy-only subnet of the internal Gateway."""
PRIVATE_SUBNET_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
"""Ranges a subnet and its secondary ranges must fall in (RFC 1918 and RFC 6598 shared space)."""
EXTERNAL_ADDRESSES = ("{cluster}-staging-[0-9]+",)
"""The only external addresses: the staging Cloud NAT's (the Hub sees the Job's egress from them)."""

"""Inputs whose change makes `pulumi up` replace a resource (delete and create) instead of updating it.

The one list `tools.preview.plan_diff` consults to call out replacements. Each rule names the resource type, the
input path (the plan's camelCase path; `[]` stands for any list element) and where upstream says so:

- pulumi-gcp bridges the Terraform provider google-beta (provider/go.mod in
  https://github.com/pulumi/pulumi-gcp), whose schema marks these fields `ForceNew: true`. A field
  without it is updated in place, even under a block that has it: the Terraform plugin SDK applies a
  block's ForceNew only to the block appearing or disappearing (scope "presence"), and a list of plain
  values inherits it for every element (scope "value").
- pulumi-kubernetes replaces an object when `metadata.name`/`metadata.namespace` or a field of its
  kind's `forceNewProperties` list changes (provider/pkg/provider/diff.go); every other change is a
  patch, which the API server rejects for a field the Kubernetes API declares immutable (effect REJECT).

Only the types this program creates are listed, with the inputs it sets plus the notable ones; a type
missing here is never called a replacement. Note `nodeConfig.machineType` (and diskSizeGb, diskType) of
a node pool is NOT a replacement: the provider updates it in place (nodePoolNodeConfigUpdate in
node_config.go) and GKE then recreates the nodes; changing `gpu.machine` still replaces the GPU pool,
because the accelerator type changes with it.
"""

from __future__ import annotations

from dataclasses import dataclass

_TF = "https://github.com/hashicorp/terraform-provider-google-beta/blob/93c65b2d60fea598528f2769b5b09de856f8cb8c/"
_NODE_POOL = _TF + "google-beta/services/container/resource_container_node_pool.go"
_NODE_CONFIG = _TF + "google-beta/services/container/node_config.go"
_CLUSTER = _TF + "google-beta/services/container/resource_container_cluster.go"
_COMPUTE = _TF + "google-beta/services/compute/"
_IAM_MEMBER = _TF + "google-beta/tpgiamresource/resource_iam_member.go#L63-L75"
_K8S = ("https://github.com/pulumi/pulumi-kubernetes/blob/eaf47e8830cf0cbece4eee61ea8eb49998aeb92c/"
        "provider/pkg/provider/diff.go")

VALUE = "value"
"""The field, or anything under it, changed."""
PRESENCE = "presence"
"""The block (or an element of a block list) appeared or disappeared; its own fields have their own rules."""


REPLACE = "replace"
"""Pulumi deletes and recreates the resource."""
REJECT = "reject"
"""Pulumi patches the object and the API server refuses: the field is immutable, so `pulumi up` fails there."""


@dataclass(frozen=True)
class Rule:
    type: str
    """Pulumi type token (`gcp:...`), or `k8s:<group>/<Kind>` for a Kubernetes object (core group: `k8s:/Pod`)."""
    path: str
    source: str
    scope: str = VALUE
    effect: str = REPLACE


def _rules(type_token: str, source: str, *paths: str, lines: tuple[int, ...] = (), scope: str = VALUE) -> list[Rule]:
    anchors = [f"#L{n}" for n in lines] if lines else [""] * len(paths)
    return [Rule(type_token, path, source + anchor, scope) for path, anchor in zip(paths, anchors, strict=True)]


_NODE_CONFIG_REPLACES = (
    # node_config.go: (plan path under nodeConfig, line of its schema entry)
    ("guestAccelerators", 316, PRESENCE), ("guestAccelerators[].count", 324, VALUE),
    ("guestAccelerators[].type", 330, VALUE), ("guestAccelerators[].gpuDriverInstallationConfig", 337, PRESENCE),
    ("guestAccelerators[].gpuDriverInstallationConfig.gpuDriverVersion", 346, VALUE),
    ("localSsdCount", 438, VALUE), ("minCpuPlatform", 571, VALUE), ("oauthScopes", 579, VALUE),
    ("preemptible", 595, VALUE), ("reservationAffinity", 602, PRESENCE),
    ("reservationAffinity.consumeReservationType", 610, VALUE), ("reservationAffinity.key", 617, VALUE),
    ("reservationAffinity.values", 623, VALUE), ("spot", 635, VALUE), ("serviceAccount", 643, VALUE),
    ("shieldedInstanceConfig", 665, PRESENCE), ("shieldedInstanceConfig.enableSecureBoot", 674, VALUE),
    ("shieldedInstanceConfig.enableIntegrityMonitoring", 681, VALUE),
)

_POD_CONTAINER_FIELDS = (
    "args", "command", "env", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "ports", "readinessProbe",
    "resources", "securityContext", "stdin", "stdinOnce", "terminationMessagePath", "terminationMessagePolicy", "tty",
    "volumeDevices", "volumeMounts", "workingDir")
_POD_FIELDS = (
    "affinity", "automountServiceAccountToken", "dnsConfig", "dnsPolicy", "enableServiceLinks", "hostAliases",
    "hostIPC", "hostNetwork", "hostPID", "hostname", "imagePullSecrets", "nodeName", "nodeSelector", "overhead",
    "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "restartPolicy", "runtimeClassName",
    "schedulerName", "securityContext", "serviceAccount", "serviceAccountName", "shareProcessNamespace", "subdomain",
    "terminationGracePeriodSeconds", "volumes")

RULES: tuple[Rule, ...] = tuple([
    # --- GKE --------------------------------------------------------------------------------------------
    *_rules("gcp:container/cluster:Cluster", _CLUSTER, "name", "location", "project", "network", "subnetwork",
            "networkingMode", "datapathProvider", "initialNodeCount", "ipAllocationPolicy.clusterSecondaryRangeName",
            "ipAllocationPolicy.servicesSecondaryRangeName",
            lines=(295, 328, 2020, 1814, 2028, 2232, 2626, 1232, 2093, 2102)),
    *_rules("gcp:container/nodePool:NodePool", _NODE_POOL, "project", "cluster", "location", "name",
            "placementPolicy.policyName", "maxPodsPerNode", "initialNodeCount",
            "networkConfig.acceleratorNetworkProfile", "networkConfig.podRange", "networkConfig.subnetwork",
            lines=(239, 246, 252, 527, 394, 427, 480, 576, 594, 694)),
    *_rules("gcp:container/nodePool:NodePool", _NODE_POOL, "placementPolicy", lines=(381,), scope=PRESENCE),
    *[Rule("gcp:container/nodePool:NodePool", f"nodeConfig.{path}", f"{_NODE_CONFIG}#L{line}", scope)
      for path, line, scope in _NODE_CONFIG_REPLACES],
    # --- Compute, IAM, Storage, services ----------------------------------------------------------------
    *_rules("gcp:compute/network:Network", _COMPUTE + "resource_compute_network.go", "name", "autoCreateSubnetworks",
            lines=(140, 153)),
    *_rules("gcp:compute/subnetwork:Subnetwork", _COMPUTE + "resource_compute_subnetwork.go", "name", "network",
            "region", lines=(544, 557, 744)),
    *_rules("gcp:compute/router:Router", _COMPUTE + "resource_compute_router.go", "name", "network", "region",
            lines=(163, 292, 319)),
    *_rules("gcp:compute/routerNat:RouterNat", _COMPUTE + "resource_compute_router_nat.go", "name", "router",
            "region", lines=(304, 312, 471)),
    *_rules("gcp:compute/address:Address", _COMPUTE + "resource_compute_address.go", "name", "addressType", "region",
            lines=(172, 193, 301)),
    *_rules("gcp:compute/resourcePolicy:ResourcePolicy", _COMPUTE + "resource_compute_resource_policy.go",
            "region", "project", "workloadPolicy.type", "workloadPolicy.acceleratorTopology",
            lines=(295, 507, 466, 473)),
    *_rules("gcp:storage/bucket:Bucket", _TF + "google-beta/services/storage/resource_storage_bucket.go",
            "name", "location", "project", lines=(132, 193, 203)),
    *_rules("gcp:serviceaccount/account:Account", _TF + "google-beta/services/resourcemanager/"
            "resource_google_service_account.go", "accountId", "project", lines=(90, 114)),
    *_rules("gcp:projects/service:Service", _TF + "google-beta/services/resourcemanager/"
            "resource_google_project_service.go", "service", "project", lines=(133, 139)),
    *_rules("gcp:projects/iAMMember:IAMMember", _IAM_MEMBER, "role", "member"),
    *_rules("gcp:projects/iAMMember:IAMMember", _TF + "google-beta/services/resourcemanager/iam_project.go",
            "project", lines=(35,)),
    *_rules("gcp:storage/bucketIAMMember:BucketIAMMember", _IAM_MEMBER, "role", "member"),
    *_rules("gcp:storage/bucketIAMMember:BucketIAMMember", _TF + "google-beta/services/storage/"
            "iam_storage_bucket.go", "bucket", lines=(33,)),
    # --- Kubernetes (pulumi-kubernetes forceNewProperties, for the API versions this program uses) ------
    *_rules("k8s:*", _K8S + "#L207-L212", "metadata.name", "metadata.namespace"),
    *_rules("k8s:/PersistentVolumeClaim", _K8S + "#L111-L118", "spec.accessModes", "spec.selector",
            "spec.storageClassName", "spec.volumeName"),
    *_rules("k8s:/Pod", _K8S + "#L119-L151", *(f"spec.{f}" for f in _POD_FIELDS),
            *(f"spec.{c}[].{f}" for c in ("containers", "initContainers") for f in _POD_CONTAINER_FIELDS)),
    *_rules("k8s:/ResourceQuota", _K8S + "#L152-L154", "spec.scopes"),
    # Secrets and ConfigMaps are replaced on a data change unless the provider sets enableSecretMutable /
    # enableConfigMapMutable (this program sets neither).
    *_rules("k8s:/Secret", _K8S + "#L28-L29", "type", "data", "stringData"),
    *_rules("k8s:/ConfigMap", _K8S + "#L32-L33", "data", "binaryData"),
    *_rules("k8s:/Service", _K8S + "#L158-L160", "spec.clusterIP"),
    *_rules("k8s:storage.k8s.io/StorageClass", _K8S + "#L70-L77", "parameters", "provisioner"),
    *_rules("k8s:apps/DaemonSet", _K8S + "#L164-L169", "spec.selector"),
    *_rules("k8s:apps/Deployment", _K8S + "#L171-L176", "spec.selector"),
    *_rules("k8s:apps/StatefulSet", _K8S + "#L196-L205", "spec.podManagementPolicy", "spec.revisionHistoryLimit",
            "spec.selector", "spec.serviceName", "spec.volumeClaimTemplates"),
    *_rules("k8s:batch/Job", _K8S + "#L178-L186", "spec.completions", "spec.parallelism", "spec.selector",
            "spec.template"),
    *[rule for kind in ("ClusterRoleBinding", "RoleBinding")
      for rule in _rules(f"k8s:rbac.authorization.k8s.io/{kind}", _K8S + "#L192-L194", "roleRef")],
    # --- Kubernetes fields the API server keeps immutable that pulumi-kubernetes does not replace for -------
    Rule("k8s:resource.k8s.io/ResourceClaimTemplate", "spec",
         "https://docs.rs/k8s-openapi/latest/src/k8s_openapi/v1_36/api/resource/v1/resource_claim_template.rs.html",
         effect=REJECT),
])

URN_CHANGE_SOURCE = "https://www.pulumi.com/docs/iac/operations/stack-management/refactoring-with-aliases/"
"""Pulumi identifies a resource by its URN (name, type, parent types): a change there is a delete and a create."""


def kubernetes_type(api_version: str, kind: str) -> str:
    """The rule type of a Kubernetes object: `k8s:<group>/<Kind>` (the core group is empty)."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return f"k8s:{group}/{kind}"

"""Scheduling proof of the offline plan: every pod the stack makes fits a node pool of the stack.

For each object that makes pods (Deployment, StatefulSet, ReplicaSet, DaemonSet, Job, LeaderWorkerSet leader
and worker templates, DisaggregatedSet roles, chart objects alike) the pod's effective requests are
computed the way the scheduler does (https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/
#resource-sharing-within-containers: the larger of the app containers plus native sidecars and the largest
init container plus the sidecars started before it, plus `overhead`). A pool can take the pod when its
taints are tolerated, the node selector and required node affinity match the pool's labels (its own and
the ones GKE sets), its nodes' allocatable (components/facts/machines.py) holds the requests, extended resources
and hugepages included, and its DRA claims name a device class some driver serves on that pool. Then
each pool is packed: every DaemonSet that lands there is on every node, and the other pods go first-fit
decreasing onto the nodes left, so replicas that need a whole node cannot outnumber the nodes.

Placement units: a DisaggregatedSet slice under its placementPolicy, and a LeaderWorkerSet group under the
exclusive-topology annotation, go whole into one topology domain each, one copy per domain (Unit); and every
accelerator pool must receive pods, since its nodes bill whether or not anything runs there.

Not modelled: GKE's own DaemonSets (their requests are not published per version), other pod (anti-)affinity and
topology spread, and pods other controllers create (the Volume Populator's transfer Job).

Architecture: every container (init, sidecar, app) of a pod is checked against each pool the pod can land on
by taints, selector and affinity: the pool's `kubernetes.io/arch` (components/facts/machines.py) must be among the
architectures components/plan/images.py records for the image, and a configured digest must not be one recorded
as another platform's manifest or another tag's. An image the program does not pin (a user's own) is noted,
not checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from components.facts import machines
from components.plan import images

GKE_POOL_LABEL = "cloud.google.com/gke-nodepool"
"""Node labels GKE sets: pool name (https://cloud.google.com/kubernetes-engine/docs/concepts/node-pools),
GPU type (https://cloud.google.com/kubernetes-engine/docs/how-to/gpus), TPU type and topology
(https://cloud.google.com/kubernetes-engine/docs/how-to/tpus), and the well-known ones every kubelet sets
(https://kubernetes.io/docs/reference/labels-annotations-taints/)."""
ARM_TAINT = ("kubernetes.io/arch", "arm64", "NoSchedule")
"""GKE taints Arm nodes (https://cloud.google.com/kubernetes-engine/docs/how-to/prepare-arm-workloads-for-deployment)."""
EFFECTS = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}

DEVICE_CLASS_PROVIDERS: dict[str, tuple[str, str, str]] = {
    # device class -> ("label", key, value): a GKE-managed driver on pools with that label, or
    # ("daemonset", name, ""): a driver DaemonSet of the plan that must land on the pool.
    "mrdma.google.com": ("label", "cloud.google.com/gke-networking-dra-driver", "true"),
    "compute-domain-default-channel.nvidia.com": ("daemonset", "nvidia-dra-driver-gpu-kubelet-plugin", ""),
    "compute-domain-daemon.nvidia.com": ("daemonset", "nvidia-dra-driver-gpu-kubelet-plugin", ""),
}
"""GKE-managed DRANET publishes `mrdma.google.com` devices on pools labelled as components/facts/catalog.py
GpuMachine.node_labels says; the NVIDIA DRA driver's kubelet plugin serves the ComputeDomain classes."""
COMPUTE_DOMAIN_CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
"""Device class of the claim template a ComputeDomain's controller creates (the driver chart's DeviceClass)."""

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


class SchedulingError(Exception):
    pass


def quantity(value: Any) -> float:
    """A Kubernetes quantity ("500m", "8Gi", 4) as a number of base units."""
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise SchedulingError(f"not a Kubernetes quantity: {value!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def _amounts(resources: dict[str, Any] | None) -> dict[str, int]:
    """requests of one container (limits stand in where requests are unset), cpu in millicores."""
    resources = resources or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {k: int(round(quantity(v) * (1000 if k == "cpu" else 1))) for k, v in merged.items()}


def _add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


def _max(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in a.keys() | b.keys()}


def effective_requests(spec: dict[str, Any]) -> dict[str, int]:
    """The pod's requests as the scheduler sums them: init containers, native sidecars, overhead."""
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or []:
        amounts = _amounts(container.get("resources"))
        if container.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, amounts)
        else:
            init_peak = _max(init_peak, _add(sidecars, amounts))
    regular: dict[str, int] = {}
    for container in spec.get("containers") or []:
        regular = _add(regular, _amounts(container.get("resources")))
    total = _max(_add(regular, sidecars), init_peak)
    return _add(total, _amounts({"requests": spec.get("overhead")}))


@dataclass
class PodGroup:
    """Pods of one template: `count` of them, or one per matching node for a DaemonSet."""

    owner: str
    namespace: str
    spec: dict[str, Any]
    count: int
    daemon: bool = False
    requests: dict[str, int] = field(default_factory=dict)
    unit: str = ""
    """Placement unit this group belongs to ('' for none): every pod of one unit must share one domain."""
    per_unit: int = 0
    """Pods of this group in each unit."""

    def __post_init__(self) -> None:
        self.requests = effective_requests(self.spec)


def _lws_groups(owner: str, namespace: str, lws_spec: dict[str, Any], sets: int = 1) -> list[PodGroup]:
    template = lws_spec.get("leaderWorkerTemplate") or {}
    size = int(template.get("size", 1))
    replicas = int(lws_spec.get("replicas", 1)) * sets
    worker = template.get("workerTemplate") or {}
    leader = template.get("leaderTemplate")
    if leader is None:
        return [PodGroup(f"{owner} (leader+workers)", namespace, worker.get("spec") or {}, replicas * size)]
    groups = [PodGroup(f"{owner} leader", namespace, leader.get("spec") or {}, replicas)]
    if size > 1:
        groups.append(PodGroup(f"{owner} worker", namespace, worker.get("spec") or {}, replicas * (size - 1)))
    return groups


@dataclass
class Unit:
    """Pods that must land together in one topology domain, `count` times, each copy in a domain of its own: a
    DisaggregatedSet slice under its placementPolicy (all roles, required pod affinity to the slice and
    anti-affinity to the set's other slices on `topology`,
    https://github.com/kubernetes-sigs/lws/blob/v0.10.0/pkg/utils/disaggregatedset/affinity.go), or a
    LeaderWorkerSet group under the `exclusive-topology` annotation (one group per domain)."""

    name: str
    topology: str
    count: int
    groups: list[PodGroup]


EXCLUSIVE_TOPOLOGY_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"


def _with_unit(groups: list[PodGroup], unit: str, copies: int) -> list[PodGroup]:
    for g in groups:
        g.unit, g.per_unit = unit, g.count // copies
    return groups


def placement_units(manifests: list[dict[str, Any]]) -> list[Unit]:
    units = []
    for m in manifests:
        kind, meta, spec = m.get("kind"), m.get("metadata") or {}, m.get("spec") or {}
        owner = f"{kind} {meta.get('namespace', '')}/{meta.get('name')}"
        if kind == "DisaggregatedSet":
            policy = spec.get("placementPolicy") or {}
            if policy.get("type", "None") != "None" and policy.get("topology"):
                slices = int(spec.get("slices", 1))
                units.append(Unit(f"{owner} slice", policy["topology"], slices,
                                  [g for g in pod_groups([m]) if g.count]))
        elif kind == "LeaderWorkerSet":
            key = (meta.get("annotations") or {}).get(EXCLUSIVE_TOPOLOGY_ANNOTATION)
            if key:
                units.append(Unit(f"{owner} group", key, int(spec.get("replicas", 1)), pod_groups([m])))
    for unit in units:
        _with_unit(unit.groups, unit.name, unit.count)
    return units


def pod_groups(manifests: list[dict[str, Any]]) -> list[PodGroup]:
    groups = []
    for m in manifests:
        kind, meta, spec = m.get("kind"), m.get("metadata") or {}, m.get("spec") or {}
        owner, namespace = f"{kind} {meta.get('namespace', '')}/{meta.get('name')}", meta.get("namespace", "")
        if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
            groups.append(PodGroup(owner, namespace, spec["template"].get("spec") or {}, int(spec.get("replicas", 1))))
        elif kind == "DaemonSet":
            groups.append(PodGroup(owner, namespace, spec["template"].get("spec") or {}, 0, daemon=True))
        elif kind == "Job":
            parallelism = int(spec.get("parallelism", 1))
            groups.append(PodGroup(owner, namespace, spec["template"].get("spec") or {}, parallelism))
        elif kind == "LeaderWorkerSet":
            groups += _lws_groups(owner, namespace, spec)
        elif kind == "DisaggregatedSet":
            # spec.slices complete copies of every role (DisaggregatedSet CRD).
            for role in spec.get("roles") or []:
                groups += _lws_groups(f"{owner} role {role['name']}", namespace, role.get("spec") or {},
                                      int(spec.get("slices", 1)))
    return groups


# --------------------------------------------------------------------------- node pools
@dataclass
class Pool:
    name: str
    machine_type: str
    nodes: int
    labels: dict[str, str]
    taints: list[tuple[str, str, str]]
    allocatable: machines.Allocatable | None


def pools_of(resources: list[dict[str, Any]], region: str = "") -> list[Pool]:
    pools = []
    for r in resources:
        if r["type"] != "gcp:container/nodePool:NodePool":
            continue
        inputs = r["inputs"]
        config = inputs.get("nodeConfig") or {}
        machine = machines.MACHINES.get(config.get("machineType", ""))
        hugepages = ((config.get("linuxNodeConfig") or {}).get("hugepagesConfig") or {}).get("hugepageSize2m", 0)
        labels = dict(config.get("labels") or {})
        labels.update({GKE_POOL_LABEL: inputs["name"], "kubernetes.io/os": "linux",
                       "node.kubernetes.io/instance-type": config.get("machineType", ""),
                       "cloud.google.com/gke-os-distribution": "cos"})
        if machine:
            labels["kubernetes.io/arch"] = machine.arch
        zones = inputs.get("nodeLocations") or []
        if len(zones) == 1:
            labels["topology.kubernetes.io/zone"] = zones[0]
            labels["topology.kubernetes.io/region"] = zones[0].rsplit("-", 1)[0]
        for accelerator in config.get("guestAccelerators") or []:
            labels["cloud.google.com/gke-accelerator"] = accelerator["type"]
        if (inputs.get("networkConfig") or {}).get("acceleratorNetworkProfile"):
            labels["gke.networks.io/accelerator-network-profile"] = inputs["networkConfig"]["acceleratorNetworkProfile"]
        topology = (inputs.get("placementPolicy") or {}).get("tpuTopology")
        if config.get("machineType", "").startswith("tpu7x"):
            labels["cloud.google.com/gke-tpu-accelerator"] = "tpu7x"
            if topology:
                labels["cloud.google.com/gke-tpu-topology"] = topology
        if config.get("spot"):
            labels["cloud.google.com/gke-spot"] = "true"
        if (config.get("workloadMetadataConfig") or {}).get("mode") == "GKE_METADATA":
            # GKE labels the nodes of a pool that runs the GKE metadata server (Workload Identity)
            # (https://cloud.google.com/kubernetes-engine/docs/how-to/workload-identity; KEDA's chart selects it).
            labels["iam.gke.io/gke-metadata-server-enabled"] = "true"
        if (inputs.get("placementPolicy") or {}).get("policyName"):
            labels[SUBBLOCK_LABEL] = _sub_block(inputs["name"], config)
        taints = [(t["key"], t.get("value", ""), EFFECTS.get(t["effect"], t["effect"]))
                  for t in config.get("taints") or []]
        if machine and machine.arch == "arm64" and ARM_TAINT not in taints:
            taints.append(ARM_TAINT)
        pools.append(Pool(inputs["name"], config.get("machineType", ""), _node_count(inputs), labels,
                          taints, machines.allocatable(machine, hugepages) if machine else None))
    return pools


def _node_count(inputs: dict) -> int:
    """Nodes a pool starts with: nodeCount, or initialNodeCount for a pool under the cluster autoscaler."""
    return int(inputs.get("nodeCount", inputs.get("initialNodeCount", 0)))


SUBBLOCK_LABEL = "cloud.google.com/gce-topology-subblock"
"""GKE labels each node with the ID of the reservation sub-block it runs in
(https://cloud.google.com/ai-hypercomputer/docs/workloads/schedule-gke-workloads-tas). A pool under a workload
policy is placed in one NVLink domain (https://cloud.google.com/compute/docs/instance-groups/about-workload-policies):
the model gives each such pool one value, the sub-block its reservation names or, unnamed, one of its own
(the program's config admits unnamed sub-blocks only where two pools cannot share one,
components/config/gpu.py GpuConfig._check_racks)."""


def _sub_block(pool: str, config: dict[str, Any]) -> str:
    values = (config.get("reservationAffinity") or {}).get("values") or []
    path = values[0] if values else ""
    return path if "/reservationSubBlocks/" in path else f"sub-block of {pool}"


def tolerates(tolerations: list[dict[str, Any]], taint: tuple[str, str, str]) -> bool:
    key, value, effect = taint
    for t in tolerations:
        if t.get("effect") and t["effect"] != effect:
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == key:
                return True
        elif t.get("key") == key and t.get("value", "") == value:
            return True
    return False


def _expression(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present:
        return int(labels[key]) > int(values[0]) if op == "Gt" else int(labels[key]) < int(values[0])
    return False


def placement_problems(spec: dict[str, Any], pool: Pool) -> list[str]:
    """Why the pod cannot land on the pool by taints, selector and required affinity (empty: it can)."""
    problems = [f"taint {k}={v}:{e} not tolerated" for k, v, e in pool.taints
                if e in ("NoSchedule", "NoExecute") and not tolerates(spec.get("tolerations") or [], (k, v, e))]
    for key, value in (spec.get("nodeSelector") or {}).items():
        if pool.labels.get(key) != value:
            problems.append(f"nodeSelector {key}={value} not on the pool (has {pool.labels.get(key, 'none')})")
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(not term.get("matchFields") and
                         all(_expression(e, pool.labels) for e in term.get("matchExpressions") or [])
                         for term in terms):
        problems.append("required node affinity not matched by the pool's labels")
    return problems


def _fmt(resource: str, amount: float) -> str:
    if resource == "cpu":
        return f"{amount / 1000:g}"
    if resource == "memory" or resource.startswith("hugepages-") or resource == "ephemeral-storage":
        return f"{amount / 2**30:.1f}Gi"
    return f"{amount:g}"


def format_requests(requests: dict[str, int]) -> str:
    order = ["cpu", "memory", *sorted(k for k in requests if k not in ("cpu", "memory"))]
    return ", ".join(f"{k} {_fmt(k, requests[k])}" for k in order if k in requests and requests[k])


def _capacity(pool: Pool) -> dict[str, int]:
    a = pool.allocatable
    return {"cpu": a.cpu_milli, "memory": a.memory_bytes, **a.extended} if a else {}


def resource_problems(requests: dict[str, int], capacity: dict[str, int]) -> list[str]:
    return [f"{k} {_fmt(k, v)} > {_fmt(k, capacity.get(k, 0))} allocatable" for k, v in sorted(requests.items())
            if k != "ephemeral-storage" and v > capacity.get(k, 0)]


# --------------------------------------------------------------------------- DRA claims
def _claim_classes(spec: dict[str, Any], namespace: str, manifests: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(claim name, device class) for each of the pod's resource claims; class '' when nothing provides it."""
    templates: dict[tuple[str, str], list[str]] = {}
    for m in manifests:
        meta = m.get("metadata") or {}
        if m.get("kind") == "ResourceClaimTemplate":
            requests = ((m.get("spec") or {}).get("spec") or {}).get("devices", {}).get("requests") or []
            templates[(meta.get("namespace", ""), meta["name"])] = [
                (r.get("exactly") or r).get("deviceClassName", "") for r in requests]
        elif m.get("kind") == "ComputeDomain":
            name = (((m.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate") or {}).get("name")
            if name:
                templates[(meta.get("namespace", ""), name)] = [COMPUTE_DOMAIN_CHANNEL_CLASS]
    result = []
    for claim in spec.get("resourceClaims") or []:
        classes = templates.get((namespace, claim.get("resourceClaimTemplateName", "")), [""])
        result += [(claim["name"], c) for c in classes]
    return result


def claim_problems(group: PodGroup, pool: Pool, manifests: list[dict[str, Any]],
                   placed: dict[str, set[str]], unverified: set[str] | None = None) -> list[str]:
    """Why the pod's DRA claims cannot be served on the pool. With `unverified` given (some chart was not
    rendered, so its driver objects are missing), a claim on a chart-provided driver is noted there instead."""
    classes = {m["metadata"]["name"] for m in manifests if m.get("kind") == "DeviceClass"}
    problems = []
    for claim, device_class in _claim_classes(group.spec, group.namespace, manifests):
        provider = DEVICE_CLASS_PROVIDERS.get(device_class)
        if not device_class:
            problems.append(f"claim {claim}: no ResourceClaimTemplate or ComputeDomain in the plan provides it")
        elif provider is None:
            problems.append(f"claim {claim}: no known driver for device class {device_class}")
        elif provider[0] == "label" and pool.labels.get(provider[1]) != provider[2]:
            problems.append(f"claim {claim}: {device_class} needs pool label {provider[1]}={provider[2]}")
        elif provider[0] == "daemonset" and unverified is not None and device_class not in classes:
            unverified.add(f"pod {group.owner}: claim {claim} ({device_class}) not checked: its driver's chart "
                           "was not rendered")
        elif provider[0] == "daemonset":
            if device_class not in classes:
                problems.append(f"claim {claim}: DeviceClass {device_class} is not in the plan")
            elif pool.name not in placed.get(provider[1], set()):
                problems.append(f"claim {claim}: the {provider[1]} DaemonSet does not run on this pool")
    return problems


# --------------------------------------------------------------------------- image architectures
def architecture_problems(group: PodGroup, pool: Pool, unrecorded: set[str]) -> list[str]:
    """One line per container image of the pod that cannot run on the pool's architecture; images not pinned
    in components/plan/images.py are added to `unrecorded`."""
    arch = pool.labels.get("kubernetes.io/arch")
    if not arch:
        return []
    problems = []
    for container in [*(group.spec.get("initContainers") or []), *(group.spec.get("containers") or [])]:
        reference = container.get("image", "")
        name, digest = images.by_reference(reference)
        if name is None:
            unrecorded.add(f"pod {group.owner}: image {reference} has no architectures in components/plan/images.py; "
                           f"not checked against pool {pool.name} ({arch})")
            continue
        where = f"pod {group.owner} container {container.get('name')} image {reference} can land on pool " \
                f"{pool.name} ({pool.machine_type}, {arch})"
        recorded = images.IMAGES[name].architectures
        if arch not in recorded:
            problems.append(f"{where} but the image publishes {', '.join(f'linux/{a}' for a in recorded)} only "
                            f"(components/plan/images.py {name!r})")
        elif digest and (wrong := images.digest_problem(name, digest, arch)):
            problems.append(f"{where} but its {wrong}")
    return problems


# --------------------------------------------------------------------------- the check
@dataclass
class PoolLoad:
    pool: Pool
    daemons: list[PodGroup] = field(default_factory=list)
    nodes: list[list[PodGroup]] = field(default_factory=list)
    used: list[dict[str, int]] = field(default_factory=list)


@dataclass
class Report:
    loads: list[PoolLoad]
    failures: list[str]
    notes: list[str]
    placements: list[str] = field(default_factory=list)
    """Where each placement unit went: `<unit> <i> -> <pools>`."""

    def lines(self) -> list[str]:
        head = ("scheduling: every pod fits its node pool and each of its images publishes the pool's architecture"
                if not self.failures else "scheduling: FAILED")
        lines = [f"{head} (allocatable per node = machine - GKE reservations - eviction threshold, "
                 "components/facts/machines.py; architectures: components/plan/images.py)"]
        for load in self.loads:
            pool = load.pool
            capacity = _capacity(pool)
            busiest = max(load.used, key=lambda u: (u.get("cpu", 0), u.get("memory", 0)), default={})
            pods = sum(len(n) for n in load.nodes)
            lines.append(f"  {pool.name} ({pool.nodes} x {pool.machine_type}): allocatable/node "
                         f"{format_requests(capacity) or 'unknown machine'}; busiest node requests "
                         f"{format_requests(busiest) or 'nothing'}; {pods} pods + {len(load.daemons)} DaemonSets")
        return (lines + [f"  placed: {p}" for p in self.placements] + [f"  {n}" for n in self.notes]
                + [f"  FAIL {f}" for f in self.failures])


def at_maximum(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifests with every autoscaled replica count at its ScaledObject's `maxReplicaCount`, the most the
    autoscaler may ask for: a LeaderWorkerSet's `spec.replicas`, or a DisaggregatedSet role's, whose /scale is the
    `<set>-<role>` DisaggregatedSetRoleScaler the controller creates for a role with `scaling.mode: External`
    (lws CRD disaggregatedsetrolescalers)."""
    maxima: dict[tuple[str, str, str], int] = {}
    for m in manifests:
        if m.get("kind") == "ScaledObject":
            ref, namespace = m["spec"]["scaleTargetRef"], (m.get("metadata") or {}).get("namespace", "")
            maxima[(ref.get("kind", "Deployment"), namespace, ref["name"])] = int(m["spec"].get("maxReplicaCount", 100))
    if not maxima:
        return manifests
    out = []
    for m in manifests:
        meta, kind = m.get("metadata") or {}, m.get("kind")
        namespace, name = meta.get("namespace", ""), meta.get("name")
        if kind == "LeaderWorkerSet" and (kind, namespace, name) in maxima:
            m = {**m, "spec": {**m["spec"], "replicas": maxima[(kind, namespace, name)]}}
        elif kind == "DisaggregatedSet":
            roles = []
            for role in m["spec"].get("roles") or []:
                top = maxima.get(("DisaggregatedSetRoleScaler", namespace, f"{name}-{role['name']}"))
                if top is not None:
                    role = {**role, "spec": {**(role.get("spec") or {}), "replicas": top}}
                roles.append(role)
            m = {**m, "spec": {**m["spec"], "roles": roles}}
        out.append(m)
    return out


def check(resources: list[dict[str, Any]], manifests: list[dict[str, Any]], unrendered: tuple[str, ...] = ()) -> Report:
    """`unrendered`: chart resources whose objects are missing from `manifests` (no verified copy found). Autoscaled
    sets are placed at their maximum (at_maximum)."""
    manifests = at_maximum(manifests)
    pools = pools_of(resources)
    unverified: set[str] | None = set() if unrendered else None
    loads = {p.name: PoolLoad(p, nodes=[[] for _ in range(p.nodes)],
                              used=[{} for _ in range(p.nodes)]) for p in pools}
    failures: list[str] = []
    notes = [f"pool {p.name}: machine type {p.machine_type} has no size in components/facts/machines.py; fit not "
             f"checked"
             for p in pools if p.allocatable is None]
    groups = pod_groups(manifests)
    unrecorded: set[str] = set()
    for group in groups:
        for pool in pools:
            if not placement_problems(group.spec, pool):
                failures += architecture_problems(group, pool, unrecorded)
    placed: dict[str, set[str]] = {}
    # DaemonSets first: on every node of every pool they can land on.
    for group in (g for g in groups if g.daemon):
        name = group.owner.rsplit("/", 1)[-1]
        fitting = [p for p in pools if not placement_problems(group.spec, p)]
        placed[name] = {p.name for p in fitting}
        for pool in fitting:
            loads[pool.name].daemons.append(group)
            for used in loads[pool.name].used:
                used.update(_add(used, group.requests))
    for pool in pools:
        if pool.allocatable is not None and pool.nodes and loads[pool.name].daemons:
            over = resource_problems(loads[pool.name].used[0], _capacity(pool))
            if over:
                failures.append(f"DaemonSets on pool {pool.name} do not fit one node together: {'; '.join(over)}")
    units = placement_units(manifests)
    in_units = {g.owner for unit in units for g in unit.groups}
    placements: list[str] = []
    for unit in units:
        failures += _place_unit(unit, pools, loads, manifests, placed, unverified, placements)
    for group in sorted((g for g in groups if not g.daemon and g.owner not in in_units),
                        key=lambda g: (-g.requests.get("cpu", 0), -g.requests.get("memory", 0), g.owner)):
        reasons: dict[str, list[str]] = {}
        for pool in pools:
            problems = placement_problems(group.spec, pool) + claim_problems(group, pool, manifests, placed,
                                                                             unverified)
            if not problems and pool.allocatable is not None:
                problems = resource_problems(group.requests, _capacity(pool))
            reasons[pool.name] = problems
        candidates = [p for p in pools if not reasons[p.name]]
        if not candidates:
            failures.append(_nowhere(group, pools, reasons))
            continue
        if all(p.allocatable is None for p in candidates):
            notes.append(f"pod {group.owner}: only pools of unknown size take it; not checked")
            continue
        left = group.count
        for pool in (p for p in candidates if p.allocatable is not None):
            load = loads[pool.name]
            for i in range(pool.nodes):
                while left and not resource_problems(_add(load.used[i], group.requests), _capacity(pool)):
                    load.used[i] = _add(load.used[i], group.requests)
                    load.nodes[i].append(group)
                    left -= 1
        if left:
            nodes = sum(p.nodes for p in candidates)
            failures.append(f"pod {group.owner}: {left} of {group.count} replicas ({format_requests(group.requests)}) "
                            f"find no node with room left in {', '.join(p.name for p in candidates)} ({nodes} nodes)")
    notes += sorted(unrecorded)
    for pool in pools if not failures else ():  # an unplaced pod already explains an empty pool
        accelerated = pool.allocatable is not None and any(
            k in ACCELERATOR_RESOURCES for k in pool.allocatable.extended)
        if accelerated and pool.nodes and not any(loads[pool.name].nodes):
            failures.append(f"pool {pool.name}: no serving pod lands on its {pool.nodes} accelerator nodes "
                            "(billed, idle)")
    if unrendered:
        notes.append(f"charts not rendered ({', '.join(unrendered)}): their pods are not in this check")
        notes += sorted(unverified or ())
    return Report(list(loads.values()), failures, notes, placements)


ACCELERATOR_RESOURCES = ("nvidia.com/gpu", "google.com/tpu")


def _fits(group: PodGroup, pool: Pool, manifests, placed, unverified) -> list[str]:
    problems = placement_problems(group.spec, pool) + claim_problems(group, pool, manifests, placed, unverified)
    if not problems and pool.allocatable is not None:
        problems = resource_problems(group.requests, _capacity(pool))
    return problems


def _place_unit(unit: Unit, pools: list[Pool], loads: dict[str, PoolLoad], manifests, placed,
                unverified, placements: list[str]) -> list[str]:
    """Each copy of the unit goes whole into one domain (pools sharing the unit's topology label value) that no
    other copy uses, packed first-fit onto the nodes left there. Pools without the label cannot take it: a
    required pod affinity on a key a node lacks never matches."""
    domains: dict[str, list[Pool]] = {}
    for pool in pools:
        if unit.topology in pool.labels:
            domains.setdefault(pool.labels[unit.topology], []).append(pool)
    failures = []
    for group in unit.groups:
        reasons = {p.name: _fits(group, p, manifests, placed, unverified) for p in pools}
        if not any(not r for r in reasons.values()):
            failures.append(_nowhere(group, pools, reasons))
    if failures:
        return failures
    used: set[str] = set()
    for index in range(unit.count):
        short: tuple[PodGroup, int, list[str]] | None = None
        for value, members in domains.items():
            if value in used:
                continue
            trial = {p.name: [dict(u) for u in loads[p.name].used] for p in members}
            bound: list[tuple[str, int, PodGroup]] = []
            for group in unit.groups:
                left = group.per_unit
                fitting = [p for p in members if not _fits(group, p, manifests, placed, unverified)]
                for pool in fitting:
                    for i in range(pool.nodes):
                        while left and not resource_problems(_add(trial[pool.name][i], group.requests),
                                                             _capacity(pool)):
                            trial[pool.name][i] = _add(trial[pool.name][i], group.requests)
                            bound.append((pool.name, i, group))
                            left -= 1
                if left:
                    short = short or (group, left, [f"{p.name} ({p.nodes} nodes)" for p in members])
                    break
            else:
                used.add(value)
                for name, i, group in bound:
                    loads[name].nodes[i].append(group)
                for name, used_nodes in trial.items():
                    loads[name].used = used_nodes
                placements.append(f"{unit.name} {index} -> {', '.join(sorted({n for n, _, _ in bound}))} "
                                  f"({unit.topology} domain of its own)")
                break
        else:
            where = (f"pod {short[0].owner}: {short[1]} of {short[0].per_unit} replicas "
                     f"({format_requests(short[0].requests)}) find no node with room left in {', '.join(short[2])}"
                     if short else "every domain is taken by another copy")
            failures.append(f"{unit.name} {index} of {unit.count} fits no {unit.topology} domain of its own "
                            f"({len(domains)} in the pools, {len(used)} taken): {where}")
    return failures


def _nowhere(group: PodGroup, pools: list[Pool], reasons: dict[str, list[str]]) -> str:
    def distance(pool: Pool) -> tuple[int, float]:
        placement = len(placement_problems(group.spec, pool))
        capacity = _capacity(pool)
        overshoot = max((v / capacity[k] for k, v in group.requests.items() if capacity.get(k)), default=0.0)
        return placement, overshoot
    closest = min(pools, key=distance)
    return (f"pod {group.owner} fits no node pool: requests {format_requests(group.requests)}; closest pool "
            f"{closest.name} ({closest.machine_type}) allocatable {format_requests(_capacity(closest)) or 'unknown'}: "
            f"{'; '.join(reasons[closest.name])}")

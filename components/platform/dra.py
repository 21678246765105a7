"""GPU track device plumbing: NVIDIA DRA driver for ComputeDomains (multi-node NVLink), the ComputeDomain
itself, the RDMA claim template for GKE-managed DRANET, and the asapd-lite NIC initializer.

GPUs stay with GKE's device plugin (`nvidia.com/gpu`); the NVIDIA driver only serves ComputeDomains
(`resources.gpus.enabled: false`), as Cluster Toolkit and AICR run it on A4X Max
(https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/examples/gke-a4x-max-bm/nvidia-dra-driver.yaml,
https://github.com/NVIDIA/aicr/blob/9b6263c1d690/docs/integrator/gke-a4x-max-networking.md).
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from ..cloud.base import Args, Component, StrInput
from ..config import ImagesConfig
from ..facts import catalog, contract
from ..facts.versions import NVIDIA_DRA_DRIVER_CHART
from ..plan import images

DRA_NAMESPACE = catalog.DRA_NAMESPACE
NVIDIA_DRIVER_ROOT = "/home/kubernetes/bin/nvidia"
"""Where GKE installs the NVIDIA driver on COS nodes
(https://github.com/NVIDIA/aicr/blob/9b6263c1d690/docs/integrator/gke-a4x-max-networking.md)."""
CRITICAL_PRIORITY_CLASSES = ["system-node-critical", "system-cluster-critical"]
ASAPD_HEALTH_PORT = 19540
HUGEPAGE_BYTES = 2 * 2**20


def dra_driver_values(accelerator: str, pinned: Optional[ImagesConfig] = None) -> dict[str, Any]:
    """Chart values: ComputeDomains only, kubelet plugin on the Arm GPU nodes, controller off them."""
    def required(*expressions: dict[str, Any]) -> dict[str, Any]:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}}}

    gpu_key, gpu_value, _ = catalog.GPU_TAINT
    values: dict[str, Any] = {
        "nvidiaDriverRoot": NVIDIA_DRIVER_ROOT,
        "resources": {"gpus": {"enabled": False}},
        # IMEX daemons find their peers by DNS name and start without waiting for them (the ComputeDomain
        # CRD's numNodes description); explicit, since older charts defaulted it off.
        "featureGates": {"IMEXDaemonsWithDNSNames": True},
        "controller": {"affinity": required({"key": gpu_key, "operator": "DoesNotExist"})},
        "kubeletPlugin": {
            "affinity": required(
                {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": [accelerator]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
            ),
            "tolerations": [
                {"key": gpu_key, "operator": "Equal", "value": gpu_value, "effect": "NoSchedule"},
                {"key": "kubernetes.io/arch", "operator": "Equal", "value": "arm64", "effect": "NoSchedule"},
            ],
        },
    }
    if pinned and images.digest(pinned, "dra-driver"):  # the chart renders `repository:tag`; the tag carries the digest
        values["image"] = {"tag": images.tag(pinned, "dra-driver")}
    return values


def asapd_hugepages_bytes(machine: catalog.GpuMachine) -> int:
    """All of the node's pre-allocated 2 MiB hugepages go to asapd-lite (node pool hugepage_size2m)."""
    return machine.hugepages_2m * HUGEPAGE_BYTES


class GpuDevicesArgs(Args):
    namespace: StrInput
    """Guide namespace: the ComputeDomain and claim templates live beside the pods that claim them."""
    machine: catalog.GpuMachine
    images: ImagesConfig = ImagesConfig()
    """Optional digests of the driver and asapd-lite images."""
    critical_pods: int = 100
    """Pods the driver may run at critical priority (components/plan/limits.py dra_critical_pods: grows with the
    nodes)."""


class GpuDevices(Component):
    """`compute_domain` and `rdma_claims` are what the model servers' pods claim."""

    def __init__(self, name: str, args: GpuDevicesArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu", "GpuDevices", name, opts)
        namespace = k8s.core.v1.Namespace(
            f"{name}-dra-ns", metadata=k8s.meta.v1.ObjectMetaArgs(name=DRA_NAMESPACE), opts=self.child())
        # GKE admits pods with critical priority classes outside kube-system only under a quota scoped to them.
        quota = k8s.core.v1.ResourceQuota(
            f"{name}-dra-quota",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{DRA_NAMESPACE}-quota", namespace=namespace.metadata.name),
            spec=k8s.core.v1.ResourceQuotaSpecArgs(
                hard={"pods": str(args.critical_pods)},
                scope_selector=k8s.core.v1.ScopeSelectorArgs(match_expressions=[
                    k8s.core.v1.ScopedResourceSelectorRequirementArgs(
                        scope_name="PriorityClass", operator="In", values=CRITICAL_PRIORITY_CLASSES)]),
            ),
            opts=self.child(),
        )
        self.dra_driver = k8s.helm.v4.Chart(
            f"{name}-dra-driver",
            chart=NVIDIA_DRA_DRIVER_CHART.chart,
            version=NVIDIA_DRA_DRIVER_CHART.version,
            repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=NVIDIA_DRA_DRIVER_CHART.repo),
            namespace=namespace.metadata.name,
            values=dra_driver_values(args.machine.accelerator, args.images),
            opts=self.child(depends_on=[quota]),
        )
        self.compute_domain = k8s.apiextensions.CustomResource(
            f"{name}-compute-domain",
            api_version="resource.nvidia.com/v1beta1",
            kind="ComputeDomain",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=contract.COMPUTE_DOMAIN, namespace=args.namespace),
            spec={
                # One ComputeDomain for every slice: a domain spans several NVLink cliques (racks), each its own
                # IMEX domain (status.nodes is keyed by cliqueID and index, the CRD of the pinned chart), and every
                # slice's pods share one pod template per role, so one channel template. numNodes 0, as the CRD
                # recommends with IMEXDaemonsWithDNSNames: the spec is immutable, so a node count in it would turn
                # a change of gpu.slices into a forbidden update (docs/scaling.md).
                "numNodes": 0,
                "channel": {"resourceClaimTemplate": {"name": contract.COMPUTE_DOMAIN_CHANNEL_TEMPLATE}},
            },
            # The CRD and its controller come with the driver chart.
            opts=self.child(depends_on=[self.dra_driver]),
        )
        rdma_request: dict[str, Any] = {"deviceClassName": "mrdma.google.com"}
        if args.machine.rdma_nics:
            rdma_request.update(allocationMode="ExactCount", count=args.machine.rdma_nics)
        else:
            rdma_request.update(allocationMode="All")
        self.rdma_claims = k8s.resource.v1.ResourceClaimTemplate(
            f"{name}-rdma",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=contract.RDMA_CLAIM_TEMPLATE, namespace=args.namespace),
            spec=k8s.resource.v1.ResourceClaimTemplateSpecArgs(spec=k8s.resource.v1.ResourceClaimSpecArgs(
                devices=k8s.resource.v1.DeviceClaimArgs(requests=[
                    k8s.resource.v1.DeviceRequestArgs(name="rdma", exactly=rdma_request)])),
            ),
            opts=self.child(),
        )
        self.asapd = self._asapd_lite(name, args.machine, images.ref(args.images, "asapd-lite")) \
            if args.machine.asapd_instance_types else None
        self.finish(compute_domain=contract.COMPUTE_DOMAIN, rdma_claim_template=contract.RDMA_CLAIM_TEMPLATE)

    def _asapd_lite(self, name: str, machine: catalog.GpuMachine, image: str) -> k8s.apps.v1.DaemonSet:
        """Brings up the MRDMA NICs of A4X Max bare-metal nodes
        (https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375af/examples/gke-a4x-max-bm/asapd-lite-installer.yaml);
        host access is inherent."""
        labels = {"k8s-app": "asapd-lite"}
        host_paths = {
            "sys": "/sys", "proc": "/proc", "udev-rules": "/etc/udev/rules.d", "run-udev": "/run/udev",
            "run-asapd": "/run/asapd-lite", "log": "/var/log/google/asapd-lite", "state": "/var/lib/google/asapd-lite",
            "systemd-units": "/etc/systemd/system", "run-systemd": "/run/systemd",
        }
        created_on_host = {"run-asapd", "log", "state"}
        volumes = [
            k8s.core.v1.VolumeArgs(name=key, host_path=k8s.core.v1.HostPathVolumeSourceArgs(
                path=path, type="DirectoryOrCreate" if key in created_on_host else None))
            for key, path in host_paths.items()
        ]
        volumes.append(k8s.core.v1.VolumeArgs(
            name="hugepages", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(medium="HugePages-2Mi")))
        mounts = [k8s.core.v1.VolumeMountArgs(name=key, mount_path=path) for key, path in host_paths.items()]
        mounts.append(k8s.core.v1.VolumeMountArgs(name="hugepages", mount_path="/hugepages-2Mi"))
        hugepages = f"{asapd_hugepages_bytes(machine) // 2**20}Mi"
        limits = {"hugepages-2Mi": hugepages, "memory": "1Gi"}
        health = k8s.core.v1.HTTPGetActionArgs(path="/healthz", port=ASAPD_HEALTH_PORT)
        # Run the setup as the installer does, then bounce any GPU NIC whose IPv6 address failed duplicate
        # detection (restarting the container retries the setup).
        script = (
            "/usr/local/bin/run_asapd_lite.sh; sleep 15; "
            "for nic in $(ip -o link show | awk -F': ' '/gpu/ {print $2}'); do "
            "if ip -6 addr show dev \"$nic\" | grep -q dadfailed; then "
            "ip link set dev \"$nic\" down; ip link set dev \"$nic\" up; exit 1; fi; done; wait"
        )
        on_machine = k8s.core.v1.AffinityArgs(node_affinity=k8s.core.v1.NodeAffinityArgs(
            required_during_scheduling_ignored_during_execution=k8s.core.v1.NodeSelectorArgs(node_selector_terms=[
                k8s.core.v1.NodeSelectorTermArgs(match_expressions=[
                    k8s.core.v1.NodeSelectorRequirementArgs(
                        key="node.kubernetes.io/instance-type", operator="In",
                        values=list(machine.asapd_instance_types)),
                    k8s.core.v1.NodeSelectorRequirementArgs(
                        key="cloud.google.com/gke-os-distribution", operator="In", values=["cos"]),
                ])])))
        return k8s.apps.v1.DaemonSet(
            f"{name}-asapd-lite",
            metadata=k8s.meta.v1.ObjectMetaArgs(name="asapd-lite", namespace="kube-system", labels=labels),
            spec=k8s.apps.v1.DaemonSetSpecArgs(
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                update_strategy=k8s.apps.v1.DaemonSetUpdateStrategyArgs(
                    type="RollingUpdate",
                    rolling_update=k8s.apps.v1.RollingUpdateDaemonSetArgs(max_unavailable="1%")),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels),
                    spec=k8s.core.v1.PodSpecArgs(
                        priority_class_name="system-node-critical",
                        automount_service_account_token=False,  # it never calls the Kubernetes API
                        host_network=True,
                        host_pid=True,
                        affinity=on_machine,
                        tolerations=[k8s.core.v1.TolerationArgs(operator="Exists")],
                        containers=[k8s.core.v1.ContainerArgs(
                            name="asapd-lite",
                            image=image,
                            command=["/bin/bash", "-c"],
                            args=[script],
                            env=[k8s.core.v1.EnvVarArgs(name="LD_LIBRARY_PATH", value="/asapd-lite/controller")],
                            security_context=k8s.core.v1.SecurityContextArgs(privileged=True),
                            resources=k8s.core.v1.ResourceRequirementsArgs(requests=limits, limits=limits),
                            liveness_probe=k8s.core.v1.ProbeArgs(http_get=health, initial_delay_seconds=60),
                            readiness_probe=k8s.core.v1.ProbeArgs(http_get=health),
                            volume_mounts=mounts,
                        )],
                        volumes=volumes,
                    ),
                ),
            ),
            opts=self.child(),
        )

"""NetworkPolicies of the model namespace (GKE Dataplane V2 enforces them): ingress is denied by default, then
each flow serving needs is allowed, and the pods this program creates get egress only to what they call.

The flows are data (`flows()`), built from the label-and-port contract (components/facts/contract.py) and the
scrape targets of components/observe/monitoring.py, so a port or label changed there changes the policy with it.
docs/security.md shows the matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional, Union
from urllib.parse import urlsplit

import pulumi
import pulumi_kubernetes as k8s

from ..cloud.base import Args, Component, StrInput
from ..config import StackConfig
from ..facts import catalog, contract
from ..observe.monitoring import router_target, serving_targets
from ..plan import engines

PortSpec = Union[int, str]


@dataclass(frozen=True)
class Port:
    port: PortSpec
    protocol: str = "TCP"
    end_port: Optional[int] = None
    """Last port of a range (NetworkPolicy `endPort`)."""


@dataclass(frozen=True)
class Peer:
    """Pods of the model namespace (`labels`, `exists` keys), pods of another namespace (`namespace`), or
    address ranges (`cidrs` minus `excluded`). `owned`: pods this program creates, which get an egress policy."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()
    exists: tuple[str, ...] = ()
    namespace: Optional[str] = None
    cidrs: tuple[StrInput, ...] = ()
    excluded: tuple[str, ...] = ()
    owned: bool = False

    def pod_selector(self) -> k8s.meta.v1.LabelSelectorArgs:
        return k8s.meta.v1.LabelSelectorArgs(
            match_labels=dict(self.labels) or None,
            match_expressions=[k8s.meta.v1.LabelSelectorRequirementArgs(key=k, operator="Exists")
                               for k in self.exists] or None)

    def peers(self) -> list[k8s.networking.v1.NetworkPolicyPeerArgs]:
        if self.cidrs:
            return [k8s.networking.v1.NetworkPolicyPeerArgs(ip_block=k8s.networking.v1.IPBlockArgs(
                cidr=cidr, except_=list(self.excluded) or None)) for cidr in self.cidrs]
        namespace = None
        if self.namespace:
            namespace = k8s.meta.v1.LabelSelectorArgs(
                match_labels={"kubernetes.io/metadata.name": self.namespace})
        return [k8s.networking.v1.NetworkPolicyPeerArgs(pod_selector=self.pod_selector(),
                                                        namespace_selector=namespace)]


@dataclass(frozen=True)
class Flow:
    source: Peer
    target: Peer
    ports: tuple[Port, ...]
    """Empty: every port (peers of one serving set only)."""
    why: str


# --------------------------------------------------------------------------- peers
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")
HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")
"""Google Cloud load balancer health checks (https://cloud.google.com/load-balancing/docs/health-check-concepts)."""
METADATA_SERVER = "169.254.169.254/32"
GKE_METADATA_SERVER = "169.254.169.252/32"
GKE_METADATA_SERVER_PORT = 988
"""Workload Identity: pods reach the GKE metadata server at 169.254.169.254:80, older node versions at
169.254.169.252:988 (https://cloud.google.com/kubernetes-engine/docs/how-to/workload-identity)."""
DNS_PORT = 53

SERVING = Peer("serving", labels=tuple(contract.SERVING_LABELS.items()), owned=True)
ROUTER = Peer("router", exists=(contract.ROUTER_MODE_LABEL,), owned=True)
LOAD_CLIENTS = Peer("load-clients", labels=tuple(contract.LOAD_CLIENT_LABELS.items()), owned=True)
BENCHMARK = Peer("benchmark", labels=tuple({**contract.LOAD_CLIENT_LABELS, **contract.BENCHMARK_NAME_LABEL}.items()),
                 owned=True)
GMP_COLLECTORS = Peer("managed-prometheus", labels=(("app.kubernetes.io/name", "collector"),), namespace="gmp-system")
"""Managed Prometheus collectors (DaemonSet `collector` in `gmp-system`, per its own PodMonitoring,
https://cloud.google.com/stackdriver/docs/managed-prometheus/exporters/prometheus)."""
KUBE_DNS = Peer("kube-dns", labels=(("k8s-app", "kube-dns"),), namespace="kube-system")
"""kube-dns pods (https://cloud.google.com/kubernetes-engine/docs/how-to/network-policy)."""
METADATA = Peer("metadata-server", cidrs=(METADATA_SERVER,))
GKE_METADATA = Peer("gke-metadata-server", cidrs=(GKE_METADATA_SERVER,))
PUBLIC_HTTPS = Peer("public-https", cidrs=("0.0.0.0/0",), excluded=PRIVATE_RANGES)
"""Public addresses: Cloud Storage's (reached through Private Google Access from private nodes). A NetworkPolicy
cannot name hosts."""
HEALTH_CHECKS = Peer("lb-health-checks", cidrs=HEALTH_CHECK_RANGES)


def model_servers(cfg: StackConfig) -> Peer:
    """Every model-server pod of the track (leaders and workers, prefill and decode)."""
    engine = "vllm" if cfg.track == "gpu" else engines.tpu_engine_type(cfg)
    return Peer(f"{engine}-pods", labels=(("llm-d.ai/guide", catalog.GUIDE_NAME), ("llm-d.ai/engine-type", engine)),
                owned=True)


def _ports(numbers: Sequence[PortSpec]) -> tuple[Port, ...]:
    return tuple(Port(p) for p in dict.fromkeys(numbers))


def client_port(cfg: StackConfig) -> int:
    parts = urlsplit(cfg.client_url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def flows(cfg: StackConfig, api_server: Sequence[StrInput]) -> list[Flow]:
    """Every allowed flow of the namespace's pods, in and out. `api_server`: the control plane's addresses."""
    servers = model_servers(cfg)
    metrics_ports = [p for t in serving_targets(cfg.track, engines.engines_per_pod(cfg))
                     for p in (t.port, *t.more_ports)]
    # Every engine is a router endpoint on its own port (GPU: one per data-parallel rank of a pod).
    endpoints = (contract.engine_ports(contract.MODEL_SERVER_PORT, engines.engines_per_pod(cfg))
                 if cfg.track == "gpu" else [contract.MODEL_SERVER_PORT])
    found: list[Flow] = [
        Flow(ROUTER, SERVING, _ports([*endpoints, *metrics_ports]),
             "the router's proxy sends requests, the EPP tokenizes prompts on the engines' render endpoint (through "
             "the render Service) and scrapes engine metrics"),
        Flow(servers, servers, (),
             "peers of one serving set: workers to their leader (DP RPC; on TPU the --nnodes master, rendezvous, "
             "slice builders and Raiden controller), prefill and decode to each other (NIXL side channels); the "
             "collective bootstraps pick free ports at start, so no port list"),
        Flow(LOAD_CLIENTS, ROUTER, _ports([contract.ROUTER_PROXY_PORT]),
             "benchmark and calibration Jobs load the router's proxy"),
    ]
    if cfg.monitoring.enabled:
        found += [
            Flow(GMP_COLLECTORS, SERVING, _ports(metrics_ports), "Managed Prometheus scrapes engine metrics"),
            Flow(GMP_COLLECTORS, ROUTER, _ports([router_target().port]), "Managed Prometheus scrapes the EPP"),
        ]
    if cfg.router.mode == "gateway":
        proxies = Peer("gateway-proxies", cidrs=(cfg.network.proxyOnlyCidr,))
        gateway = Peer("gateway-address", cidrs=(cfg.network.nodesCidr,))
        found += [
            Flow(proxies, SERVING, _ports(endpoints), "the Gateway's proxies send requests"),
            Flow(proxies, ROUTER, _ports([contract.EPP_EXT_PROC_PORT]), "the Gateway's proxies call the EPP"),
            Flow(HEALTH_CHECKS, SERVING, _ports(endpoints), "load balancer health checks"),
            Flow(HEALTH_CHECKS, ROUTER, _ports([contract.EPP_EXT_PROC_PORT, contract.EPP_GRPC_HEALTH_PORT]),
                 "load balancer health checks"),
            Flow(LOAD_CLIENTS, gateway, _ports([client_port(cfg)]), "load Jobs send to the Gateway's address"),
        ]
    dns = (Port(DNS_PORT, "UDP"), Port(DNS_PORT, "TCP"))
    found += [Flow(peer, KUBE_DNS, dns, "name lookups") for peer in (servers, ROUTER, LOAD_CLIENTS)]
    found += [
        Flow(ROUTER, Peer("api-server", cidrs=tuple(api_server)), _ports([443]),
             "the EPP watches pods and its InferencePool"),
        Flow(BENCHMARK, METADATA, _ports([80]), "Workload Identity tokens for the report upload"),
        Flow(BENCHMARK, GKE_METADATA, _ports([GKE_METADATA_SERVER_PORT]), "Workload Identity tokens (older nodes)"),
        Flow(BENCHMARK, PUBLIC_HTTPS, _ports([443]), "report upload to Cloud Storage"),
    ]
    # No engine pod reaches the internet: the TPU engine runs the image the stack built
    # (components/serving/engineimage.py).
    return found


# --------------------------------------------------------------------------- objects
def _rule_ports(flow: Flow) -> Optional[list[k8s.networking.v1.NetworkPolicyPortArgs]]:
    return [k8s.networking.v1.NetworkPolicyPortArgs(port=p.port, protocol=p.protocol, end_port=p.end_port)
            for p in flow.ports] or None


def policy_specs(all_flows: Sequence[Flow]) -> dict[str, k8s.networking.v1.NetworkPolicySpecArgs]:
    """One policy per pod class this program owns: its ingress (flows into it) and egress (flows out of it)."""
    owned: dict[str, Peer] = {}
    for flow in all_flows:
        for peer in (flow.source, flow.target):
            if peer.owned:
                owned.setdefault(peer.name, peer)
    specs = {}
    for name, peer in owned.items():
        ingress = [k8s.networking.v1.NetworkPolicyIngressRuleArgs(from_=f.source.peers(), ports=_rule_ports(f))
                   for f in all_flows if f.target == peer]
        egress = [k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=f.target.peers(), ports=_rule_ports(f))
                  for f in all_flows if f.source == peer]
        specs[name] = k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=peer.pod_selector(),
            policy_types=[kind for kind, rules in (("Ingress", ingress), ("Egress", egress)) if rules],
            ingress=ingress or None,
            egress=egress or None,
        )
    return specs


DEFAULT_DENY = f"{catalog.GUIDE_NAME}-default-deny-ingress"


class NetworkPoliciesArgs(Args):
    namespace: StrInput
    config: StackConfig
    api_server: tuple[StrInput, ...]
    """The control plane's endpoint addresses (/32 each): where the EPP's API calls go after service translation."""


class NetworkPolicies(Component):
    """Default-deny ingress for every pod of the namespace, then one allow policy per pod class."""

    def __init__(self, name: str, args: NetworkPoliciesArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("netpol", "NetworkPolicies", name, opts)
        self.default_deny = k8s.networking.v1.NetworkPolicy(
            f"{name}-default-deny",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=DEFAULT_DENY, namespace=args.namespace),
            spec=k8s.networking.v1.NetworkPolicySpecArgs(pod_selector=k8s.meta.v1.LabelSelectorArgs(),
                                                         policy_types=["Ingress"]),
            opts=self.child(),
        )
        self.allow = {
            peer: k8s.networking.v1.NetworkPolicy(
                f"{name}-{peer}",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{catalog.GUIDE_NAME}-{peer}", namespace=args.namespace),
                spec=spec,
                opts=self.child(),
            )
            for peer, spec in policy_specs(flows(args.config, args.api_server)).items()
        }
        self.finish(default_deny=DEFAULT_DENY, allow=sorted(self.allow))


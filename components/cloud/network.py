"""VPC for the cluster: node subnet with pod/service ranges, proxy-only subnet, a staging subnet, and Cloud NAT.

Two NAT sections on one router: the cluster's nodes share automatically allocated addresses (image and package
pulls); the staging subnet, which holds only the staging pool, leaves through `staging_addresses` static
addresses the program owns, one per staging node (catalog.NAT_MIN_PORTS_PER_VM_ONE_ADDRESS), so the Hugging Face
Hub's per-address limit applies per pod, not to the whole copy. A NAT section naming all subnets excludes any
other (catalog.NAT_ONE_SECTION_RULE), so each lists its subnet.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_gcp as gcp

from ..facts import catalog
from .base import Args, Component

PODS_RANGE = "pods"
SERVICES_RANGE = "services"
STAGING_PODS_RANGE = "staging-pods"


class NetworkArgs(Args):
    name: str
    """Prefix of the GCP resource names."""
    region: str
    nodes_cidr: str
    """Primary range of the node subnet."""
    pods_cidr: str
    """Secondary range for pods (VPC-native cluster)."""
    services_cidr: str
    """Secondary range for Services."""
    proxy_only_cidr: str
    """Proxy-only subnet that regional GKE Gateways (gke-l7-rilb) need (https://llm-d.ai/docs/resources/gateway/gke)."""
    staging_nodes_cidr: str
    """Primary range of the staging subnet (the staging pool's nodes only)."""
    staging_pods_cidr: str
    """Its secondary range for the staging pool's pods."""
    staging_addresses: int
    """Static external addresses of the staging NAT: one per staging pod (staging.staging_addresses)."""


class Network(Component):
    """Private nodes have no external IPs, so Cloud NAT gives them egress (image pulls)."""

    def __init__(self, name: str, args: NetworkArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("network", "Network", name, opts)
        self.vpc = gcp.compute.Network(
            f"{name}-vpc",
            name=args.name,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            opts=self.child(),
        )
        self.subnet = self._subnet(name, "nodes", args, args.nodes_cidr,
                                   {PODS_RANGE: args.pods_cidr, SERVICES_RANGE: args.services_cidr})
        self.proxy_only_subnet = gcp.compute.Subnetwork(
            f"{name}-proxy-only",
            name=f"{args.name}-proxy-only",
            network=self.vpc.id,
            region=args.region,
            ip_cidr_range=args.proxy_only_cidr,
            purpose="REGIONAL_MANAGED_PROXY",
            role="ACTIVE",
            opts=self.child(),
        )
        self.router = gcp.compute.Router(
            f"{name}-router", name=f"{args.name}-router", network=self.vpc.id, region=args.region, opts=self.child()
        )
        self.nat = self._nat(name, "nat", args, self.subnet, nat_ip_allocate_option="AUTO_ONLY")
        self.staging_subnet = self._subnet(name, "staging", args, args.staging_nodes_cidr,
                                           {STAGING_PODS_RANGE: args.staging_pods_cidr})
        # Owned by the stack: `pulumi destroy` releases them after the NAT section that uses them.
        self.staging_addresses = [
            gcp.compute.Address(f"{name}-staging-ip-{i}", name=f"{args.name}-staging-{i}", region=args.region,
                                address_type="EXTERNAL", opts=self.child())
            for i in range(args.staging_addresses)
        ]
        self.staging_nat = self._nat(
            name, "staging-nat", args, self.staging_subnet,
            nat_ip_allocate_option="MANUAL_ONLY", nat_ips=[address.self_link for address in self.staging_addresses],
            # Static allocation: each VM keeps the ports it reserved, on one address (catalog).
            enable_dynamic_port_allocation=False, min_ports_per_vm=catalog.NAT_MIN_PORTS_PER_VM_ONE_ADDRESS)
        self.finish(network=self.vpc.self_link, subnetwork=self.subnet.self_link,
                    staging_subnetwork=self.staging_subnet.self_link,
                    staging_addresses=[a.address for a in self.staging_addresses])

    def _subnet(self, name: str, suffix: str, args: NetworkArgs, cidr: str,
                secondary: dict[str, str]) -> gcp.compute.Subnetwork:
        return gcp.compute.Subnetwork(
            f"{name}-{suffix}",
            name=f"{args.name}-{suffix}",
            network=self.vpc.id,
            region=args.region,
            ip_cidr_range=cidr,
            private_ip_google_access=True,
            secondary_ip_ranges=[gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=r, ip_cidr_range=c)
                                 for r, c in secondary.items()],
            opts=self.child(),
        )

    def _nat(self, name: str, suffix: str, args: NetworkArgs, subnet: gcp.compute.Subnetwork,
             **allocation) -> gcp.compute.RouterNat:
        """A NAT section for all ranges of one subnet (catalog.NAT_ONE_SECTION_RULE: none may name them all)."""
        return gcp.compute.RouterNat(
            f"{name}-{suffix}",
            name=f"{args.name}-{suffix}",
            router=self.router.name,
            region=args.region,
            source_subnetwork_ip_ranges_to_nat="LIST_OF_SUBNETWORKS",
            subnetworks=[gcp.compute.RouterNatSubnetworkArgs(name=subnet.self_link,
                                                             source_ip_ranges_to_nats=["ALL_IP_RANGES"])],
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            opts=self.child(),
            **allocation,
        )

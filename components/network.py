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

from . import catalog
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
        self.subnet = gcp.compute.Subnetwork(
            f"{name}-nodes",
            name=f"{args.name}-nodes",
            network=self.vpc.id,
            region=args.region,
            ip_cidr_range=args.nodes_cidr,
            private_ip_google_access=True,
            secondary_ip_ranges=[
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=PODS_RANGE, ip_cidr_range=args.pods_cidr),
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=SERVICES_RANGE, ip_cidr_range=args.services_cidr),
            ],
            opts=self.child(),
        )
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
        self.nat = gcp.compute.RouterNat(
            f"{name}-nat",
            name=f"{args.name}-nat",
            router=self.router.name,
            region=args.region,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="LIST_OF_SUBNETWORKS",
            subnetworks=[gcp.compute.RouterNatSubnetworkArgs(name=self.subnet.self_link,
                                                             source_ip_ranges_to_nats=["ALL_IP_RANGES"])],
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            opts=self.child(),
        )
        self.staging_subnet = gcp.compute.Subnetwork(
            f"{name}-staging",
            name=f"{args.name}-staging",
            network=self.vpc.id,
            region=args.region,
            ip_cidr_range=args.staging_nodes_cidr,
            private_ip_google_access=True,
            secondary_ip_ranges=[gcp.compute.SubnetworkSecondaryIpRangeArgs(
                range_name=STAGING_PODS_RANGE, ip_cidr_range=args.staging_pods_cidr)],
            opts=self.child(),
        )
        # Owned by the stack: `pulumi destroy` releases them after the NAT section that uses them.
        self.staging_addresses = [
            gcp.compute.Address(f"{name}-staging-ip-{i}", name=f"{args.name}-staging-{i}", region=args.region,
                                address_type="EXTERNAL", opts=self.child())
            for i in range(args.staging_addresses)
        ]
        self.staging_nat = gcp.compute.RouterNat(
            f"{name}-staging-nat",
            name=f"{args.name}-staging-nat",
            router=self.router.name,
            region=args.region,
            nat_ip_allocate_option="MANUAL_ONLY",
            nat_ips=[address.self_link for address in self.staging_addresses],
            source_subnetwork_ip_ranges_to_nat="LIST_OF_SUBNETWORKS",
            subnetworks=[gcp.compute.RouterNatSubnetworkArgs(name=self.staging_subnet.self_link,
                                                             source_ip_ranges_to_nats=["ALL_IP_RANGES"])],
            # Static allocation: each VM keeps the ports it reserved, on one address (catalog).
            enable_dynamic_port_allocation=False,
            min_ports_per_vm=catalog.NAT_MIN_PORTS_PER_VM_ONE_ADDRESS,
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            opts=self.child(),
        )
        self.finish(network=self.vpc.self_link, subnetwork=self.subnet.self_link,
                    staging_subnetwork=self.staging_subnet.self_link,
                    staging_addresses=[a.address for a in self.staging_addresses])

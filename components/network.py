"""VPC for the cluster: node subnet with pod/service ranges, proxy-only subnet, Cloud NAT."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_gcp as gcp

from .base import Args, Component

PODS_RANGE = "pods"
SERVICES_RANGE = "services"


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
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            opts=self.child(),
        )
        self.finish(network=self.vpc.self_link, subnetwork=self.subnet.self_link)

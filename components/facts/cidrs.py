"""What counts as an address range open to the internet, shared by config validation and the policy pack."""

from __future__ import annotations

import ipaddress

WIDEST_PUBLIC_PREFIX = 24
"""A public range wider than a /24 (256 addresses, an office's block) is treated as open to the internet: the
two halves 0.0.0.0/1 + 128.0.0.0/1 are the internet as much as 0.0.0.0/0 is."""

GOOGLE_SOURCE_RANGES = ("35.191.0.0/16", "130.211.0.0/22", "35.235.240.0/20")
"""Google's load-balancer health-check ranges (https://cloud.google.com/load-balancing/docs/health-check-concepts)
and Identity-Aware Proxy's TCP forwarding range (https://cloud.google.com/iap/docs/using-tcp-forwarding):
public, wider than a /24, and only Google's."""


def reaches_internet(cidr: str) -> bool:
    """True if `cidr` covers public addresses wider than a /24 and is not one of Google's own source ranges.
    Private, shared (100.64/10), link-local and loopback space never counts. Unparseable input counts."""
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return True
    if str(net) in GOOGLE_SOURCE_RANGES:
        return False
    widest = WIDEST_PUBLIC_PREFIX if net.version == 4 else 48
    if net.prefixlen >= widest:
        return False
    non_public = net.is_private or net.is_link_local or net.is_loopback or net.is_reserved or net.is_multicast
    if net.version == 4:
        non_public = non_public or net.subnet_of(ipaddress.IPv4Network("100.64.0.0/10"))
    return not non_public


SUBNET_RESERVED_ADDRESSES = 4
"""Addresses of every IPv4 subnet's primary range no VM gets: network, gateway, second-to-last and broadcast
(https://cloud.google.com/vpc/docs/subnets#unusable-ip-addresses-in-every-subnet)."""
MAX_PODS_PER_NODE = 110
POD_RANGE_PREFIX_PER_NODE = 24
POD_RANGE_SOURCE = "https://cloud.google.com/kubernetes-engine/docs/how-to/flexible-pod-cidr"
"""GKE Standard's default of 110 pods per node takes a /24 of the pod range per node (POD_RANGE_SOURCE); the node
pools set no other maximum."""


def prefix_for(addresses: int) -> int:
    """The longest IPv4 prefix whose range holds `addresses` addresses."""
    return 32 - max(0, (addresses - 1).bit_length())

"""List prices for the cost estimate: one table, each figure with its source and the date it was read.

Compiled 2026-11-29/30 from stored copies of Google's pricing pages and secondary sources. No public list
price was found for A4X Max, A4X or Ironwood (tpu7x): those rows are None and the estimate names them as
unpriced until `kimi-k3-1:cost.*` gives one (negotiated or current prices). The CPU machine types carry
Google's published on-demand prices for Iowa (us-central1). Treat every figure as an estimate and check the
Google Cloud pricing pages for your region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

HOURS_PER_MONTH = 730
TABLE_DATE = "2026-11-29"
TABLE_REGION = "us-central1"
"""The region every price of the table is for; a stack elsewhere is told so beside its estimate."""
NOT_PRICED = ("the staging pool while it copies (it scales to zero)", "Cloud NAT data processing and internet egress",
              "Cloud Monitoring and Logging ingestion")
"""What the estimate never includes: usage-billed items whose amount the plan cannot know."""
ENGINE_IMAGE_NOT_PRICED = ("the TPU engine image's Cloud Build minutes (once per lock) and its Artifact Registry "
                           "storage",)
"""Also never included on a stack that builds the TPU engine image (components/serving/engineimage.py)."""


@dataclass(frozen=True)
class Price:
    usd: Optional[float]
    unit: str
    source: str


GPU_NODE_HOUR = Price(None, "node-hour", "not published: A4X Max / A4X are reservation-only "
                      "(https://docs.cloud.google.com/ai-hypercomputer/docs/create/create-a4xmax-instances-in-bulk)")
TPU_CHIP_HOUR = Price(None, "chip-hour", "not published: Ironwood access through the account team "
                      "(https://docs.cloud.google.com/tpu/docs/regions-zones)")
VM_PRICING = "https://cloud.google.com/compute/vm-instance-pricing"
VM_PRICES_READ = "2026-11-30"
CPU_MACHINE_HOUR: dict[str, float] = {
    # On-demand ("Default") price per hour in Iowa (us-central1), from the N2 and C3 standard tables of
    # VM_PRICING, read VM_PRICES_READ from a stored copy of the page. Other regions cost more or less.
    "n2-standard-2": 0.097118,
    "n2-standard-4": 0.194236,
    "n2-standard-8": 0.388472,
    "n2-standard-16": 0.776944,
    "n2-standard-32": 1.553888,
    "c3-standard-4": 0.201608,
    "c3-standard-8": 0.403216,
    "c3-standard-22": 1.108844,
    "c3-standard-44": 2.217688,
    "c3-standard-88": 4.435376,
}
CPU_PRICE_SOURCE = f"{VM_PRICING} (us-central1 on-demand, read {VM_PRICES_READ})"


def cpu_node_hour(machine_type: str) -> Price:
    """Published on-demand price of a CPU machine type; None for a type the table does not list."""
    return Price(CPU_MACHINE_HOUR.get(machine_type), "node-hour",
                 CPU_PRICE_SOURCE if machine_type in CPU_MACHINE_HOUR else f"{machine_type} is not in the table")
GKE_CLUSTER_HOUR = Price(0.10, "cluster-hour", "cloud.google.com/kubernetes-engine/pricing (all regions)")
NAT_GATEWAY_VM_HOUR = Price(0.0014, "VM-hour", "cloud.google.com/nat/pricing: $0.0014 per VM, $0.044 flat above 32 VMs")
NAT_GATEWAY_MAX_HOUR = 0.044
NAT_ADDRESS_HOUR = Price(0.005, "address-hour", "cloud.google.com/nat/pricing: $0.005 per hour for a static or an "
                                                "ephemeral external IP address used by a NAT gateway")
HYPERDISK_ML_CAPACITY = Price(0.084, "GiB-month", "secondary source quoting list prices of 2026-08 (unverified)")
HYPERDISK_ML_THROUGHPUT = Price(0.12, "MiB/s-month",
                                "derived from a secondary source's 100 GiB at 1,700 MiB/s = ~$212/month (unverified)")
BOOT_DISK = Price(0.08, "GB-month", "Hyperdisk Balanced storage-pool capacity, Iowa, from a secondary source; used "
                                   "for every boot disk as an estimate (unverified)")
GCS_STANDARD_REGIONAL = Price(0.020, "GB-month", "cloud.google.com/storage/pricing, us-central1 Standard")


def hyperdisk_ml_monthly(volume_gib: int, throughput_mibps: int) -> tuple[float, float]:
    """(capacity, throughput) cost per month of one Hyperdisk ML volume."""
    return volume_gib * HYPERDISK_ML_CAPACITY.usd, throughput_mibps * HYPERDISK_ML_THROUGHPUT.usd

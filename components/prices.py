"""List prices for the cost estimate: one table, each figure with its source and the date it was read.

Compiled 2026-11-29 from stored copies of Google's pricing pages and secondary sources. No public list
price was found for A4X Max, A4X, Ironwood (tpu7x) or the CPU machine types used here: those rows are
None and the estimate asks for `kimi-k3-1:cost.*` (negotiated or current prices). Treat every figure as
an estimate and check the Google Cloud pricing pages for your region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

HOURS_PER_MONTH = 730
TABLE_DATE = "2026-11-29"


@dataclass(frozen=True)
class Price:
    usd: Optional[float]
    unit: str
    source: str


GPU_NODE_HOUR = Price(None, "node-hour", "not published: A4X Max / A4X are reservation-only "
                      "(https://docs.cloud.google.com/ai-hypercomputer/docs/create/create-a4xmax-instances-in-bulk)")
TPU_CHIP_HOUR = Price(None, "chip-hour", "not published: Ironwood access through the account team "
                      "(https://docs.cloud.google.com/tpu/docs/regions-zones)")
CPU_NODE_HOUR = Price(None, "node-hour", "not found for n2-standard-8 / c3-standard-44 in the stored pricing pages")
GKE_CLUSTER_HOUR = Price(0.10, "cluster-hour", "cloud.google.com/kubernetes-engine/pricing (all regions)")
NAT_GATEWAY_VM_HOUR = Price(0.0014, "VM-hour", "cloud.google.com/nat/pricing: $0.0014 per VM, $0.044 flat above 32 VMs")
NAT_GATEWAY_MAX_HOUR = 0.044
HYPERDISK_ML_CAPACITY = Price(0.084, "GiB-month", "secondary source quoting list prices of 2026-08 (unverified)")
HYPERDISK_ML_THROUGHPUT = Price(0.12, "MiB/s-month",
                                "derived from a secondary source's 100 GiB at 1,700 MiB/s = ~$212/month (unverified)")
BOOT_DISK = Price(0.08, "GB-month", "Hyperdisk Balanced storage-pool capacity, Iowa, from a secondary source; used "
                                   "for every boot disk as an estimate (unverified)")
GCS_STANDARD_REGIONAL = Price(0.020, "GB-month", "cloud.google.com/storage/pricing, us-central1 Standard")


def hyperdisk_ml_monthly(volume_gib: int, throughput_mibps: int) -> tuple[float, float]:
    """(capacity, throughput) cost per month of one Hyperdisk ML volume."""
    return volume_gib * HYPERDISK_ML_CAPACITY.usd, throughput_mibps * HYPERDISK_ML_THROUGHPUT.usd

"""List prices used for cost figures in the plan summary: one table, with its date and source.

No official Google price page was reachable when this table was compiled (2026-11-29); the Hyperdisk ML
figures come from a secondary source quoting vendor list prices of August 2026 and are marked as such.
Treat every figure as an estimate and check the Google Cloud pricing pages for your region.
"""

from __future__ import annotations

from dataclasses import dataclass

HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class Price:
    usd: float
    unit: str
    source: str


HYPERDISK_ML_CAPACITY = Price(0.084, "GiB-month", "secondary source quoting list prices of 2026-08 (unverified)")
HYPERDISK_ML_THROUGHPUT = Price(0.12, "MiB/s-month",
                                "derived from a secondary source's 100 GiB at 1,700 MiB/s = ~$212/month (unverified)")
GCS_STANDARD_REGIONAL = Price(0.020, "GB-month", "cloud.google.com/storage/pricing, us-central1 Standard")


def hyperdisk_ml_monthly(volume_gib: int, throughput_mibps: int) -> tuple[float, float]:
    """(capacity, throughput) cost per month of one Hyperdisk ML volume."""
    return volume_gib * HYPERDISK_ML_CAPACITY.usd, throughput_mibps * HYPERDISK_ML_THROUGHPUT.usd

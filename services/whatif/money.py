"""The monthly benefit in money, like the paper's estimate (spec: "≈ $459,715 per month"; its
reconstruction: extra GPUs allocated × hourly price × the hours of a month).

Here the GPU-hours are the spot GPU-hours of the two runs over the same log: GFS as it ran (what
happened) against another policy simulated on the same trace. Their difference per pool, priced
at the operator's USD per GPU-hour for that pool, is scaled from the log's span to a 30-day month.
A positive benefit means GFS kept more spot GPU-hours busy than the other policy would have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MONTH_S = 30 * 86400.0


@dataclass(frozen=True, slots=True)
class MonthlyBenefit:
    usd_per_month: float
    by_pool: Mapping[str, float]  # USD per month, per priced pool
    gpu_hours_per_day: Mapping[str, float]  # GFS minus the other policy, per pool
    unpriced: tuple[str, ...]  # pools with a difference but no price (left out of the sum)

    def to_json(self) -> dict[str, object]:
        return {
            "usd_per_month": self.usd_per_month,
            "usd_per_month_by_pool": dict(sorted(self.by_pool.items())),
            "spot_gpu_hours_per_day_difference": dict(sorted(self.gpu_hours_per_day.items())),
            "unpriced_pools": list(self.unpriced),
        }


def monthly_benefit(
    gfs_gpu_hours: Mapping[str, float],
    other_gpu_hours: Mapping[str, float],
    prices: Mapping[str, float],
    span_s: float,
) -> MonthlyBenefit:
    """(GFS − other) spot GPU-hours per pool over `span_s` seconds of log, in USD per 30-day month."""
    if not span_s > 0:
        raise ValueError(f"the log spans {span_s} s: nothing to scale to a month")
    per_day: dict[str, float] = {}
    by_pool: dict[str, float] = {}
    unpriced: list[str] = []
    for pool in sorted(set(gfs_gpu_hours) | set(other_gpu_hours)):
        diff = gfs_gpu_hours.get(pool, 0.0) - other_gpu_hours.get(pool, 0.0)
        per_day[pool] = diff * 86400.0 / span_s
        if pool in prices:
            by_pool[pool] = diff * prices[pool] * MONTH_S / span_s
        elif diff:
            unpriced.append(pool)
    return MonthlyBenefit(sum(by_pool.values()), by_pool, per_day, tuple(unpriced))


def parse_prices(items: list[str]) -> dict[str, float]:
    """`POOL=USD_PER_GPU_HOUR` items (a pool is its GPU model, as the live service names it)."""
    prices: dict[str, float] = {}
    for item in items:
        pool, sep, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = -1.0
        if not sep or not pool or not price >= 0:
            raise ValueError(f"--price {item!r}: expected POOL=USD_PER_GPU_HOUR, e.g. A100=2.5")
        prices[pool] = price
    return prices

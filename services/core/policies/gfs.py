"""GFS (spec 4-5): forecast quota with eta feedback, best fit with class affinity and eviction
score, largest-first queues with the `failed` threshold, two-pointer victims with node cost."""

from __future__ import annotations

from services.core.placement import BestFit
from services.core.policies.protocols import SchedulingPolicy
from services.core.queues import LargestFirst, LargestFirstFewWorkers
from services.core.quota import ForecastQuota, QuotaSettings
from services.core.victims import GfsVictims


def build_gfs(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    return SchedulingPolicy(
        name="gfs",
        hp_order=LargestFirst(),
        spot_order=LargestFirstFewWorkers(),
        placement=BestFit(),
        victims=GfsVictims(),
        quota=ForecastQuota(settings=settings or QuotaSettings()),
    )

"""GFS (spec 4-5): forecast quota with eta feedback, best fit with class affinity and eviction
score, largest-first queues with the `failed` threshold, two-pointer victims with node cost, and
(issue 21) a head-of-queue reservation for an HP task that has waited `RESERVE_AFTER_S`."""

from __future__ import annotations

from gfs.services.core.placement import BestFit
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.queues import LargestFirst, LargestFirstFewWorkers
from gfs.services.core.quota import ForecastQuota, QuotaSettings
from gfs.services.core.victims_gfs import GfsVictims

# An hour: longer than a normal backfill gap (a finishing HP task frees its GPUs within minutes of
# a pass), short next to the days a starved wide gang waited (docs/quality-findings.md).
RESERVE_AFTER_S = 3600.0
SPOT_CLAIMS = "hard"
# While a reservation is lent, spot goes to its nodes first and keeps the other nodes' idle GPUs
# for arriving HP (issue 35 dev split: fewer evictions in 11 of 15 regimes, queueing unchanged;
# docs/evaluation.md, section 3c).
LEND_FIRST = True


def build_gfs(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    return SchedulingPolicy(
        name="gfs",
        hp_order=LargestFirst(),
        spot_order=LargestFirstFewWorkers(),
        placement=BestFit(),
        victims=GfsVictims(),
        quota=ForecastQuota(settings=settings or QuotaSettings()),
        reserve_after_s=RESERVE_AFTER_S,
        spot_claims=SPOT_CLAIMS,
        lend_first=LEND_FIRST,
    )

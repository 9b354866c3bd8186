"""FGD (ATC'23) as a baseline (spec 6.2, 8 #15): fragmentation-gradient-descent placement for HP
(normal and preemptive) and spot; FIFO queues with head-of-line blocking; reactive quota, or GFS's
forecast quota in the `+gfs-quota` variant."""

from __future__ import annotations

from gfs.services.core.placement_fgd import FgdPlacement
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.queues import Fifo
from gfs.services.core.quota import QuotaSettings, ReactiveQuota
from gfs.services.core.victims_fgd import FgdVictims


def build_fgd(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    return SchedulingPolicy(
        name="fgd",
        hp_order=Fifo(),
        spot_order=Fifo(),
        placement=FgdPlacement(),
        victims=FgdVictims(),
        quota=ReactiveQuota(settings=settings or QuotaSettings()),
        use_eviction_scores=False,
    )

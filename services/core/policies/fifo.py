"""Production-like baseline: FIFO queues with head-of-line blocking, first fit, spot admitted
whenever GPUs are idle (reactive quota, no forecast), HP evicts the spot tasks on the first node
where enough GPUs can be freed."""

from __future__ import annotations

from gfs.services.core.placement import FirstFit
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.queues import Fifo
from gfs.services.core.quota import QuotaSettings, ReactiveQuota
from gfs.services.core.victims_first_node import FirstNodeVictims


def build_fifo(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    return SchedulingPolicy(
        name="fifo",
        hp_order=Fifo(),
        spot_order=Fifo(),
        placement=FirstFit(),
        victims=FirstNodeVictims(),
        quota=ReactiveQuota(settings=settings or QuotaSettings()),
        use_eviction_scores=False,
    )

"""Lyra (EuroSys'23) as a baseline (spec 6.2, 8 #16): capacity loaning with least-cost reclaim.

Spot work borrows idle GPUs (reactive quota: the loan is whatever is idle); an HP task that does
not fit reclaims GPUs from the node whose preemption costs the fewest servers (victims_lyra).
Queues are largest-first with head-of-line blocking; placement packs on free GPUs (no class
affinity, no eviction score).
"""

from __future__ import annotations

from gfs.services.core.placement_spread import PackFree
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.queue_blocking import LargestFirstBlocking
from gfs.services.core.quota import QuotaSettings, ReactiveQuota
from gfs.services.core.victims_lyra import LyraVictims


def build_lyra(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    return SchedulingPolicy(
        name="lyra",
        hp_order=LargestFirstBlocking(),
        spot_order=LargestFirstBlocking(),
        placement=PackFree(),
        victims=LyraVictims(),
        quota=ReactiveQuota(settings=settings or QuotaSettings()),
        use_eviction_scores=False,
    )

"""Chronus (SoCC'21) as a baseline (spec 6.2, 8 #7): lease-based time slicing.

Every 1200 s every running task (HP and spot) gives its GPUs back and the queues are scheduled
again, HP first, in (-gpus per worker, workers, submit) order with consolidating best fit; a task
that gets GPUs again at the renewal simply continues. Nothing is preempted between renewals. The
simulator's lease hook (services/simulator/lease.py) counts a spot task that is not renewed in the
middle of a guarantee period as a failed period, and HP queue time accumulates across leases
(the fixes of spec 8 #7). Chronus has no spot quota: reactive (idle GPUs) here, or GFS's quota.
"""

from __future__ import annotations

from gfs.services.core.placement import BestFit
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.queues import LargestFirstFewWorkers
from gfs.services.core.quota import QuotaSettings, ReactiveQuota
from gfs.services.core.victims_lease import LEASE_PERIOD_S, NoMidLeasePreemption


def build_chronus(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    return SchedulingPolicy(
        name="chronus",
        hp_order=LargestFirstFewWorkers(),
        spot_order=LargestFirstFewWorkers(),
        placement=BestFit(),
        victims=NoMidLeasePreemption(),
        quota=ReactiveQuota(settings=settings or QuotaSettings()),
        use_eviction_scores=False,
        lease_s=LEASE_PERIOD_S,
    )

"""Kubernetes-style priority preemption (spec 6.2): kube-scheduler's defaults applied to HP/spot.

HP and spot are two PriorityClasses. Queues are FIFO by arrival with head-of-line blocking (the
scheduling queue pops by priority then timestamp; each class has its own queue here). Placement
spreads (NodeResourcesFit LeastAllocated); preemption reprieves the oldest pods and picks the node
with the fewest victims, then the latest-started victims, then node index. Quota is reactive (spot
uses whatever is idle), or GFS's forecast quota in the `+gfs-quota` variant.
"""

from __future__ import annotations

from gfs.services.core.placement_spread import LeastAllocated
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.queues import Fifo
from gfs.services.core.quota import QuotaSettings, ReactiveQuota
from gfs.services.core.victims_k8s import K8sVictims


def build_k8s_priority(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    return SchedulingPolicy(
        name="k8s-priority",
        hp_order=Fifo(),
        spot_order=Fifo(),
        placement=LeastAllocated(),
        victims=K8sVictims(),
        quota=ReactiveQuota(settings=settings or QuotaSettings()),
        use_eviction_scores=False,
    )

"""Lease-based scheduling (Chronus, SoCC'21): nothing is preempted in the middle of a lease.

HP work waiting for GPUs gets them at the next lease renewal, when every running task gives its
GPUs back and the queues are scheduled again (the simulator's lease hook,
services/simulator/lease.py); between renewals an HP task that does not fit simply waits.
"""

from __future__ import annotations

from gfs.services.core.pool import PoolState
from gfs.services.core.task import TaskSpec
from gfs.services.core.victims import PreemptionContext, PreemptionPlan

LEASE_PERIOD_S = 1200.0  # Chronus's lease (spec 6.2)
RELEASE_OVERHEAD_S = 120.0  # restart cost of a task whose lease is not renewed (spec 6.2)


class NoMidLeasePreemption:
    name = "no-mid-lease-preemption"

    def plan(self, pool: PoolState, spec: TaskSpec, ctx: PreemptionContext) -> PreemptionPlan | None:
        return None

"""Servable HP demand: the HP usage a pool can have during the next guarantee period (issue 35).

Why: the spot quota lends the GPUs that HP will not take back during a spot task's guarantee. What
HP can take during the period is what runs now plus the queued HP that can start during it. A
queued task that cannot start during it (a gang wider than anything that frees, a task behind a
reservation) takes no GPU spot could hold, so protecting it from spot protects nothing and idles
the pool (docs/quality-findings.md: the quota was 0 all month while half the pool idled).

Definition (written down and tested: tests/unit/core/test_core_servable.py). At an instant, a
pool's servable HP demand is, per tenant,
1. the HP GPUs running (g x w), plus
2. of the queued HP tasks that can start within the period, the GPUs they take that HP does not
   hold now (idle, or held by spot). Which tasks: in the scheduler's HP order, each packed best fit
   on what the tasks before it left, a task that does not fit skipped (backfill), on
   - the GPUs HP does not hold now, per node (what preemption frees at once), and
   - the GPUs HP work frees during the period ("soon-freed"): the scheduler never reads a run's
     duration, so the estimate is persistence of the release flow, the chunks (one per finished
     HP task and node) that HP finishes freed in the last period, each a node of its own.
   A task packed on freed chunks replaces finishing HP: that part adds no usage. A gang that does
   not fit on both together cannot start within the period and protects nothing.
3. A head-of-queue reservation's nodes offer nothing to other HP tasks. Its holder starts when the
   HP work on its nodes ends: it counts (its GPUs beyond that HP, `reservation_growth`) only when
   that HP is no more than what frees in a period, i.e. it can start within the period.

The plan also says which GPUs the counted tasks would take (`claims`, per node): spot is placed
elsewhere when it can be (cycle.py), and the reserved nodes' idle GPUs are lent to spot only while
the holder cannot start within the period.

The same definition is the forecast's target series (each minute's level, hourly peaks, per tenant
and per pool) and the quota's floor (the level now), in the simulator and in the live pipeline,
where the preemption service publishes it (`PoolDemandLevel`) and the forecast stream reads it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from gfs.services.core.ids import TaskId, TenantId
from gfs.services.core.placeable import fit_one, fit_workers, preemptible_capacity
from gfs.services.core.pool import PoolState, RunningTask
from gfs.services.core.queues import BucketQueue, LargestFirst
from gfs.services.core.reservation import Reservation
from gfs.services.core.task import TaskClass

_DECIMALS = 6  # sums of fractional requests drift by ~1e-12; requests have a few decimals at most
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class ServablePlan:
    """What part 2 and 3 of the definition found (module doc)."""

    queued: dict[TenantId, float]  # per tenant: GPUs the servable queued tasks take beyond HP's now
    claims: np.ndarray  # per node: GPUs HP does not hold now that those tasks would take
    holder_servable: bool  # the reservation's holder can start within the period

    @property
    def total(self) -> float:
        return float(sum(self.queued.values()))


# A caller's memo of a servable plan: given how to compute the plan on a miss, the plan
# (runtime/servable_view.py keeps it; cycle.py and spot_room.py read it).
PlanMemo = Callable[[Callable[[], ServablePlan]], ServablePlan]


class HpReleases:
    """The chunks of GPUs HP finishes freed (one per task and node) over the last `window_s`: the
    soon-freed estimate of the servable demand (module doc, part 2)."""

    __slots__ = ("_chunks", "_items", "version", "window_s")

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._items: deque[tuple[float, float]] = deque()  # (when, GPUs freed on one node)
        self.version = 0  # bumped whenever the chunks change (memo keys)
        # The chunks as last read, with the version they were read at: a busy pool's period holds
        # thousands of chunks and they are read on every pass and every demand sample.
        self._chunks: tuple[int, tuple[float, ...]] = (0, ())

    def note(self, now: float, running: RunningTask) -> None:
        """An HP run ended on its own (finished, or cancelled while running)."""
        if running.spec.task_class is not TaskClass.HP:
            return
        per_node: dict[int, float] = {}
        for p in running.placements:
            per_node[p.node] = per_node.get(p.node, 0.0) + (p.gpus if p.slot < 0 else p.fraction)
        self._items.extend((now, gpus) for _, gpus in sorted(per_node.items()))
        self.version += 1

    def chunks(self, now: float) -> tuple[float, ...]:
        items = self._items
        while items and items[0][0] <= now - self.window_s:
            items.popleft()
            self.version += 1
        version, chunks = self._chunks
        if version != self.version:
            chunks = tuple(g for _, g in items)
            self._chunks = (self.version, chunks)
        return chunks


def plan_servable(
    state: PoolState,
    hp: BucketQueue,
    reservation: Reservation | None,
    freed: Sequence[float] = (),
    skip: Collection[TaskId] = (),
    held: np.ndarray | None = None,
) -> ServablePlan:
    """Parts 2 and 3 of the definition (module doc). `skip`: queued tasks to leave out (those a
    pass has just started); `held`: GPUs per node that a pass's placeholders hold for the
    reservation (they count as HP in the pool's arrays, but are idle)."""
    n = len(state.node_cap)
    claims = np.zeros(n)
    queued: dict[TenantId, float] = {}
    excluded = () if reservation is None else reservation.nodes
    holder = None if reservation is None or reservation.task_id not in hp else hp.specs[reservation.task_id]
    freed_total = float(sum(freed))
    holder_servable = False
    if holder is not None and reservation is not None:
        placeholders = np.zeros(n) if held is None else np.asarray(held, dtype=np.float64)
        nodes = list(reservation.nodes)
        hp_there = state.hp_gpus[nodes] - placeholders[nodes]
        holder_servable = float(hp_there.sum()) <= freed_total + _EPS
        if holder_servable:
            growth = max(0.0, holder.total_gpus - float(hp_there.sum()))
            if growth > 0:
                queued[holder.tenant] = growth
            claims[nodes] = state.non_hp[nodes] + placeholders[nodes]
    if not hp.index:
        return ServablePlan(queued, claims, holder_servable)
    real = preemptible_capacity(state, excluded)
    # Only the GPUs HP does not hold now can count (tasks on freed chunks alone add nothing): with
    # none, or once they are used up, nothing more counts, so the walk stops there.
    if float(real.sum()) <= _EPS:
        return ServablePlan(queued, claims, holder_servable)
    cap = np.concatenate((real, np.asarray(freed, dtype=np.float64)))
    uniform = isinstance(hp.order, LargestFirst)  # buckets share g per worker
    failed: dict[float, int] = {}  # as placeable.placeable_tasks: shapes known not to fit
    for _, entries in hp.buckets():
        if float(cap[:n].sum()) <= _EPS:
            break
        for _, tid in entries:
            if (holder is not None and tid == holder.task_id) or tid in skip:
                continue
            spec = hp.specs[tid]
            g = spec.gpus_per_worker
            if uniform and failed.get(g) == 1:
                break
            if spec.workers >= failed.get(g, spec.workers + 1):
                continue
            if spec.workers == 1 and not spec.is_fractional:
                # One whole-GPU worker (most queued tasks): one node changes; the same
                # arithmetic as below on that node alone.
                k = spec.whole_gpus_per_worker
                node, before_there = fit_one(cap, k)
                if node < 0:
                    failed[g] = spec.workers
                    continue
                failed.clear()
                if node < n:
                    took = before_there - float(cap[node])
                    if took > _EPS:
                        claims[node] += took
                        queued[spec.tenant] = queued.get(spec.tenant, 0.0) + took
                continue
            before = cap[:n].copy()
            if not fit_workers(cap, spec):
                failed[g] = spec.workers
                continue
            failed.clear()
            used = before - cap[:n]
            took = float(used.sum())
            if took > _EPS:
                claims += used
                queued[spec.tenant] = queued.get(spec.tenant, 0.0) + took
    return ServablePlan(queued, claims, holder_servable)


def servable_levels(state: PoolState, plan: ServablePlan) -> dict[TenantId, float]:
    """Servable HP demand per tenant (module doc); tenants at 0 are left out."""
    levels = dict(state.hp_by_tenant)
    for tenant, gpus in plan.queued.items():
        levels[tenant] = levels.get(tenant, 0.0) + gpus
    rounded = ((t, round(v, _DECIMALS) + 0.0) for t, v in sorted(levels.items()))
    return {t: v for t, v in rounded if v > 0.0}


def servable_total(state: PoolState, plan: ServablePlan) -> float:
    """The pool's servable HP demand now: the quota's floor."""
    return round(state.hp_in_use + plan.total, _DECIMALS) + 0.0

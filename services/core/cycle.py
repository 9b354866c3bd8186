"""One scheduling pass over one pool: HP first, then spot. Returns decisions; changes nothing.

Steps (spec 5.3, 5.2):
1. HP queue in the policy's order, skipping sizes at or above the `failed` threshold: normal
   placement, else (inside the window) preemptive placement; a gang HP task is placed worker by
   worker against the tentative state and committed only if every worker fits (spec 8 #8).
2. Spot queue in the policy's order: quota admission (S_v + g w <= Q_v(H)), then normal placement
   of every worker or none. Spot never preempts.
3. Eviction budget (`CycleContext.eviction_budget`, the pool's eviction cap): the pass counts the
   victims it commits to; a preemption whose plans would exceed what is left is not made (the HP
   task waits as EVICTION_BUDGET, raising the threshold like NO_PREEMPTION_PLAN). None = no cap.
4. Tenant budgets (`PreemptionContext.tenant_left`, core/tenant_budget.py): the pass counts each
   budgeted tenant's victims too and gives every victim search what is left; the selector avoids
   sets over them when it can, but (unlike the cap) never refuses a preemption for them.
5. Reservation (`CycleContext.reservation`, core/reservation.py): its holder is tried before
   anything else; if it cannot start, the reserved nodes' idle GPUs are held and preemption skips
   those nodes for the rest of the pass, so HP backfill goes on elsewhere only. The waiting holder
   neither blocks its bucket nor lowers the threshold (EASY: the head has its reservation, so
   every task behind it may start on what is left). Spot that fits nowhere else may borrow the
   held GPUs (the policy's `lend_reserved`, issue 35): the holder, tried first on the next pass,
   evicts it when the HP work on its nodes has ended.

The pass works on the pool under a journal and rolls it back, so the caller's state is unchanged;
the caller applies the returned decisions (decide/do split).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

from gfs.services.core.decisions import Decision, EvictTask, StartTask, WorkerPlacement
from gfs.services.core.ids import TenantId
from gfs.services.core.placement import place_task, place_worker, release, reserve
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.pool import PoolState, RunningTask
from gfs.services.core.queues import Blocked, BucketQueue, SortKey
from gfs.services.core.reasons import Unschedulable
from gfs.services.core.reservation import Reservation, hold_reserved
from gfs.services.core.servable import PlanMemo
from gfs.services.core.shared_gpus import open_slot
from gfs.services.core.spot_room import Held, SpotRoom, spot_room
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.core.victims import PreemptionContext, PreemptionPlan, preemptible

_EPS = 1e-9


class CycleContext(NamedTuple):
    now: float
    preemption_enabled: bool
    quota_enabled: bool
    quota: Mapping[int, float]  # guarantee hours -> Q_v(H)
    preemption: PreemptionContext
    version: int  # the pool's capacity version (bumped whenever GPUs are freed or quota changes)
    eviction_budget: int | None = None  # evictions this pass may commit to (None: no cap)
    reservation: Reservation | None = None  # the pool's head-of-queue reservation, if any
    # GPU chunks HP finishes freed in the last guarantee period: the soon-freed estimate of the
    # servable demand (core/servable.py), whose claims spot is kept off.
    freed: tuple[float, ...] = ()
    # The caller's memo of the servable plan of the pool as the pass found it (None: the pass
    # computes its own); on a miss it is handed how the pass computes it, and keeps the result. A
    # pass that started nothing has the state it began with (its tentative changes rolled back; a
    # reservation's placeholders are subtracted by the plan), so that plan is its own: the spot
    # room takes it instead of walking the HP queue again when it was known (issue 37).
    servable: PlanMemo | None = None


class CycleOutcome(NamedTuple):
    decisions: tuple[Decision, ...]
    blocked: tuple[tuple[TaskClass, SortKey, Blocked], ...]
    # Buckets the pass skipped because their size was at or above the `failed` threshold
    # (explanations only; the memos in `blocked` say why the other non-started buckets stopped).
    skipped: tuple[tuple[TaskClass, SortKey], ...] = ()


def schedule_pool(
    pool: PoolState,
    hp_queue: BucketQueue,
    spot_queue: BucketQueue,
    policy: SchedulingPolicy,
    ctx: CycleContext,
) -> CycleOutcome:
    decisions: list[Decision] = []
    blocked: list[tuple[TaskClass, SortKey, Blocked]] = []
    skipped: list[tuple[TaskClass, SortKey]] = []
    budget = _Budget(ctx.eviction_budget, ctx.preemption.tenant_left)
    pool.begin()
    try:
        first: tuple[TaskSpec, _Attempt] | None = None
        held: np.ndarray | None = None  # idle GPUs held for the reservation, per node
        res = ctx.reservation
        if res is not None and res.task_id in hp_queue:
            holder = hp_queue.specs[res.task_id]
            if _still_blocked(hp_queue, hp_queue.bucket_of(holder.task_id), holder.task_id, ctx.version):
                attempt = _Attempt.NO_PREEMPTION_PLAN  # nothing changed since it last failed
            else:
                attempt = _start_hp(pool, holder, policy, ctx, decisions, budget)
            if attempt is not _Attempt.STARTED:
                attempt = _Attempt.HOLDS_RESERVATION
            first = (holder, attempt)
            if attempt is not _Attempt.STARTED:
                held = hold_reserved(pool, res)
                ctx = ctx._replace(preemption=ctx.preemption._replace(excluded=frozenset(res.nodes)))
        _hp_pass(pool, hp_queue, policy, ctx, decisions, blocked, skipped, budget, first)
        started = {d.task_id for d in decisions if isinstance(d, StartTask)}
        reserved = ctx.reservation if held is not None else None
        # The caller's plan has the pass's reservation (the holder's own placeholders aside).
        before = None if started or reserved is not ctx.reservation else ctx.servable
        room = spot_room(
            pool, hp_queue, spot_queue, policy, reserved, ctx.freed, ctx.now, started, held, before
        )
        _spot_pass(pool, spot_queue, policy, ctx, decisions, blocked, skipped, room)
    finally:
        pool.rollback()
    return CycleOutcome(tuple(decisions), tuple(blocked), tuple(skipped))


def _still_blocked(queue: BucketQueue, bucket: SortKey, head: str, version: int) -> Blocked | None:
    memo = queue.blocked.get(bucket)
    return memo if memo is not None and memo.version == version and memo.head == head else None


class _Attempt(enum.Enum):
    STARTED = "started"
    NO_FIT = "no-fit"  # raises the `failed` threshold to this size (spec 5.3)
    NO_PREEMPTION_PLAN = "no-preemption-plan"  # an HP miss with preemption on: as NO_FIT
    EVICTION_BUDGET = "eviction-budget"  # a plan exists but exceeds the eviction cap: as NO_FIT
    OVER_QUOTA = "over-quota"  # stops the bucket but leaves the threshold alone
    RESERVED = "reserved"  # as NO_FIT, but it would have fit on the GPUs a reservation holds
    CLAIMED = "claimed"  # as NO_FIT, but it would have fit on GPUs the servable HP queue claims
    # The reservation's holder did not start: its nodes are held for it, so (EASY backfill) it
    # neither blocks its bucket nor lowers the threshold; the tasks behind it may start elsewhere.
    HOLDS_RESERVATION = "holds-reservation"


_REASON = {
    _Attempt.NO_FIT: Unschedulable.NO_FIT,
    _Attempt.NO_PREEMPTION_PLAN: Unschedulable.NO_PREEMPTION_PLAN,
    _Attempt.EVICTION_BUDGET: Unschedulable.EVICTION_BUDGET,
    _Attempt.OVER_QUOTA: Unschedulable.OVER_QUOTA,
    _Attempt.RESERVED: Unschedulable.RESERVED,
    _Attempt.CLAIMED: Unschedulable.CLAIMED,
    _Attempt.HOLDS_RESERVATION: Unschedulable.NO_PREEMPTION_PLAN,
}


# What kept a spot task out of the spot room (spot_room.py), as this pass's attempts.
_HELD_BY = {Held.NO_FIT: _Attempt.NO_FIT, Held.RESERVED: _Attempt.RESERVED, Held.CLAIMED: _Attempt.CLAIMED}

_TryStart = Callable[[TaskSpec], _Attempt]


def _queue_pass(
    queue: BucketQueue,
    task_class: TaskClass,
    ctx: CycleContext,
    try_start: _TryStart,
    blocked: list[tuple[TaskClass, SortKey, Blocked]],
    skipped: list[tuple[TaskClass, SortKey]],
) -> None:
    """Walk the queue's buckets in order under the `failed` threshold (spec 5.3).

    Tiers: buckets in the order's sequence; inside a bucket, entries in order until the first task
    that cannot start, which blocks the rest of its bucket. A bucket whose head was blocked at the
    same capacity version is skipped without re-trying it (the memo keeps long queues cheap).
    """
    order = queue.order
    size = order.size
    specs = queue.specs
    memos = queue.blocked
    version = ctx.version
    threshold = order.initial_threshold
    # The walk visits every bucket, most of them only to skip it (over the threshold, or blocked
    # at this capacity version with the same head): that path reads two dicts and nothing else.
    for bucket, entries in queue.buckets():
        head = entries[0][1]
        head_size = size(specs[head])
        if head_size >= threshold:
            skipped.append((task_class, bucket))
            continue
        memo = memos.get(bucket)
        if memo is not None and memo.version == version and memo.head == head:
            if memo.raises_threshold:
                threshold = head_size
            continue
        for _, tid in entries:
            spec = specs[tid]
            if size(spec) >= threshold:
                break
            attempt = try_start(spec)
            if attempt is _Attempt.STARTED or attempt is _Attempt.HOLDS_RESERVATION:
                continue  # a reservation's holder waits on its own nodes: backfill goes past it
            raises = attempt is not _Attempt.OVER_QUOTA
            if raises:
                threshold = order.size(spec)
            memo = Blocked(ctx.version, tid, raises_threshold=raises, reason=_REASON[attempt])
            blocked.append((task_class, bucket, memo))
            break


def _hp_pass(
    pool: PoolState,
    queue: BucketQueue,
    policy: SchedulingPolicy,
    ctx: CycleContext,
    decisions: list[Decision],
    blocked: list[tuple[TaskClass, SortKey, Blocked]],
    skipped: list[tuple[TaskClass, SortKey]],
    budget: _Budget,
    first: tuple[TaskSpec, _Attempt] | None = None,
) -> None:
    def try_start(spec: TaskSpec) -> _Attempt:
        if first is not None and spec.task_id == first[0].task_id:
            return first[1]  # the reservation's holder was tried before the pass
        return _start_hp(pool, spec, policy, ctx, decisions, budget)

    _queue_pass(queue, TaskClass.HP, ctx, try_start, blocked, skipped)


class _Budget:
    """The evictions a pass may still commit to (None: no cap), and per budgeted tenant."""

    __slots__ = ("left", "tenants")

    def __init__(self, left: int | None, tenants: Mapping[TenantId, int] | None = None) -> None:
        self.left = left
        self.tenants = None if not tenants else dict(tenants)

    def tenants_after(self, victims_of: list[TenantId]) -> dict[TenantId, int] | None:
        """Tenant budgets left once victims of these tenants (one entry each) are evicted."""
        if self.tenants is None:
            return None
        left = dict(self.tenants)
        for tenant in victims_of:
            if tenant in left:
                left[tenant] -= 1
        return left


def _start_hp(
    pool: PoolState,
    spec: TaskSpec,
    policy: SchedulingPolicy,
    ctx: CycleContext,
    decisions: list[Decision],
    budget: _Budget,
) -> _Attempt:
    placements = place_task(pool, spec, policy.placement)
    if placements is not None:
        pool.add_task(RunningTask(spec, ctx.now, placements))
        decisions.append(StartTask(spec.task_id, placements))
        return _Attempt.STARTED
    if not ctx.preemption_enabled:
        return _Attempt.NO_FIT
    return _start_hp_preemptive(pool, spec, policy, ctx, decisions, budget)


def _start_hp_preemptive(
    pool: PoolState,
    spec: TaskSpec,
    policy: SchedulingPolicy,
    ctx: CycleContext,
    decisions: list[Decision],
    budget: _Budget,
) -> _Attempt:
    if not spec.is_fractional:
        # Quick refusal: even evicting every spot task leaves too few GPUs for the gang.
        k = spec.whole_gpus_per_worker
        if int((preemptible(pool, ctx.preemption) // k).sum()) < spec.workers:
            return _Attempt.NO_PREEMPTION_PLAN
    if budget.left is not None and budget.left <= 0:
        return _Attempt.EVICTION_BUDGET
    mark = pool.mark()
    evictions: list[EvictTask] = []
    plans: list[PreemptionPlan] = []
    placed: list[WorkerPlacement] = []
    victims_of: list[TenantId] = []  # each eviction's tenant (the tenant budgets)
    failure: _Attempt | None = None
    for p in _fits_now(pool, spec, policy):  # workers that fit without preemption come first
        reserve(pool, p, spec.task_class)
        placed.append(p)
    for _ in range(spec.workers - _count_workers(spec, placed)):
        maybe = place_worker(pool, spec, policy.placement)
        if maybe is not None:
            p = maybe
        else:
            pctx = ctx.preemption
            if budget.left is not None:
                pctx = pctx._replace(eviction_budget=budget.left - len(evictions))
            if budget.tenants is not None:
                pctx = pctx._replace(tenant_left=budget.tenants_after(victims_of))
            plan = policy.victims.plan(pool, spec, pctx)
            if plan is None:
                failure = _Attempt.NO_PREEMPTION_PLAN
                break
            if budget.left is not None and len(evictions) + len(plan.victims) > budget.left:
                failure = _Attempt.EVICTION_BUDGET
                break
            plans.append(plan)
            for victim in plan.victims:
                victims_of.append(pool.remove_task(victim).spec.tenant)
                evictions.append(EvictTask(victim, spec.task_id, plan.node))
            p = _placement_after_eviction(pool, spec, plan)
        reserve(pool, p, spec.task_class)
        placed.append(p)
    for p in reversed(placed):
        release(pool, p, spec.task_class)
    if failure is not None:
        pool.rollback_to(mark)  # gang HP tasks are placed atomically or not at all
        return failure
    pool.add_task(RunningTask(spec, ctx.now, tuple(placed)))
    decisions.extend(evictions)
    decisions.append(StartTask(spec.task_id, tuple(placed), preempted=bool(evictions), plans=tuple(plans)))
    if budget.left is not None:
        budget.left -= len(evictions)
    if budget.tenants is not None:
        budget.tenants = budget.tenants_after(victims_of)
    return _Attempt.STARTED


def _fits_now(pool: PoolState, spec: TaskSpec, policy: SchedulingPolicy) -> list[WorkerPlacement]:
    """As many whole-GPU workers as fit without preemption, as the per-worker loop would place
    them before its first miss (one vectorised fill instead of one argmin per worker)."""
    if spec.is_fractional or spec.workers == 1:
        return []
    k = spec.whole_gpus_per_worker
    fitting = int((pool.free // k).sum())
    n = min(spec.workers - 1, fitting)
    if n <= 0:
        return []
    nodes = policy.placement.fill(pool, k, spec.task_class, n)
    return [] if nodes is None else [WorkerPlacement(node, k * count) for node, count in nodes]


def _count_workers(spec: TaskSpec, placed: list[WorkerPlacement]) -> int:
    if spec.is_fractional:
        return len(placed)
    return sum(p.gpus for p in placed) // spec.whole_gpus_per_worker


def _placement_after_eviction(pool: PoolState, spec: TaskSpec, plan: PreemptionPlan) -> WorkerPlacement:
    if not spec.is_fractional:
        return WorkerPlacement(plan.node, spec.whole_gpus_per_worker)
    slot = plan.slot if plan.slot >= 0 else open_slot(pool, plan.node)
    return WorkerPlacement(plan.node, 0, slot, spec.gpus_per_worker)


def _spot_pass(
    pool: PoolState,
    queue: BucketQueue,
    policy: SchedulingPolicy,
    ctx: CycleContext,
    decisions: list[Decision],
    blocked: list[tuple[TaskClass, SortKey, Blocked]],
    skipped: list[tuple[TaskClass, SortKey]],
    room: SpotRoom | None = None,
) -> None:
    def try_start(spec: TaskSpec) -> _Attempt:
        if ctx.quota_enabled:
            limit = ctx.quota.get(spec.guarantee_hours, 0.0)
            if pool.spot_in_use + spec.total_gpus > limit + _EPS:
                # Over quota: skip without raising the threshold (spec 5.3). Tasks behind it in
                # this bucket ask for at least as many GPUs, so the bucket is done.
                return _Attempt.OVER_QUOTA
        if room is None:
            placements = place_task(pool, spec, policy.placement)
            if placements is None:
                return _Attempt.NO_FIT
            pool.add_task(RunningTask(spec, ctx.now, placements))
        else:
            placed, held_by = room.place(spec, policy)
            if placed is None:
                return _HELD_BY[held_by]
            placements = placed
        decisions.append(StartTask(spec.task_id, placements))
        return _Attempt.STARTED

    _queue_pass(queue, TaskClass.SPOT, ctx, try_start, blocked, skipped)

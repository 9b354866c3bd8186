"""The servable demand's views of a pool (core/servable.py) and the idle GPUs queued work would
fit on (core/work_conservation.py), memoised on the counters of what they read: passes come with
every event and a quiet pool's views do not change between them."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from gfs.services.core.guarantee import GUARANTEE_PERIOD_S
from gfs.services.core.ids import TenantId
from gfs.services.core.placeable import reservation_growth
from gfs.services.core.pool import PoolState
from gfs.services.core.queues import BucketQueue
from gfs.services.core.reservation import Reservation
from gfs.services.core.servable import (
    HpReleases,
    PlanMemo,
    ServablePlan,
    plan_servable,
    servable_levels,
    servable_total,
)
from gfs.services.core.work_conservation import QuotaBasis, idle_while_work_fits


class ServableView:
    """Owns the HP releases of the last guarantee period (the soon-freed estimate) and the memos."""

    __slots__ = ("_idle_memo", "_plan_memo", "releases")

    def __init__(self) -> None:
        self.releases = HpReleases(GUARANTEE_PERIOD_S)
        self._plan_memo: tuple[tuple[object, ...], ServablePlan] | None = None
        self._idle_memo: tuple[tuple[object, ...], dict[str, float]] | None = None

    def freed(self, now: float) -> tuple[float, ...]:
        return self.releases.chunks(now)

    def plan(
        self, state: PoolState, hp: BucketQueue, reservation: Reservation | None, now: float
    ) -> ServablePlan:
        """The servable plan now, memoised on what runs where, the HP queue, the reservation and
        the chunks freed in the last period."""
        chunks = self.releases.chunks(now)
        key = self._key(state, hp, reservation)
        return self._memoised(key, lambda: plan_servable(state, hp, reservation, chunks))

    def plan_before(self, state: PoolState, hp: BucketQueue, reservation: Reservation | None) -> PlanMemo:
        """The memo of `plan` for the state as it is now, read later by a pass that started
        nothing and so has this state again (cycle.py's `CycleContext.servable`). Its key is read
        now, so a pass's tentative changes (which move `state.mutations`) do not miss it; on a
        miss the pass computes the plan its own way (its placeholders in the pool) and it is kept."""
        key = self._key(state, hp, reservation)
        return lambda compute: self._memoised(key, compute)

    def _key(self, state: PoolState, hp: BucketQueue, reservation: Reservation | None) -> tuple[object, ...]:
        return (state.mutations, hp.mutations, reservation, self.releases.version)

    def _memoised(self, key: tuple[object, ...], compute: Callable[[], ServablePlan]) -> ServablePlan:
        memo = self._plan_memo
        if memo is not None and memo[0] == key:
            return memo[1]
        found = compute()
        self._plan_memo = (key, found)
        return found

    def levels(
        self, state: PoolState, hp: BucketQueue, reservation: Reservation | None, now: float
    ) -> dict[TenantId, float]:
        """The servable HP demand per tenant now: the forecast's target series."""
        return servable_levels(state, self.plan(state, hp, reservation, now))

    def floor(
        self, state: PoolState, hp: BucketQueue, reservation: Reservation | None, now: float, *, growth: bool
    ) -> float:
        """The servable HP demand now, plus the reservation's growth when `growth` (issue 21's floor)
        and the holder cannot start within the period: the HP usage the quota protects at least."""
        plan = self.plan(state, hp, reservation, now)
        total = servable_total(state, plan)
        res = reservation
        if growth and res is not None and res.task_id in hp and not plan.holder_servable:
            total += reservation_growth(state, hp.specs[res.task_id], res.nodes)
        return float(total)

    def idle_fit(
        self,
        state: PoolState,
        hp: BucketQueue,
        spot: BucketQueue,
        reservation: Reservation | None,
        now: float,
        *,
        claims: bool,
        quota: Mapping[int, float] | None,
        basis: QuotaBasis,
    ) -> dict[str, float]:
        """GPUs idle now while queued work would fit on them, per reason; `claims`: the policy keeps
        spot off the servable HP's claims (the reason `claimed` exists)."""
        claimed: np.ndarray | None = None
        if claims and hp.index and spot.index:
            claimed = self.plan(state, hp, reservation, now).claims
        key = (
            state.mutations, hp.mutations, spot.mutations, reservation, self.releases.version,
            None if quota is None else tuple(sorted(quota.items())), basis,
        )  # fmt: skip
        memo = self._idle_memo
        if memo is not None and memo[0] == key:
            return dict(memo[1])
        found = idle_while_work_fits(
            state, hp, spot, reservation=reservation, claims=claimed, quota=quota, basis=basis
        )
        self._idle_memo = (key, found)
        return dict(found)

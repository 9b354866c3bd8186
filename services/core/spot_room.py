"""Where spot may go in a pass while HP work waits (issue 35): around the holds, in layers.

A pass (cycle.py) first tries every spot task on the GPUs nobody holds. Two kinds of holds keep
GPUs for HP that waits:
- a reservation's idle GPUs (core/reservation.py), lent to spot (the policy's `lend_reserved`)
  while the holder cannot start within the guarantee period (core/servable.py: the HP on its nodes
  is more than what HP freed in the last period), so the reserved nodes do not idle; the holder,
  tried first on every pass, evicts that spot when it can start;
- the GPUs the servable HP queue is expected to take within the period (the servable plan's
  claims), kept from spot always ("hard", gfs) or while spot fits anywhere else ("soft"): spot
  placed there would be evicted within its guarantee.
A layer is lifted for one placement and put back on what is still idle, so the next spot task
again tries the unheld GPUs first.
"""

from __future__ import annotations

import enum

import numpy as np

from gfs.services.core.decisions import WorkerPlacement
from gfs.services.core.ids import TaskId
from gfs.services.core.placeable import fit_workers
from gfs.services.core.placeholders import hold, lift
from gfs.services.core.placement import place_task
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.pool import PoolState, RunningTask
from gfs.services.core.queues import BucketQueue
from gfs.services.core.reservation import Reservation, hold_id, hold_reserved
from gfs.services.core.servable import PlanMemo, ServablePlan, plan_servable
from gfs.services.core.task import TaskSpec

_EPS = 1e-9
# The placeholders of a pass (core/placeholders.py): the servable HP's claims, and the idle GPUs
# outside a lent reservation while spot tries its nodes first.
_CLAIMS = "servable-claims"
_OUTSIDE = "spot-room-outside"
CLAIM_TENANT = "servable-claim"


class Held(enum.Enum):
    """What kept a spot task out (NONE: it was placed)."""

    NONE = "none"
    NO_FIT = "no-fit"  # it fits nowhere, held GPUs included
    RESERVED = "reserved"  # it would fit on the reservation's held GPUs
    CLAIMED = "claimed"  # it would fit only on GPUs the servable HP claims


def spot_room(
    pool: PoolState,
    hp_queue: BucketQueue,
    spot_queue: BucketQueue,
    policy: SchedulingPolicy,
    res: Reservation | None,
    freed: tuple[float, ...],
    now: float,
    started: set[TaskId],
    held: np.ndarray | None,
    before: PlanMemo | None = None,
) -> SpotRoom | None:
    """What spot may use in this pass beyond the idle GPUs nobody holds: the reservation's held
    GPUs (lent while its holder cannot start within the period) and the GPUs the servable HP
    queue is expected to take (kept off while anything else fits). None: nothing is held.
    `before`: the servable plan of the state the pass began on, when nothing was started since
    (cycle.py's `CycleContext.servable`); else the plan is computed here."""
    if not spot_queue.index or (res is None and policy.spot_claims == "off"):
        return None
    plan = None
    if policy.spot_claims != "off" or (res is not None and policy.lend_reserved):

        def compute() -> ServablePlan:
            return plan_servable(pool, hp_queue, res, freed, skip=started, held=held)

        plan = compute() if before is None else before(compute)
    lend = res is not None and policy.lend_reserved and plan is not None and not plan.holder_servable
    claims = None
    if plan is not None and policy.spot_claims != "off":
        claims = plan.claims.copy()
        if res is not None:
            claims[list(res.nodes)] = 0.0  # the reservation's own holds cover its nodes
    return SpotRoom(
        pool,
        res,
        now,
        lend=lend,
        claims=claims,
        hard=policy.spot_claims == "hard",
        lend_first=policy.lend_first,
    )


class SpotRoom:
    """Spot placement around holds, in layers: first on GPUs nobody holds; then, if the
    reservation is lent, also on its held GPUs; then, if claims are soft, also on the GPUs the
    servable HP queue claims. A layer is lifted for one placement and put back on what is still
    idle, so the next spot task again tries the unheld GPUs first."""

    __slots__ = ("claims", "hard", "lend", "lend_first", "now", "pool", "reservation")

    def __init__(
        self,
        pool: PoolState,
        reservation: Reservation | None,
        now: float,
        *,
        lend: bool,
        claims: np.ndarray | None,
        hard: bool,
        lend_first: bool = False,
    ) -> None:
        self.pool = pool
        self.reservation = reservation
        self.now = now
        self.lend = lend
        self.lend_first = lend_first and lend and reservation is not None
        self.claims = claims
        self.hard = hard
        self._hold_claims()

    def place(
        self, spec: TaskSpec, policy: SchedulingPolicy
    ) -> tuple[tuple[WorkerPlacement, ...] | None, Held]:
        pool = self.pool
        if self.lend_first and not spec.is_fractional:
            placements = self._on_reserved(spec, policy)
            if placements is not None:
                return placements, Held.NONE
        placements = place_task(pool, spec, policy.placement)
        if placements is not None:
            pool.add_task(RunningTask(spec, self.now, placements))
            return placements, Held.NONE
        if spec.is_fractional:
            return None, Held.NO_FIT
        stages: list[tuple[bool, bool]] = []  # (lift the reservation's holds, lift the claims)
        if self.lend:
            stages.append((True, False))
        if self.claims is not None and not self.hard:
            stages.append((self.lend, True))
        for lift_res, lift_claims in stages:
            self._lift(reservation=lift_res, claims=lift_claims)
            placements = place_task(pool, spec, policy.placement)
            if placements is not None:
                pool.add_task(RunningTask(spec, self.now, placements))
            self._restore(reservation=lift_res, claims=lift_claims)
            if placements is not None:
                return placements, Held.NONE
        # Would it fit without the reservation's holds, or without any hold? Then the holds kept
        # it out (the threshold rises as for NO_FIT: larger tasks of its class need as much).
        attempt = Held.NO_FIT
        for lift_claims, why in ((False, Held.RESERVED), (True, Held.CLAIMED)):
            self._lift(reservation=self.reservation is not None, claims=lift_claims)
            fits = fit_workers(pool.free.astype(float), spec)
            self._restore(reservation=self.reservation is not None, claims=lift_claims)
            if fits:
                attempt = why
                break
        return None, attempt

    def _on_reserved(self, spec: TaskSpec, policy: SchedulingPolicy) -> tuple[WorkerPlacement, ...] | None:
        """Spot on the lent reserved nodes alone (`lend_first`): only the holder may take those
        GPUs, and it cannot within the period, while the other nodes' idle GPUs are where HP that
        arrives starts; so they are kept free when the reserved nodes can take the task."""
        pool = self.pool
        assert self.reservation is not None
        outside = np.maximum(pool.free, 0)
        outside[list(self.reservation.nodes)] = 0
        self._lift(reservation=True, claims=False)
        hold(pool, _OUTSIDE, CLAIM_TENANT, outside)
        placements = place_task(pool, spec, policy.placement)
        if placements is not None:
            pool.add_task(RunningTask(spec, self.now, placements))
        lift(pool, _OUTSIDE)
        self._restore(reservation=True, claims=False)
        return placements

    def _lift(self, *, reservation: bool, claims: bool) -> None:
        pool = self.pool
        if reservation and self.reservation is not None:
            lift(pool, hold_id(self.reservation))
        if claims and self.claims is not None:
            lift(pool, _CLAIMS)

    def _restore(self, *, reservation: bool, claims: bool) -> None:
        if reservation and self.reservation is not None:
            hold_reserved(self.pool, self.reservation)
        if claims:
            self._hold_claims()

    def _hold_claims(self) -> None:
        if self.claims is None:
            return
        pool = self.pool
        want = np.minimum(pool.free, np.floor(self.claims + _EPS).astype(np.int64))
        want[self.claims <= _EPS] = 0
        hold(pool, _CLAIMS, CLAIM_TENANT, want)

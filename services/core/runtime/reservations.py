"""A pool's head-of-queue reservation over time (the rule is core/reservation.py): who holds it,
when to look for a holder again, and the recent HP waits the relative threshold reads."""

from __future__ import annotations

import math
from dataclasses import replace

from gfs.services.core.eviction_log import DAY_S
from gfs.services.core.ids import TaskId
from gfs.services.core.pool import PoolState
from gfs.services.core.queues import BucketQueue
from gfs.services.core.reservation import RecentWaits, Reservation, choose_nodes, nodes_online, pick_holder

HOLDER_SCAN_S = 60.0  # after a scan found no reservation holder, the next scan waits this long
RESERVE_RELATIVE_WAIT = 2.0  # a reservation needs a wait of this many times the recent HP mean


class ReservationKeeper:
    """Owns the reservation in force (None: none), the time of the next holder scan and the
    waits of the HP tasks that started in the last day."""

    __slots__ = ("_hp_waits", "_next_scan", "current")

    def __init__(self) -> None:
        self.current: Reservation | None = None
        self._next_scan = -math.inf
        self._hp_waits = RecentWaits(DAY_S)

    def update(
        self, now: float, state: PoolState, hp: BucketQueue, after_s: float | None, *, indexed: bool
    ) -> bool:
        """Before a pass: drop a reservation whose holder left the queue, choose its nodes again if
        one went down, make one for the longest-waiting HP gang past the threshold (`after_s`, the
        policy's; None: no reservations). True when it changed (a new capacity version: what
        other tasks may use changed). `indexed` False scans the whole queue for the holder (a
        debug switch: the same answer, slower)."""
        if after_s is None:
            return False
        res = self.current
        if res is not None:
            if res.task_id not in hp:
                self.current = None
                return True
            if not nodes_online(state, res.nodes):
                nodes = choose_nodes(state, hp.specs[res.task_id])
                self.current = None if nodes is None else replace(res, nodes=nodes)
                return True
            return False
        if now < self._next_scan:
            return False
        # Starvation is relative: a gang is starved when it waited well past what HP tasks that
        # started lately waited, not when the whole pool is overloaded (reservation.py).
        after = max(after_s, RESERVE_RELATIVE_WAIT * self._hp_waits.mean(now))
        holder = hp.oldest_gang(now, after) if indexed else pick_holder(hp, now, after)
        if holder is None:
            # Passes come with every event; a minute's delay in reserving costs nothing next to
            # the hour waited, and an overloaded queue's old single-worker tasks are not rescanned.
            self._next_scan = now + HOLDER_SCAN_S
            return False
        nodes = choose_nodes(state, holder)
        if nodes is None:
            return False
        self.current = Reservation(holder.task_id, nodes, now, holder.total_gpus)
        return True

    def hp_started(self, task_id: TaskId, now: float, wait_s: float) -> bool:
        """An HP task started after waiting `wait_s`; True if it was the holder (its reservation
        ends: the nodes are everyone's again, a new capacity version)."""
        self._hp_waits.note(now, wait_s)
        if self.current is not None and self.current.task_id == task_id:
            self.current = None
            return True
        return False

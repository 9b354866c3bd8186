"""The decider's wake at its pools' due times (wall clock only: on the controllable clock the
ticks drive time), and the due time of one pool (`due_after`), which the timers also use.

`DueWake` owns its own bookkeeping (what was acted on, the last wake, the wake-up event); it
reaches the decider only through `DueTimers` (timers.py's `Timers` is one), the port its unit tests
fake.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Protocol

from gfs.services.platform.clock import Clock
from gfs.services.platform.timer import FailureCounter
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.decider.names import LOGGER

log = logging.getLogger(LOGGER)


class DueTimers(Protocol):
    """What the wake drives: the earliest due time after a time, the tick's path for the pools due,
    the periodic tick, and the clock they run on."""

    @property
    def clock(self) -> Clock: ...

    def next_due(self, after: float) -> float: ...

    async def wake(self, after: float) -> float: ...

    async def tick(self) -> None: ...


def due_after(controller: PoolController, after: float) -> float:
    """The driver's `next_due` (core/driver/pool_driver.py) taken part by part, each later than
    `after`, the time up to which everything due was acted on: a part acted on and still due (a held
    start or an ending waiting on a node that still reports its attempt; a quota an SRE freeze
    keeps from expiring) must not hide the pool's later due times, nor wake the decider again."""
    driver = controller.driver
    due = driver.held.next_due_after(after)
    if (period := driver.periods.next_due) > after:
        due = min(due, period)
    until = driver.quota_valid_until
    expires = not driver.quota_frozen and controller.controls.quota_mode is None  # controller.tick's rule
    if until is not None and until > after and expires:
        due = min(due, until)
    return due


class DueWake:
    """Wakes the decider at its pools' `next_due` (wall clock only: on the controllable clock the
    ticks drive time). One timer for all owned pools, armed at the earliest due time and moved
    when a commit (it is the decider's `on_committed`: every committed batch or tick) may have
    moved it; when it fires, `Timers.wake` runs the tick's path for the pools due, so a held
    start's or an ending's deadline, a guarantee period's end or the quota's expiry is acted on
    at its time, not up to `preemption_tick_s` later. The periodic tick stays the safety net (node
    liveness, reconciliation, controls, status, and whatever waits on a node past its due time)."""

    # Fire this much after the due time: the wall clock read at firing is then past it (the
    # quota's expiry is strict: `now > valid_until`).
    SLACK_S = 0.002
    # At most one wake per this long: deadlines that fall close together (every eviction of a
    # burst has its own ending deadline) are acted on in one wake, one pass and one commit per
    # pool instead of one each, since a wake holds the decider's lock through its commit. A held
    # start still goes out within 0.1 s of its deadline (the tick's period is 1 s).
    MIN_GAP_S = 0.1

    def __init__(
        self, timers: DueTimers, *, then: Callable[[], None] = lambda: None,
        failures: FailureCounter | None = None,
    ) -> None:  # fmt: skip
        self.timers = timers
        self.then = then  # the decider's commit hook before the wake (the outbox relay's wake)
        self.failures = failures
        self.acted = -math.inf  # every due time up to this one was acted on (a wake or a tick)
        self.last_wake = -math.inf  # the clock's time at the last wake
        self.changed = asyncio.Event()
        self.wakes = 0

    def __call__(self) -> None:
        """The decider's commit hook (`on_committed`): something was committed, so the earliest
        due time may have moved."""
        self.changed.set()
        self.then()

    async def tick(self) -> None:
        """The periodic tick: it acts on every pool, so what was due before it started is done."""
        started = self.timers.clock.now()
        await self.timers.tick()
        self.acted = max(self.acted, started)
        self.changed.set()

    async def run(self) -> None:
        """Until cancelled (the service cancels its jobs when it stops)."""
        while True:
            self.changed.clear()
            due = self.timers.next_due(self.acted)
            at = max(due + self.SLACK_S, self.last_wake + self.MIN_GAP_S)
            wait = at - self.timers.clock.now()
            if wait > 0:
                try:
                    # None when nothing is due: sleep until a commit arms something.
                    timeout = None if math.isinf(wait) else wait
                    await asyncio.wait_for(self.changed.wait(), timeout)
                    continue  # a commit: the earliest due time may be earlier now
                except TimeoutError:
                    pass
            try:
                self.last_wake = self.timers.clock.now()
                self.acted = await self.timers.wake(self.acted)
                self.wakes += 1
            except Exception:
                # As the periodic timer does (platform/timer.py): logged, counted, and the next
                # tick retries; this wake does not retry the same due time in a loop.
                log.exception("preemption: the wake at a due time failed; the next tick retries")
                if self.failures is not None:
                    self.failures.add(1, {"timer": "preemption.wake"})
                self.acted = max(self.acted, due)
                await asyncio.sleep(0)

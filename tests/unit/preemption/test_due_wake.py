"""The decider's wake at its pools' due times (services/preemption/decider/due_wake.py): which time
a pool wakes at (`due_after`, hand-worked on test_controller's worlds), and the one timer
(`DueWake`) over a fake decider (the decider's own port: `next_due`, `wake`, a clock)."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from test_controller import T0, _quota, _spot_world, _task
from test_controller_attempts import _evicted_b, _exit

from gfs.schemas.commands import BindCommand
from gfs.schemas.tasks import TaskClass
from gfs.services.preemption.controller.settings import Controls
from gfs.services.preemption.decider.due_wake import DueTimers, DueWake, due_after


# ----- which time a pool wakes at ------------------------------------------------------------------
def test_a_pool_wakes_at_its_drivers_next_due_when_nothing_was_acted_on() -> None:
    w, _, _ = _spot_world()
    w.event(_task("H", TaskClass.HP), 2000)  # B's ending and H's held start: due at 2000 + 30 + 10
    assert due_after(w.c, -math.inf) == w.c.driver.next_due == T0 + 2040


def test_a_start_waiting_past_its_deadline_on_a_node_does_not_hide_the_pools_later_due_times() -> None:
    w, bind_a, _, _ = _evicted_b()
    w.event(_exit(bind_a, 0, 2001), 2001)  # B's attempt 2 held for attempt 1 until 2041
    report = {"node": "n1", "sampled_at": T0 + 2039, "running": [["B", 1, 0]]}
    w.feed(("node_report", report, T0 + 2039))
    out = w.feed(("tick", {}, T0 + 2041))  # acted on at 2041: H, B's ending and B's start stay
    assert not [b for b in out.commands if isinstance(b, BindCommand)]
    assert w.c.driver.next_due == T0 + 2040  # the driver's: in the past, still waiting on n1
    # What the wake arms after 2041: the next time something turns due, the quota's expiry at
    # T0 + 3600 (A's first guarantee period ends at 1 + 3600).
    assert due_after(w.c, T0 + 2041) == T0 + 3600
    assert due_after(w.c, T0 + 2039) == T0 + 2040  # not yet acted on: due


def test_a_quota_an_sre_holds_does_not_wake_the_pool_at_its_expiry() -> None:
    w, _, _ = _spot_world()  # A's first guarantee period ends at T0 + 3600 (its run began at 0)
    w.event(_quota(4.0, until=3000.0), 1500)
    assert due_after(w.c, T0 + 2000) == T0 + 3000  # the quota's expiry
    w.feed(("control", {"controls": Controls(quota_mode="freeze").as_dict()}, T0 + 2000))
    assert due_after(w.c, T0 + 2000) == T0 + 3600  # frozen: it does not expire; A's period is next
    assert w.c.driver.next_due == T0 + 3000  # the driver's own view still names the expiry


# ----- the one timer ---------------------------------------------------------------------------------
class _Clock:
    def now(self) -> float:
        return time.time()


@dataclass
class _Decider:
    """The decider's port as the wake uses it: due times that a wake acts on (removed), except
    `stuck` ones (waiting on a node: still due after the wake)."""

    due: list[float] = field(default_factory=list)
    stuck: set[float] = field(default_factory=set)
    woken: list[tuple[float, float]] = field(default_factory=list)  # (after, now)
    clock: _Clock = field(default_factory=_Clock)

    def next_due(self, after: float) -> float:
        return min((d for d in self.due if d > after), default=math.inf)

    async def wake(self, after: float) -> float:
        now = self.clock.now()
        self.woken.append((after, now))
        self.due = [d for d in self.due if d > now or d in self.stuck]
        return now

    async def tick(self) -> None:
        pass


async def _running(decider: _Decider) -> tuple[DueWake, asyncio.Task[None]]:
    wake = DueWake(cast(DueTimers, decider))
    return wake, asyncio.create_task(wake.run())


@pytest.mark.asyncio
async def test_the_wake_fires_at_the_due_time_and_a_commit_moves_it_earlier() -> None:
    decider = _Decider()
    wake, task = await _running(decider)
    try:
        await asyncio.sleep(0.05)
        assert not decider.woken  # nothing due: it sleeps
        later = time.time() + 5.0
        decider.due.append(later)
        wake()  # a commit armed a due time 5 s away
        await asyncio.sleep(0.05)
        assert not decider.woken
        soon = time.time() + 0.1
        decider.due.append(soon)
        wake()  # another commit: 0.1 s away, earlier than the armed one
        await asyncio.sleep(0.4)
        assert len(decider.woken) == 1
        _, at = decider.woken[0]
        assert soon <= at < soon + 0.1  # at its time (within tens of ms here), not at `later`
        assert decider.due == [later]
    finally:
        task.cancel()


@pytest.mark.asyncio
async def test_a_due_time_still_due_after_its_wake_does_not_wake_it_again() -> None:
    due = time.time() + 0.05
    decider = _Decider(due=[due], stuck={due})
    wake, task = await _running(decider)
    try:
        await asyncio.sleep(0.3)
        assert len(decider.woken) == 1 and wake.acted >= due  # once: the periodic tick rechecks it
    finally:
        task.cancel()


@pytest.mark.asyncio
async def test_a_failed_wake_is_counted_and_not_retried_in_a_loop() -> None:
    decider = _Decider(due=[time.time() + 0.02])
    calls: list[Any] = []

    async def failing(after: float) -> float:
        calls.append(after)
        raise ConnectionError("postgres blinked")

    decider.wake = failing  # type: ignore[method-assign]
    failures: list[dict[str, str] | None] = []

    class Counter:
        def add(self, amount: int, attributes: dict[str, str] | None = None) -> None:
            failures.append(attributes)

    wake = DueWake(cast(DueTimers, decider), failures=Counter())
    task = asyncio.create_task(wake.run())
    try:
        await asyncio.sleep(0.3)
        assert len(calls) == 1 and failures == [{"timer": "preemption.wake"}]
    finally:
        task.cancel()

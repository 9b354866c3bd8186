"""The per-pool driver (services/core/driver): typed inputs in, typed effects out; its timers,
its pass trigger and its clock. Expectations are worked by hand in the comments."""

from __future__ import annotations

import math

from builders import a_spot, a_task

from gfs.services.core.driver.effects import (
    Accepted,
    NodeJoined,
    NodeLost,
    PeriodClosed,
    QuotaExpired,
    QuotaInForce,
    Rejected,
    Withdrawn,
)
from gfs.services.core.driver.inputs import Advance, Cancel, NodeDown, NodeSeen, Pass, QuotaApplied, Submit
from gfs.services.core.driver.pool_driver import PoolDriver
from gfs.services.core.driver.timers import PeriodTimers
from gfs.services.core.ids import PoolId, TaskId
from gfs.services.core.outcomes import Started, Stopped
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.pool import PoolState
from gfs.services.core.reasons import EvictionReason, Rejection
from gfs.services.core.runtime import PoolRuntime

S1, H1 = TaskId("s1"), TaskId("h1")


def a_driver(*, nodes: int = 1) -> PoolDriver:
    """An empty pool P; `nodes` nodes of 8 GPUs join at t = 0, and a spot quota of their capacity
    (a runtime built empty starts with a quota of 0 GPUs) that does not expire."""
    driver = PoolDriver(PoolRuntime(PoolState(PoolId("P"), (), ()), build_policy("gfs")))
    for i in range(nodes):
        driver.apply(NodeSeen(f"n{i}", 8, 0.0))
    driver.apply(QuotaApplied(dict.fromkeys(driver.runtime.quota, 8.0 * nodes), 1.0, 0.0))
    return driver


# ----- timers ---------------------------------------------------------------------------------------
def test_a_known_run_length_arms_only_the_periods_that_end_before_it() -> None:
    timers = PeriodTimers(3600.0)
    timers.arm(S1, 100.0, length=7200.0)  # ends at 7300: periods end at 3700 and 7300 (the finish's)
    assert timers.next_due == 3700.0
    assert timers.pop_due(3699.0) == []
    assert timers.pop_due(3700.0) == [(S1, 100.0, 3700.0)]
    assert timers.next_due == math.inf  # 7300 is the finish, not a timer


def test_an_exact_period_length_arms_nothing() -> None:
    timers = PeriodTimers(3600.0)
    timers.arm(S1, 0.0, length=3600.0)  # its only period ends with the run
    assert timers.next_due == math.inf


def test_a_stopped_run_never_fires_even_when_restarted_at_the_same_instant() -> None:
    timers = PeriodTimers(3600.0)
    timers.arm(S1, 0.0)
    timers.disarm(S1)
    timers.arm(S1, 0.0)  # a new run from the same start: one entry counts, the first is stale
    assert timers.pop_due(3600.0) == [(S1, 0.0, 3600.0)]
    assert timers.popped == 2
    assert timers.next_due == 7200.0  # the live run's next period


def test_equal_ends_fire_in_task_id_order() -> None:
    timers = PeriodTimers(3600.0)
    for tid in ("b", "a", "c"):
        timers.arm(TaskId(tid), 0.0)
    assert [t for t, _, _ in timers.pop_due(3600.0)] == ["a", "b", "c"]


# ----- the driver -----------------------------------------------------------------------------------
def test_a_pass_runs_only_when_something_changed() -> None:
    driver = a_driver()
    assert driver.apply(Pass(0.0)) == []  # nodes joined: a pass, nothing queued
    assert driver.apply(Pass(1.0)) == []
    assert driver.apply(Submit(a_task("h1", gpus=4), 2.0)) == [Accepted(H1)]
    assert driver.dirty
    (started,) = driver.apply(Pass(2.0))
    assert isinstance(started, Started) and started.task_id == H1
    assert not driver.dirty
    assert driver.run_pass(3.0) is None  # nothing changed since
    assert driver.run_pass(3.0, force=True) is not None


def test_rejections_do_not_trigger_a_pass() -> None:
    driver = a_driver()
    driver.apply(Pass(0.0))
    assert driver.apply(Submit(a_task("big", gpus=16), 1.0)) == [
        Rejected(TaskId("big"), Rejection.WORKER_LARGER_THAN_NODE)
    ]
    assert not driver.dirty


def test_guarantee_periods_close_until_the_run_is_evicted() -> None:
    # s1 (spot, 8 GPUs) starts at 0 on the one 8-GPU node: periods end at 3600, 7200, ... At 3600
    # one success; h1 (HP, 4 GPUs) arrives at 5400 and evicts s1 (nothing else is free): s1 ran
    # 5400 s, one period logged already, the interrupted one failed. Its 7200 timer is stale.
    driver = a_driver()
    driver.apply(Submit(a_spot("s1", gpus=8, duration=7200.0), 0.0))
    (started,) = driver.apply(Pass(0.0))
    assert isinstance(started, Started) and driver.next_due == 3600.0
    assert driver.apply(Advance(3599.0)) == []
    assert driver.apply(Advance(3600.0)) == [PeriodClosed(S1, 0.0, 3600.0)]
    assert driver.ledger.succeeded_total == 1 and driver.next_due == 7200.0
    assert not driver.dirty  # a period closing changes nothing a pass could act on
    driver.apply(Submit(a_task("h1", gpus=4), 5400.0))
    stop, start = driver.apply(Pass(5400.0))
    assert isinstance(stop, Stopped) and stop.task_id == S1 and stop.preemptor == H1
    assert (stop.successes, stop.failed_period) == (0, True)  # the 3600 one was logged by its timer
    assert isinstance(start, Started) and start.task_id == H1
    assert driver.apply(Advance(7200.0)) == []
    assert (driver.ledger.failed_total, driver.ledger.succeeded_total) == (1, 1)


def test_cancel_withdraws_a_queued_task_and_stops_a_running_one() -> None:
    driver = a_driver()
    driver.apply(Submit(a_spot("s1", gpus=8), 0.0))
    driver.apply(Pass(0.0))
    driver.apply(Submit(a_spot("s2", gpus=8), 10.0))
    driver.apply(Pass(10.0))  # s2 waits: the node is full
    assert driver.apply(Cancel(TaskId("s2"), 20.0)) == [Withdrawn(TaskId("s2"))]
    (stop,) = driver.apply(Cancel(S1, 30.0))
    assert isinstance(stop, Stopped) and stop.reason is EvictionReason.CANCELLED
    assert driver.dirty and driver.next_due == 3600.0  # s1's timer is stale: nothing fires
    assert driver.apply(Advance(3600.0)) == []


def test_node_down_stops_its_tasks_and_their_timers() -> None:
    driver = a_driver(nodes=2)
    assert driver.apply(NodeSeen("n2", 8, 0.0)) == [NodeJoined("n2", 2)]
    assert driver.apply(NodeSeen("n2", 8, 1.0)) == []  # a heartbeat of a known node
    driver.apply(Submit(a_spot("s1", gpus=8), 1.0))
    (started,) = driver.apply(Pass(1.0))
    assert isinstance(started, Started)
    node = driver.runtime.state.node_names[started.placements[0].node]
    lost, stop = driver.apply(NodeDown(node, 100.0))
    assert lost == NodeLost(node, (S1,))
    assert isinstance(stop, Stopped) and stop.reason is EvictionReason.NODE_DOWN
    assert driver.apply(NodeDown(node, 101.0)) == []  # already down
    (restarted,) = driver.apply(Pass(101.0))  # requeued, on another node
    assert isinstance(restarted, Started)
    # The first run's timer (1 + 3600) is still in the lazy heap: due, it fires nothing.
    assert driver.next_due == 3601.0 and driver.apply(Advance(3601.0)) == []
    assert driver.next_due == 3701.0  # the second run's


def test_a_quota_past_valid_until_freezes_at_the_spot_gpus_running() -> None:
    # 2 nodes (16 GPUs); quota 8 for every duration, valid until 600. s1 (6 GPUs) runs. At 600 the
    # quota is still valid (it expires strictly after); at 601 it freezes at the 6 GPUs running.
    driver = a_driver(nodes=2)
    quota = dict.fromkeys(driver.runtime.quota, 8.0)
    assert driver.apply(QuotaApplied(quota, 1.0, 0.0, valid_until=600.0)) == [QuotaInForce(True)]
    driver.apply(Submit(a_spot("s1", gpus=6), 0.0))
    driver.apply(Pass(0.0))
    assert driver.next_due == 600.0
    assert driver.apply(Advance(600.0)) == []
    assert driver.apply(Advance(601.0)) == [QuotaExpired(6.0)]
    assert driver.quota_frozen and set(driver.runtime.quota.values()) == {6.0} and driver.dirty
    assert driver.apply(Advance(700.0)) == []  # frozen once
    assert driver.next_due == 3600.0  # only s1's period is armed now


def test_the_clock_never_goes_back() -> None:
    driver = a_driver()
    driver.apply(Submit(a_task("h1", gpus=4), 100.0))
    driver.apply(Pass(100.0))
    # A wall clock that stepped back 5 s: applied at the runtime's time, not rejected.
    assert driver.apply(Submit(a_task("h2", gpus=4), 95.0)) == [Accepted(TaskId("h2"))]
    assert driver.runtime.now == 100.0

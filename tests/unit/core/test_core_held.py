"""The driver's held starts and ending attempts (services/core/driver/held.py): what a held start
waits for, what releases it, and its deadline. Command ids are plain strings here (the module is
generic over them). Grace 30 s and margin 10 s throughout; expectations worked by hand in the
comments."""

from __future__ import annotations

import math

from gfs.services.core.driver.effects import Released, ReleaseWhy
from gfs.services.core.driver.held import HeldStarts
from gfs.services.core.driver.inputs import Advance, AttemptEnded, EvictAcked, NodeSeen
from gfs.services.core.driver.pool_driver import PoolDriver
from gfs.services.core.ids import PoolId, TaskId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.pool import PoolState
from gfs.services.core.runtime import PoolRuntime

H, S, B = TaskId("h"), TaskId("s"), TaskId("b")
WAIT = {"grace_s": 30.0, "margin_s": 10.0}


def test_a_start_without_victims_or_an_ending_is_not_held() -> None:
    held: HeldStarts[str] = HeldStarts()
    assert held.place(H, {"n1": frozenset({0, 1})}, [], now=100.0, **WAIT) is None
    assert held.idle and held.next_due == math.inf


def test_a_held_start_is_released_only_by_the_last_victims_ack() -> None:
    held: HeldStarts[str] = HeldStarts()
    h = held.place(H, {"n1": frozenset({0, 1})}, ["e1", "e2"], now=100.0, **WAIT)
    assert h is not None and h.waiting == {"e1", "e2"} and h.deadline == 140.0  # 100 + 30 + 10
    assert held.ack("e1") == [] and H in held.held
    assert held.ack("e1") == []  # the same ack again changes nothing
    assert held.ack("e2") == [H] and H not in held.held
    assert held.ack("e2") == []  # released once


def test_an_ack_for_an_id_nobody_waits_for_is_ignored() -> None:
    held: HeldStarts[str] = HeldStarts()
    held.place(H, {"n1": frozenset({0})}, ["e1"], now=100.0, **WAIT)
    assert held.ack("unknown") == []
    assert held.held[H].waiting == {"e1"}


def test_the_deadline_releases_a_held_start_unless_a_node_says_its_victim_still_runs() -> None:
    held: HeldStarts[str] = HeldStarts()
    held.place(H, {"n1": frozenset({0})}, ["e1"], now=100.0, **WAIT)
    held.place(S, {"n0": frozenset({0})}, ["e2"], now=105.0, **WAIT)  # deadline 145
    assert held.next_due == 140.0
    assert held.due(139.9) == []
    # At 145 both are due; H's victim e1 is still listed by its node: H stays, S goes.
    assert held.due(145.0, lambda c: c == "e1") == [S]
    assert held.next_due == 140.0  # H's deadline passed but it stays due: the next tick checks again
    assert held.due(146.0) == [H] and held.idle


def test_two_held_starts_released_by_one_ack_come_out_in_the_order_they_were_held() -> None:
    held: HeldStarts[str] = HeldStarts()
    held.place(S, {"n0": frozenset({0})}, ["e1"], now=100.0, **WAIT)
    held.place(H, {"n0": frozenset({1})}, ["e1"], now=100.0, **WAIT)
    assert held.ack("e1") == [S, H]


def test_a_task_run_again_waits_for_its_own_previous_attempt_to_end_not_for_its_acks() -> None:
    held: HeldStarts[str] = HeldStarts()
    held.ending(B, {"e1": "n0", "e2": "n1"}, {"n0": frozenset({0}), "n1": frozenset({0})}, now=50.0, **WAIT)
    assert held.deadline(B) == 90.0  # 50 + 30 + 10
    # B placed again at 60 on n2: nothing of another task there, but its own attempt still ends.
    h = held.place(B, {"n2": frozenset({0})}, [], now=60.0, **WAIT)
    assert h is not None and h.waiting == set() and h.own == {"e1", "e2"}
    assert h.deadline == 100.0  # max(60 + 40, the previous attempt's 90)
    assert held.ack("e1") == [] and held.ack("e2") == []  # acks alone do not end an attempt
    # Placed again before its previous attempt's deadline less grace + margin (a rule, worked
    # directly): the previous attempt's deadline wins.
    again = held.place(B, {"n2": frozenset({0})}, [], now=45.0, **WAIT)
    assert again is not None and again.deadline == 90.0  # max(45 + 40, 90)
    assert held.end(B, evicted=True) == B  # its acks and exits said: evicted
    assert B not in held.held and B not in held.endings


def test_an_attempt_that_finished_on_its_own_leaves_the_next_start_held() -> None:
    held: HeldStarts[str] = HeldStarts()
    held.ending(B, {"e1": "n0"}, {"n0": frozenset({0})}, now=50.0, **WAIT)
    held.place(B, {"n0": frozenset({1})}, [], now=60.0, **WAIT)
    assert held.end(B, evicted=False) is None
    assert held.held[B].own == {"e1"}  # the shell withdraws the finished task and drops the start
    assert held.drop(B) and not held.drop(B)


def test_a_start_on_gpus_another_attempt_still_holds_waits_for_that_eviction_and_its_deadline() -> None:
    held: HeldStarts[str] = HeldStarts()
    # B's attempt holds n1 GPUs 0, 1; evicted at 2000 (deadline 2040), re-issued at 2035 (2075).
    held.ending(B, {"e1": "n1"}, {"n1": frozenset({0, 1})}, now=2000.0, **WAIT)
    held.extend(B, now=2035.0, **WAIT)
    assert held.deadline(B) == 2075.0 and held.next_due == 2075.0
    assert held.place(S, {"n1": frozenset({2, 3})}, [], now=2010.0, **WAIT) is None  # other GPUs
    s = held.place(S, {"n1": frozenset({1, 2})}, [], now=2010.0, **WAIT)  # GPU 1 is B's
    assert s is not None and s.waiting == {"e1"} and s.own == set()
    assert s.deadline == 2075.0  # max(2010 + 40 = 2050, B's 2075)
    assert held.endings_due(2074.0) == [] and held.endings_due(2075.0) == [B]
    assert held.ack("e1") == [S]
    # n1 acknowledged: B's GPUs there no longer hold anyone back.
    assert held.place(H, {"n1": frozenset({0})}, [], now=2080.0, **WAIT) is None


def test_a_newer_ending_of_the_same_task_replaces_the_older_one() -> None:
    held: HeldStarts[str] = HeldStarts()
    held.ending(B, {"e1": "n1"}, {"n1": frozenset({0})}, now=0.0, **WAIT)
    held.ending(B, {"e2": "n1"}, {"n1": frozenset({0})}, now=100.0, **WAIT)
    held.ack("e1")  # the older attempt's ack says nothing about the newer one
    assert held.endings[B].acked == set()
    held.ack("e2")
    assert held.endings[B].acked == {"n1"}


def test_the_drivers_next_due_and_its_typed_inputs_include_the_held_starts() -> None:
    driver: PoolDriver[str] = PoolDriver(PoolRuntime(PoolState(PoolId("P"), (), ()), build_policy("gfs")))
    driver.apply(NodeSeen("n0", 8, 0.0))
    assert driver.next_due == math.inf
    driver.held.ending(B, {"e1": "n0"}, {"n0": frozenset({0})}, now=10.0, **WAIT)  # deadline 50
    driver.held.place(B, {"n0": frozenset({1})}, [], now=20.0, **WAIT)  # own e1; deadline 60
    driver.held.place(H, {"n0": frozenset({0})}, [], now=25.0, **WAIT)  # waits e1; deadline 65
    driver.held.place(S, {"n0": frozenset({2})}, ["e9"], now=30.0, **WAIT)  # deadline 70
    assert driver.next_due == 50.0
    assert driver.apply(EvictAcked("e1", 30.0)) == [Released(H, ReleaseWhy.ACKED)]
    assert driver.apply(AttemptEnded(B, 31.0)) == [Released(B, ReleaseWhy.ENDED)]
    assert driver.next_due == 70.0
    assert driver.apply(Advance(69.0)) == []
    assert driver.apply(Advance(70.0)) == [Released(S, ReleaseWhy.DEADLINE)]
    assert driver.next_due == math.inf

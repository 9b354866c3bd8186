"""What happened to tasks, from their life events (services/whatif/outcomes.py), hand-worked."""

from __future__ import annotations

import pytest

from gfs.services.whatif.outcomes import Event, TaskInfo, TaskOutcome, summarize, task_outcome

E = Event


def test_a_spot_task_evicted_once_waits_twice_and_runs_twice() -> None:
    # Submitted at 0, started at 600, evicted at 4200 (a two-node gang: one record per node, the
    # second ignored), started again at 5000, finished at 8600.
    events = [(600.0, E.START), (4200.0, E.EVICT), (4200.0, E.EVICT), (5000.0, E.START), (8600.0, E.FINISH)]
    out = task_outcome(0.0, events, end_s=10_000.0)
    assert out.wait_s == 600.0 + 800.0
    assert out.evictions == 1
    assert out.run_s == 3600.0 + 3600.0


def test_cancellations_end_a_task_without_an_eviction_and_open_ends_are_cut_at_the_log_end() -> None:
    # Stopped for good while running (its owner cancelled): ran 100..400, no eviction, no more wait.
    assert task_outcome(0.0, [(100.0, E.START), (400.0, E.STOP)], 1000.0) == TaskOutcome(100.0, 0, 300.0)
    # Withdrawn from the queue at 250: waited 250 - 50.
    assert task_outcome(50.0, [(250.0, E.WITHDRAW)], 1000.0) == TaskOutcome(200.0, 0, 0.0)
    # Still queued at the end (1000): waited 1000 - 50.
    assert task_outcome(50.0, [], 1000.0) == TaskOutcome(950.0, 0, 0.0)
    # Still running at the end: ran 700..1000; a lease stop requeues without an eviction.
    assert task_outcome(0.0, [(100.0, E.START), (200.0, E.REQUEUE), (700.0, E.START)], 1000.0) == TaskOutcome(
        100.0 + 500.0, 0, 100.0 + 300.0,
    )  # fmt: skip


def test_summary_means_per_class_and_spot_gpu_hours_per_pool() -> None:
    tasks = {
        "s1": TaskInfo("A100", hp=False, gpus=2.0, submit_s=0.0),  # waits 600, runs 1 h, evicted once
        "s2": TaskInfo("A10", hp=False, gpus=0.5, submit_s=0.0),  # waits 1800, runs 2 h
        "h1": TaskInfo("A100", hp=True, gpus=4.0, submit_s=3000.0),  # waits 600 (not spot hours)
    }
    events = {
        "s1": [(4200.0, E.EVICT), (600.0, E.START)],  # given out of order: sorted by time
        "s2": [(1800.0, E.START), (9000.0, E.FINISH)],
        "h1": [(3600.0, E.START)],
    }
    s = summarize(tasks, events, end_s=9000.0)
    # s1 is queued again from 4200 to the end: 600 + 4800.
    assert s.spot_queue_mean_s == pytest.approx((600.0 + 4800.0 + 1800.0) / 2)
    assert s.hp_queue_mean_s == pytest.approx(600.0)
    assert s.evictions == 1
    assert s.spot_gpu_hours_by_pool == {"A100": pytest.approx(2.0), "A10": pytest.approx(1.0)}
    assert s.spot_gpu_hours == pytest.approx(3.0)
    assert (s.spot_tasks, s.hp_tasks) == (2, 1)

"""Trace -> workload: the evaluation window, warm-up spot drop, infeasible-job rejection."""

from __future__ import annotations

import pytest
from builders import a_job, a_node, a_trace

from gfs.services.simulator.workload import build_workload, fits_empty_pool

DAY = 86400.0


def test_window_is_the_last_days_and_early_spot_is_dropped() -> None:
    trace = a_trace(
        [a_node("n0", gpus=8)],
        [
            a_job("h", submit=0, duration=40 * DAY),
            a_job("s-early", cls="SPOT", submit=5 * DAY),
            a_job("s-late", cls="SPOT", submit=20 * DAY),
        ],
    )
    w = build_workload(trace, window_days=31)
    assert (w.window_start_s, w.window_end_s) == (9 * DAY, 40 * DAY)
    assert [t.task_id for t in w.tasks] == ["h", "s-late"] and w.dropped_spot == 1


def test_short_trace_window_starts_at_zero() -> None:
    w = build_workload(a_trace([a_node()], [a_job(duration=3600)]), window_days=31)
    assert (w.window_start_s, w.window_end_s) == (0.0, 3600.0)


@pytest.mark.parametrize(
    ("gpus", "workers", "fits"),
    [
        (8, 2, True),
        (8, 3, False),
        (4, 4, True),
        (4, 5, False),
        (16, 1, False),
        (0.5, 32, True),
        (0.5, 33, False),
    ],
)
def test_fits_empty_pool(gpus: float, workers: int, fits: bool) -> None:
    # two 8-GPU nodes: 2 workers of 8, 4 of 4, 16 GPUs for fractional workers
    assert fits_empty_pool((8, 8), gpus, workers) is fits


def test_infeasible_jobs_are_rejected_and_counted() -> None:
    jobs = [a_job("ok", gpus=8), a_job("never", gpus=8, workers=2), a_job("huge", gpus=16)]
    w = build_workload(a_trace([a_node("n0", gpus=8)], jobs))
    assert [t.task_id for t in w.tasks] == ["ok"] and w.rejected_infeasible == 2
    assert w.rejected_by_reason == {"GANG_LARGER_THAN_POOL": 1, "WORKER_LARGER_THAN_NODE": 1}

"""The in-window measure (issue 10): guarantee periods that end in the drain, where preemption is
off, are not counted; spot GPU-hours count only for work finished by the window's end.

Worked by hand on one 2-GPU node with fifo (reactive quota, first-node victims), window [0, 9000]
(the trace's horizon is max(submit + duration) = 9000 s; a 1-day window starts at 0), 1-day drain:
- S2 (spot, 1 GPU, 1800 s) runs 100 -> 1900: one period, ended in the window.
- S (spot, 1 GPU, 9000 s) starts at 0; a period succeeds at 3600 (in the window).
- H (HP, 2 GPUs, 2000 s) arrives at 5000: the node must be emptied, S is evicted: one failed
  period at 5000 (in the window). S keeps 9000 - 5000 + 1400 (since the 3600 s checkpoint) + 40 =
  5440 s of work; H runs 5000 -> 7040 (2000 s + its 40 s restart overhead).
- S restarts at 7040: a period succeeds at 10640 and the run finishes at 12480, both in the drain.
Drain-inclusive: 1 failure in 5 periods (0.2). In-window: 1 failure in 3 periods (1/3). Spot work
finished in the window: S2 only, 1 GPU x 1800 s = 0.5 GPU-h -> 1000 x 1 / 0.5 = 2000 evictions per
1,000 GPU-h (the drain-inclusive basis has 3.0 GPU-h).
"""

from __future__ import annotations

import pytest
from builders import a_job, a_node, a_trace

from gfs.services.core.policies.registry import build_policy
from gfs.services.simulator.result import build_policy_result
from gfs.services.simulator.runner import RunSettings, build_simulation, prepare


def test_in_window_measure_by_hand() -> None:
    trace = a_trace(
        [a_node("n0", gpus=2)],
        [
            a_job("S", cls="SPOT", submit=0.0, duration=9000.0),
            a_job("S2", cls="SPOT", submit=100.0, duration=1800.0),
            a_job("H", gpus=2, submit=5000.0, duration=2000.0),
        ],
    )
    settings = RunSettings(window_days=1.0, drain_days=1.0)
    workload, demand = prepare(trace, settings)
    assert (workload.window_start_s, workload.window_end_s) == (0.0, 9000.0)
    policy = build_policy("fifo")
    sim = build_simulation(workload, demand, policy, settings)
    sim.run()
    s, s2 = sim.lives["S"], sim.lives["S2"]
    assert s.end == pytest.approx(12480.0) and s2.end == pytest.approx(1900.0)
    assert (s.failed, s.succeeded, s.failed_in_window, s.succeeded_in_window) == (1, 3, 1, 1)
    assert (s2.failed, s2.succeeded, s2.failed_in_window, s2.succeeded_in_window) == (0, 1, 0, 1)
    m = build_policy_result(sim).metrics
    assert m["lp_eviction_rate"] == pytest.approx(1 / 5)
    assert m["lp_eviction_rate_in_window"] == pytest.approx(1 / 3)
    assert m["lp_guarantee_periods_in_window"] == 3
    assert m["lp_gpu_hours_completed"] == pytest.approx(3.0)
    assert m["lp_gpu_hours_completed_in_window"] == pytest.approx(0.5)
    assert m["lp_evictions_per_kgpuh_in_window"] == pytest.approx(2000.0)

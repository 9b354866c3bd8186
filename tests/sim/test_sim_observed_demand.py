"""The simulator's forecasts read the HP demand the policy names: the servable demand (issue 35,
gfs), or the observed one (issue 10, gfs-observed-demand: queued HP counts, a rejected task never
does, and the series differs from the trace-defined one exactly where HP waits)."""

from __future__ import annotations

import pytest
from builders import a_job, a_node, a_trace

from gfs.services.core.policies.registry import build_policy
from gfs.services.simulator.runner import ForecastSource, RunSettings, build_simulation, prepare

# One 8-GPU node. h1 (8 GPUs) runs [0, 7200). h2 (4 GPUs, submit 600, 3600 s) waits for it and
# runs [7200, 10800). h3 asks for 16 GPUs on an 8-GPU pool: rejected, never counted.
#   observed: hour 0: 8 at minute 0, 12 from minute 10 -> 12; hour 1: 12 -> 12; hour 2: 4 (h1
#             gone, h2 running); hour 3: 0 (h2 finished at 10800 = minute 180, sampled after).
#   trace-defined (as if every HP job started on submission, rejected ones included): h2 is
#             [600, 4200), h3 [900, 1500): hour 0: 8 + 4 + 16 = 28; hour 1: 12 at minute 60
#             (h1 + h2 until 4200) -> 12; hour 2: 0; hour 3: 0.
TRACE = a_trace(
    [a_node("n0", gpus=8)],
    [
        a_job("h1", gpus=8, submit=0, duration=7200),
        a_job("h2", gpus=4, submit=600, duration=3600),
        a_job("h3", gpus=16, submit=900, duration=600),
    ],
    horizon=4 * 3600.0,
)


def _run(policy_name: str) -> tuple[list[float], list[float]]:
    settings = RunSettings(window_days=4 / 24, drain_days=0.0)
    workload, trace_demand = prepare(TRACE, settings)
    sim = build_simulation(workload, trace_demand, build_policy(policy_name), settings)
    sim.run()
    assert sim.observed is not None or policy_name != "gfs"
    return sim.demand.pool_hourly[:4, 0].tolist(), trace_demand.pool_hourly[:4, 0].tolist()


def test_observed_counts_queued_hp_and_not_rejected_tasks() -> None:
    observed, trace_defined = _run("gfs-observed-demand")
    assert observed == [12.0, 12.0, 4.0, 0.0]
    assert trace_defined == [28.0, 12.0, 0.0, 0.0]


def test_servable_counts_only_the_queued_hp_that_can_start() -> None:
    """gfs (issue 35, core/servable.py): h2 waits on a node h1 fills, and nothing HP held was freed
    in the last period, so it cannot start within it and does not count: hour 0: h1's 8; hour 1: 8;
    hour 2: h1 ends at 7200 = minute 120 and h2 starts then, sampled after both: 4; hour 3: 0."""
    servable, _ = _run("gfs")
    assert servable == [8.0, 8.0, 4.0, 0.0]


def test_trace_demand_ablation_forecasts_the_trace_series() -> None:
    observed, trace_defined = _run("gfs-trace-demand")
    assert observed == trace_defined  # the policy reads the trace-defined series itself


def test_oracle_refuses_observed_demand() -> None:
    settings = RunSettings(forecast=ForecastSource.ORACLE, window_days=4 / 24, drain_days=0.0)
    workload, trace_demand = prepare(TRACE, settings)
    with pytest.raises(ValueError, match="oracle"):
        build_simulation(workload, trace_demand, build_policy("gfs"), settings)


def test_running_demand_counts_hp_from_its_start_only() -> None:
    """gfs-running-demand (issue 21): h2 counts from its start at 7200, not from its submission.
    hour 0: h1's 8; hour 1: 8; hour 2: h1 ends at 7200 = minute 120 and h2 starts then, sampled
    after both: 4; hour 3: 0 (h2 ended at 10800, sampled after)."""
    running, _ = _run("gfs-running-demand")
    assert running == [8.0, 8.0, 4.0, 0.0]

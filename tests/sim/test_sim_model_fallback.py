"""The `model` forecast path: a model that fails falls back to persistence, and it is counted."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from builders import a_job, a_node, a_trace

from services.core.forecast import DemandForecast, SeriesKey
from services.core.policies.registry import build_policy
from services.simulator.engine import SimSettings, Simulation
from services.simulator.forecast_sources import Persistence
from services.simulator.runner import ModelWithFallback, RunSettings, demand_for, prepare


class BrokenModel:
    name = "broken"
    version = "0"

    def __init__(self) -> None:
        self.fits = 0

    def fit(self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int) -> None:
        self.fits += 1
        raise RuntimeError("training diverged")

    def predict(
        self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int, horizon: int
    ) -> DemandForecast:
        raise RuntimeError("no weights")


def test_broken_model_falls_back_to_persistence_and_counts() -> None:
    # 3 hours of trace: the window is the whole trace; one fit (day 0) and one prediction per hour
    trace = a_trace(
        [a_node("n0", gpus=8)],
        [a_job("h", gpus=2, submit=0, duration=3 * 3600), a_job("s", cls="SPOT", gpus=2, submit=60)],
    )
    run = RunSettings()
    workload, trace_demand = prepare(trace, run)
    policy = build_policy("gfs")
    demand = demand_for(policy, workload, trace_demand)
    model = BrokenModel()
    forecaster = ModelWithFallback(model, Persistence(demand.pools, demand.pool_hourly))
    sim = Simulation(workload, policy, forecaster, demand, SimSettings())
    sim.run()
    assert model.fits == 1
    # hours 0, 1, 2 are predicted once each (the drain after the window has no quota)
    assert forecaster.fallback_count == 1 + 3
    assert sim.lives["s"].first_start == 60.0  # persistence with no history: quota = capacity

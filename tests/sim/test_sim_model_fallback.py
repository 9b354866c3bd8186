"""The `model` forecast path: a model that fails falls back to persistence, and it is counted."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from builders import a_job, a_node, a_trace

from gfs.services.core.forecast import DemandForecast, SeriesKey
from gfs.services.core.naive_forecasts import Persistence
from gfs.services.core.policies.registry import build_policy
from gfs.services.simulator.demand import read_canonical_csv
from gfs.services.simulator.engine import SimSettings, Simulation
from gfs.services.simulator.runner import (
    ModelWithFallback,
    RunSettings,
    demand_for,
    prepare,
    write_observed_csv,
)


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


class RecordingModel:
    """Persistence underneath; remembers which series it was fitted and asked on."""

    name = "recording"
    version = "0"

    def __init__(self, inner: Persistence) -> None:
        self.inner = inner
        self.seen: list[tuple[int, int, np.ndarray]] = []  # (end_hour, id of hourly, rows before it)

    def fit(self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int) -> None:
        self.seen.append((end_hour, id(hourly), hourly[:end_hour].copy()))

    def predict(
        self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int, horizon: int
    ) -> DemandForecast:
        self.seen.append((end_hour, id(hourly), hourly[:end_hour].copy()))
        return self.inner.predict(keys, hourly, end_hour, horizon)


def test_model_path_reads_the_tracked_series(tmp_path: Path) -> None:
    # HP h (8 GPUs) runs [0, 3 h); HP q (4 GPUs, submit 600) waits for it, runs [3 h, 4 h).
    # Servable (issue 35, gfs's series): q cannot start within a period while h fills the node
    # and nothing was freed, so hours 0-2 peak 8, hour 3: 4. The trace-defined series would give
    # hour 0 12 and then 8 (q "ran" [600, 4200) there). The model sees the tracked array, and
    # only completed hours of it.
    trace = a_trace(
        [a_node("n0", gpus=8)],
        [a_job("h", gpus=8, submit=0, duration=3 * 3600), a_job("q", gpus=4, submit=600, duration=3600)],
        horizon=5 * 3600.0,
    )
    run = RunSettings(window_days=5 / 24, drain_days=0.0)
    workload, trace_demand = prepare(trace, run)
    policy = build_policy("gfs")
    demand = demand_for(policy, workload, trace_demand)
    assert demand.observed is not None
    model = RecordingModel(Persistence(demand.pools, demand.pool_hourly))
    sim = Simulation(workload, policy, ModelWithFallback(model, model.inner), demand, SimSettings())
    sim.run()
    assert {ident for _, ident, _ in model.seen} == {id(demand.observed.hourly)}
    last_hour, _, rows = max(model.seen, key=lambda s: s[0])
    assert last_hour == 4
    assert rows[:, 0].tolist() == [8.0, 8.0, 8.0, 4.0]
    # The same series, written for `gfs forecast train --series`.
    write_observed_csv(demand.observed, tmp_path / "gfs.csv")
    back = read_canonical_csv(tmp_path / "gfs.csv")
    assert back.keys == demand.observed.keys
    assert back.hourly[:4, 0].tolist() == [8.0, 8.0, 8.0, 4.0]

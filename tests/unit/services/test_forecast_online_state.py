"""The forecast stream keeps the model's online recalibration state (ml/online.py) in the pool
history: a worker restarted from the changelogged history publishes exactly what an uninterrupted
one does, also across the weekly move of the series' first hour."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np

from gfs.ml.baselines import LastValue
from gfs.ml.calibrated import CalibratedForecaster
from gfs.schemas.forecast import DemandForecast, PoolDemandForecast
from gfs.services.forecast.forecasting import PoolHistory, StreamForecaster
from gfs.services.forecast.pipeline import CompletedHour

H0 = 480_000


def _loader(path: Path, start: datetime) -> CalibratedForecaster:
    return CalibratedForecaster(LastValue())  # the default online recalibration, as shipped


def _hours(n: int) -> list[CompletedHour]:
    rng = np.random.default_rng(7)
    a = (30 + rng.integers(-4, 5, n).cumsum()).clip(0, None)
    b = (10 + rng.integers(-2, 3, n).cumsum()).clip(0, None)
    return [CompletedHour(H0 + h, {"a": float(a[h]), "b": float(b[h])}, float(a[h] + b[h])) for h in range(n)]


def _published(out: tuple[list[DemandForecast], PoolDemandForecast] | None) -> list[tuple[float, float]]:
    assert out is not None
    tenants, pool = out
    rows = [(h.quantiles["0.5"], h.quantiles["0.9"]) for t in tenants for h in t.horizon]
    return rows + [(h.quantiles["0.5"], h.quantiles["0.9"]) for h in pool.horizon]


def _stream(artifact: Path) -> StreamForecaster:
    (artifact / "metadata.json").write_text("{}")  # the loader below ignores it
    return StreamForecaster(artifact=artifact, loader=_loader)


def _run(
    artifact: Path, hours: list[CompletedHour], restart_at: int | None
) -> tuple[list[list[tuple[float, float]]], PoolHistory]:
    history = PoolHistory(max_hours=200, trim_hours=24)  # the first hour moves every 24 h
    stream = _stream(artifact)
    out = []
    for i, hour in enumerate(hours):
        if i == restart_at:  # the worker dies: only the changelogged history survives
            history = PoolHistory.from_json(history.to_json())
            stream = _stream(artifact)
        history.add(hour)
        out.append(_published(stream.forecast("A100", history)))
    return out, history


def test_restart_resumes_the_online_state_and_publishes_the_same_forecasts(tmp_path: Path) -> None:
    hours = _hours(300)
    straight, end = _run(tmp_path, hours, None)
    restarted, _ = _run(tmp_path, hours, 260)
    assert restarted == straight
    # The state is really in use: tenants' levels moved away from 0.9, and the series' first
    # hour moved (trimmed) while the state was carried in absolute hours.
    assert end.online is not None and end.first_hour is not None and end.first_hour > H0
    alphas = [a for _, a in end.online["series"]["alpha"]]
    assert alphas and any(abs(x - 0.1) > 1e-6 for a in alphas for x in a)
    assert end.online["through"] == H0 + 300


def test_a_restart_without_the_state_would_differ(tmp_path: Path) -> None:
    # Control: the same run with the state dropped at hour 260 publishes different quantiles,
    # so the test above is not vacuous.
    hours = _hours(300)
    straight, _ = _run(tmp_path, hours, None)
    history = PoolHistory(max_hours=200, trim_hours=24)
    stream = _stream(tmp_path)
    lost = []
    for i, hour in enumerate(hours):
        if i == 260:
            history.online = None
        history.add(hour)
        lost.append(_published(stream.forecast("A100", history)))
    assert lost[:260] == straight[:260] and lost[260:] != straight[260:]

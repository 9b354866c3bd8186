"""The forecast stream agrees with the simulator's persistence forecast: at a pool's first hour
(no completed hour: zeros, so the quota floors HP demand at what runs and queues now, exactly as
the simulator's quota does) and at later hours (the same pool q90 on the same hourly peaks)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gfs.services.core.naive_forecasts import Persistence
from gfs.services.core.quota import ForecastQuota, QuotaInputs
from gfs.services.forecast.app import ForecastServiceSettings
from gfs.services.forecast.forecasting import PoolHistory, StreamForecaster, hour_start
from gfs.services.forecast.pipeline import CompletedHour
from gfs.services.quota.book import PoolBook, StatusView
from gfs.services.quota.mapping import forecast_view
from gfs.services.quota.service import QuotaServiceSettings

H0 = 480_000  # an hour index (hours since the epoch)
HOUR_S = 3600.0


def _status(at: float, **kw: float) -> StatusView:
    values = {"capacity": 100, "idle_gpus": 30, "spot_in_use": 10.0, "hp_running": 50.5, "hp_queued": 5.0}
    values.update(kw)
    return StatusView(observed_s=at, head_wait_s=None, quota_held_wait_s=None, **values)  # type: ignore[arg-type]


def test_the_first_hour_forecast_is_the_simulators_persistence_on_an_empty_history() -> None:
    forecaster = StreamForecaster(artifact=None)
    tenants, pool = forecaster.first_hour_forecast("A100", ["x"], H0)
    assert pool.origin_time == hour_start(H0) and pool.fallback and pool.model_name == "persistence"
    assert [(t.tenant, t.fallback) for t in tenants] == [("x", True)] and pool.tenants == 1
    assert [h.hour_ahead for h in pool.horizon] == [1, 2, 3, 4]
    assert all(h.quantiles == {"0.5": 0.0, "0.9": 0.0} and h.mean == h.std == 0.0 for h in pool.horizon)
    assert all(h.quantiles["0.9"] == 0.0 for h in tenants[0].horizon)
    # The simulator's source, asked at its first hour (no history), says the same.
    sim = Persistence(("A100",), np.zeros((0, 1))).predict((("A100", "x"),), np.zeros((0, 1)), 0, 4)
    assert list(sim.pool_quantile("A100", 0.9)) == [h.quantiles["0.9"] for h in pool.horizon]
    assert forecaster.fallbacks == 0  # by design, not a model failure


def test_with_a_model_configured_the_first_hour_forecast_keeps_its_name_flagged(tmp_path: Path) -> None:
    # As when the model answers with persistence for lack of lookback: the model's name, flagged;
    # the model itself is not loaded (it cannot answer without history).
    forecaster = StreamForecaster(artifact=tmp_path, loader=_no_loader)
    _, pool = forecaster.first_hour_forecast("A100", [], H0)
    assert (pool.model_name, pool.fallback, pool.tenants) == ("lstm", True, 0)


def _no_loader(path: Path, start: datetime) -> Any:
    raise AssertionError("the first-hour forecast must not load the model")


def test_the_quota_from_the_first_hour_forecast_equals_the_simulators() -> None:
    # Capacity 100, HP running 50.5 + queued 5 = 55.5: zeros floored at 55.5 -> usage floor 55,
    # spare 45 every hour, eta 1: Q = 45 for 1, 2 and 4 h. Without the forecast the live quota
    # fell back to spot in use + idle = 10 + 30 = 40.
    at = H0 * HOUR_S + 1200.0  # 20 minutes into the pool's first hour
    _, pool_fc = StreamForecaster(artifact=None).first_hour_forecast("A100", ["x"], H0)
    book = PoolBook("A100")
    book.update_status(_status(at))
    no_forecast = book.compute(at, refresh_s=300)
    assert no_forecast is not None and dict(no_forecast.quota) == {1: 40.0, 2: 40.0, 4: 40.0}
    assert book.update_forecast(forecast_view(pool_fc))
    out = book.compute(at, refresh_s=300)
    assert out is not None and out.forecast is not None and out.forecast.fallback
    assert dict(out.quota) == {1: 45.0, 2: 45.0, 4: 45.0}
    assert out.inputs.hp_quantile is not None and list(out.inputs.hp_quantile) == [0.0] * 4
    # ... which is what the simulator's quota computes with hp_quantile = zeros.
    sim = ForecastQuota().refresh(
        QuotaInputs(capacity=100, idle_gpus=30, spot_in_use=10.0, hp_quantile=np.zeros(4), eta=1.0,
                    failed_recent=0, succeeded_recent=0, head_wait_s=None, hp_observed=55.5)
    )  # fmt: skip
    assert {h: sim.quota[h] for h in (1, 2, 4)} == dict(out.quota)
    # Later in the first hour (40 minutes on) the same four hours still apply.
    later = book.compute(at + 2400.0, refresh_s=300)
    assert later is not None and dict(later.quota) == {1: 45.0, 2: 45.0, 4: 45.0}


def _peaks(hours: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hourly peaks of two tenants and of the pool total (which is not their sum)."""
    rng = np.random.default_rng(seed)
    tenants = np.round(rng.uniform(0, 40, size=(hours, 2)), 1)
    pool = np.round(tenants.sum(axis=1) - rng.uniform(0, 5, size=hours), 1)
    return tenants, pool


def _completed(h: int, tenants: np.ndarray, pool: np.ndarray) -> CompletedHour:
    return CompletedHour(H0 + h, {"a": float(tenants[h, 0]), "b": float(tenants[h, 1])}, float(pool[h]))


@pytest.mark.parametrize("hours", [1, 2, 5, 30, 200])
def test_later_hours_give_the_simulators_persistence_q90(hours: int) -> None:
    tenants, pool = _peaks(hours + 3, seed=hours)
    history = PoolHistory(max_hours=24 * 14)
    for h in range(hours):
        history.add(_completed(h, tenants, pool))
    out = StreamForecaster(artifact=None).forecast("A100", history)
    assert out is not None
    pool_fc = out[1]
    assert pool_fc.origin_time == hour_start(H0 + hours)
    # The simulator: every pool's series from the trace's first hour (here H0), hours past `end`
    # present but unseen, another pool beside it.
    keys = (("A100", "a"), ("A100", "b"), ("H100", "c"))
    hourly = np.column_stack([tenants, np.ones(hours + 3)])
    pool_hourly = np.column_stack([pool, np.full(hours + 3, 7.0)])
    sim = Persistence(("A100", "H100"), pool_hourly).predict(keys, hourly, hours, 4)
    expected = [float(x) for x in sim.pool_quantile("A100", 0.9)]
    assert [h.quantiles["0.9"] for h in pool_fc.horizon] == expected
    # The quota book reads level "0.9" as it is, at any time in the forecast's first hour.
    view = forecast_view(pool_fc)
    now = hours * HOUR_S + H0 * HOUR_S + 900.0
    assert list(view.quantile(0.9, now)) == expected


def test_a_history_started_at_the_trace_origin_sees_the_leading_zeros_as_the_simulator() -> None:
    # The pool's first demand comes at hour 3 of the trace: the simulator's series has zeros for
    # hours 0..2, so its residuals include them; a history started at the origin matches it.
    tenants, pool = _peaks(8, seed=7)
    tenants[:3] = 0.0
    pool[:3] = 0.0
    history = PoolHistory(max_hours=24 * 14, first_hour=H0)
    for h in range(3, 8):
        history.add(_completed(h, tenants, pool))
    assert history.first_hour == H0 and history.pool[:3] == [0.0, 0.0, 0.0]
    out = StreamForecaster(artifact=None).forecast("A100", history)
    assert out is not None
    sim = Persistence(("A100",), pool[:, None]).predict((("A100", "a"), ("A100", "b")), tenants, 8, 4)
    assert [h.quantiles["0.9"] for h in out[1].horizon] == [float(x) for x in sim.pool_quantile("A100", 0.9)]
    # Before the first completed hour nothing is forecast from it (the first-hour forecast is).
    assert StreamForecaster(artifact=None).forecast("A100", PoolHistory(first_hour=H0)) is None


def test_the_first_forecast_marker_survives_the_table_and_old_rows_read_without_it() -> None:
    history = PoolHistory(first_hour=H0, empty_forecast_sent=True)
    assert PoolHistory.from_json(history.to_json()) == history
    old = PoolHistory().to_json()
    del old["empty_forecast_sent"]
    assert not PoolHistory.from_json(old).empty_forecast_sent


def test_clock_settings_and_their_env_names(monkeypatch: pytest.MonkeyPatch) -> None:
    wall = ForecastServiceSettings()
    assert (wall.forecast_clock, wall.topic_clock, wall.commit_interval_s) == ("wall", False, 2.8)
    assert QuotaServiceSettings().quota_clock == "wall"
    monkeypatch.setenv("GFS_FORECAST_CLOCK", "topic")
    monkeypatch.setenv("GFS_QUOTA_CLOCK", "topic")
    topic = ForecastServiceSettings()
    assert (topic.forecast_clock, topic.topic_clock, topic.commit_interval_s) == ("topic", True, 0.1)
    assert QuotaServiceSettings().topic_clock
    assert ForecastServiceSettings(forecast_commit_interval_s=0.5).commit_interval_s == 0.5
    assert topic.forecast_clock_name == "clock"  # ClockTick's default clock
    monkeypatch.setenv("GFS_FORECAST_CLOCK_NAME", "it-clock")
    monkeypatch.setenv("FORECAST_ARTIFACT", "")  # persistence only, not the current directory
    named = ForecastServiceSettings()
    assert (named.forecast_clock_name, named.forecast_artifact) == ("it-clock", None)
    monkeypatch.setenv("FORECAST_HISTORY_ORIGIN", "2026-01-01T00:00:00")  # no offset: UTC
    assert ForecastServiceSettings().forecast_history_origin == datetime(2026, 1, 1, tzinfo=UTC)
    monkeypatch.setenv("GFS_QUOTA_CLOCK", "sometimes")
    with pytest.raises(ValueError, match="wall"):
        QuotaServiceSettings()

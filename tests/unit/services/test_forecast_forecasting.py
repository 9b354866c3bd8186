"""The forecast stream's model step: the pool history window, the shipped LSTM artifact, and the
persistence fallback (flagged, counted, logged once per episode)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from gfs.services.forecast.forecasting import PoolHistory, StreamForecaster, hour_start
from gfs.services.forecast.pipeline import CompletedHour

ARTIFACT = Path(__file__).resolve().parents[3] / "services" / "forecast" / "model" / "lstm-observed"
H0 = 480_000  # an hour index (hours since the epoch)


def _history(hours: int = 48) -> PoolHistory:
    """Tenant a holds 4 GPUs, b 1 (pool 5), except the last hour: a 6, pool 7."""
    history = PoolHistory(max_hours=24 * 14)
    for h in range(hours):
        last = h == hours - 1
        history.add(CompletedHour(H0 + h, {"a": 6.0 if last else 4.0, "b": 1.0}, 7.0 if last else 5.0))
    return history


def test_history_appends_skips_replays_fills_gaps_and_trims() -> None:
    history = PoolHistory(max_hours=3, trim_hours=1)
    assert history.add(CompletedHour(10, {"a": 1.0}, 1.0))
    assert not history.add(CompletedHour(10, {"a": 9.0}, 9.0))  # a replayed hour
    assert history.add(CompletedHour(12, {"b": 2.0}, 2.0))  # hour 11 never sampled: zeros
    assert (history.first_hour, history.pool, history.tenants) == (
        10, [1.0, 0.0, 2.0], {"a": [1.0, 0.0, 0.0], "b": [0.0, 0.0, 2.0]}
    )  # fmt: skip
    history.add(CompletedHour(13, {"a": 3.0}, 3.0))  # window of 3: hour 10 drops out
    assert (history.first_hour, history.end_hour, history.pool) == (11, 14, [0.0, 2.0, 3.0])
    assert PoolHistory.from_json(history.to_json()) == history


def test_old_hours_leave_a_week_at_a_time_so_the_models_origin_moves_weekly() -> None:
    # Keep at least 3 hours, drop 2 at a time: the 4th hour is kept (1 over), the 5th sends hours
    # 0 and 1 out together; the 6th is again only 1 over.
    history = PoolHistory(max_hours=3, trim_hours=2)
    for h in range(4):
        history.add(CompletedHour(h, {"a": float(h)}, float(h)))
    assert (history.first_hour, history.pool) == (0, [0.0, 1.0, 2.0, 3.0])
    history.add(CompletedHour(4, {"a": 4.0}, 4.0))
    assert (history.first_hour, history.pool) == (2, [2.0, 3.0, 4.0])
    history.add(CompletedHour(5, {"a": 5.0}, 5.0))
    assert (history.first_hour, history.pool) == (2, [2.0, 3.0, 4.0, 5.0])


def test_no_artifact_means_a_flagged_persistence_forecast() -> None:
    forecaster = StreamForecaster(artifact=None)
    out = forecaster.forecast("A100", _history())
    assert out is not None
    tenants, pool = out
    assert [t.tenant for t in tenants] == ["a", "b"]
    assert all(t.fallback for t in tenants) and pool.fallback and pool.model_name == "persistence"
    assert pool.origin_time == hour_start(H0 + 48) and pool.tenants == 2
    # Persistence: the last hour's value plus the median 1-step change over the week (0 here).
    assert tenants[0].horizon[0].quantiles["0.5"] == 6.0
    assert pool.horizon[0].quantiles["0.5"] == 7.0
    assert pool.horizon[0].quantiles["0.9"] >= 7.0
    assert forecaster.fallbacks == 1


def test_the_shipped_artifact_runs_the_lstm_not_the_fallback() -> None:
    forecaster = StreamForecaster(artifact=ARTIFACT)
    out = forecaster.forecast("A100", _history(24 * 14))
    assert out is not None
    _, pool = out
    assert not pool.fallback and pool.model_name == "lstm" and forecaster.fallbacks == 0
    assert len(pool.horizon) == 4 and all(h.quantiles["0.9"] >= h.quantiles["0.5"] for h in pool.horizon)
    forecaster.refit("A100", _history(24 * 14))  # the daily warm start runs on the same history


def test_a_broken_model_falls_back_counts_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "metadata.json").write_text("{not json")
    forecaster = StreamForecaster(artifact=tmp_path)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            out = forecaster.forecast("A100", _history())
            assert out is not None and out[1].fallback
    assert forecaster.fallbacks == 3
    assert (
        sum(
            "persistence fallback" in r.getMessage() or "falling back" in r.getMessage()
            for r in caplog.records
        )
        == 1
    )


def test_a_new_artifact_is_picked_up_without_a_restart(tmp_path: Path) -> None:
    # The loader runs again only when the artifact's metadata changes on disk (or the origin moves).
    (tmp_path / "metadata.json").write_text("{}")
    loads: list[float] = []

    class Fixed:
        def fit(self, keys: object, hourly: object, end_hour: int) -> None: ...

        def predict(self, keys: object, hourly: object, end_hour: int, horizon: int) -> object:
            raise RuntimeError("only the loading is under test")

    def loader(path: Path, start: object) -> Fixed:
        loads.append((path / "metadata.json").stat().st_mtime)
        return Fixed()

    forecaster = StreamForecaster(artifact=tmp_path, loader=loader)  # type: ignore[arg-type]
    history = _history()
    forecaster.forecast("A100", history)
    forecaster.forecast("A100", history)
    assert len(loads) == 1
    os.utime(tmp_path / "metadata.json", (loads[0] + 60, loads[0] + 60))  # a new artifact lands
    forecaster.forecast("A100", history)
    assert len(loads) == 2 and loads[1] == loads[0] + 60

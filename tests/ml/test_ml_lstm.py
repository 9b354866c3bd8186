"""The LSTM forecaster: learning, determinism, artifact round trip, leakage, bad input."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from ml_builders import seasonal_series, step_series

from gfs.ml.artifact import METADATA, save_artifact
from gfs.ml.calibrated import CalibratedForecaster
from gfs.ml.inference import load_forecaster
from gfs.ml.series import SeriesError
from gfs.ml.training import LstmTraining
from gfs.ml.zoo import build_forecaster

FAST = LstmTraining(max_epochs=25, patience=4, samples_per_epoch=2048, warm_max_epochs=2)


def _lstm(series, *, seed: int = 0) -> CalibratedForecaster:  # type: ignore[no-untyped-def]
    f = build_forecaster("lstm", series.keys, start=series.start, seed=seed)
    f.model.train_config = FAST  # type: ignore[attr-defined]
    return f


@pytest.fixture(scope="module")
def trained() -> tuple[CalibratedForecaster, object]:
    s = seasonal_series(days=35)
    f = _lstm(s)
    f.fit(s.keys, s.values, s.hours - 72)
    return f, s


def test_learns_daily_weekly_series_far_below_persistence(trained) -> None:  # type: ignore[no-untyped-def]
    f, s = trained
    origins = np.arange(s.hours - 72, s.hours - 4)
    errs, persist = [], []
    for o in origins:
        fc = f.predict(s.keys, s.values, int(o), 4)
        y = s.values[o : o + 4]
        errs.append(np.abs(fc.q50 - y).mean())
        persist.append(np.abs(s.values[o - 1][None, :] - y).mean())
    assert np.mean(errs) < 0.5 * np.mean(persist), (np.mean(errs), np.mean(persist))


def test_shapes_and_protocol_fields(trained) -> None:  # type: ignore[no-untyped-def]
    f, s = trained
    fc = f.predict(s.keys, s.values, s.hours - 10, 4)
    for arr in (fc.mean, fc.std, fc.q50, fc.q90):
        assert arr.shape == (4, len(s.keys))
    assert fc.keys == s.keys and fc.fallback is False
    assert fc.pool_quantile("pool-a", 0.9).shape == (4,)
    assert isinstance(f.name, str) and f.version.startswith("lstm")


def test_deterministic_under_a_seed() -> None:
    s = step_series(days=12, tenants=2)
    a, b = _lstm(s, seed=3), _lstm(s, seed=3)
    a.fit(s.keys, s.values, 240)
    b.fit(s.keys, s.values, 240)
    fa, fb = a.predict(s.keys, s.values, 260, 4), b.predict(s.keys, s.values, 260, 4)
    np.testing.assert_array_equal(fa.q50, fb.q50)
    np.testing.assert_array_equal(fa.q90, fb.q90)


def test_artifact_round_trip_and_loads_without_training_code(trained, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f, s = trained
    save_artifact(f.model, tmp_path / "art")
    meta = (tmp_path / "art" / METADATA).read_text()
    for field in ("normalisation", "training", "validation", "version", "lookback_hours"):
        assert field in meta
    g = load_forecaster(tmp_path / "art")
    end = s.hours - 5
    # a fresh wrapper on f's weights: f itself carries the online calibration state of the
    # forecasts earlier tests asked it for, a newly loaded artifact starts without one
    fa, fb = load_forecaster_like(f).predict(s.keys, s.values, end, 4), g.predict(s.keys, s.values, end, 4)
    np.testing.assert_allclose(fa.q90, fb.q90, rtol=1e-6)
    assert g.version == f.version
    moved = load_forecaster(tmp_path / "art", start=datetime(2020, 5, 1))
    assert moved.model.cal.start == datetime(2020, 5, 1)  # type: ignore[attr-defined]
    code = (
        "import sys; from pathlib import Path; from gfs.ml.inference import load_forecaster;"
        f"load_forecaster(Path({str(tmp_path / 'art')!r})); print('gfs.ml.training' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_no_leakage_changing_data_after_origin_changes_no_forecast(trained) -> None:  # type: ignore[no-untyped-def]
    f, s = trained
    origin = s.hours - 30
    altered = s.values.copy()
    altered[origin:] = altered[origin:] * 3 + 17  # rewrite everything from the origin on
    a = load_forecaster_like(f).predict(s.keys, s.values, origin, 4)
    b = load_forecaster_like(f).predict(s.keys, altered, origin, 4)
    np.testing.assert_array_equal(a.q50, b.q50)
    np.testing.assert_array_equal(a.q90, b.q90)
    np.testing.assert_array_equal(a.pool_quantile("pool-a", 0.9), b.pool_quantile("pool-a", 0.9))
    # ... while changing data before it does change the forecast (the test can fail)
    altered[origin - 1] += 20
    c = load_forecaster_like(f).predict(s.keys, altered, origin, 4)
    assert not np.array_equal(a.q50, c.q50)


def load_forecaster_like(f: CalibratedForecaster) -> CalibratedForecaster:
    """A fresh wrapper around the same frozen weights (own, empty cache)."""
    return CalibratedForecaster(f.model)


def test_unknown_tenant_uses_the_shared_unknown_embedding(trained) -> None:  # type: ignore[no-untyped-def]
    f, s = trained
    keys = (*s.keys[:-1], ("pool-new", "never-seen"))
    fc = load_forecaster_like(f).predict(keys, s.values, s.hours - 5, 4)
    assert np.all(np.isfinite(fc.q90)) and not fc.fallback
    tenant_ids, pool_ids = f.model.ids(keys)  # type: ignore[attr-defined]
    assert tenant_ids[-1] == 0 and pool_ids[-1] == 0


def test_bad_input(trained) -> None:  # type: ignore[no-untyped-def]
    f, s = trained
    g = load_forecaster_like(f)
    end = s.hours - 5
    short_gap = s.values.copy()
    short_gap[end - 3 : end - 1, 0] = np.nan  # 2 h gap: forward filled
    assert np.all(np.isfinite(g.predict(s.keys, short_gap, end, 4).q90))
    long_gap = s.values.copy()
    long_gap[end - 10 : end - 4, 1] = np.nan
    with pytest.raises(SeriesError, match="gap of 6 h"):
        load_forecaster_like(f).predict(s.keys, long_gap, end, 4)
    with pytest.raises(SeriesError, match="shape"):
        g.predict(s.keys[:1], s.values, end, 4)
    with pytest.raises(ValueError, match="asked for 5"):
        g.predict(s.keys, s.values, end, 5)
    # too short a history: documented fallback to flagged persistence
    fc = load_forecaster_like(f).predict(s.keys, s.values, 100, 4)
    assert fc.fallback
    np.testing.assert_array_equal(fc.q50[0], s.values[99])


def test_too_short_history_to_train_is_a_clear_error() -> None:
    s = step_series(days=8)
    with pytest.raises(SeriesError, match="too short to train"):
        _lstm(s).fit(s.keys, s.values, 170)


def test_warm_start_retrain_continues_from_current_weights(trained) -> None:  # type: ignore[no-untyped-def]
    f, s = trained
    fits = f.model.info.fits  # type: ignore[attr-defined]
    before = {k: v.clone() for k, v in f.model.net.state_dict().items()}  # type: ignore[attr-defined]
    f.fit(s.keys, s.values, s.hours - 48)
    assert f.model.info.fits == fits + 1  # type: ignore[attr-defined]
    after = f.model.net.state_dict()  # type: ignore[attr-defined]
    assert any(not np.array_equal(before[k].numpy(), after[k].numpy()) for k in before)

"""The simulator's forecast sources, checked against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from gfs.services.core.naive_forecasts import Oracle, Persistence, SeasonalNaive

KEYS = (("P", "org"),)


def _series(values: list[float]) -> np.ndarray:
    return np.asarray(values, dtype=float)[:, None]


def test_oracle_is_the_future() -> None:
    hourly = _series([1, 2, 3, 4, 5])
    fc = Oracle(("P",), hourly).predict(KEYS, hourly, 2, 4)
    # hours 2, 3, 4, then past the end repeats hour 4
    assert fc.pool_quantile("P", 0.9).tolist() == [3, 4, 5, 5]


def test_persistence_adds_the_residual_quantile() -> None:
    hourly = _series([0, 4, 2, 6])
    fc = Persistence(("P",), hourly).predict(KEYS, hourly, 4, 2)
    # base = 6. 1-step changes: 4, -2, 4; 2-step: 2, 2. Both horizons keep the last 2 residuals
    # (the common length): h1 [-2, 4] -> q90 = -2 + 0.9 * 6 = 3.4; h2 [2, 2] -> 2.
    assert fc.pool_quantile("P", 0.9) == pytest.approx([9.4, 8.0])
    assert fc.mean[:, 0].tolist() == [6.0, 6.0]


def test_persistence_uses_only_the_past() -> None:
    hourly = _series([0, 4, 2, 600])
    fc = Persistence(("P",), hourly).predict(KEYS, hourly, 3, 1)
    # end_hour 3: history [0, 4, 2]; base 2; 1-step changes 4, -2 -> q90 = -2 + 0.9 * 6 = 3.4
    assert fc.pool_quantile("P", 0.9) == pytest.approx([5.4])


def test_seasonal_naive_uses_the_same_hour_yesterday_with_short_history() -> None:
    day = [float(h) for h in range(24)]
    hourly = _series(day + day)  # two identical days: seasonal changes are all 0
    fc = SeasonalNaive(("P",), hourly).predict(KEYS, hourly, 48, 3)
    # < 2 weeks of history -> lag 24: hours 48, 49, 50 take hours 24, 25, 26 = 0, 1, 2
    assert fc.pool_quantile("P", 0.9).tolist() == [0.0, 1.0, 2.0]

"""Baselines as raw models: last-value (persistence), seasonal-naive (same hour yesterday), EWMA.

Their raw q90 is the point forecast itself; CalibratedForecaster then adds the 0.9 quantile of the
method's own residuals over the 7 days before the origin, per series and horizon (issue 5).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gfs.ml.series import SeriesKey

BASELINE_VERSION = "1"


class LastValue:
    name = "last-value"
    version = BASELINE_VERSION
    min_history = 1

    def fit(self, keys: Sequence[SeriesKey], values: np.ndarray, end_hour: int) -> None:
        """Nothing to learn."""

    def raw(
        self, keys: Sequence[SeriesKey], values: np.ndarray, origins: np.ndarray, horizon: int
    ) -> tuple[np.ndarray, np.ndarray]:
        last = values[np.asarray(origins) - 1]  # [n_o, N]
        point = np.repeat(last[:, None, :], horizon, axis=1)
        return point, point


class SeasonalNaive:
    """Value at the same hour one period (default a day) before the target hour."""

    name = "seasonal-naive"
    version = BASELINE_VERSION

    def __init__(self, period: int = 24) -> None:
        self.period = period
        self.min_history = period

    def fit(self, keys: Sequence[SeriesKey], values: np.ndarray, end_hour: int) -> None:
        """Nothing to learn."""

    def raw(
        self, keys: Sequence[SeriesKey], values: np.ndarray, origins: np.ndarray, horizon: int
    ) -> tuple[np.ndarray, np.ndarray]:
        if horizon > self.period:
            raise ValueError(f"horizon {horizon} exceeds the season {self.period}")
        idx = np.asarray(origins)[:, None] + np.arange(horizon)[None, :] - self.period  # [n_o, H]
        point = values[idx]  # [n_o, H, N]
        return point, point


class Ewma:
    """Exponentially weighted mean of the last `span` hours, flat over the horizon.

    fit() picks alpha from a small grid by MAE at horizon 1 on the history it is given (hours
    before end_hour only), so the backtest never tunes on the holdout.
    """

    name = "ewma"
    version = BASELINE_VERSION
    min_history = 1
    GRID = (0.2, 0.4, 0.6, 0.8)

    def __init__(self, alpha: float = 0.6, span: int = 48) -> None:
        self.alpha = alpha
        self.span = span

    def _weights(self, alpha: float) -> np.ndarray:
        return alpha * (1.0 - alpha) ** np.arange(self.span)  # weight of x[t-1-k]

    def _point(self, values: np.ndarray, origins: np.ndarray, alpha: float) -> np.ndarray:
        origins = np.asarray(origins, dtype=np.int64)
        idx = origins[:, None] - 1 - np.arange(self.span)[None, :]  # [n_o, span]
        ok = idx >= 0
        w = self._weights(alpha)[None, :] * ok
        x = values[np.where(ok, idx, 0)]  # [n_o, span, N]
        return (w[:, :, None] * x).sum(axis=1) / w.sum(axis=1)[:, None]

    def fit(self, keys: Sequence[SeriesKey], values: np.ndarray, end_hour: int) -> None:
        origins = np.arange(max(1, end_hour - 24 * 21), end_hour)
        if origins.size < 24:
            return
        errors = {
            a: float(np.abs(values[origins] - self._point(values, origins, a)).mean()) for a in self.GRID
        }
        self.alpha = min(errors, key=lambda a: (errors[a], a))

    def raw(
        self, keys: Sequence[SeriesKey], values: np.ndarray, origins: np.ndarray, horizon: int
    ) -> tuple[np.ndarray, np.ndarray]:
        level = self._point(values, origins, self.alpha)
        point = np.repeat(level[:, None, :], horizon, axis=1)
        return point, point

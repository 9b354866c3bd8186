"""Forecasts that need no model, implementing the core's Forecaster protocol: the simulator's
sources, and persistence is also the live forecast stream's fallback (one copy for both).

- `oracle`: the true future of the demand series (an upper bound on what a forecast can do);
- `persistence`: the last hourly value plus the empirical residual quantile of h-step changes
  over the last 7 days;
- `seasonal-naive`: the value one week earlier (one day if less than two weeks of history) plus
  the empirical residual quantile of that seasonal change over the last 7 days.

Pool-level quantiles use the pool's own total series (demand.py's `pool_hourly`, the hourly peak
of the per-minute pool total), never the sum of tenant quantiles.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import cast

import numpy as np

from gfs.services.core.forecast import DemandForecast, SeriesKey

RESIDUAL_HOURS = 168  # 7 days of residuals
WEEK_H = 168
DAY_H = 24


class EmpiricalForecast:
    """Point forecast plus past residuals per horizon step, per series and per pool.

    Per-series statistics are computed on first use: the quota needs only pool quantiles, and
    the per-series quantiles over ~400 series would dominate the hourly forecast cost.
    """

    def __init__(
        self,
        keys: Sequence[SeriesKey],
        base: np.ndarray,  # [horizon, n_series]
        residuals: np.ndarray,  # [n_residuals, horizon, n_series]
        pool_base: Mapping[str, np.ndarray],  # [horizon]
        pool_residuals: Mapping[str, np.ndarray],  # [n_residuals, horizon]
    ) -> None:
        self.keys = tuple(keys)
        self.fallback = False
        self._base = base
        self._res = residuals
        self._pool_base = pool_base
        self._pool_res = pool_residuals
        self._cache: dict[tuple[str, float], np.ndarray] = {}

    def _series_quantile(self, p: float) -> np.ndarray:
        if self._res.shape[0] == 0:
            return self._base
        return np.asarray(self._base + np.quantile(self._res, p, axis=0))

    @functools.cached_property
    def mean(self) -> np.ndarray:
        return self._base

    @functools.cached_property
    def std(self) -> np.ndarray:
        return self._res.std(axis=0) if self._res.shape[0] else np.zeros_like(self._base)

    @functools.cached_property
    def q50(self) -> np.ndarray:
        return self._series_quantile(0.5)

    @functools.cached_property
    def q90(self) -> np.ndarray:
        return self._series_quantile(0.9)

    def pool_quantile(self, pool: str, p: float) -> np.ndarray:
        hit = self._cache.get((pool, p))
        if hit is not None:
            return hit
        base = self._pool_base[pool]
        res = self._pool_res[pool]
        out = np.asarray(base if res.shape[0] == 0 else base + np.quantile(res, p, axis=0), dtype=np.float64)
        self._cache[(pool, p)] = out
        return out


def _history(series: np.ndarray, end_hour: int) -> np.ndarray:
    return series[: max(0, min(end_hour, series.shape[0]))]


def _lag_forecast(hist: np.ndarray, horizon: int, lag_of: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Base forecast and residuals for [T, n] history `hist`.

    lag_of None: persistence, base = last value, residual_h(t) = x[t] - x[t - h].
    lag_of L: seasonal, base_h = x[T + h - 1 - L], residual(t) = x[t] - x[t - L] (same for every h).
    """
    t, n = hist.shape
    base = np.zeros((horizon, n))
    res = np.zeros((0, horizon, n))
    if t == 0:
        return base, res
    if lag_of is None:
        base[:] = hist[-1]
        parts = []
        for h in range(1, horizon + 1):
            lo = max(h, t - RESIDUAL_HOURS)
            parts.append(hist[lo:] - hist[lo - h : t - h] if lo < t else np.zeros((0, n)))
        m = min(len(p) for p in parts)
        res = np.stack([p[len(p) - m :] for p in parts], axis=1) if m else res
        return base, res
    lag = lag_of
    for h in range(horizon):
        idx = t + h - lag
        base[h] = hist[idx] if 0 <= idx < t else hist[-1]
    lo = max(lag, t - RESIDUAL_HOURS)
    if lo < t:
        seasonal = hist[lo:] - hist[lo - lag : t - lag]
        res = np.repeat(seasonal[:, None, :], horizon, axis=1)
    return base, res


class _EmpiricalSource:
    name = "persistence"
    version = "1"

    def __init__(self, pools: Sequence[str], pool_hourly: np.ndarray) -> None:
        self._pools = tuple(pools)
        self._pool_hourly = pool_hourly

    def fit(self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int) -> None:
        """Nothing to learn: the residual window moves with `end_hour`."""

    def _lag(self, end_hour: int) -> int | None:
        return None

    def predict(
        self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int, horizon: int
    ) -> DemandForecast:
        lag = self._lag(end_hour)
        base, res = _lag_forecast(_history(hourly, end_hour), horizon, lag)
        pbase, pres = _lag_forecast(_history(self._pool_hourly, end_hour), horizon, lag)
        forecast = EmpiricalForecast(
            keys,
            base,
            res,
            pool_base={p: pbase[:, i] for i, p in enumerate(self._pools)},
            pool_residuals={p: pres[:, :, i] for i, p in enumerate(self._pools)},
        )
        return cast(DemandForecast, forecast)


class Persistence(_EmpiricalSource):
    name = "persistence"


class SeasonalNaive(_EmpiricalSource):
    name = "seasonal-naive"

    def _lag(self, end_hour: int) -> int | None:
        return WEEK_H if end_hour >= 2 * WEEK_H else DAY_H


class Oracle:
    """The demand series' own future: quantiles equal the truth (hours past the end repeat the
    last hour)."""

    name = "oracle"
    version = "1"

    def __init__(self, pools: Sequence[str], pool_hourly: np.ndarray) -> None:
        self._pools = tuple(pools)
        self._pool_hourly = pool_hourly

    def fit(self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int) -> None:
        """The oracle knows everything already."""

    def predict(
        self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int, horizon: int
    ) -> DemandForecast:
        idx = np.minimum(np.arange(end_hour, end_hour + horizon), hourly.shape[0] - 1)
        truth = hourly[idx]
        pidx = np.minimum(idx, self._pool_hourly.shape[0] - 1)
        ptruth = self._pool_hourly[pidx]
        zero = np.zeros((0, horizon))
        forecast = EmpiricalForecast(
            keys,
            truth,
            np.zeros((0, *truth.shape)),
            pool_base={p: ptruth[:, i] for i, p in enumerate(self._pools)},
            pool_residuals={p: zero for p in self._pools},
        )
        return cast(DemandForecast, forecast)

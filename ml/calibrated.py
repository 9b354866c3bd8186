"""`CalibratedForecaster`: turns any raw model into the Forecaster protocol the quota consumes.

A raw model maps (history, origins) to a point forecast and a raw 0.9 quantile per origin,
horizon and series. This wrapper adds what every model needs the same way, so comparisons are
fair: input checks, the short-history fallback, conformal calibration on the 7 days before the
origin (ml/calibration.py), pool-level quantiles, and a cache of past raw forecasts.

Cache: raw forecasts are kept per origin, so steady-state serving costs one forward pass per new
hour. The cache assumes the history is append-only (hours before an origin never change); it is
cleared by fit() and whenever the keys or horizon change. Call `clear_cache()` after rewriting
past data.

Online recalibration (ml/online.py, on by default): every conformal quantile it publishes, per
tenant and per pool, is scored once its target hour is known, and the level of the next conformal
quantile moves by the adaptive-conformal step. The state survives fit() and cache clears (it is
about the series, not the weights); `online_state` / `restore_online` let the live stream keep it
across restarts. Pass `online=None` for the plain 7-day conformal quantile.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from statistics import NormalDist
from typing import Any, Protocol

import numpy as np

from gfs.ml.calibration import CALIBRATION_HOURS, MIN_CALIBRATION, calibration_cells, residual_quantile
from gfs.ml.forecast import Z90, Forecast
from gfs.ml.online import DEFAULT_ONLINE, OnlineCalibration, OnlineSettings, quantile_at_levels
from gfs.ml.series import SeriesError, SeriesKey, fill_gaps


class RawModel(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def min_history(self) -> int:
        """Earliest origin (hours of history) the model can forecast from."""
        ...

    def fit(self, keys: Sequence[SeriesKey], values: np.ndarray, end_hour: int) -> None: ...

    def raw(
        self, keys: Sequence[SeriesKey], values: np.ndarray, origins: np.ndarray, horizon: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(point, raw q90), each [n_origins, horizon, n_series], from hours < origin only."""
        ...


class Uncertainty(Enum):
    CONFORMAL = "conformal: raw q90 shifted by the 0.9 quantile of its residuals over 7 days"
    GAUSSIAN = "gaussian: mu + z sigma per series; pool sigma = sqrt(sum sigma^2) (paper)"


class CalibratedForecaster:
    def __init__(
        self,
        model: RawModel,
        *,
        uncertainty: Uncertainty = Uncertainty.CONFORMAL,
        p: float = 0.9,
        window: int = CALIBRATION_HOURS,
        online: OnlineSettings | None = DEFAULT_ONLINE,
    ) -> None:
        self.model = model
        self.uncertainty = uncertainty
        self.p = p
        self.window = window
        self.online = online
        self._online: OnlineCalibration | None = None  # built at the first predict (needs horizon)
        self.fallback_count = 0
        # plain attributes (the core's Forecaster protocol declares them settable); fit() refreshes
        self.name: str = model.name
        self.version: str = model.version
        # raw forecasts by origin: _point[o], _q90[o] are [horizon, n_series]; _have[o] marks filled
        self._point = np.zeros((0, 0, 0))
        self._q90 = np.zeros((0, 0, 0))
        self._have = np.zeros(0, dtype=bool)
        self._cache_id: tuple[tuple[SeriesKey, ...], int] | None = None
        self._last: tuple[int, Forecast] | None = None

    def clear_cache(self) -> None:
        self._point = np.zeros((0, 0, 0))
        self._q90 = np.zeros((0, 0, 0))
        self._have = np.zeros(0, dtype=bool)
        self._last = None

    def fit(self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int) -> None:
        values = _clean(hourly, keys, end_hour)
        self.model.fit(tuple(keys), values, end_hour)
        self.version = self.model.version
        self.clear_cache()

    def predict(self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int, horizon: int) -> Forecast:
        keys = tuple(keys)
        values = _clean(hourly, keys, end_hour)  # hours >= end_hour are never read
        if (keys, horizon) != self._cache_id:
            self.clear_cache()
            self._cache_id = (keys, horizon)
        if self._last is not None and self._last[0] == end_hour:
            return self._last[1]  # the simulator asks every 300 s; the hour's answer is fixed
        online = self._observe(keys, values, end_hour, horizon)
        short = end_hour < self.model.min_history
        if short:
            # Documented fallback: too little history for the model -> persistence, flagged.
            self.fallback_count += 1
            return _persistence(keys, values, end_hour, horizon)
        cells = calibration_cells(end_hour, horizon, self.model.min_history, self.window)
        self._fill_cache(keys, values, np.concatenate([*cells, [end_hour]]), horizon)
        point, q90_raw = self._point[end_hour], self._q90[end_hour]
        if self.uncertainty is Uncertainty.GAUSSIAN:
            return self._gaussian(keys, point, q90_raw)
        past_point = [self._point[c, h] for h, c in enumerate(cells)]  # each [n_cells, n_series]
        truth = [values[c + h] for h, c in enumerate(cells)]
        # Online: each series and horizon takes its residual quantile at its own level 1 - alpha.
        levels = online.series.levels(keys) if online is not None else None
        offsets = np.zeros_like(point)
        for h, c in enumerate(cells):
            if len(c) >= MIN_CALIBRATION and levels is not None:
                offsets[h] = quantile_at_levels(truth[h] - self._q90[c, h], levels[h])
            elif len(c):
                offsets[h] = residual_quantile(truth[h] - self._q90[c, h], self.p)
        q50 = np.maximum(point, 0.0)
        q90 = np.maximum(q90_raw + offsets, q50)
        calibrated = all(len(c) >= MIN_CALIBRATION for c in cells)
        if not calibrated:
            self.fallback_count += 1
        if online is not None and calibrated:
            online.series.publish(end_hour, keys, q90)  # scored when its target hours complete

        def pool_fn(pool: str, p: float) -> np.ndarray:
            # Raw pool quantile: summed points plus the tenants' raw spreads (q90 - q50) added in
            # quadrature, rescaled from 0.9 to p; then shifted by the p-quantile of the pool's own
            # residuals over the window, which absorbs whatever dependence the tenants showed.
            # For the baselines the raw spread is 0, i.e. point + Q_p(pool residuals).
            # Online: the pool's own alpha for this p (the quota asks its guarantee rate, the
            # stream 0.5 and 0.9), scored against the pool total, and only while this forecast is
            # the newest (an old forecast asked late is answered but not recorded).
            cols = [j for j, k in enumerate(keys) if k[0] == pool]
            z = NormalDist().inv_cdf(p) / Z90
            current = online is not None and online.through == end_hour and calibrated
            tracker = online.pool_tracker(p) if online is not None and current else None
            plevels = tracker.levels([(pool,)])[:, 0] if tracker is not None else None
            out = point[:, cols].sum(axis=1) + z * _spread(q90_raw[:, cols] - point[:, cols])
            for h, c in enumerate(cells):
                if len(c):
                    past = past_point[h][:, cols]
                    raw = past.sum(axis=1) + z * _spread(self._q90[c, h][:, cols] - past)
                    resid = truth[h][:, cols].sum(axis=1) - raw
                    if plevels is not None:
                        out[h] += quantile_at_levels(resid[:, None], plevels[h : h + 1])[0]
                    else:
                        out[h] += residual_quantile(resid[:, None], p)[0]
            out = np.asarray(np.maximum(out, 0.0), dtype=np.float64)
            if tracker is not None:
                tracker.publish(end_hour, [(pool,)], out[:, None])
            return out

        forecast = Forecast(keys, q50, (q90 - q50) / Z90, q50, q90, not calibrated, pool_fn)
        self._last = (end_hour, forecast)
        return forecast

    def _observe(
        self, keys: tuple[SeriesKey, ...], values: np.ndarray, end_hour: int, horizon: int
    ) -> OnlineCalibration | None:
        """Score the published quantiles whose targets completed before `end_hour` (hours the
        caller has not asked about are still scored, from the history)."""
        if self.online is None or self.uncertainty is not Uncertainty.CONFORMAL:
            return None
        if self._online is None or self._online.horizon != horizon:
            self._online = OnlineCalibration(self.online, self.p, horizon)
        col = {k: j for j, k in enumerate(keys)}
        pool_cols: dict[str, list[int]] = {}
        for j, k in enumerate(keys):
            pool_cols.setdefault(k[0], []).append(j)

        def series_actual(key: tuple[str, ...], hour: int) -> float | None:
            j = col.get((key[0], key[1])) if len(key) == 2 else None
            return None if j is None or hour >= end_hour else float(values[hour, j])

        def pool_actual(key: tuple[str, ...], hour: int) -> float | None:
            cols = pool_cols.get(key[0])
            return None if cols is None or hour >= end_hour else float(values[hour, cols].sum())

        self._online.observe(end_hour, series_actual, pool_actual)
        return self._online

    def online_state(self, hour_offset: int = 0) -> dict[str, Any] | None:
        """The online calibration state as JSON (hours shifted by `hour_offset`), None if off."""
        return None if self._online is None else self._online.to_json(hour_offset)

    def restore_online(self, data: dict[str, Any] | None, hour_offset: int = 0) -> None:
        """Adopt a state from `online_state` (None: start afresh)."""
        if self.online is None:
            return
        self._online = None if data is None else OnlineCalibration.from_json(data, self.online, hour_offset)

    def _fill_cache(
        self, keys: tuple[SeriesKey, ...], values: np.ndarray, origins: np.ndarray, horizon: int
    ) -> None:
        top = int(origins.max()) + 1
        if top > len(self._have):
            size = max(top, 2 * len(self._have), 256)
            grow = size - len(self._have)
            pad = np.zeros((grow, horizon, len(keys)))
            self._point = np.concatenate([self._point.reshape(-1, horizon, len(keys)), pad])
            self._q90 = np.concatenate([self._q90.reshape(-1, horizon, len(keys)), pad.copy()])
            self._have = np.concatenate([self._have, np.zeros(grow, dtype=bool)])
        missing = np.unique(origins[~self._have[origins]])
        if missing.size == 0:
            return
        point, q90 = self.model.raw(keys, values, missing, horizon)
        self._point[missing], self._q90[missing], self._have[missing] = point, q90, True

    def _gaussian(self, keys: tuple[SeriesKey, ...], mu: np.ndarray, q90_raw: np.ndarray) -> Forecast:
        sigma = np.maximum((q90_raw - mu) / Z90, 0.0)
        q50 = np.maximum(mu, 0.0)

        def pool_fn(pool: str, p: float) -> np.ndarray:
            cols = [j for j, k in enumerate(keys) if k[0] == pool]
            m = mu[:, cols].sum(axis=1)
            s = np.sqrt((sigma[:, cols] ** 2).sum(axis=1))
            return np.asarray(np.maximum(m + NormalDist().inv_cdf(p) * s, 0.0), dtype=np.float64)

        return Forecast(keys, mu, sigma, q50, np.maximum(mu + Z90 * sigma, 0.0), False, pool_fn)


def _spread(gaps: np.ndarray) -> np.ndarray:
    """Root of the summed squared per-series spreads along the last axis (independence)."""
    return np.asarray(np.sqrt((np.maximum(gaps, 0.0) ** 2).sum(axis=-1)), dtype=np.float64)


def _clean(hourly: np.ndarray, keys: Sequence[SeriesKey], end_hour: int) -> np.ndarray:
    values = np.asarray(hourly, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] != len(keys):
        raise SeriesError(f"hourly has shape {values.shape}, expected [T, {len(keys)}]")
    if not 0 <= end_hour <= values.shape[0]:
        raise SeriesError(f"end_hour {end_hour} outside [0, {values.shape[0]}]")
    values = values[:end_hour]
    if np.isnan(values).any():
        values = fill_gaps(values, keys, trailing_zero=False)  # short gaps forward filled, long ones raise
    elif (values < 0).any():
        raise SeriesError("negative demand in input")
    return values


def _persistence(keys: tuple[SeriesKey, ...], values: np.ndarray, end_hour: int, horizon: int) -> Forecast:
    last = values[end_hour - 1] if end_hour > 0 else np.zeros(len(keys))
    point = np.repeat(last[None, :], horizon, axis=0)
    zero = np.zeros_like(point)

    def pool_fn(pool: str, p: float) -> np.ndarray:
        return np.asarray(
            point[:, [j for j, k in enumerate(keys) if k[0] == pool]].sum(axis=1), dtype=np.float64
        )

    return Forecast(keys, point, zero, point, point.copy(), True, pool_fn)

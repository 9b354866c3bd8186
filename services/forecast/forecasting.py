"""The forecast stream's model step: a pool's completed hours -> per-tenant and per-pool forecasts.

`PoolHistory` keeps the last `max_hours` completed hours of one pool (per tenant and the pool's
own peak series), as plain data for a Faust table. `StreamForecaster` turns it into wire payloads
with the calibrated model from an artifact (`gfs.ml.inference.load_forecaster`, the live time origin
passed in so calendar features are right) or, when there is no artifact or the model fails, the
simulator's persistence forecast (`gfs.services.core.naive_forecasts`), flagged as a fallback.

The model's online recalibration state (ml/online.py: per tenant and pool, the level of the next
conformal quantile, stepped by every published quantile's hit or miss) lives in the pool's
history, so it is changelogged with it: before each forecast the model adopts the stored state,
after it the state goes back (hours stored absolute, as the series' first hour moves). A restarted
worker therefore resumes the same levels, and scores the forecasts it published before the crash.

Before a pool's first hour completes, `first_hour_forecast` answers what the simulator's
persistence answers from an empty history: zeros (flagged as persistence is). The quota then
floors HP demand at what runs and queues now, as the simulator's does, instead of falling back to
the idle GPUs for want of any forecast.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import NormalDist
from typing import Any, Protocol

import numpy as np

from gfs.schemas.forecast import DemandForecast, HourlyDemand, PoolDemandForecast
from gfs.services.core.forecast import DemandForecast as CoreForecast
from gfs.services.core.naive_forecasts import Persistence
from gfs.services.forecast.pipeline import CompletedHour

log = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
Z90 = NormalDist().inv_cdf(0.9)


def hour_start(hour: int) -> datetime:
    """Hour index (hours since the Unix epoch) -> its start, UTC."""
    return datetime(1970, 1, 1, tzinfo=UTC) + hour * HOUR


@dataclass(slots=True)
class PoolHistory:
    """At least the last `max_hours` completed hours of one pool (hours with no row for a tenant
    are 0). Old hours are dropped a week at a time, not one per hour: the series' first hour is the
    model's time origin, and a moving origin would make it recompute everything every hour.

    A history created with `first_hour` set and no hours starts its series there: hours before
    the pool's first completed one are zeros (the simulator's series of every pool starts at the
    trace's first hour, and persistence's residuals see those zeros too)."""

    max_hours: int = 14 * 24
    trim_hours: int = 7 * 24
    first_hour: int | None = None
    tenants: dict[str, list[float]] = field(default_factory=dict)
    pool: list[float] = field(default_factory=list)
    # The empty-history forecast went out (before the first completed hour): not sent again.
    empty_forecast_sent: bool = False
    # The model's online recalibration state (ml/online.py), absolute hours; None: none yet.
    online: dict[str, Any] | None = None

    @property
    def end_hour(self) -> int | None:
        """The hour after the last completed one."""
        return None if self.first_hour is None else self.first_hour + len(self.pool)

    def add(self, hour: CompletedHour) -> bool:
        """Append a completed hour (False for one already held: a replay after a restart)."""
        if self.first_hour is None:
            self.first_hour = hour.hour
        end = self.first_hour + len(self.pool)
        if hour.hour < end:
            return False
        while end < hour.hour:  # hours nobody sampled (the stream was down): their levels are unknown
            self._append({}, 0.0)
            end += 1
        self._append(hour.tenants, hour.pool)
        drop = len(self.pool) - self.max_hours
        if drop >= self.trim_hours:
            self.first_hour += drop
            del self.pool[:drop]
            for values in self.tenants.values():
                del values[:drop]
        return True

    def _append(self, tenants: dict[str, float], pool: float) -> None:
        n = len(self.pool)
        for tenant in tenants:
            self.tenants.setdefault(tenant, [0.0] * n)
        for tenant, values in self.tenants.items():
            values.append(float(tenants.get(tenant, 0.0)))
        self.pool.append(float(pool))

    def arrays(self, pool_name: str) -> tuple[tuple[tuple[str, str], ...], np.ndarray, np.ndarray]:
        names = sorted(self.tenants)
        keys = tuple((pool_name, t) for t in names)
        hourly = np.array([self.tenants[t] for t in names], dtype=np.float64).T.reshape(
            len(self.pool), len(names)
        )
        return keys, hourly, np.asarray(self.pool, dtype=np.float64).reshape(-1, 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "max_hours": self.max_hours,
            "trim_hours": self.trim_hours,
            "first_hour": self.first_hour,
            "tenants": self.tenants,
            "pool": self.pool,
            "empty_forecast_sent": self.empty_forecast_sent,
            "online": self.online,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> PoolHistory:
        tenants = {k: list(v) for k, v in data["tenants"].items()}
        return PoolHistory(
            int(data["max_hours"]),
            int(data.get("trim_hours", 7 * 24)),
            data["first_hour"],
            tenants,
            list(data["pool"]),
            bool(data.get("empty_forecast_sent", False)),  # absent in tables written before it
            data.get("online"),  # ditto
        )


class _Model(Protocol):
    def fit(self, keys: Sequence[tuple[str, str]], hourly: np.ndarray, end_hour: int) -> None: ...
    def predict(
        self, keys: Sequence[tuple[str, str]], hourly: np.ndarray, end_hour: int, horizon: int
    ) -> CoreForecast: ...


@dataclass(slots=True)
class StreamForecaster:
    """Forecasts for a pool from its history; counts fallbacks and logs each episode once."""

    artifact: Path | None
    horizon: int = 4
    model_name: str = "lstm"
    loader: Callable[[Path, datetime], _Model] | None = None
    fallbacks: int = 0
    # One model per pool: a model caches its backtests per series and origin, and a shared one
    # would drop them at every pool change. pool -> (artifact mtime, time origin, model).
    _loaded: dict[str, tuple[float, datetime, _Model]] = field(default_factory=dict, init=False)
    _in_fallback: bool = field(default=False, init=False)

    @property
    def version(self) -> str:
        if self.artifact is None:
            return "persistence"
        return f"{self.artifact.name}@{self._artifact_mtime():.0f}"

    def _artifact_mtime(self) -> float:
        assert self.artifact is not None
        meta = self.artifact / "metadata.json"
        return meta.stat().st_mtime if meta.exists() else 0.0

    def _model(self, pool: str, start: datetime) -> _Model | None:
        """The artifact's model with hour 0 at `start`; reloaded when the artifact changes on disk
        (a new one is picked up without a restart) or the series' origin moves."""
        if self.artifact is None:
            return None
        mtime = self._artifact_mtime()
        cached = self._loaded.get(pool)
        if cached is not None and cached[0] == mtime and cached[1] == start:
            return cached[2]
        loader = self.loader or _load_artifact
        model = loader(self.artifact, start)
        self._loaded[pool] = (mtime, start, model)
        return model

    def refit(self, pool_name: str, history: PoolHistory) -> None:
        """Warm-start the model on the pool's history (run off the event loop)."""
        start_hour = history.first_hour
        if start_hour is None:
            return
        model = self._model(pool_name, hour_start(start_hour))
        if model is not None:
            keys, hourly, _ = history.arrays(pool_name)
            model.fit(keys, hourly, hourly.shape[0])

    def forecast(
        self, pool_name: str, history: PoolHistory
    ) -> tuple[list[DemandForecast], PoolDemandForecast] | None:
        """Forecasts for the hours after the last completed one (None before any hour completed)."""
        if history.first_hour is None or not history.pool:
            return None
        keys, hourly, pool_hourly = history.arrays(pool_name)
        end = hourly.shape[0]
        origin = hour_start(history.first_hour + end)
        fallback = False
        model: _Model | None = None
        try:
            model = self._model(pool_name, hour_start(history.first_hour))
            if model is None:
                raise LookupError("no model artifact configured")
            _restore_online(model, history)
            fc = model.predict(keys, hourly, end, self.horizon)
            fallback = bool(getattr(fc, "fallback", False))
        except Exception as exc:
            fc = Persistence((pool_name,), pool_hourly).predict(keys, hourly, end, self.horizon)
            fallback = True
            self.fallbacks += 1
            if not self._in_fallback:
                log.warning(
                    "forecast: falling back to persistence (%r); logged once until the model works", exc
                )
            self._in_fallback = True
        else:
            if self._in_fallback:
                log.info("forecast: the model works again")
            self._in_fallback = False
        name = "persistence" if fallback and self.artifact is None else self.model_name
        out = self._payloads(pool_name, keys, fc, origin, name, fallback)
        if model is not None:
            _save_online(model, history)  # after _payloads: it asks for the published pool quantiles
        return out

    def first_hour_forecast(
        self, pool_name: str, tenants: Sequence[str], origin_hour: int
    ) -> tuple[list[DemandForecast], PoolDemandForecast]:
        """The forecast of a pool with no completed hour yet, from `origin_hour` on: the
        simulator's persistence on an empty history (`_lag_forecast`: all zeros), flagged as
        persistence forecasts are. `tenants`: the series known so far (each forecast at 0).

        Not a model failure, so not counted in `fallbacks`: no model can answer without history."""
        names = sorted(set(tenants))
        keys = tuple((pool_name, t) for t in names)
        empty = np.zeros((0, len(keys)), dtype=np.float64)
        fc = Persistence((pool_name,), np.zeros((0, 1), dtype=np.float64)).predict(
            keys, empty, 0, self.horizon
        )
        name = "persistence" if self.artifact is None else self.model_name
        return self._payloads(pool_name, keys, fc, hour_start(origin_hour), name, True)

    def _payloads(
        self,
        pool_name: str,
        keys: Sequence[tuple[str, str]],
        fc: CoreForecast,
        origin: datetime,
        name: str,
        fallback: bool,
    ) -> tuple[list[DemandForecast], PoolDemandForecast]:
        version = self.version
        tenants = [
            DemandForecast(
                pool=pool_name,
                tenant=tenant,
                origin_time=origin,
                horizon=_hours(fc.mean[:, j], fc.std[:, j], fc.q50[:, j], fc.q90[:, j]),
                model_name=name,
                model_version=version,
                fallback=fallback,
            )
            for j, (_, tenant) in enumerate(keys)
        ]
        q50 = np.asarray(fc.pool_quantile(pool_name, 0.5))
        q90 = np.asarray(fc.pool_quantile(pool_name, 0.9))
        spread = np.maximum(q90 - q50, 0.0) / Z90
        pool_fc = PoolDemandForecast(
            pool=pool_name,
            origin_time=origin,
            horizon=_hours(q50, spread, q50, q90),
            tenants=len(keys),
            model_name=name,
            model_version=version,
            fallback=fallback,
        )
        return tenants, pool_fc


def _hours(mean: np.ndarray, std: np.ndarray, q50: np.ndarray, q90: np.ndarray) -> tuple[HourlyDemand, ...]:
    out = []
    for h in range(len(q50)):
        lo = float(q50[h])
        out.append(
            HourlyDemand(
                hour_ahead=h + 1,
                mean=float(mean[h]),
                std=max(0.0, float(std[h])),
                quantiles={"0.5": lo, "0.9": max(lo, float(q90[h]))},  # never crossing
            )
        )
    return tuple(out)


def _restore_online(model: _Model, history: PoolHistory) -> None:
    """Hand the model the stored online state (models without one, e.g. test stubs, skip)."""
    restore = getattr(model, "restore_online", None)
    if restore is not None and history.first_hour is not None:
        restore(history.online, history.first_hour)


def _save_online(model: _Model, history: PoolHistory) -> None:
    state = getattr(model, "online_state", None)
    if state is not None and history.first_hour is not None:
        history.online = state(history.first_hour)


def _load_artifact(path: Path, start: datetime) -> _Model:
    from gfs.ml.inference import load_forecaster  # torch is imported only when a model is configured

    model: _Model = load_forecaster(path, start=start)
    return model

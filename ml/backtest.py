"""Rolling-origin backtest: train before the holdout, freeze, forecast every holdout hour.

Each model is fit on hours [0, T0) (T0 = start of the last `holdout_days`), then for every target
hour y in [T0, T) and horizon h in 1..4 it is asked, at origin y - h + 1, for a forecast using only
hours before that origin. Calibration windows roll with the origin (they only use known targets);
the weights stay frozen. Metrics are pooled over all (target, horizon, series) cells.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gfs.ml.calibrated import CalibratedForecaster
from gfs.ml.series import DemandSeries
from gfs.ml.zoo import build_forecaster


@dataclass(frozen=True, slots=True)
class Cells:
    """Forecast cells [horizon, n_target_hours, n_series] for one model."""

    y: np.ndarray
    q50: np.ndarray
    q90: np.ndarray
    pool_y: dict[str, np.ndarray]  # [H, n_targets]
    pool_q90: dict[str, np.ndarray]


def pinball(pred: np.ndarray, y: np.ndarray, q: float) -> np.ndarray:
    d = y - pred
    return np.maximum(q * d, (q - 1.0) * d)


def score(y: np.ndarray, q50: np.ndarray, q90: np.ndarray) -> dict[str, float]:
    err = q50 - y
    return {
        "mae": float(np.abs(err).mean()),
        "rmse": float(np.sqrt((err**2).mean())),
        "coverage_p90": float((y <= q90).mean()),
        "pinball_p90": float(pinball(q90, y, 0.9).mean()),
    }


def rolling_cells(
    forecaster: CalibratedForecaster,
    series: DemandSeries,
    t0: int,
    horizon: int = 4,
    on_origin: Callable[[int], None] | None = None,
) -> Cells:
    values, keys = series.values, series.keys
    t_end = series.hours
    n_t = t_end - t0
    y = np.repeat(values[t0:t_end][None], horizon, axis=0)
    q50 = np.full_like(y, np.nan)
    q90 = np.full_like(y, np.nan)
    pools = sorted({k[0] for k in keys})
    pool_q90 = {p: np.full((horizon, n_t), np.nan) for p in pools}
    for origin in range(t0 - horizon + 1, t_end):
        fc = forecaster.predict(keys, values, origin, horizon)
        pq = {p: fc.pool_quantile(p, 0.9) for p in pools}
        for h in range(horizon):
            target = origin + h
            if t0 <= target < t_end:
                q50[h, target - t0] = fc.q50[h]
                q90[h, target - t0] = fc.q90[h]
                for p in pools:
                    pool_q90[p][h, target - t0] = pq[p][h]
        if on_origin:
            on_origin(origin)
    pool_y = {p: y[:, :, [j for j, k in enumerate(keys) if k[0] == p]].sum(axis=2) for p in pools}
    return Cells(y, q50, q90, pool_y, pool_q90)


def summarise(cells: Cells, series: DemandSeries) -> dict[str, object]:
    out: dict[str, object] = dict(score(cells.y, cells.q50, cells.q90))
    out["per_horizon"] = {
        str(h + 1): score(cells.y[h], cells.q50[h], cells.q90[h]) for h in range(cells.y.shape[0])
    }
    per_tenant = {}
    for j, (pool, tenant) in enumerate(series.keys):
        s = score(cells.y[:, :, j], cells.q50[:, :, j], cells.q90[:, :, j])
        s["mean_demand"] = float(cells.y[0, :, j].mean())
        per_tenant[f"{pool}/{tenant}"] = s
    out["per_tenant"] = per_tenant
    out["per_pool"] = {
        p: {
            "coverage_p90": float((cells.pool_y[p] <= cells.pool_q90[p]).mean()),
            "pinball_p90": float(pinball(cells.pool_q90[p], cells.pool_y[p], 0.9).mean()),
            "mean_demand": float(cells.pool_y[p][0].mean()),
        }
        for p in cells.pool_y
    }
    return out


def inference_ms(
    forecaster: CalibratedForecaster, series: DemandSeries, origin: int, n_series: int = 100
) -> float:
    """Median wall time of one raw forward pass for `n_series` series x 4 h (series tiled)."""
    reps = -(-n_series // len(series.keys))
    values = np.tile(series.values[:origin], (1, reps))[:, :n_series]
    keys = [series.keys[j % len(series.keys)] for j in range(n_series)]
    keys = [(p, t if i < len(series.keys) else f"{t}#{i}") for i, (p, t) in enumerate(keys)]
    o = np.array([origin])
    times = []
    for _ in range(7):
        t = time.perf_counter()
        forecaster.model.raw(keys, values, o, 4)
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e3)


def run_backtest(
    series: DemandSeries,
    models: Sequence[str],
    *,
    holdout_days: int = 7,
    seed: int = 0,
    horizon: int = 4,
    log: Callable[[str], None] = lambda _msg: None,
) -> dict[str, object]:
    t0 = series.hours - holdout_days * 24
    if t0 <= 0:
        raise ValueError(f"series of {series.hours} h is shorter than the {holdout_days}-day holdout")
    results: dict[str, object] = {}
    for name in models:
        f = build_forecaster(
            name, series.keys, start=series.start, seed=seed, train_hours=t0, horizon=horizon
        )
        t = time.perf_counter()
        f.fit(series.keys, series.values, t0)
        train_s = time.perf_counter() - t
        cells = rolling_cells(f, series, t0, horizon)
        res = summarise(cells, series)
        res["train_s"] = train_s
        res["infer_ms_per_100_series"] = inference_ms(f, series, series.hours - 1)
        res["version"] = f.version
        res["fallback_count"] = f.fallback_count
        info = getattr(f.model, "info", None) or getattr(getattr(f.model, "inner", None), "info", None)
        if info is not None:
            res["training"] = {"hours": list(info.trained_hours), "validation": info.validation}
        results[name] = res
        log(
            f"{name}: mae {res['mae']:.3f} pinball_p90 {res['pinball_p90']:.3f} cov {res['coverage_p90']:.3f}"
        )
    return {
        "series": {
            "n_series": len(series.keys),
            "hours": series.hours,
            "start": series.start.isoformat(),
            "holdout_start_hour": t0,
            "holdout_days": holdout_days,
            "horizon": horizon,
        },
        "models": results,
    }

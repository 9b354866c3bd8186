"""HP demand per (pool, tenant): the series the spot quota is sized from and the forecasters learn.

Definition (issue 3, "Definitions"): the HP demand of a tenant in a pool at minute m is the sum of
`gpus_per_worker * workers` over its HP jobs with `submit_s <= 60*m < submit_s + duration_s`, i.e.
as if every HP job started on submission. It therefore depends on the trace alone, never on the
policy, so every policy (and the oracle forecast) sees the same series. Per-minute samples are
reduced to hourly peaks (max of the 60 samples of the hour; hour 0 starts at t = 0) because the
quota must cover the worst minute of the hour, not its average.

Memory: 184 days are 265k minutes; a dense [minutes x ~400 series] matrix would take ~850 MB, so
the per-minute curve is built one series at a time (difference array + cumsum) and only the
[hours x series] peaks are kept.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from gfs.services.simulator.traces.gfs_format import format_number
from gfs.services.simulator.traces.records import Trace

MINUTES_PER_HOUR = 60
# Trace t = 0 maps to this instant for calendar features and the canonical CSV (issue 3).
TIME_ORIGIN = datetime(2024, 3, 1, tzinfo=UTC)
CSV_COLUMNS = ("time", "tenant", "pool", "demand_gpus")
# Per-minute sums of fractional requests accumulate float error (~1e-12); requests have at most a
# few decimals, so rounding to 1e-6 GPU removes the noise without touching real values.
_DECIMALS = 6


@dataclass(frozen=True, eq=False)
class DemandSeries:
    """Hourly HP-demand peaks: column i of `hourly` is the series of `keys[i] = (pool, tenant)`.

    `pools` / `pool_hourly` hold each pool's hourly peak of its per-minute total, which is not the
    sum of its tenants' hourly peaks (tenants peak at different minutes). They are None when the
    series was read from the canonical CSV, which has no per-minute information.
    """

    keys: tuple[tuple[str, str], ...]  # (pool, tenant), sorted
    hourly: np.ndarray  # [n_hours, n_series] float
    pools: tuple[str, ...] | None = None
    pool_hourly: np.ndarray | None = None  # [n_hours, n_pools] float

    @property
    def n_hours(self) -> int:
        return int(self.hourly.shape[0])


def _hp_columns(trace: Trace) -> tuple[list[tuple[str, str]], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """HP jobs as arrays: series index, total GPUs, first and past-the-last sampled minute."""
    hp = [j for j in trace.jobs if j.job_class == "HP"]
    keys = sorted({(j.gpu_model, j.organization) for j in hp})
    index = {k: i for i, k in enumerate(keys)}
    series = np.fromiter((index[(j.gpu_model, j.organization)] for j in hp), dtype=np.int64, count=len(hp))
    gpus = np.fromiter((j.gpus_per_worker * j.workers for j in hp), dtype=np.float64, count=len(hp))
    submit = np.fromiter((j.submit_s for j in hp), dtype=np.float64, count=len(hp))
    end = submit + np.fromiter((j.duration_s for j in hp), dtype=np.float64, count=len(hp))
    # Minute m is sampled iff submit <= 60m < end: m >= ceil(submit/60) and m < ceil(end/60).
    first = np.ceil(submit / MINUTES_PER_HOUR).astype(np.int64)
    stop = np.ceil(end / MINUTES_PER_HOUR).astype(np.int64)
    return keys, series, gpus, first, stop


def _minute_curve(first: np.ndarray, stop: np.ndarray, gpus: np.ndarray, n_minutes: int) -> np.ndarray:
    """Per-minute demand over [0, n_minutes) from jobs active on minutes [first, stop)."""
    first = np.minimum(first, n_minutes)
    stop = np.minimum(stop, n_minutes)
    diff = np.bincount(first, weights=gpus, minlength=n_minutes + 1)
    diff -= np.bincount(stop, weights=gpus, minlength=n_minutes + 1)
    return np.cumsum(diff[:n_minutes])


def _hourly_peaks(curve: np.ndarray, n_hours: int) -> np.ndarray:
    peaks = curve.reshape(n_hours, MINUTES_PER_HOUR).max(axis=1)
    return np.asarray(np.round(peaks, _DECIMALS) + 0.0)  # + 0.0 turns -0.0 into 0.0


def hp_demand_series(trace: Trace, *, n_hours: int | None = None) -> DemandSeries:
    """Hourly peaks of per-minute HP demand per (pool = gpu_model, tenant = organization).

    `n_hours` defaults to the hours needed to cover `trace.horizon_s` (at least 1).
    """
    if n_hours is None:
        n_hours = max(1, math.ceil(trace.horizon_s / 3600.0))
    if n_hours < 1:
        raise ValueError(f"n_hours must be >= 1, got {n_hours}")
    n_minutes = n_hours * MINUTES_PER_HOUR
    keys, series, gpus, first, stop = _hp_columns(trace)
    hourly = np.zeros((n_hours, len(keys)))
    pools = tuple(sorted({pool for pool, _ in keys}))
    pool_curves = {pool: np.zeros(n_minutes) for pool in pools}
    order = np.argsort(series, kind="stable")
    bounds = np.searchsorted(series[order], np.arange(len(keys) + 1))
    for i, (pool, _tenant) in enumerate(keys):
        rows = order[bounds[i] : bounds[i + 1]]
        curve = _minute_curve(first[rows], stop[rows], gpus[rows], n_minutes)
        hourly[:, i] = _hourly_peaks(curve, n_hours)
        pool_curves[pool] += curve
    pool_hourly = np.zeros((n_hours, len(pools)))
    for p, pool in enumerate(pools):
        pool_hourly[:, p] = _hourly_peaks(pool_curves[pool], n_hours)
    return DemandSeries(keys=tuple(keys), hourly=hourly, pools=pools, pool_hourly=pool_hourly)


def pool_totals(series: DemandSeries, *, allow_upper_bound: bool = False) -> dict[str, np.ndarray]:
    """Each pool's hourly peak of its per-minute total HP demand.

    A series read back from CSV has lost the per-minute detail; then the sum of tenant peaks (an
    upper bound of the true pool peak) is returned only if `allow_upper_bound` is set.
    """
    if series.pools is not None and series.pool_hourly is not None:
        return {pool: series.pool_hourly[:, p].copy() for p, pool in enumerate(series.pools)}
    if not allow_upper_bound:
        raise ValueError(
            "this DemandSeries has no per-minute pool totals (read from CSV?); "
            "pass allow_upper_bound=True to get the sum of tenant hourly peaks instead"
        )
    sums: dict[str, np.ndarray] = {}
    for i, (pool, _tenant) in enumerate(series.keys):
        sums[pool] = sums.get(pool, np.zeros(series.n_hours)) + series.hourly[:, i]
    return sums


def _iso(hour: int) -> str:
    return (TIME_ORIGIN + timedelta(hours=hour)).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_canonical_csv(series: DemandSeries, path: Path) -> None:
    """Write `time,tenant,pool,demand_gpus`, one row per hour per series, time-major."""
    times = [_iso(h) for h in range(series.n_hours)]
    values = np.round(series.hourly, _DECIMALS)
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(CSV_COLUMNS)
        for h, stamp in enumerate(times):
            row = values[h]
            out.writerows(
                (stamp, tenant, pool, format_number(float(row[i])))
                for i, (pool, tenant) in enumerate(series.keys)
            )


def read_canonical_csv(path: Path) -> DemandSeries:
    """Read a canonical demand CSV; hours with no row for a series read as 0."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: empty file")
        index = {name.strip(): i for i, name in enumerate(header)}
        missing = [c for c in CSV_COLUMNS if c not in index]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        c_time, c_tenant, c_pool, c_value = (index[c] for c in CSV_COLUMNS)
        hour_of: dict[str, int] = {}
        cells: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            stamp = row[c_time]
            hour = hour_of.get(stamp)
            if hour is None:
                hour = _hour_index(path, line, stamp)
                hour_of[stamp] = hour
            cells[(row[c_pool], row[c_tenant])][hour] = float(row[c_value])
    keys = tuple(sorted(cells))
    n_hours = max(hour_of.values(), default=-1) + 1
    hourly = np.zeros((n_hours, len(keys)))
    for i, key in enumerate(keys):
        for hour, value in cells[key].items():
            hourly[hour, i] = value
    return DemandSeries(keys=keys, hourly=hourly)


def _hour_index(path: Path, line: int, stamp: str) -> int:
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{path}:{line}: bad time {stamp!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = (when - TIME_ORIGIN).total_seconds()
    if seconds < 0 or seconds % 3600:
        raise ValueError(f"{path}:{line}: time {stamp!r} is not an hour start at or after {TIME_ORIGIN}")
    return int(seconds // 3600)

"""Loaders producing `DemandSeries`: Helios per-VC minute files and the canonical hourly CSV.

Canonical CSV (written by `gfs trace demand`, accepted from users):
    time,tenant,pool,demand_gpus
    2024-03-01T00:00:00Z,org-1,A100,16
one row per hour (hour start, UTC ISO-8601) per series; the value is the hourly peak.
"""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from gfs.ml.series import DemandSeries, SeriesError, SeriesKey, fill_gaps

HELIOS_POOL = "helios-earth"
_HELIOS_SUFFIX = "_cluster_sequence_vc.csv"


def _parse_time(text: str) -> datetime:
    text = text.strip()
    if text.endswith("Z"):
        text = text[:-1]
    t = datetime.fromisoformat(text)
    # Calendar features are read from the wall clock as written; drop tzinfo after normalising.
    return t.replace(tzinfo=None)


def _hour_floor(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def load_helios(folder: Path, *, pool: str = HELIOS_POOL) -> DemandSeries:
    """Helios 'Earth' VC files -> hourly peaks of running + pending GPUs, tenant = VC name.

    `folder` is the helios-earth directory (or its vc/ subfolder). Minutes missing from a file
    leave the hour NaN, which `fill_gaps` then handles (short gaps filled, long ones raise).
    """
    vc_dir = folder / "vc" if (folder / "vc").is_dir() else folder
    files = sorted(vc_dir.glob(f"*{_HELIOS_SUFFIX}"))
    if not files:
        raise SeriesError(f"no *{_HELIOS_SUFFIX} files under {vc_dir}")
    per_vc: dict[str, dict[datetime, float]] = {}
    for f in files:
        peaks: dict[datetime, float] = {}
        with f.open(newline="") as fh:
            for row in csv.DictReader(fh):
                try:
                    d = float(row["running_gpu_num"]) + float(row["pending_gpu_num"])
                except (KeyError, ValueError):
                    continue  # unreadable minute: the hour's peak comes from the other minutes
                h = _hour_floor(_parse_time(row["time"]))
                if d > peaks.get(h, -1.0):
                    peaks[h] = d
        per_vc[f.name[: -len(_HELIOS_SUFFIX)]] = peaks
    return _dense({(pool, vc): p for vc, p in per_vc.items()})


def load_csv(path: Path) -> DemandSeries:
    """Read the canonical CSV. Repeated (time, series) rows keep the max (they are peaks)."""
    data: dict[SeriesKey, dict[datetime, float]] = {}
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"time", "tenant", "pool", "demand_gpus"} - set(reader.fieldnames or ())
        if missing:
            raise SeriesError(f"{path}: missing columns {sorted(missing)}")
        for line, row in enumerate(reader, start=2):
            key = (row["pool"], row["tenant"])
            t = _parse_time(row["time"])
            if t != _hour_floor(t):
                raise SeriesError(f"{path}:{line}: time {row['time']} is not an hour start")
            text = (row["demand_gpus"] or "").strip()
            value = float(text) if text else float("nan")  # empty -> NaN -> gap handling
            series = data.setdefault(key, {})
            prev = series.get(t, float("nan"))
            series[t] = value if np.isnan(prev) else max(prev, value)
    if not data:
        raise SeriesError(f"{path}: no rows")
    return _dense(data)


def _dense(data: dict[SeriesKey, dict[datetime, float]]) -> DemandSeries:
    keys = tuple(sorted(data))
    all_times = [t for series in data.values() for t in series]
    start, end = min(all_times), max(all_times)
    hours = int((end - start) / timedelta(hours=1)) + 1
    values = np.full((hours, len(keys)), np.nan)
    for j, key in enumerate(keys):
        for t, v in data[key].items():
            values[int((t - start) / timedelta(hours=1)), j] = v
    return DemandSeries(keys, fill_gaps(values, keys), start)


def write_csv(series: DemandSeries, path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time", "tenant", "pool", "demand_gpus"])
        for t in range(series.hours):
            stamp = series.time_of(t).strftime("%Y-%m-%dT%H:%M:%SZ")
            for j, (pool, tenant) in enumerate(series.keys):
                w.writerow([stamp, tenant, pool, f"{series.values[t, j]:g}"])


def load_series(path: Path) -> DemandSeries:
    """A helios-earth folder or a canonical CSV file."""
    if path.is_dir():
        return load_helios(path)
    return load_csv(path)

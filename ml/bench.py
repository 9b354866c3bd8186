"""Benchmarks: LSTM forward latency for N series x 4 h, and a daily warm-start retrain."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from gfs.ml.series import DemandSeries
from gfs.ml.zoo import build_forecaster


def _tile(series: DemandSeries, n: int, hours: int) -> tuple[list[tuple[str, str]], np.ndarray]:
    reps = -(-n // len(series.keys))
    values = np.tile(series.values[:hours], (1, reps))[:, :n]
    keys = [
        (series.keys[j % len(series.keys)][0], f"{series.keys[j % len(series.keys)][1]}#{j}")
        for j in range(n)
    ]
    return keys, values


def run_bench(series: DemandSeries, *, n_tenants: int = 100, history_days: int = 28) -> dict[str, Any]:
    """Cold-train on the first `history_days`, then time: (1) the forward pass for n_tenants x 4
    at one origin, (2) predict() steady state (one new hour, calibration from cache), (3) one
    warm-start retrain on the newest `history_days` of history, a day later."""
    hours = min(series.hours, history_days * 24 + 24)
    keys, values = _tile(series, n_tenants, hours)
    f = build_forecaster("lstm", keys, start=series.start)
    first_end = hours - 24
    t = time.perf_counter()
    f.fit(keys, values, first_end)
    cold_s = time.perf_counter() - t
    origin = np.array([first_end])
    # Wall time suffers on a shared machine; CPU time of this (single-threaded) process is the
    # cost itself, so both are reported.
    fwd, fwd_cpu = [], []
    for _ in range(20):
        t, c = time.perf_counter(), time.process_time()
        f.model.raw(keys, values, origin, 4)
        fwd.append(time.perf_counter() - t)
        fwd_cpu.append(time.process_time() - c)
    f.predict(keys, values, first_end, 4)  # fills the calibration cache
    steady, steady_cpu = [], []
    for end in range(first_end + 1, first_end + 11):
        t, c = time.perf_counter(), time.process_time()
        f.predict(keys, values, end, 4)
        steady.append(time.perf_counter() - t)
        steady_cpu.append(time.process_time() - c)
    t, c = time.perf_counter(), time.process_time()
    f.fit(keys, values, hours)  # warm start, a day later
    warm_s, warm_cpu = time.perf_counter() - t, time.process_time() - c
    return {
        "n_series": n_tenants,
        "history_hours": hours,
        "forward_ms_median": round(float(np.median(fwd) * 1e3), 3),
        "forward_ms_p90": round(float(np.quantile(fwd, 0.9) * 1e3), 3),
        "forward_cpu_ms_median": round(float(np.median(fwd_cpu) * 1e3), 3),
        "predict_steady_ms_median": round(float(np.median(steady) * 1e3), 3),
        "predict_steady_cpu_ms_median": round(float(np.median(steady_cpu) * 1e3), 3),
        "cold_train_s": round(cold_s, 2),
        "warm_retrain_s": round(warm_s, 2),
        "warm_retrain_cpu_s": round(warm_cpu, 2),
        "torch_threads": torch.get_num_threads(),
    }

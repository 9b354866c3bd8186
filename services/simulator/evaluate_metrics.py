"""The metrics a grid's or a suite's report aggregates, and how a cell's values are summarised."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gfs.services.core.work_conservation import REASONS as IDLE_FIT_REASONS

# The cluster-wide metrics (services/core/metrics.metric_block) the report aggregates.
METRICS: tuple[str, ...] = (
    "lp_eviction_rate", "lp_queue_delay_mean_s", "lp_queue_delay_p99_s", "hp_queue_delay_mean_s",
    "hp_queue_delay_p99_s", "hp_slo_attainment", "gpu_allocation_rate", "useful_gpu_time_rate",
    "lp_gpu_hours_completed", "lp_jct_mean_s", "evictions", "tasks_finished", "tasks_unfinished",
    "lp_tasks", "hp_tasks", "lp_guarantee_periods",
    # The in-window measure (issue 10): periods that ended by the window's end, spot work finished by then.
    "lp_eviction_rate_in_window", "lp_evictions_per_kgpuh_in_window", "lp_gpu_hours_completed_in_window",
    "lp_guarantee_periods_in_window",
    # Issue 35: GPU-hours idle in the window while queued work would fit (core/work_conservation.py).
    "idle_fit_gpu_hours", *(f"idle_fit_gpu_hours:{r}" for r in IDLE_FIT_REASONS),
)  # fmt: skip
# Derived per cell at aggregation time (so reports of earlier runs can be rebuilt): evictions per
# 1,000 completed spot GPU-hours. Why: the eviction rate per guarantee period rewards a policy that
# runs little spot in contended pools; per GPU-hour of finished spot work it does not.
DERIVED: dict[str, Callable[[dict[str, float]], float]] = {
    "lp_evictions_per_kgpuh": lambda m: (
        1000.0 * m["evictions"] / m["lp_gpu_hours_completed"] if m["lp_gpu_hours_completed"] > 0 else 0.0
    ),
}
REPORT_METRICS: tuple[str, ...] = METRICS + tuple(DERIVED)
POOL_METRICS: tuple[str, ...] = (
    "lp_eviction_rate",
    "lp_eviction_rate_in_window",
    "lp_queue_delay_mean_s",
    "gpu_allocation_rate",
    "hp_queue_delay_mean_s",
    "idle_fit_gpu_hours",
)


def spread(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(a.mean()),
        "std": float(a.std(ddof=1)) if len(a) > 1 else 0.0,
        "min": float(a.min()),
        "max": float(a.max()),
        "n": float(len(a)),
    }

"""Evaluation metrics (spec 6.3), computed from per-task outcome arrays and state samples.

All task arrays hold the tasks submitted inside the evaluation window only. A task still queued
at the stop has waited stop - submit (or, after an eviction, up to the stop); that censored wait
is already folded into `wait_s` by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HP_SLO_START_S = 600.0  # HP SLO: started within 10 minutes of submission (spec 8 #22)


@dataclass(frozen=True, slots=True)
class ClassOutcomes:
    """Per-task arrays (same length) for one class in one scope (cluster or pool)."""

    wait_s: np.ndarray  # total queueing time (initial wait + every wait after an eviction)
    first_wait_s: np.ndarray  # start - submit of the first start (nan if never started)
    finished: np.ndarray  # bool
    jct_s: np.ndarray  # end - submit (nan if unfinished)
    gpus: np.ndarray  # g x w
    duration_s: np.ndarray  # work the task needs when never evicted
    failed_periods: np.ndarray
    succeeded_periods: np.ndarray
    evictions: np.ndarray
    # The in-window measure: periods that ended by the window's end, tasks finished by then.
    failed_in_window: np.ndarray
    succeeded_in_window: np.ndarray
    finished_in_window: np.ndarray  # bool

    @staticmethod
    def empty() -> ClassOutcomes:
        z = np.zeros(0)
        b = np.zeros(0, dtype=bool)
        return ClassOutcomes(z, z, b, z, z, z, z, z, z, z, z, b)

    def select(self, mask: np.ndarray) -> ClassOutcomes:
        return ClassOutcomes(
            self.wait_s[mask],
            self.first_wait_s[mask],
            self.finished[mask],
            self.jct_s[mask],
            self.gpus[mask],
            self.duration_s[mask],
            self.failed_periods[mask],
            self.succeeded_periods[mask],
            self.evictions[mask],
            self.failed_in_window[mask],
            self.succeeded_in_window[mask],
            self.finished_in_window[mask],
        )


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if len(x) else 0.0


def _p99(x: np.ndarray) -> float:
    return float(np.percentile(x, 99)) if len(x) else 0.0


def metric_block(
    hp: ClassOutcomes,
    spot: ClassOutcomes,
    allocation_samples: np.ndarray,
    useful_gpu_s: float,
    capacity: int,
    window_s: float,
) -> dict[str, float]:
    """The per-scope metrics of OUT.json (cluster-wide or one pool)."""
    failed = float(spot.failed_periods.sum())
    succeeded = float(spot.succeeded_periods.sum())
    periods = failed + succeeded
    hp_started = ~np.isnan(hp.first_wait_s)
    within = hp_started & (np.nan_to_num(hp.first_wait_s, nan=np.inf) <= HP_SLO_START_S)
    spot_done = spot.finished
    unfinished = int((~hp.finished).sum() + (~spot.finished).sum())
    failed_iw = float(spot.failed_in_window.sum())
    periods_iw = failed_iw + float(spot.succeeded_in_window.sum())
    done_iw = spot.finished_in_window
    gpu_h_iw = float((spot.gpus[done_iw] * spot.duration_s[done_iw]).sum() / 3600.0)
    return {
        "lp_eviction_rate": failed / periods if periods else 0.0,
        "lp_queue_delay_mean_s": _mean(spot.wait_s),
        "lp_queue_delay_p99_s": _p99(spot.wait_s),
        "hp_queue_delay_mean_s": _mean(hp.wait_s),
        "hp_queue_delay_p99_s": _p99(hp.wait_s),
        "hp_slo_attainment": float(within.mean()) if len(within) else 1.0,
        "gpu_allocation_rate": _mean(allocation_samples),
        "useful_gpu_time_rate": useful_gpu_s / (capacity * window_s) if capacity and window_s else 0.0,
        "lp_gpu_hours_completed": float((spot.gpus[spot_done] * spot.duration_s[spot_done]).sum() / 3600.0),
        "lp_jct_mean_s": _mean(spot.jct_s[spot_done]),
        "evictions": float(spot.evictions.sum()),
        "tasks_finished": float(hp.finished.sum() + spot.finished.sum()),
        "tasks_unfinished": float(unfinished),
        "lp_tasks": float(len(spot.wait_s)),
        "hp_tasks": float(len(hp.wait_s)),
        "lp_guarantee_periods": periods,
        # The in-window measure (docs/decisions.md): only guarantee periods that ended by the end of
        # the window, where preemption is on, and spot work finished by then.
        "lp_eviction_rate_in_window": failed_iw / periods_iw if periods_iw else 0.0,
        "lp_guarantee_periods_in_window": periods_iw,
        "lp_gpu_hours_completed_in_window": gpu_h_iw,
        "lp_evictions_per_kgpuh_in_window": 1000.0 * failed_iw / gpu_h_iw if gpu_h_iw > 0 else 0.0,
    }

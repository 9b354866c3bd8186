"""The simulator's early-warning accounting (issue 27 item 2): warnings sent, and the spot work
evictions lose with and without them.

Warnings change no decision (core/reclaim_warning.py), so one run measures both sides at exactly
the same evictions: each eviction's lost work as it is without a warning (since the last periodic
checkpoint) and as it would be had the task checkpointed on its last warning in this run. The run
itself keeps the no-warning remaining work, so the comparison is conservative: a warned task would
also finish earlier, which is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gfs.services.core.forecast import DemandForecast
from gfs.services.core.ids import TaskId
from gfs.services.core.reclaim_warning import (
    WarningSettings,
    lost_after_warning,
    shortfall_gpus,
    warn_candidates,
)
from gfs.services.core.runtime import PoolRuntime
from gfs.services.core.task import TaskSpec


@dataclass
class WarningLedger:
    settings: WarningSettings = field(default_factory=WarningSettings)
    # task -> (start of the run it was warned in, when its newest warning went out)
    last: dict[TaskId, tuple[float, float]] = field(default_factory=dict)
    warnings: int = 0
    at_risk_checks: int = 0
    checks: int = 0
    evictions: int = 0
    warned_evictions: int = 0  # evictions of a task warned in that run
    lost_gpu_s: float = 0.0  # lost work without warnings (GPU-seconds)
    lost_gpu_s_warned: float = 0.0  # the same evictions with a checkpoint on every warning
    hit_warnings: int = 0  # warnings whose task was evicted within the lead time
    checkpoint_gpu_s: float = 0.0  # what the warnings' checkpoints cost (settings.checkpoint_cost_s each)

    def check(self, now: float, rt: PoolRuntime, forecast: DemandForecast | None) -> list[TaskId]:
        """One look at a pool: the tasks warned now (a task already warned in this run within the
        lead time is not warned again)."""
        self.checks += 1
        s = self.settings
        quantile = None
        if forecast is not None:
            try:
                quantile = [float(q) for q in forecast.pool_quantile(rt.state.pool, s.quantile)]
            except KeyError:  # a pool without HP history has no demand series
                quantile = None
        st = rt.state
        short = shortfall_gpus(st.online_capacity, st.spot_in_use, rt.hp_observed, quantile, now, s.lead_s)
        if short <= 0:
            return []
        self.at_risk_checks += 1
        sent = []
        for tid in warn_candidates(st, short, now, s.margin):
            start = st.running[tid].start_s
            prev = self.last.get(tid)
            if prev is not None and prev[0] == start and now - prev[1] < s.lead_s:
                continue
            self.last[tid] = (start, now)
            self.warnings += 1
            self.checkpoint_gpu_s += st.running[tid].spec.total_gpus * s.checkpoint_cost_s
            sent.append(tid)
        return sent

    def evicted(self, spec: TaskSpec, run_s: float, now: float, start_s: float) -> None:
        self.evictions += 1
        warned = self.last.get(spec.task_id)
        warned_run_s = None
        if warned is not None and warned[0] == start_s:
            warned_run_s = warned[1] - start_s
            self.warned_evictions += 1
            if now - warned[1] <= self.settings.lead_s:
                self.hit_warnings += 1
        gpus = spec.total_gpus
        self.lost_gpu_s += gpus * lost_after_warning(run_s, spec.checkpoint_interval_s, None)
        self.lost_gpu_s_warned += gpus * lost_after_warning(run_s, spec.checkpoint_interval_s, warned_run_s)

    def summary(self) -> dict[str, float]:
        lost, warned = self.lost_gpu_s / 3600.0, self.lost_gpu_s_warned / 3600.0
        cost = self.checkpoint_gpu_s / 3600.0
        return {
            "evictions": float(self.evictions),
            "warnings": float(self.warnings),
            "warned_evictions": float(self.warned_evictions),
            "recall": self.warned_evictions / self.evictions if self.evictions else float("nan"),
            "precision": self.hit_warnings / self.warnings if self.warnings else float("nan"),
            "at_risk_share": self.at_risk_checks / self.checks if self.checks else 0.0,
            "lost_gpu_h": lost,
            "lost_gpu_h_warned": warned,
            "lost_cut": 1.0 - warned / lost if lost > 0 else float("nan"),
            "checkpoint_gpu_h": cost,
            # The saving net of the checkpoints' cost (negative: the warnings cost more than they saved).
            "net_cut": 1.0 - (warned + cost) / lost if lost > 0 else float("nan"),
        }

"""The simulation result: metrics per policy (cluster-wide and per pool) plus the series the report
plots. Kept apart from rendering (report.py) so tests and the JSON writer need no matplotlib."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gfs.services.core.metrics import HP_SLO_START_S, ClassOutcomes, metric_block
from gfs.services.core.task import TaskClass

if TYPE_CHECKING:
    from gfs.services.simulator.engine import Simulation


@dataclass(frozen=True, eq=False)
class PolicySeries:
    pools: tuple[str, ...]
    times_s: np.ndarray  # [T]
    allocation: np.ndarray  # [T, P] allocated GPUs / capacity
    quota: np.ndarray  # [T, P] spot quota for 1 h (capped at capacity)
    hp_demand: np.ndarray  # [T, P] HP demand (trace-defined, demand.py) at the sample's hour
    spot_in_use: np.ndarray  # [T, P]
    eta: np.ndarray  # [T, P]
    capacity: np.ndarray  # [P]
    lp_wait_s: np.ndarray
    hp_wait_s: np.ndarray


@dataclass(frozen=True, eq=False)
class PolicyResult:
    name: str
    metrics: dict[str, Any]
    series: PolicySeries


@dataclass(frozen=True, eq=False)
class SimulationResult:
    source: str
    settings: dict[str, Any]
    policies: dict[str, PolicyResult] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "trace": self.source,
            "settings": self.settings,
            "policies": {name: r.metrics for name, r in self.policies.items()},
        }


def _outcomes(sim: Simulation, cls: TaskClass, pool: str | None) -> ClassOutcomes:
    lives = [
        life
        for life in sim.lives.values()
        if life.in_window and life.spec.task_class is cls and (pool is None or life.spec.pool == pool)
    ]
    if not lives:
        return ClassOutcomes.empty()
    first = np.array([life.first_start - life.spec.submit_s for life in lives])
    end = np.array([life.end for life in lives])
    submit = np.array([life.spec.submit_s for life in lives])
    return ClassOutcomes(
        wait_s=np.array([life.wait for life in lives]),
        first_wait_s=first,
        finished=~np.isnan(end),
        jct_s=end - submit,
        gpus=np.array([life.spec.total_gpus for life in lives]),
        duration_s=np.array([life.spec.duration_s for life in lives]),
        failed_periods=np.array([life.failed for life in lives], dtype=np.float64),
        succeeded_periods=np.array([life.succeeded for life in lives], dtype=np.float64),
        evictions=np.array([life.evictions for life in lives], dtype=np.float64),
        failed_in_window=np.array([life.failed_in_window for life in lives], dtype=np.float64),
        succeeded_in_window=np.array([life.succeeded_in_window for life in lives], dtype=np.float64),
        finished_in_window=np.nan_to_num(end, nan=np.inf) <= sim.w.window_end_s,
    )


def _with_cancellations(block: dict[str, float], sim: Simulation, pool: str | None) -> dict[str, float]:
    """Cancelled tasks (a trace's cancel_time) are neither finished nor unfinished: they count in
    `tasks_cancelled`; their waits (until the cancel, if queued) and guarantee periods count as
    usual. An HP task cancelled unstarted within the SLO's 10 minutes is left out of the SLO (it
    could not miss it); one cancelled after waiting longer missed it."""
    cancelled = sum(
        1
        for tid in sim.cancelled
        if sim.lives[tid].in_window and (pool is None or sim.lives[tid].spec.pool == pool)
    )
    block["tasks_cancelled"] = float(cancelled)
    if not cancelled:
        return block
    block["tasks_unfinished"] -= cancelled
    hp = [
        life
        for life in sim.lives.values()
        if life.in_window
        and (pool is None or life.spec.pool == pool)
        and life.spec.task_class is TaskClass.HP
        and not (
            not math.isnan(life.cancelled)
            and math.isnan(life.first_start)
            and life.cancelled - life.spec.submit_s <= HP_SLO_START_S
        )
    ]
    within = [
        not math.isnan(life.first_start) and life.first_start - life.spec.submit_s <= HP_SLO_START_S
        for life in hp
    ]
    block["hp_slo_attainment"] = sum(within) / len(within) if within else 1.0
    return block


# Gang widths (workers) whose longest HP wait is reported: starvation shows at the wide end.
WIDTH_BANDS = ((1, 1, "1"), (2, 4, "2-4"), (5, 8, "5-8"), (9, 10**9, "9+"))


def hp_wait_max_by_width(sim: Simulation) -> dict[str, float | None]:
    """The longest queueing time (initial wait + waits after a requeue; censored at the stop) of an
    HP task submitted in the window, per band of worker counts (None: no such task)."""
    out: dict[str, float | None] = {}
    for lo, hi, name in WIDTH_BANDS:
        waits = [
            life.wait
            for life in sim.lives.values()
            if life.in_window and life.spec.task_class is TaskClass.HP and lo <= life.spec.workers <= hi
        ]
        out[name] = max(waits) if waits else None
    return out


IDLE_FIT = "idle_fit_gpu_hours"  # the metrics' prefix: the total, then `<prefix>:<reason>` each


def _idle_fit(by_reason: dict[str, float]) -> dict[str, float]:
    """GPU-hours idle while queued work would fit (core/work_conservation.py), in the window."""
    out = {f"{IDLE_FIT}:{reason}": hours for reason, hours in by_reason.items()}
    out[IDLE_FIT] = sum(by_reason.values())
    return out


def build_policy_result(sim: Simulation) -> PolicyResult:
    rec = sim.recorder
    pools = tuple(str(p) for p in rec.pools)
    caps = np.array([sim.pools[p].state.capacity for p in rec.pools], dtype=np.float64)
    alloc = rec.matrix(rec.allocated)
    window_s = sim.w.window_s
    per_pool: dict[str, dict[str, float]] = {}
    for i, pool in enumerate(pools):
        block = metric_block(
            _outcomes(sim, TaskClass.HP, pool),
            _outcomes(sim, TaskClass.SPOT, pool),
            alloc[:, i] / caps[i] if len(alloc) else np.zeros(0),
            sim.useful_gpu_s[rec.pools[i]],
            int(caps[i]),
            window_s,
        )
        per_pool[pool] = _with_cancellations(block, sim, pool) | _idle_fit(rec.idle_fit[rec.pools[i]])
    hp_all = _outcomes(sim, TaskClass.HP, None)
    spot_all = _outcomes(sim, TaskClass.SPOT, None)
    cluster = _with_cancellations(
        metric_block(
            hp_all,
            spot_all,
            alloc.sum(axis=1) / caps.sum() if len(alloc) else np.zeros(0),
            sum(sim.useful_gpu_s.values()),
            int(caps.sum()),
            window_s,
        ),
        sim,
        None,
    )
    fc = sim.forecaster
    metrics: dict[str, Any] = dict(cluster)
    for pool_metrics in per_pool.values():  # the cluster's idle-while-work-fits: the pools' sum
        for key, value in pool_metrics.items():
            if key.startswith(IDLE_FIT):
                metrics[key] = metrics.get(key, 0.0) + value
    metrics.update(
        pools=per_pool,
        forecast={
            "name": getattr(fc, "name", "?"),
            "version": getattr(fc, "version", "?"),
            "fallback_count": sim.recorder.forecast_fallbacks + getattr(fc, "fallback_count", 0),
            "predictions": sim.recorder.forecasts,
        },
        hp_wait_max_s_by_width=hp_wait_max_by_width(sim),
        sim_wall_s=rec.wall_s,
        events=rec.events,
        stop_s=sim.stop_s,
        window_start_s=sim.w.window_start_s,
        window_end_s=sim.w.window_end_s,
    )
    times = np.asarray(rec.times)
    hours = (times // 3600).astype(np.int64)
    demand = np.zeros((len(times), len(pools)))
    # The HP demand the policy's quota forecast (observed or trace-defined), per pool.
    column = {p: j for j, p in enumerate(sim.demand.pools)}
    for i, pool in enumerate(pools):
        j = column.get(pool)
        series = sim.demand.pool_hourly[:, j] if j is not None else None
        if series is not None and len(series):
            demand[:, i] = series[np.minimum(hours, len(series) - 1)]
    return PolicyResult(
        name=sim.policy.name,
        metrics=metrics,
        series=PolicySeries(
            pools=pools,
            times_s=times,
            allocation=alloc / caps if len(alloc) else alloc,
            quota=rec.matrix(rec.quota),
            hp_demand=demand,
            spot_in_use=rec.matrix(rec.spot_in_use),
            eta=rec.matrix(rec.eta),
            capacity=caps,
            lp_wait_s=spot_all.wait_s,
            hp_wait_s=hp_all.wait_s,
        ),
    )

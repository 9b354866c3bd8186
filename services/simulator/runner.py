"""Composition root of a simulation run: trace -> workload, demand series, forecaster, policy.

The `model` forecast source is wired here by a lazy import of `gfs.ml.inference.load_forecaster`, so
the simulator never imports torch unless that source is asked for. A model that fails to fit or
predict is replaced by persistence for that call and the fallback is counted.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from gfs.services.core.forecast import DemandForecast, Forecaster, SeriesKey
from gfs.services.core.naive_forecasts import Oracle, Persistence, SeasonalNaive
from gfs.services.core.observed_demand import ObservedDemand
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.policies.registry import build_policy
from gfs.services.simulator.decision_log import DecisionLog
from gfs.services.simulator.demand import DemandSeries, hp_demand_series, pool_totals, write_canonical_csv
from gfs.services.simulator.engine import CancelSink, DecisionSink, DemandInput, SimSettings, Simulation
from gfs.services.simulator.quota_log import QuotaLog
from gfs.services.simulator.result import PolicyResult, SimulationResult, build_policy_result
from gfs.services.simulator.traces.records import Trace
from gfs.services.simulator.workload import Workload, build_workload


class ForecastSource(enum.Enum):
    ORACLE = "oracle"
    PERSISTENCE = "persistence"
    SEASONAL_NAIVE = "seasonal-naive"
    MODEL = "model"


class ModelWithFallback:
    """The ML model behind the Forecaster protocol, falling back to persistence on any failure."""

    def __init__(self, model: Forecaster, fallback: Forecaster) -> None:
        self.model = model
        self.fallback = fallback
        self.name = getattr(model, "name", "model")
        self.version = getattr(model, "version", "?")
        self.fallback_count = 0

    def fit(self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int) -> None:
        try:
            self.model.fit(keys, hourly, end_hour)
        except Exception:  # a failed daily retrain keeps the previous weights (counted)
            self.fallback_count += 1

    def predict(
        self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int, horizon: int
    ) -> DemandForecast:
        try:
            return self.model.predict(keys, hourly, end_hour, horizon)
        except Exception:
            self.fallback_count += 1
            return self.fallback.predict(keys, hourly, end_hour, horizon)


@dataclass(frozen=True, slots=True)
class RunSettings:
    forecast: ForecastSource = ForecastSource.PERSISTENCE
    seed: int = 0
    window_days: float = 31.0
    drain_days: float = 7.0
    t_win_days: float = 31.0
    model_artifact: Path | None = None
    window_end_s: float | None = None  # None: the trace horizon


def build_forecaster(settings: RunSettings, demand: DemandInput) -> Forecaster:
    pools, pool_hourly = demand.pools, demand.pool_hourly
    if settings.forecast is ForecastSource.ORACLE:
        if demand.observed is not None:
            raise ValueError(
                "the oracle forecast needs the trace-defined demand: observed demand depends on the "
                "policy's own decisions, so its future is not known in advance (use a policy whose "
                "quota forecasts the trace series, e.g. gfs-trace-demand)"
            )
        return Oracle(pools, pool_hourly)
    if settings.forecast is ForecastSource.SEASONAL_NAIVE:
        return SeasonalNaive(pools, pool_hourly)
    persistence = Persistence(pools, pool_hourly)
    if settings.forecast is ForecastSource.PERSISTENCE:
        return persistence
    if settings.model_artifact is None:
        raise ValueError("--forecast model needs --model-artifact DIR")
    from gfs.ml.inference import load_forecaster  # lazy: only this path needs torch

    # cast: the ML forecaster satisfies the protocol structurally at run time (its frozen
    # dataclass attributes are read-only, which mypy's settable-protocol check rejects).
    return ModelWithFallback(cast(Forecaster, load_forecaster(settings.model_artifact)), persistence)


def prepare(trace: Trace, settings: RunSettings) -> tuple[Workload, DemandInput]:
    """The workload and the trace-defined HP demand (what `demand_for` starts from)."""
    workload = build_workload(
        trace,
        window_days=settings.window_days,
        drain_days=settings.drain_days,
        window_end_s=settings.window_end_s,
    )
    series = hp_demand_series(trace)
    totals = pool_totals(series)
    pools = tuple(sorted(totals))
    pool_hourly = np.stack([totals[p] for p in pools], axis=1) if pools else np.zeros((series.n_hours, 0))
    return workload, DemandInput(series.keys, series.hourly, pools, pool_hourly)


def demand_for(policy: SchedulingPolicy, workload: Workload, trace_demand: DemandInput) -> DemandInput:
    """The series `policy`'s quota forecasts: the trace-defined one, or (the default) a fresh
    observed-demand tracker that this policy's own simulation fills."""
    quota = policy.quota
    if not quota.uses_forecast or quota.settings.demand_source == "trace":
        return trace_demand
    stop_h = math.ceil((workload.window_end_s + workload.drain_s) / 3600.0) + 1
    n_hours = max(trace_demand.hourly.shape[0], stop_h)
    return DemandInput.tracking(ObservedDemand(trace_demand.keys, n_hours))


def build_simulation(
    workload: Workload,
    trace_demand: DemandInput,
    policy: SchedulingPolicy,
    settings: RunSettings,
    decision_sink: DecisionSink | None = None,
    cancel_sink: CancelSink | None = None,
) -> Simulation:
    """One policy's simulation with its demand series and forecaster (every driver composes it here)."""
    demand = demand_for(policy, workload, trace_demand)
    sim_settings = SimSettings(t_win_s=settings.t_win_days * 86400.0)
    return Simulation(
        workload, policy, build_forecaster(settings, demand), demand, sim_settings, decision_sink, cancel_sink
    )


def run_policies(
    trace: Trace,
    policies: Sequence[str],
    settings: RunSettings,
    progress: Callable[[str, float], None] | None = None,
    decisions: Path | None = None,
    observed_out: Path | None = None,
    quota_log: Path | None = None,
) -> SimulationResult:
    """`observed_out`: a folder for each policy's observed HP-demand series (`<policy>.csv`, the
    canonical demand CSV that `gfs forecast train --series` reads), for policies that track it."""
    workload, demand = prepare(trace, settings)
    result = SimulationResult(
        source=trace.source,
        settings={
            "forecast": settings.forecast.value,
            "seed": settings.seed,
            "window_days": settings.window_days,
            "drain_days": settings.drain_days,
            "t_win_days": settings.t_win_days,
            "model_artifact": str(settings.model_artifact) if settings.model_artifact else None,
            "window_start_s": workload.window_start_s,
            "window_end_s": workload.window_end_s,
            "cancellations": len(workload.cancels),
            "spot_jobs_dropped_before_window": workload.dropped_spot,
            "jobs_dropped_no_pool": workload.dropped_no_pool,
            "tasks": len(workload.tasks),
            "jobs_rejected_infeasible": workload.rejected_infeasible,
            "jobs_rejected_by_reason": workload.rejected_by_reason,
        },
    )
    if decisions is not None:
        decisions.parent.mkdir(parents=True, exist_ok=True)
        decisions.write_text("")
    for name in policies:
        result.policies[name] = run_one(
            workload, demand, name, settings, progress, decisions, observed_out, quota_log
        )
    return result


def run_one(
    workload: Workload,
    demand: DemandInput,
    name: str,
    settings: RunSettings,
    progress: Callable[[str, float], None] | None = None,
    decisions: Path | None = None,
    observed_out: Path | None = None,
    quota_log: Path | None = None,
) -> PolicyResult:
    """One policy on the workload; `decisions`: append its decision log (JSON lines) to this file;
    `observed_out`: write its observed HP-demand series there (if it tracks one); `quota_log`: write
    its hourly quota inputs to DIR/<policy>.csv (quota_log.py)."""
    policy = build_policy(name)
    on_progress = None if progress is None else (lambda t: progress(name, t))
    qlog = QuotaLog() if quota_log is not None else None
    if decisions is None:
        sim = build_simulation(workload, demand, policy, settings)
        sim.quota_log = qlog
        sim.run(on_progress)
    else:
        with decisions.open("a", encoding="utf-8") as out:
            log = DecisionLog(out, name)
            sim = build_simulation(workload, demand, policy, settings, log, log.cancelled)
            sim.quota_log = qlog
            sim.run(on_progress)
    if observed_out is not None and sim.observed is not None:
        write_observed_csv(sim.observed, observed_out / f"{name}.csv")
    if quota_log is not None and qlog is not None:
        qlog.write(quota_log / f"{name}.csv")
        summary = {"idle_share": 0.2, "wait_s": 3600.0, "pool_hours_by_reason": qlog.idle_waits()}
        text = json.dumps(summary, indent=2, sort_keys=True) + "\n"
        (quota_log / f"{name}.idle-waits.json").write_text(text)
    return build_policy_result(sim)


def write_observed_csv(observed: ObservedDemand, path: Path) -> None:
    """The completed hours of an observed series as the canonical demand CSV (training input)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    hours = observed.complete_hours
    write_canonical_csv(DemandSeries(keys=observed.keys, hourly=observed.hourly[:hours]), path)

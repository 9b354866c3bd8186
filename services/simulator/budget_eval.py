"""Tenant eviction budgets in the simulator (issue 27 item 3): the same trace with and without a
budget for every spot tenant, compared on fairness and on total cost (`gfs evaluate-budgets`).

Fairness is the spread of per-tenant eviction rates (failed / all guarantee periods of the
tenant's spot tasks submitted in the window, tenants with at least `min_periods` of them): max,
min, standard deviation and Gini coefficient. Total cost: preemption evictions, spot GPU-hours
lost (GPU time since each evicted run's last checkpoint, redone after the restart), mean HP and
spot queueing, and the top tenant's share of all evictions.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gfs.services.core.policies.registry import build_policy
from gfs.services.core.runtime import PassResult, PoolRuntime, Stopped
from gfs.services.core.task import TaskClass
from gfs.services.core.tenant_budget import TenantBudget
from gfs.services.core.victims_gfs import GfsVictims
from gfs.services.simulator.engine import SimSettings, Simulation
from gfs.services.simulator.evaluate_config import EvaluateConfig, resolve_nodes
from gfs.services.simulator.evaluate_trace import cell_trace, scaled_nodes
from gfs.services.simulator.result import build_policy_result
from gfs.services.simulator.runner import ForecastSource, RunSettings, build_forecaster, demand_for, prepare
from gfs.services.simulator.traces.gfs_format import read_nodes

MAX_JOB_SHARE = 0.5  # as evaluate.py's cells


def gini(values: Sequence[float]) -> float:
    """Gini coefficient of non-negative values: 0 when all are equal, towards 1 when one holds all
    (mean absolute difference over all ordered pairs / (2 * mean)); 0 for none or all zero."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n == 0 or x.sum() <= 0:
        return 0.0
    ranks = np.arange(1, n + 1)
    return float((2 * ranks - n - 1) @ x / (n * x.sum()))


def spread(rates: Sequence[float]) -> dict[str, float]:
    """The spread of per-tenant eviction rates."""
    if not rates:
        return {"tenants": 0.0, "max": 0.0, "min": 0.0, "std": 0.0, "gini": 0.0}
    r = np.asarray(rates, dtype=np.float64)
    return {"tenants": float(len(r)), "max": float(r.max()), "min": float(r.min()),
            "std": float(r.std()), "gini": gini(rates)}  # fmt: skip


@dataclass
class _Losses:
    """Per preemption eviction: the tenant, and GPU time lost since the run's last checkpoint."""

    by_tenant: Counter[str] = dataclasses.field(default_factory=Counter)
    lost_gpu_s: float = 0.0

    def __call__(self, sim: Simulation, rt: PoolRuntime, result: PassResult) -> None:
        for o in result.outcomes:
            if isinstance(o, Stopped) and o.preemptor is not None:
                spec = rt.tasks[o.task_id]
                self.by_tenant[spec.tenant] += 1
                ckpt = spec.checkpoint_interval_s
                self.lost_gpu_s += spec.total_gpus * (math.fmod(o.run_s, ckpt) if ckpt > 0 else 0.0)


def tenant_rates(sim: Simulation, min_periods: int) -> dict[str, float]:
    """Per spot tenant (tasks submitted in the window): failed / all guarantee periods."""
    failed: Counter[str] = Counter()
    periods: Counter[str] = Counter()
    for life in sim.lives.values():
        if life.in_window and life.spec.task_class is TaskClass.SPOT:
            failed[life.spec.tenant] += life.failed
            periods[life.spec.tenant] += life.failed + life.succeeded
    return {t: failed[t] / n for t, n in sorted(periods.items()) if n >= min_periods}


def run_budgeted(
    cfg: EvaluateConfig,
    seed: int,
    load: float,
    budget: TenantBudget | None,
    min_periods: int,
    policy_name: str = "gfs",
) -> dict[str, Any]:
    """A GFS policy on the config's trace at `seed` and `load`, every spot tenant under `budget`
    (None: none). Only GFS's victim selector reads budgets: another selector is refused."""
    policy = build_policy(policy_name)
    if not isinstance(policy.victims, GfsVictims):
        raise ValueError(
            f"policy {policy_name!r} does not choose victims with GFS's selector: budgets do nothing"
        )
    nodes = scaled_nodes(read_nodes(resolve_nodes(cfg.nodes)), cfg.node_fraction)
    trace = cell_trace(cfg.base_generator(), nodes, seed=seed, load=load, max_job_share=MAX_JOB_SHARE).trace
    settings = RunSettings(
        forecast=ForecastSource(cfg.forecast),
        seed=seed,
        window_days=cfg.window_days,
        drain_days=cfg.drain_days,
        t_win_days=cfg.window_days,
    )
    workload, trace_demand = prepare(trace, settings)
    demand = demand_for(policy, workload, trace_demand)
    losses = _Losses()
    sim_settings = SimSettings(t_win_s=settings.t_win_days * 86400.0, every_tenant_budget=budget)
    sim = Simulation(workload, policy, build_forecaster(settings, demand), demand, sim_settings, losses)
    sim.run()
    m = build_policy_result(sim).metrics
    evictions = sum(losses.by_tenant.values())
    top = max(losses.by_tenant.values(), default=0)
    return {
        "seed": seed,
        "policy": policy_name,
        "budget": None
        if budget is None
        else {"max_evictions": budget.max_evictions, "per": budget.window.value},
        "evictions": float(evictions),
        "lost_spot_gpu_hours": losses.lost_gpu_s / 3600.0,
        "hp_queue_delay_mean_s": float(m["hp_queue_delay_mean_s"]),
        "hp_slo_attainment": float(m["hp_slo_attainment"]),
        "lp_queue_delay_mean_s": float(m["lp_queue_delay_mean_s"]),
        "lp_eviction_rate": float(m["lp_eviction_rate"]),
        "top_tenant_eviction_share": top / evictions if evictions else 0.0,
        "tenant_rates": spread(list(tenant_rates(sim, min_periods).values())),
    }


ROWS = (
    ("evictions", "evictions", "{:.0f}"),
    ("lost spot GPU-h", "lost_spot_gpu_hours", "{:.1f}"),
    ("HP queue mean (s)", "hp_queue_delay_mean_s", "{:.1f}"),
    ("HP SLO attainment", "hp_slo_attainment", "{:.4f}"),
    ("spot queue mean (s)", "lp_queue_delay_mean_s", "{:.0f}"),
    ("spot eviction rate", "lp_eviction_rate", "{:.4f}"),
    ("top tenant's share of evictions", "top_tenant_eviction_share", "{:.3f}"),
    ("tenant rate max", "tenant_rates.max", "{:.4f}"),
    ("tenant rate std", "tenant_rates.std", "{:.4f}"),
    ("tenant rate Gini", "tenant_rates.gini", "{:.3f}"),
    ("tenants measured", "tenant_rates.tenants", "{:.0f}"),
)


def _get(result: dict[str, Any], path: str) -> float:
    value: Any = result
    for part in path.split("."):
        value = value[part]
    return float(value)


def markdown(pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """One table: per metric, each seed's value without | with budgets, and the seed mean."""
    seeds = " | ".join(f"seed {plain['seed']}" for plain, _ in pairs)
    lines = [f"| metric (without / with budgets) | {seeds} | mean |", "|---" * (len(pairs) + 2) + "|"]
    for label, path, fmt in ROWS:
        cells = [f"{fmt.format(_get(a, path))} / {fmt.format(_get(b, path))}" for a, b in pairs]
        mean_a = float(np.mean([_get(a, path) for a, _ in pairs]))
        mean_b = float(np.mean([_get(b, path) for _, b in pairs]))
        lines.append(f"| {label} | {' | '.join(cells)} | {fmt.format(mean_a)} / {fmt.format(mean_b)} |")
    return "\n".join(lines) + "\n"

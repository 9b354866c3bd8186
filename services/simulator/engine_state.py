"""What a simulation (engine.py) is configured with: its event kinds and periods, its settings,
and the HP-demand input its forecaster reads (the sinks a driver may attach are engine.py's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gfs.services.core.ids import PoolId, TenantId
from gfs.services.core.observed_demand import ObservedDemand
from gfs.services.core.runtime import PoolRuntime
from gfs.services.core.task import TaskClass
from gfs.services.core.tenant_budget import TenantBudget
from gfs.services.simulator.workload import Workload

# Event kinds, in the order equal-time events are applied (arrivals come before all of them).
FINISH, PERIOD, CANCEL, QUOTA, SAMPLE, WINDOW_START, WINDOW_END, LEASE = range(8)
QUOTA_PERIOD_S = 300.0
SAMPLE_PERIOD_S = 60.0
HORIZON_H = 4


@dataclass(frozen=True, slots=True)
class SimSettings:
    t_win_s: float = 31 * 86400.0  # node-cost normaliser (spec 5.2)
    quota_period_s: float = QUOTA_PERIOD_S
    sample_period_s: float = SAMPLE_PERIOD_S
    cost_weight: float = 5.0
    device_indices: bool = False  # track GPU indices even without a decision log
    # Per-tenant eviction budgets (core/tenant_budget.py), counted per pool as the live service
    # does: (tenant, budget) pairs, and one for every spot tenant the workload has (the named ones
    # win). None by default: no budgets, today's decisions.
    tenant_budgets: tuple[tuple[str, TenantBudget], ...] = ()
    every_tenant_budget: TenantBudget | None = None


@dataclass(frozen=True, eq=False)
class DemandInput:
    """The HP-demand series the forecaster reads: hourly peaks per (pool, tenant) series and per
    pool. With `observed`, they are that tracker's arrays, filled as the simulation runs (the
    forecaster only ever reads completed hours); without it, the trace-defined series, known in
    advance."""

    keys: tuple[tuple[str, str], ...]
    hourly: np.ndarray  # [hours, series]
    pools: tuple[str, ...]
    pool_hourly: np.ndarray  # [hours, pools]
    observed: ObservedDemand | None = None

    @staticmethod
    def tracking(observed: ObservedDemand) -> DemandInput:
        return DemandInput(observed.keys, observed.hourly, observed.pools, observed.pool_hourly, observed)


def set_tenant_budgets(
    settings: SimSettings, workload: Workload, pools: Mapping[PoolId, PoolRuntime]
) -> None:
    """The settings' tenant eviction budgets, in every pool (a named tenant's budget wins over the
    one for every spot tenant)."""
    budgets: dict[TenantId, TenantBudget] = {}
    if settings.every_tenant_budget is not None:
        spot = {t.tenant for t in workload.tasks if t.task_class is TaskClass.SPOT}
        budgets = dict.fromkeys(sorted(spot), settings.every_tenant_budget)
    budgets.update((TenantId(t), b) for t, b in settings.tenant_budgets)
    for rt in pools.values():
        for tenant, budget in budgets.items():
            rt.tenant_evictions.set_budget(tenant, budget)

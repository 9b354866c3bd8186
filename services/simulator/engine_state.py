"""The simulation's state (engine.py): its settings, the per-pool drivers, task lives, the event
heap and recording, with the plumbing every layer shares (`push`). The first of the engine's
layers: state, then actuation (engine_actuation.py), then the event loop (engine.py)."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from services.core.driver.pool_driver import PoolDriver
from services.core.forecast import DemandForecast, Forecaster
from services.core.guarantee import (
    periods_ended_by,
)
from services.core.ids import PoolId, TaskId, TenantId
from services.core.observed_demand import ObservedDemand
from services.core.policies.protocols import SchedulingPolicy
from services.core.runtime import PassResult, PoolRuntime, RuntimeSettings
from services.core.task import TaskClass
from services.core.tenant_budget import TenantBudget
from services.simulator.lifecycle import Life
from services.simulator.quota_log import QuotaLog
from services.simulator.reclaim_warnings import WarningLedger
from services.simulator.recording import Recorder
from services.simulator.workload import Workload

if TYPE_CHECKING:  # the sinks receive the whole simulation
    from services.simulator.engine import Simulation

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


DecisionSink = Callable[["Simulation", PoolRuntime, PassResult], None]
# A cancellation as it happened: the pool's runtime, the task, and the node it ran on (its first
# worker's; None: it was queued).
CancelSink = Callable[["Simulation", PoolRuntime, TaskId, str | None], None]


class SimulationState:
    def __init__(
        self,
        workload: Workload,
        policy: SchedulingPolicy,
        forecaster: Forecaster,
        demand: DemandInput,
        settings: SimSettings = SimSettings(),
        decision_sink: DecisionSink | None = None,
        cancel_sink: CancelSink | None = None,
    ) -> None:
        self.w = workload
        self.policy = policy
        self.forecaster = forecaster
        self.demand = demand
        self.observed = demand.observed
        # Which HP the tracked series counts: the servable demand ("servable", issue 35: set from
        # each pool's state after every instant that changed it, core/servable.py), running +
        # queued ("observed", issue 10: counted from arrival to end), or only running ("running").
        source = policy.quota.settings.demand_source
        self.count_servable = source == "servable"
        self.count_queued = source == "observed"
        self.count_running = source == "running"
        self.quota_log: QuotaLog | None = None  # set by a driver that wants the hourly quota log
        self.settings = settings
        self.decision_sink = decision_sink
        self.cancel_sink = cancel_sink
        # Device indices change no decision and no metric: tracked when a decision log reads them.
        rs = RuntimeSettings(
            t_win_s=settings.t_win_s,
            cost_weight=settings.cost_weight,
            device_indices=decision_sink is not None or settings.device_indices,
        )
        # A pool is passed only once something changed in it: no pass before its first event.
        # The simulator holds no starts (its actuation is instant): no command ids, so none typed.
        self.drivers: dict[PoolId, PoolDriver[str]] = {
            p.pool: PoolDriver(PoolRuntime(p.build(), policy, rs), pass_pending=False) for p in workload.pools
        }
        self.pools: dict[PoolId, PoolRuntime] = {p: d.runtime for p, d in self.drivers.items()}
        self._wakes: dict[PoolId, set[float]] = {p: set() for p in self.drivers}  # PERIOD events queued
        self._set_tenant_budgets()
        self.useful_gpu_s: dict[PoolId, float] = dict.fromkeys(self.pools, 0.0)
        self.lives: dict[TaskId, Life] = {}
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.now = 0.0
        self.in_window = False
        self.outstanding_window = 0
        self.events = 0
        self.forecast_cache: tuple[int, DemandForecast | None] = (-1, None)
        self.last_fit_day = -1
        self.recorder = Recorder(workload, tuple(self.pools))
        self.stop_s = workload.window_end_s + workload.drain_s
        # Lease-based policies (Chronus): every `lease_s` inside the window each pool's runtime
        # releases its running tasks and the next pass renews or stops them.
        self.lease_s = float(policy.lease_s or 0.0)
        self.lease_renewals = 0
        self.lease_stops = 0
        self.cancelled: list[TaskId] = []  # in the order they happened
        self.cancelled_queued = 0
        self.cancelled_running = 0
        # Early reclaim warnings (issue 27 item 2), set by a driver that measures them: they change
        # no decision, only what the evictions cost, so one run can score several settings at once
        # (simulator/reclaim_warnings.py).
        self.warnings: tuple[WarningLedger, ...] = ()

    def push(self, t: float, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, payload))

    def _set_tenant_budgets(self) -> None:
        budgets: dict[TenantId, TenantBudget] = {}
        if self.settings.every_tenant_budget is not None:
            spot = {t.tenant for t in self.w.tasks if t.task_class is TaskClass.SPOT}
            budgets = dict.fromkeys(sorted(spot), self.settings.every_tenant_budget)
        budgets.update((TenantId(t), b) for t, b in self.settings.tenant_budgets)
        for rt in self.pools.values():
            for tenant, budget in budgets.items():
                rt.tenant_evictions.set_budget(tenant, budget)

    def _window(self) -> tuple[float, float]:
        return self.w.window_start_s, self.w.window_end_s

    def _in_window(self, life: Life, total: int, new: int, *, finished: bool) -> int:
        """How many of the `new` periods just logged (the last of `total`) ended by the window's end."""
        end = self.w.window_end_s
        return periods_ended_by(life.start, self.now, total, new, end, finished=finished)

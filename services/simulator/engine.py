"""Discrete-event simulation: one heap ordered by (time, kind, seq), one clock, no fixed ticks.

Events: arrivals (merged from the sorted task list), finishes, guarantee-period boundaries,
cancellations, quota refresh (300 s) and state samples (60 s) inside the window, window start /
end, lease renewals, stop. All events at one timestamp are applied first, in a canonical order:
arrivals, then the heap's events by kind (FINISH, PERIOD, CANCEL, QUOTA, SAMPLE, WINDOW_START,
WINDOW_END, LEASE), equal kinds in push order; so a quota refresh at t sees every finish and
cancellation at t, whenever their events were pushed. Then every pool that changed runs one
scheduling pass (events a pass pushes at the same instant, a zero-length run's finish, are
applied in the same order and followed by another pass). A live driver plays an instant the same
way: time advances (finishes, guarantee periods), submissions and cancellations, the quota
refresh, one pass.

Everything per pool (queues, applying decisions, guarantee ledger, eviction scores, quota inputs,
leases) is the core's `PoolRuntime`, driven by the core's `PoolDriver` (services/core/driver): the
pass trigger (a pool "dirty" since its last pass) and the guarantee-period timers are the driver's,
the same one the live preemption service drives. The engine keeps only events (a PERIOD event
wakes a pool at its driver's `next_due`), the actuation model (durations, finishes, leases) and
recording (task lives, useful GPU time, samples).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np

from services.core.driver.pool_driver import PoolDriver
from services.core.feasibility import rejection_message
from services.core.forecast import DemandForecast, Forecaster
from services.core.guarantee import (
    periods_ended_by,
    remaining_after_eviction,
    successes_before_eviction,
    successes_on_finish,
    useful_seconds_before_eviction,
)
from services.core.ids import PoolId, TaskId, TenantId
from services.core.observed_demand import ObservedDemand
from services.core.policies.protocols import SchedulingPolicy
from services.core.reasons import EvictionReason
from services.core.runtime import PassResult, PoolRuntime, RuntimeSettings, Started, Stopped
from services.core.task import TaskClass, TaskSpec
from services.core.tenant_budget import TenantBudget
from services.core.victims_lease import RELEASE_OVERHEAD_S
from services.simulator.lifecycle import Life, overlap
from services.simulator.quota_log import QuotaLog
from services.simulator.reclaim_warnings import WarningLedger
from services.simulator.recording import Recorder
from services.simulator.workload import Workload

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


class Simulation:
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
        # Which HP the observed series counts: running + queued ("observed", issue 10), or only
        # running ("running", issue 21: the queue's servable part enters through the quota's floor).
        self.count_queued = policy.quota.settings.demand_source != "running"
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
        self.drivers: dict[PoolId, PoolDriver] = {
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

    # ----- event plumbing -------------------------------------------------------------------
    def push(self, t: float, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, payload))

    def run(self, progress: Callable[[float], None] | None = None) -> Recorder:
        wall0 = time.perf_counter()
        tasks = self.w.tasks
        n_tasks = len(tasks)
        ai = 0
        self.push(self.w.window_start_s, WINDOW_START, None)
        self.push(self.w.window_end_s, WINDOW_END, None)
        for cancel_s, tid in self.w.cancels:
            self.push(cancel_s, CANCEL, tid)
        next_progress = 0
        t = 0.0
        while True:
            t_heap = self.heap[0][0] if self.heap else math.inf
            t_arr = tasks[ai].submit_s if ai < n_tasks else math.inf
            t = min(t_heap, t_arr)
            if t == math.inf or t > self.stop_s:
                break
            if self.now >= self.w.window_end_s and self.outstanding_window == 0 and t > self.now:
                self.stop_s = self.now  # every window task is done: the drain ends early
                break
            self.now = t
            sample = False
            while True:
                while ai < n_tasks and tasks[ai].submit_s == t:
                    self._arrive(tasks[ai])
                    ai += 1
                while self.heap and self.heap[0][0] == t:
                    _, kind, _, payload = heapq.heappop(self.heap)
                    self.events += 1
                    sample |= self._handle(kind, payload)
                dirty = sorted(p for p, d in self.drivers.items() if d.trigger.pending)
                if not dirty:
                    break
                for pool_id in dirty:
                    self._schedule(pool_id)
                if not (self.heap and self.heap[0][0] == t):
                    break
            if sample:
                self.recorder.sample(self)
            if progress is not None and self.events >= next_progress:
                progress(t)
                next_progress = self.events + 20000
        if t == math.inf:
            self.stop_s = max(self.now, self.w.window_end_s)
        self._close()
        self.recorder.wall_s = time.perf_counter() - wall0
        self.recorder.events = self.events + n_tasks
        return self.recorder

    def _handle(self, kind: int, payload: object) -> bool:
        if kind == FINISH:
            tid, epoch = cast(tuple[TaskId, int], payload)
            self._finish(tid, epoch)
        elif kind == PERIOD:
            self._period(cast(PoolId, payload))
        elif kind == CANCEL:
            self._cancel(cast(TaskId, payload))
        elif kind == QUOTA:
            self._refresh_quota()
        elif kind == SAMPLE:
            if self.now + self.settings.sample_period_s < self.w.window_end_s:
                self.push(self.now + self.settings.sample_period_s, SAMPLE, None)
            return True
        elif kind == WINDOW_START:
            self.in_window = True
            self._touch_all()
            self.push(self.now, QUOTA, None)
            self.push(self.now, SAMPLE, None)
            if self.lease_s > 0:
                self.push(self.now + self.lease_s, LEASE, None)
        elif kind == WINDOW_END:
            self.in_window = False
            self._touch_all()
        elif kind == LEASE:
            self._renew_leases()
        return False

    def _touch_all(self) -> None:
        for driver in self.drivers.values():
            driver.invalidate()  # preemption and the quota switch on or off: every memo is stale

    def _wake(self, pool_id: PoolId) -> None:
        """A PERIOD event at the pool's driver's next due timer, unless one is queued then."""
        due = self.drivers[pool_id].next_due
        wakes = self._wakes[pool_id]
        if due != math.inf and due not in wakes:
            wakes.add(due)
            self.push(due, PERIOD, pool_id)

    # ----- task events --------------------------------------------------------------------------
    def _arrive(self, spec: TaskSpec) -> None:
        self.events += 1
        in_window = self.w.window_start_s <= spec.submit_s < self.w.window_end_s
        life = Life(spec, in_window=in_window)
        self.lives[spec.task_id] = life
        if in_window:
            self.outstanding_window += 1
        rejection = self.drivers[spec.pool].submit(spec, self.now)
        if rejection is not None:  # the workload already dropped infeasible jobs
            detail = rejection_message(rejection, spec.gpus_per_worker, spec.workers, spec.pool)
            raise ValueError(f"task {spec.task_id}: {detail}")
        if self.observed is not None and spec.task_class is TaskClass.HP and self.count_queued:
            self.observed.add(self.now, (spec.pool, spec.tenant), spec.total_gpus)

    def _finish(self, tid: TaskId, epoch: int) -> None:
        life = self.lives[tid]
        if life.epoch != epoch:
            return
        spec = life.spec
        done = self.drivers[spec.pool].finish(tid, self.now)
        if self.observed is not None and spec.task_class is TaskClass.HP:
            self.observed.remove(self.now, (spec.pool, spec.tenant), spec.total_gpus)
        life.end = self.now
        life.remaining = 0.0
        life.epoch += 1
        if done.successes:
            life.succeeded += done.successes
            total = successes_on_finish(done.run_s)
            life.succeeded_in_window += self._in_window(life, total, done.successes, finished=True)
        self.useful_gpu_s[spec.pool] += spec.total_gpus * overlap(life.start, self.now, *self._window())
        if life.in_window:
            self.outstanding_window -= 1

    def _cancel(self, tid: TaskId) -> None:
        """The owner cancels: a finished (or already cancelled) task is not affected; a queued one is
        withdrawn, having waited until now; a running one stops for good: its completed guarantee
        periods count, the interrupted one is void, its work until now is charged like a run still
        going at the stop (HP: all of it; spot: its completed periods). Either way its life ends
        here, not as a finish: it is no longer outstanding."""
        life = self.lives.get(tid)
        if life is None:  # the workload checks that no cancel comes before its submission
            raise ValueError(f"task {tid}: cancelled at {self.now} s before it was submitted")
        if not (math.isnan(life.end) and math.isnan(life.cancelled)):
            return
        spec = life.spec
        rt = self.pools[spec.pool]
        running = rt.state.running.get(tid)
        node = rt.state.node_names[running.placements[0].node] if running is not None else None
        stop = self.drivers[spec.pool].cancel(tid, self.now)
        if stop is None:
            life.wait += self.now - life.entered
            self.cancelled_queued += 1
        else:
            self._log_stop(life, stop)
            end = (
                self.now
                if spec.task_class is TaskClass.HP
                else life.start + useful_seconds_before_eviction(stop.run_s)
            )
            self.useful_gpu_s[spec.pool] += spec.total_gpus * overlap(life.start, end, *self._window())
            self.cancelled_running += 1
        if self.observed is not None and spec.task_class is TaskClass.HP and (self.count_queued or stop):
            self.observed.remove(self.now, (spec.pool, spec.tenant), spec.total_gpus)
        life.cancelled = self.now
        self.cancelled.append(tid)
        life.epoch += 1  # its finish / period events are stale now
        if life.in_window:
            self.outstanding_window -= 1
        if self.cancel_sink is not None:
            self.cancel_sink(self, rt, tid, node)

    def _period(self, pool_id: PoolId) -> None:
        """The pool's timers due now: every guarantee period that closed is one success."""
        self._wakes[pool_id].discard(self.now)
        driver = self.drivers[pool_id]
        popped = driver.periods.popped
        for closed in driver.advance(self.now):
            life = self.lives[closed.task_id]
            life.succeeded += 1
            life.succeeded_in_window += self.now <= self.w.window_end_s
        # One event per timer that came due, as when each period was an event of its own.
        self.events += driver.periods.popped - popped - 1
        self._wake(pool_id)

    def _set_tenant_budgets(self) -> None:
        budgets: dict[TenantId, TenantBudget] = {}
        if self.settings.every_tenant_budget is not None:
            spot = {t.tenant for t in self.w.tasks if t.task_class is TaskClass.SPOT}
            budgets = dict.fromkeys(sorted(spot), self.settings.every_tenant_budget)
        budgets.update((TenantId(t), b) for t, b in self.settings.tenant_budgets)
        for rt in self.pools.values():
            for tenant, budget in budgets.items():
                rt.set_tenant_budget(tenant, budget)

    def _window(self) -> tuple[float, float]:
        return self.w.window_start_s, self.w.window_end_s

    def _in_window(self, life: Life, total: int, new: int, *, finished: bool) -> int:
        """How many of the `new` periods just logged (the last of `total`) ended by the window's end."""
        end = self.w.window_end_s
        return periods_ended_by(life.start, self.now, total, new, end, finished=finished)

    # ----- scheduling ---------------------------------------------------------------------------
    def _schedule(self, pool_id: PoolId) -> None:
        driver = self.drivers[pool_id]
        rt = driver.runtime
        if not rt.hp.index and not rt.spot.index:
            driver.trigger.take()
            return  # nothing queued (lease-released tasks are queued too): no pass
        result = driver.run_pass(
            self.now, preemption=self.in_window, quota=self.in_window, run_length=self._run_length
        )
        assert result is not None  # the pool was dirty
        for o in result.outcomes:
            if isinstance(o, Started):
                self._start(o)
            elif o.reason is EvictionReason.LEASE_NOT_RENEWED:
                self._lease_stop(o)
            else:
                self._evict(o)
        if result.outcomes:
            if self.decision_sink is not None:
                self.decision_sink(self, rt, result)
            self._wake(pool_id)  # only a start arms a timer

    def _run_length(self, o: Started) -> float:
        """How long a run just started will last (`_start` sets the same): the driver arms no
        guarantee period at or past its finish."""
        life = self.lives[o.task_id]
        return life.remaining + (life.spec.restart_overhead_s if o.preempted else 0.0)

    def _start(self, o: Started) -> None:
        if o.renewed:
            return  # the lease was renewed: same run, same events
        life = self.lives[o.task_id]
        spec = life.spec
        if self.observed is not None and spec.task_class is TaskClass.HP and not self.count_queued:
            self.observed.add(self.now, (spec.pool, spec.tenant), spec.total_gpus)
        life.wait += self.now - life.entered
        if math.isnan(life.first_start):
            life.first_start = self.now
        if o.preempted:
            life.remaining += spec.restart_overhead_s
        life.start = self.now
        life.epoch += 1
        self.push(self.now + life.remaining, FINISH, (o.task_id, life.epoch))

    def _stop_running_hp(self, spec: TaskSpec) -> None:
        """An HP run ended without finishing: it stops counting where only running HP counts."""
        if self.observed is not None and spec.task_class is TaskClass.HP and not self.count_queued:
            self.observed.remove(self.now, (spec.pool, spec.tenant), spec.total_gpus)

    def _evict(self, o: Stopped) -> None:
        life = self.lives[o.task_id]
        spec = life.spec
        self._stop_running_hp(spec)
        self._log_stop(life, o)
        for ledger in self.warnings:
            ledger.evicted(spec, o.run_s, self.now, life.start)
        self.useful_gpu_s[spec.pool] += spec.total_gpus * overlap(
            life.start, life.start + useful_seconds_before_eviction(o.run_s), *self._window()
        )
        life.remaining = remaining_after_eviction(
            life.remaining, o.run_s, spec.checkpoint_interval_s, spec.restart_overhead_s
        )
        life.evictions += 1
        life.epoch += 1
        life.entered = self.now

    def _log_stop(self, life: Life, o: Stopped) -> None:
        """The guarantee periods a stop logged: its completed ones, and the failed one if any."""
        if o.successes:
            life.succeeded += o.successes
            total = successes_before_eviction(o.run_s)
            life.succeeded_in_window += self._in_window(life, total, o.successes, finished=False)
        if o.failed_period:
            life.failed += 1
            life.failed_in_window += self.now <= self.w.window_end_s

    # ----- leases -------------------------------------------------------------------------------
    def _renew_leases(self) -> None:
        """Every running task gives its GPUs back (spec 6.2, 8 #7); the pass at this instant decides
        who holds GPUs for the next lease. Tasks finishing right now keep theirs: their finish events
        handle them."""
        if not self.in_window:
            return
        if self.now + self.lease_s < self.w.window_end_s:
            self.push(self.now + self.lease_s, LEASE, None)
        self.lease_renewals += 1
        lives = self.lives
        for driver in self.drivers.values():
            running = driver.runtime.state.running
            finishing = frozenset(t for t in running if lives[t].start + lives[t].remaining <= self.now)
            driver.release_leases(self.now, keep=finishing)

    def _lease_stop(self, o: Stopped) -> None:
        """A lease not renewed: work since the last checkpoint is lost plus the re-lease overhead; a
        spot task stopped inside a guarantee period failed it (the runtime logged it)."""
        life = self.lives[o.task_id]
        spec = life.spec
        self._stop_running_hp(spec)
        self.lease_stops += 1
        self._log_stop(life, o)
        # HP work counts up to now; spot work only for its completed guarantee periods.
        if spec.task_class is TaskClass.SPOT:
            end = life.start + useful_seconds_before_eviction(o.run_s)
        else:
            end = self.now
        self.useful_gpu_s[spec.pool] += spec.total_gpus * overlap(life.start, end, *self._window())
        if o.failed_period:
            life.evictions += 1
        life.remaining = remaining_after_eviction(
            life.remaining, o.run_s, spec.checkpoint_interval_s, RELEASE_OVERHEAD_S
        )
        life.epoch += 1  # its finish / period events are stale now
        life.entered = self.now
        if math.isnan(life.first_start):
            life.first_start = life.start

    # ----- quota, forecasts ---------------------------------------------------------------------
    def _forecast(self) -> DemandForecast | None:
        hour = int(self.now // 3600)
        if self.forecast_cache[0] == hour:
            return self.forecast_cache[1]
        day = int(self.now // 86400)
        if self.observed is not None:
            self.observed.advance(self.now)  # the hours before this one are final now
        keys, hourly = self.demand.keys, self.demand.hourly
        if day != self.last_fit_day:
            self.last_fit_day = day
            self.forecaster.fit(keys, hourly, hour)
        fc = self.forecaster.predict(keys, hourly, hour, HORIZON_H)
        self.forecast_cache = (hour, fc)
        self.recorder.forecasts += 1
        if fc.fallback:
            self.recorder.forecast_fallbacks += 1
        return fc

    def _refresh_quota(self) -> None:
        if not self.in_window:
            return
        nxt = self.now + self.settings.quota_period_s
        if nxt < self.w.window_end_s:
            self.push(nxt, QUOTA, None)
        fc = self._forecast() if self.policy.quota.uses_forecast else None
        p = self.policy.quota.settings.guarantee_rate
        for pool_id, rt in self.pools.items():
            quantile = None
            if fc is not None:
                try:
                    quantile = fc.pool_quantile(pool_id, p)
                except KeyError:  # a pool without HP history has no demand series
                    quantile = np.zeros(HORIZON_H)
            self.drivers[pool_id].refresh_quota(self.now, quantile)
            for ledger in self.warnings:
                ledger.check(self.now, rt, fc)
            if self.quota_log is not None and rt.last_quota_inputs is not None:
                self.quota_log.record(self.now, pool_id, rt, rt.last_quota_inputs, self.policy.quota.settings)

    # ----- stop ---------------------------------------------------------------------------------
    def _close(self) -> None:
        """Tasks still queued or running at the stop: queued ones have waited until the stop;
        running ones keep their completed guarantee periods as useful time."""
        stop = self.stop_s
        for pool_id, rt in self.pools.items():
            for tid in rt.queued_ids():
                life = self.lives[tid]
                life.wait += stop - life.entered
            for tid, running in rt.state.running.items():
                life = self.lives[tid]
                run = stop - life.start
                if running.spec.task_class is TaskClass.HP:
                    end = stop
                else:
                    end = life.start + useful_seconds_before_eviction(run)
                self.useful_gpu_s[pool_id] += running.spec.total_gpus * overlap(
                    life.start, end, *self._window()
                )

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
the same one the live preemption service drives. The engine keeps the events (a PERIOD event
wakes a pool at its driver's `next_due`) and the actuation model (durations, finishes, leases),
and hands the rest to collaborators that own their state: what each task's life is charged
(accounting.py), the HP-demand series the forecaster reads (demand_tracking.py), the hourly
forecasts (hourly_forecasts.py) and the samples (recording.py).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from typing import cast

import numpy as np

from gfs.services.core.driver.pool_driver import PoolDriver
from gfs.services.core.feasibility import rejection_message
from gfs.services.core.forecast import DemandForecast, Forecaster
from gfs.services.core.ids import PoolId, TaskId
from gfs.services.core.observed_demand import ObservedDemand
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.reasons import EvictionReason
from gfs.services.core.runtime import PassResult, PoolRuntime, RuntimeSettings, Started, Stopped
from gfs.services.core.task import TaskSpec
from gfs.services.simulator.accounting import RunAccounting
from gfs.services.simulator.demand_tracking import DemandTracking
from gfs.services.simulator.engine_state import (
    CANCEL,
    FINISH,
    HORIZON_H,
    LEASE,
    PERIOD,
    QUOTA,
    SAMPLE,
    WINDOW_END,
    WINDOW_START,
    DemandInput,
    SimSettings,
    set_tenant_budgets,
)
from gfs.services.simulator.hourly_forecasts import HourlyForecasts
from gfs.services.simulator.lifecycle import Life
from gfs.services.simulator.quota_log import QuotaLog
from gfs.services.simulator.reclaim_warnings import WarningLedger
from gfs.services.simulator.recording import Recorder
from gfs.services.simulator.workload import Workload

__all__ = ["HORIZON_H", "CancelSink", "DecisionSink", "DemandInput", "SimSettings", "Simulation"]


DecisionSink = Callable[["Simulation", PoolRuntime, PassResult], None]
# A cancellation: the pool's runtime, the task, the node it ran on (its first worker's; None: queued).
CancelSink = Callable[["Simulation", PoolRuntime, TaskId, str | None], None]


class Simulation:
    def __init__(
        self,
        workload: Workload,
        policy: SchedulingPolicy,
        forecaster: Forecaster,
        demand: DemandInput,
        settings: SimSettings | None = None,
        decision_sink: DecisionSink | None = None,
        cancel_sink: CancelSink | None = None,
    ) -> None:
        settings = settings or SimSettings()
        self.w = workload
        self.policy = policy
        self.settings = settings
        self.decision_sink = decision_sink
        self.cancel_sink = cancel_sink
        self.quota_log: QuotaLog | None = None  # set by a driver that wants the hourly quota log
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
        set_tenant_budgets(settings, workload, self.pools)
        self.accounting = RunAccounting(workload, tuple(self.pools))
        self.tracking = DemandTracking(demand.observed, policy.quota.settings.demand_source)
        self.forecasts = HourlyForecasts(forecaster, demand)
        self.recorder = Recorder(workload, tuple(self.pools))
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.now = 0.0
        self.in_window = False
        self.events = 0
        self.stop_s = workload.window_end_s + workload.drain_s
        # Lease-based policies (Chronus): every `lease_s` inside the window each pool's runtime
        # releases its running tasks and the next pass renews or stops them.
        self.lease_s = float(policy.lease_s or 0.0)
        self.lease_renewals = 0
        # Early reclaim warnings (issue 27 item 2), set by a driver that measures them: they change
        # no decision, only what the evictions cost, so one run can score several settings at once
        # (simulator/reclaim_warnings.py).
        self.warnings: tuple[WarningLedger, ...] = ()

    # ----- what the collaborators hold, as drivers and reports read it --------------------------------
    @property
    def lives(self) -> dict[TaskId, Life]:
        return self.accounting.lives

    @property
    def useful_gpu_s(self) -> dict[PoolId, float]:
        return self.accounting.useful_gpu_s

    @property
    def cancelled(self) -> list[TaskId]:
        return self.accounting.cancelled

    @property
    def cancelled_queued(self) -> int:
        return self.accounting.cancelled_queued

    @property
    def cancelled_running(self) -> int:
        return self.accounting.cancelled_running

    @property
    def lease_stops(self) -> int:
        return self.accounting.lease_stops

    @property
    def observed(self) -> ObservedDemand | None:
        return self.tracking.observed

    @property
    def demand(self) -> DemandInput:
        return self.forecasts.demand

    @property
    def forecaster(self) -> Forecaster:
        return self.forecasts.forecaster

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
        changed: set[PoolId] = set()  # pools whose state an instant changed (their servable level)
        while True:
            t_heap = self.heap[0][0] if self.heap else math.inf
            t_arr = tasks[ai].submit_s if ai < n_tasks else math.inf
            t = min(t_heap, t_arr)
            if t == math.inf or t > self.stop_s:
                break
            if self.now >= self.w.window_end_s and self.accounting.outstanding_window == 0 and t > self.now:
                self.stop_s = self.now  # every window task is done: the drain ends early
                break
            self.now = t
            self.tracking.flush(t, self.pools)
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
                changed.update(dirty)
                if not (self.heap and self.heap[0][0] == t):
                    break
            if changed:
                self.tracking.instant_done(t, changed)  # the level after this instant holds from t on
                changed.clear()
            if sample:
                self.recorder.sample(self.now, self.pools, self.settings.sample_period_s)
            if progress is not None and self.events >= next_progress:
                progress(t)
                next_progress = self.events + 20000
        if t == math.inf:
            self.stop_s = max(self.now, self.w.window_end_s)
        self.accounting.close(self.stop_s, self.pools)
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
        self.accounting.arrive(spec)
        rejection = self.drivers[spec.pool].submit(spec, self.now)
        if rejection is not None:  # the workload already dropped infeasible jobs
            detail = rejection_message(rejection, spec.gpus_per_worker, spec.workers, spec.pool)
            raise ValueError(f"task {spec.task_id}: {detail}")
        self.tracking.arrived(spec, self.now)

    def _finish(self, tid: TaskId, epoch: int) -> None:
        life = self.accounting.lives[tid]
        if life.epoch != epoch:
            return
        spec = life.spec
        done = self.drivers[spec.pool].finish(tid, self.now)
        self.tracking.finished(spec, self.now)
        self.accounting.finish(done, self.now)

    def _cancel(self, tid: TaskId) -> None:
        """The owner cancels: a finished (or already cancelled) task is not affected; a queued one is
        withdrawn, having waited until now; a running one stops for good: its completed guarantee
        periods count, the interrupted one is void, its work until now is charged like a run still
        going at the stop (HP: all of it; spot: its completed periods). Either way its life ends
        here, not as a finish: it is no longer outstanding."""
        life = self.accounting.lives.get(tid)
        if life is None:  # the workload checks that no cancel comes before its submission
            raise ValueError(f"task {tid}: cancelled at {self.now} s before it was submitted")
        if not (math.isnan(life.end) and math.isnan(life.cancelled)):
            return
        spec = life.spec
        rt = self.pools[spec.pool]
        running = rt.state.running.get(tid)
        node = rt.state.node_names[running.placements[0].node] if running is not None else None
        stop = self.drivers[spec.pool].cancel(tid, self.now)
        self.accounting.cancel(tid, stop, self.now)
        self.tracking.cancelled(spec, self.now, was_running=stop is not None)
        if self.cancel_sink is not None:
            self.cancel_sink(self, rt, tid, node)

    def _period(self, pool_id: PoolId) -> None:
        """The pool's timers due now: every guarantee period that closed is one success."""
        self._wakes[pool_id].discard(self.now)
        driver = self.drivers[pool_id]
        popped = driver.periods.popped
        for closed in driver.advance(self.now):
            self.accounting.period_closed(closed.task_id, self.now)
        # One event per timer that came due, as when each period was an event of its own.
        self.events += driver.periods.popped - popped - 1
        self._wake(pool_id)

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

    # ----- what happens to a run ----------------------------------------------------------------
    def _run_length(self, o: Started) -> float:
        """How long a run just started will last (`_start` sets the same): the driver arms no
        guarantee period at or past its finish."""
        life = self.accounting.lives[o.task_id]
        return life.remaining + (life.spec.restart_overhead_s if o.preempted else 0.0)

    def _start(self, o: Started) -> None:
        if o.renewed:
            return  # the lease was renewed: same run, same events
        life = self.accounting.lives[o.task_id]
        self.tracking.started(life.spec, self.now)
        finish = self.accounting.start(o, self.now)
        self.push(finish, FINISH, (o.task_id, life.epoch))

    def _evict(self, o: Stopped) -> None:
        self.tracking.stopped_running(self.accounting.lives[o.task_id].spec, self.now)
        self.accounting.evict(o, self.now, self.warnings)

    def _lease_stop(self, o: Stopped) -> None:
        self.tracking.stopped_running(self.accounting.lives[o.task_id].spec, self.now)
        self.accounting.lease_stop(o, self.now)

    def _renew_leases(self) -> None:
        """Every running task gives its GPUs back (spec 6.2, 8 #7); the pass at this instant decides
        who holds GPUs for the next lease. Tasks finishing right now keep theirs: their finish events
        handle them."""
        if not self.in_window:
            return
        if self.now + self.lease_s < self.w.window_end_s:
            self.push(self.now + self.lease_s, LEASE, None)
        self.lease_renewals += 1
        lives = self.accounting.lives
        for driver in self.drivers.values():
            running = driver.runtime.state.running
            finishing = frozenset(t for t in running if lives[t].start + lives[t].remaining <= self.now)
            driver.release_leases(self.now, keep=finishing)

    # ----- quota, forecasts ---------------------------------------------------------------------
    def _forecast(self) -> DemandForecast | None:
        return self.forecasts.at(self.now, self.tracking, self.recorder)

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

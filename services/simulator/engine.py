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
from typing import cast

from services.core.feasibility import rejection_message
from services.core.guarantee import (
    successes_on_finish,
    useful_seconds_before_eviction,
)
from services.core.ids import PoolId, TaskId
from services.core.reasons import EvictionReason
from services.core.runtime import Started
from services.core.task import TaskClass, TaskSpec
from services.simulator.engine_actuation import Actuation
from services.simulator.engine_state import (
    CANCEL,
    FINISH,
    HORIZON_H,
    LEASE,
    PERIOD,
    QUOTA,
    SAMPLE,
    WINDOW_END,
    WINDOW_START,
    CancelSink,
    DecisionSink,
    DemandInput,
    SimSettings,
)
from services.simulator.lifecycle import Life, overlap
from services.simulator.recording import Recorder

__all__ = ["HORIZON_H", "CancelSink", "DecisionSink", "DemandInput", "SimSettings", "Simulation"]


class Simulation(Actuation):
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
        # Pools whose servable level changed at the instant given and is not taken yet: it is
        # computed only when a minute boundary samples it (no later change came first).
        stale: dict[PoolId, float] = {}
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
            if stale:
                self._flush_servable(t, stale)
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
            if changed and self.count_servable:
                for pool_id in changed:
                    stale[pool_id] = t  # the level after this instant holds from t on
                changed.clear()
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

    def _flush_servable(self, now: float, stale: dict[PoolId, float]) -> None:
        """Before anything happens at `now`: the servable level (core/servable.py) of every pool
        whose level changed at an earlier instant and that a minute boundary before `now` samples,
        taken from its state, unchanged since (a later change would have replaced it unsampled).
        In the order of those instants, so the tracker's time never goes back."""
        observed = self.observed
        if observed is None:
            stale.clear()
            return
        due = sorted((at, pool_id) for pool_id, at in stale.items() if math.ceil(at / 60.0) * 60.0 < now)
        for at, pool_id in due:
            observed.set_levels(at, pool_id, self.pools[pool_id].servable_levels())
            del stale[pool_id]

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
        if self.observed is not None and spec.task_class is TaskClass.HP and not self.count_servable:
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
        if (
            self.observed is not None
            and spec.task_class is TaskClass.HP
            and (self.count_queued or (stop and self.count_running))
        ):
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

"""Discrete-event simulation: one heap ordered by (time, seq), one clock, no fixed ticks.

Events: arrivals (merged from the sorted task list), finishes, guarantee-period boundaries,
quota refresh (300 s) and state samples (60 s) inside the window, window start / end, stop.
All events at one timestamp are applied first; then every pool that changed runs one scheduling
pass (the core's `schedule_pool`) and the simulator applies the returned decisions.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np

from services.core.cycle import CycleContext, schedule_pool
from services.core.decisions import EvictTask, StartTask
from services.core.eviction_score import eviction_scores, recent_counts
from services.core.forecast import DemandForecast, Forecaster
from services.core.guarantee import (
    GUARANTEE_PERIOD_S,
    remaining_after_eviction,
    successes_before_eviction,
    successes_on_finish,
)
from services.core.ids import PoolId, TaskId
from services.core.policies.protocols import SchedulingPolicy
from services.core.pool import PoolState, RunningTask
from services.core.queues import BucketQueue
from services.core.quota import QuotaInputs
from services.core.task import TaskClass, TaskSpec
from services.core.victims import PreemptionContext
from services.simulator.lifecycle import Life, overlap
from services.simulator.recording import Recorder
from services.simulator.workload import Workload

FINISH, PERIOD, QUOTA, SAMPLE, WINDOW_START, WINDOW_END = range(6)
QUOTA_PERIOD_S = 300.0
SAMPLE_PERIOD_S = 60.0
HORIZON_H = 4


@dataclass(frozen=True, slots=True)
class SimSettings:
    t_win_s: float = 31 * 86400.0  # node-cost normaliser (spec 5.2)
    quota_period_s: float = QUOTA_PERIOD_S
    sample_period_s: float = SAMPLE_PERIOD_S
    cost_weight: float = 5.0


@dataclass(frozen=True, eq=False)
class DemandInput:
    keys: tuple[tuple[str, str], ...]
    hourly: np.ndarray
    pools: tuple[str, ...]


class PoolRuntime:
    """A pool plus its queues and the simulator-side counters around it."""

    def __init__(self, state: PoolState, policy: SchedulingPolicy, max_hours: int) -> None:
        self.state = state
        self.hp = BucketQueue(policy.hp_order)
        self.spot = BucketQueue(policy.spot_order)
        self.version = 0
        self.quota: dict[int, float] = dict.fromkeys(range(1, max_hours + 1), float(state.capacity))
        self.eta = 1.0
        self.failed_total = 0
        self.succeeded_total = 0
        self.recent_success: deque[float] = deque()
        self.recent_failure: deque[float] = deque()
        self.evict_times: list[float] = []
        self.evict_nodes: list[int] = []
        self.useful_gpu_s = 0.0
        self.scores_set = False  # eviction scores differ from the default (recent evictions)


class Simulation:
    def __init__(
        self,
        workload: Workload,
        policy: SchedulingPolicy,
        forecaster: Forecaster,
        demand: DemandInput,
        settings: SimSettings = SimSettings(),
    ) -> None:
        self.w = workload
        self.policy = policy
        self.forecaster = forecaster
        self.demand = demand
        self.settings = settings
        max_h = policy.quota.settings.max_guarantee_hours
        self.pools: dict[PoolId, PoolRuntime] = {
            p.pool: PoolRuntime(p.build(), policy, max_h) for p in workload.pools
        }
        self.lives: dict[TaskId, Life] = {}
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.now = 0.0
        self.in_window = False
        self.dirty: set[PoolId] = set()
        self.outstanding_window = 0
        self.events = 0
        self.forecast_cache: tuple[int, DemandForecast | None] = (-1, None)
        self.last_fit_day = -1
        self.recorder = Recorder(workload, tuple(self.pools))
        self.stop_s = workload.window_end_s + workload.drain_s

    # ----- event plumbing -------------------------------------------------------------------
    def push(self, t: float, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, payload))

    def run(self, progress: Callable[[float], None] | None = None) -> Recorder:
        wall0 = time.perf_counter()
        tasks = self.w.tasks
        n_tasks = len(tasks)
        ai = 0
        self.push(self.w.window_start_s, WINDOW_START, None)
        self.push(self.w.window_end_s, WINDOW_END, None)
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
                    _, _, kind, payload = heapq.heappop(self.heap)
                    self.events += 1
                    sample |= self._handle(kind, payload)
                if not self.dirty:
                    break
                for pool_id in sorted(self.dirty):
                    self._schedule(pool_id)
                self.dirty.clear()
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
            tid, epoch = cast(tuple[TaskId, int], payload)
            self._period(tid, epoch)
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
        elif kind == WINDOW_END:
            self.in_window = False
            self._touch_all()
        return False

    def _touch_all(self) -> None:
        for pool_id, rt in self.pools.items():
            rt.version += 1
            self.dirty.add(pool_id)

    # ----- task events --------------------------------------------------------------------------
    def _arrive(self, spec: TaskSpec) -> None:
        self.events += 1
        in_window = self.w.window_start_s <= spec.submit_s < self.w.window_end_s
        life = Life(spec, in_window=in_window)
        self.lives[spec.task_id] = life
        if in_window:
            self.outstanding_window += 1
        rt = self.pools[spec.pool]
        (rt.hp if spec.task_class is TaskClass.HP else rt.spot).push(spec, self.now)
        self.dirty.add(spec.pool)

    def _finish(self, tid: TaskId, epoch: int) -> None:
        life = self.lives[tid]
        if life.epoch != epoch:
            return
        spec = life.spec
        rt = self.pools[spec.pool]
        rt.state.remove_task(tid)
        run = self.now - life.start
        life.end = self.now
        life.remaining = 0.0
        life.epoch += 1
        if spec.task_class is TaskClass.SPOT:
            self._log_success(rt, life, successes_on_finish(run) - life.logged)
        rt.useful_gpu_s += spec.total_gpus * overlap(life.start, self.now, *self._window())
        if life.in_window:
            self.outstanding_window -= 1
        rt.version += 1
        self.dirty.add(spec.pool)

    def _period(self, tid: TaskId, epoch: int) -> None:
        life = self.lives[tid]
        if life.epoch != epoch:
            return
        rt = self.pools[life.spec.pool]
        self._log_success(rt, life, 1)
        nxt = self.now + GUARANTEE_PERIOD_S
        if nxt < life.start + life.remaining:
            self.push(nxt, PERIOD, (tid, epoch))

    def _log_success(self, rt: PoolRuntime, life: Life, count: int) -> None:
        for _ in range(max(0, count)):
            rt.recent_success.append(self.now)
        life.logged += max(0, count)
        life.succeeded += max(0, count)
        rt.succeeded_total += max(0, count)

    def _window(self) -> tuple[float, float]:
        return self.w.window_start_s, self.w.window_end_s

    # ----- scheduling ---------------------------------------------------------------------------
    def _schedule(self, pool_id: PoolId) -> None:
        rt = self.pools[pool_id]
        if not len(rt.hp) and not len(rt.spot):
            return
        ctx = CycleContext(
            now=self.now,
            preemption_enabled=self.in_window,
            quota_enabled=self.in_window,
            quota=rt.quota,
            preemption=PreemptionContext(
                now=self.now,
                failed_periods=rt.failed_total,
                succeeded_periods=rt.succeeded_total,
                t_win_s=self.settings.t_win_s,
                cost_weight=self.settings.cost_weight,
            ),
            version=rt.version,
        )
        outcome = schedule_pool(rt.state, rt.hp, rt.spot, self.policy, ctx)
        for d in outcome.decisions:
            if isinstance(d, EvictTask):
                self._evict(rt, d)
            else:
                self._start(rt, d)
        for cls, bucket, memo in outcome.blocked:
            queue = rt.hp if cls is TaskClass.HP else rt.spot
            if memo.head in queue:
                queue.blocked[bucket] = memo

    def _start(self, rt: PoolRuntime, d: StartTask) -> None:
        life = self.lives[d.task_id]
        spec = life.spec
        queue = rt.hp if spec.task_class is TaskClass.HP else rt.spot
        queue.remove(d.task_id)
        rt.state.add_task(RunningTask(spec, self.now, d.placements))
        life.wait += self.now - life.entered
        if math.isnan(life.first_start):
            life.first_start = self.now
        if d.preempted:
            life.remaining += spec.restart_overhead_s
        life.start = self.now
        life.epoch += 1
        life.logged = 0
        self.push(self.now + life.remaining, FINISH, (d.task_id, life.epoch))
        if spec.task_class is TaskClass.SPOT and life.remaining > GUARANTEE_PERIOD_S:
            self.push(self.now + GUARANTEE_PERIOD_S, PERIOD, (d.task_id, life.epoch))

    def _evict(self, rt: PoolRuntime, d: EvictTask) -> None:
        life = self.lives[d.task_id]
        spec = life.spec
        rt.state.remove_task(d.task_id)
        run = self.now - life.start
        self._log_success(rt, life, successes_before_eviction(run) - life.logged)
        rt.useful_gpu_s += spec.total_gpus * overlap(
            life.start, life.start + successes_before_eviction(run) * GUARANTEE_PERIOD_S, *self._window()
        )
        life.remaining = remaining_after_eviction(
            life.remaining, run, spec.checkpoint_interval_s, spec.restart_overhead_s
        )
        life.failed += 1
        life.evictions += 1
        life.epoch += 1
        rt.failed_total += 1
        rt.recent_failure.append(self.now)
        rt.evict_times.append(self.now)
        rt.evict_nodes.append(d.node)
        life.entered = self.now
        rt.spot.push(spec, self.now)
        rt.version += 1
        self.dirty.add(spec.pool)

    # ----- quota, forecasts, eviction scores ---------------------------------------------------
    def _forecast(self) -> DemandForecast | None:
        hour = int(self.now // 3600)
        if self.forecast_cache[0] == hour:
            return self.forecast_cache[1]
        day = int(self.now // 86400)
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
        horizon = self.now - 4 * 3600.0
        for pool_id, rt in self.pools.items():
            for dq in (rt.recent_success, rt.recent_failure):
                while dq and dq[0] <= horizon:
                    dq.popleft()
            head = rt.spot.head()
            quantile = None
            if fc is not None:
                try:
                    quantile = fc.pool_quantile(pool_id, p)
                except KeyError:  # a pool without HP history has no demand series
                    quantile = np.zeros(HORIZON_H)
            out = self.policy.quota.refresh(
                QuotaInputs(
                    capacity=rt.state.capacity,
                    idle_gpus=int(rt.state.free.sum()),
                    spot_in_use=rt.state.spot_in_use,
                    hp_quantile=quantile,
                    eta=rt.eta,
                    failed_recent=len(rt.recent_failure),
                    succeeded_recent=len(rt.recent_success),
                    head_wait_s=None if head is None else self.now - rt.spot.entered_s[head],
                )
            )
            rt.eta = out.eta
            if dict(out.quota) != rt.quota:
                rt.quota = dict(out.quota)
                rt.version += 1
                self.dirty.add(pool_id)
            if self.policy.use_eviction_scores:
                self._refresh_scores(rt)

    def _refresh_scores(self, rt: PoolRuntime) -> None:
        if not rt.evict_times and not rt.scores_set:
            return  # no eviction in the last day and the scores are already the default
        n = len(rt.state.node_cap)
        times = np.asarray(rt.evict_times, dtype=np.float64)
        nodes = np.asarray(rt.evict_nodes, dtype=np.int64)
        keep = times > self.now - 86400.0
        rt.evict_times = times[keep].tolist()
        rt.evict_nodes = nodes[keep].tolist()
        n1h = recent_counts(times, nodes, self.now, 3600.0, n)
        n1d = recent_counts(times, nodes, self.now, 86400.0, n)
        rt.state.eviction_score = eviction_scores(n1h, n1d)
        rt.scores_set = bool(rt.evict_times)

    # ----- stop ---------------------------------------------------------------------------------
    def _close(self) -> None:
        """Tasks still queued or running at the stop: queued ones have waited until the stop;
        running ones keep their completed guarantee periods as useful time."""
        stop = self.stop_s
        for rt in self.pools.values():
            for queue in (rt.hp, rt.spot):
                for tid in queue.task_ids():
                    life = self.lives[tid]
                    life.wait += stop - life.entered
            for tid, running in rt.state.running.items():
                life = self.lives[tid]
                run = stop - life.start
                if running.spec.task_class is TaskClass.HP:
                    rt.useful_gpu_s += running.spec.total_gpus * overlap(life.start, stop, *self._window())
                else:
                    done = successes_before_eviction(run) * GUARANTEE_PERIOD_S
                    rt.useful_gpu_s += running.spec.total_gpus * overlap(
                        life.start, life.start + done, *self._window()
                    )

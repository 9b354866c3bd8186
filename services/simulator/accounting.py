"""What the simulation charges to each task's life: waits, runs, periods, evictions, lost work, and
the useful GPU time per pool in the window (spec 6.3, 5.4). The engine (engine.py) calls it as the
runtime's outcomes come; it decides nothing."""

from __future__ import annotations

import math

from gfs.services.core.guarantee import (
    periods_ended_by,
    remaining_after_eviction,
    successes_before_eviction,
    successes_on_finish,
    useful_seconds_before_eviction,
)
from gfs.services.core.ids import PoolId, TaskId
from gfs.services.core.runtime import Finished, PoolRuntime, Started, Stopped
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.core.victims_lease import RELEASE_OVERHEAD_S
from gfs.services.simulator.lifecycle import Life, overlap
from gfs.services.simulator.reclaim_warnings import WarningLedger
from gfs.services.simulator.workload import Workload


class RunAccounting:
    """Owns every task's `Life`, the useful GPU-seconds per pool inside the window, how many window
    tasks are still outstanding, and the cancellations and lease stops counted."""

    def __init__(self, workload: Workload, pools: tuple[PoolId, ...]) -> None:
        self.w = workload
        self.lives: dict[TaskId, Life] = {}
        self.useful_gpu_s: dict[PoolId, float] = dict.fromkeys(pools, 0.0)
        self.outstanding_window = 0
        self.cancelled: list[TaskId] = []  # in the order they happened
        self.cancelled_queued = 0
        self.cancelled_running = 0
        self.lease_stops = 0

    def _window(self) -> tuple[float, float]:
        return self.w.window_start_s, self.w.window_end_s

    def _useful(self, spec: TaskSpec, start: float, end: float) -> None:
        self.useful_gpu_s[spec.pool] += spec.total_gpus * overlap(start, end, *self._window())

    def _ended_by_window(self, life: Life, now: float, total: int, new: int, *, finished: bool) -> int:
        """How many of the `new` periods just logged (the last of `total`) ended by the window's end."""
        return periods_ended_by(life.start, now, total, new, self.w.window_end_s, finished=finished)

    # ----- a life's events ----------------------------------------------------------------------
    def arrive(self, spec: TaskSpec) -> None:
        in_window = self.w.window_start_s <= spec.submit_s < self.w.window_end_s
        self.lives[spec.task_id] = Life(spec, in_window=in_window)
        if in_window:
            self.outstanding_window += 1

    def start(self, o: Started, now: float) -> float:
        """A run starts now: when it will finish (the engine's FINISH event)."""
        life = self.lives[o.task_id]
        life.wait += now - life.entered
        if math.isnan(life.first_start):
            life.first_start = now
        if o.preempted:
            life.remaining += life.spec.restart_overhead_s
        life.start = now
        life.epoch += 1
        return now + life.remaining

    def finish(self, done: Finished, now: float) -> None:
        life = self.lives[done.task_id]
        spec = life.spec
        life.end = now
        life.remaining = 0.0
        life.epoch += 1
        if done.successes:
            life.succeeded += done.successes
            total = successes_on_finish(done.run_s)
            life.succeeded_in_window += self._ended_by_window(life, now, total, done.successes, finished=True)
        self._useful(spec, life.start, now)
        if life.in_window:
            self.outstanding_window -= 1

    def period_closed(self, task_id: TaskId, now: float) -> None:
        life = self.lives[task_id]
        life.succeeded += 1
        life.succeeded_in_window += now <= self.w.window_end_s

    def evict(self, o: Stopped, now: float, warnings: tuple[WarningLedger, ...]) -> None:
        life = self.lives[o.task_id]
        spec = life.spec
        self.log_stop(life, o, now)
        for ledger in warnings:
            ledger.evicted(spec, o.run_s, now, life.start)
        self._useful(spec, life.start, life.start + useful_seconds_before_eviction(o.run_s))
        life.remaining = remaining_after_eviction(
            life.remaining, o.run_s, spec.checkpoint_interval_s, spec.restart_overhead_s
        )
        life.evictions += 1
        life.epoch += 1
        life.entered = now

    def log_stop(self, life: Life, o: Stopped, now: float) -> None:
        """The guarantee periods a stop logged: its completed ones, and the failed one if any."""
        if o.successes:
            life.succeeded += o.successes
            total = successes_before_eviction(o.run_s)
            life.succeeded_in_window += self._ended_by_window(life, now, total, o.successes, finished=False)
        if o.failed_period:
            life.failed += 1
            life.failed_in_window += now <= self.w.window_end_s

    def lease_stop(self, o: Stopped, now: float) -> None:
        """A lease not renewed: work since the last checkpoint is lost plus the re-lease overhead; a
        spot task stopped inside a guarantee period failed it (the runtime logged it)."""
        life = self.lives[o.task_id]
        spec = life.spec
        self.lease_stops += 1
        self.log_stop(life, o, now)
        # HP work counts up to now; spot work only for its completed guarantee periods.
        spot = spec.task_class is TaskClass.SPOT
        self._useful(spec, life.start, life.start + useful_seconds_before_eviction(o.run_s) if spot else now)
        if o.failed_period:
            life.evictions += 1
        life.remaining = remaining_after_eviction(
            life.remaining, o.run_s, spec.checkpoint_interval_s, RELEASE_OVERHEAD_S
        )
        life.epoch += 1  # its finish / period events are stale now
        life.entered = now
        if math.isnan(life.first_start):
            life.first_start = life.start

    def cancel(self, tid: TaskId, stop: Stopped | None, now: float) -> None:
        """The owner cancelled (module doc of engine.py's `_cancel`): a queued task waited until now;
        a running one is charged like a run still going at the stop (HP: all of it; spot: its
        completed periods). Its life ends here, not as a finish."""
        life = self.lives[tid]
        spec = life.spec
        if stop is None:
            life.wait += now - life.entered
            self.cancelled_queued += 1
        else:
            self.log_stop(life, stop, now)
            end = (
                now
                if spec.task_class is TaskClass.HP
                else life.start + useful_seconds_before_eviction(stop.run_s)
            )
            self._useful(spec, life.start, end)
            self.cancelled_running += 1
        life.cancelled = now
        self.cancelled.append(tid)
        life.epoch += 1  # its finish / period events are stale now
        if life.in_window:
            self.outstanding_window -= 1

    def close(self, stop: float, pools: dict[PoolId, PoolRuntime]) -> None:
        """Tasks still queued or running at the stop: queued ones have waited until the stop;
        running ones keep their completed guarantee periods as useful time."""
        for pool_id, rt in pools.items():
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

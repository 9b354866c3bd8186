"""What happens to a task's run in the simulation (engine.py): starts, evictions and lease stops
with their accounting, lease renewals, the quota refresh and its forecasts, and the close at the
stop; a layer over the state (engine_state.py)."""

from __future__ import annotations

import math

import numpy as np

from services.core.forecast import DemandForecast
from services.core.guarantee import (
    remaining_after_eviction,
    successes_before_eviction,
    useful_seconds_before_eviction,
)
from services.core.runtime import Started, Stopped
from services.core.task import TaskClass, TaskSpec
from services.core.victims_lease import RELEASE_OVERHEAD_S
from services.simulator.engine_state import FINISH, HORIZON_H, LEASE, QUOTA, SimulationState
from services.simulator.lifecycle import Life, overlap


class Actuation(SimulationState):
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
        if self.observed is not None and spec.task_class is TaskClass.HP and self.count_running:
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
        if self.observed is not None and spec.task_class is TaskClass.HP and self.count_running:
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

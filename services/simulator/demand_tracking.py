"""The HP-demand series a simulation's forecaster reads, kept as the policy's quota names it
(`QuotaSettings.demand_source`): the servable demand (issue 35: taken from each pool's state, at the
instants a minute boundary samples, core/servable.py), running + queued HP (issue 10: counted from
arrival to end, core/observed_demand.py), or running HP only. The trace-defined series needs no
tracking (the forecaster reads it from the trace)."""

from __future__ import annotations

import math

from gfs.services.core.ids import PoolId
from gfs.services.core.observed_demand import ObservedDemand
from gfs.services.core.runtime import PoolRuntime
from gfs.services.core.task import TaskClass, TaskSpec


class DemandTracking:
    """Owns the tracker (None: the trace-defined series) and, for the servable series, the pools
    whose level changed at an instant and was not taken yet (with that instant)."""

    def __init__(self, observed: ObservedDemand | None, source: str) -> None:
        self.observed = observed
        self.servable = source == "servable"
        self.queued = source == "observed"
        self.running = source == "running"
        self._stale: dict[PoolId, float] = {}

    def _change(self, now: float, spec: TaskSpec, gpus: float) -> None:
        assert self.observed is not None
        if gpus >= 0:
            self.observed.add(now, (spec.pool, spec.tenant), gpus)
        else:
            self.observed.remove(now, (spec.pool, spec.tenant), -gpus)

    def arrived(self, spec: TaskSpec, now: float) -> None:
        if self.observed is not None and spec.task_class is TaskClass.HP and self.queued:
            self._change(now, spec, spec.total_gpus)

    def finished(self, spec: TaskSpec, now: float) -> None:
        if self.observed is not None and spec.task_class is TaskClass.HP and not self.servable:
            self._change(now, spec, -spec.total_gpus)

    def cancelled(self, spec: TaskSpec, now: float, *, was_running: bool) -> None:
        counted = self.queued or (was_running and self.running)
        if self.observed is not None and spec.task_class is TaskClass.HP and counted:
            self._change(now, spec, -spec.total_gpus)

    def started(self, spec: TaskSpec, now: float) -> None:
        if self.observed is not None and spec.task_class is TaskClass.HP and self.running:
            self._change(now, spec, spec.total_gpus)

    def stopped_running(self, spec: TaskSpec, now: float) -> None:
        """An HP run ended without finishing: it stops counting where only running HP counts."""
        if self.observed is not None and spec.task_class is TaskClass.HP and self.running:
            self._change(now, spec, -spec.total_gpus)

    def instant_done(self, t: float, pools: set[PoolId]) -> None:
        """The pools whose state the instant `t` changed: their servable level holds from `t` on."""
        if self.servable:
            for pool_id in pools:
                self._stale[pool_id] = t

    def flush(self, now: float, pools: dict[PoolId, PoolRuntime]) -> None:
        """Before anything happens at `now`: the servable level (core/servable.py) of every pool
        whose level changed at an earlier instant and that a minute boundary before `now` samples,
        taken from its state, unchanged since (a later change would have replaced it unsampled).
        In the order of those instants, so the tracker's time never goes back."""
        stale = self._stale
        if not stale:
            return
        if self.observed is None:
            stale.clear()
            return
        due = sorted((at, pool_id) for pool_id, at in stale.items() if math.ceil(at / 60.0) * 60.0 < now)
        for at, pool_id in due:
            self.observed.set_levels(at, pool_id, pools[pool_id].servable_levels())
            del stale[pool_id]

    def advance(self, now: float) -> None:
        """The hours before the one holding `now` are final (the forecaster reads them)."""
        if self.observed is not None:
            self.observed.advance(now)

"""Lease renewal for lease-based policies (Chronus, spec 6.2 and 8 #7), as a Simulation subclass.

Why a subclass: the engine knows nothing of leases; a policy with `lease_s` set runs here. Every
`lease_s` inside the window, each running task gives its GPUs back and goes back to its queue;
the scheduling pass at that instant then decides who holds GPUs for the next lease:
- a task scheduled again at the renewal continues as if nothing happened (its start, guarantee
  period clock and finish event are kept; it may land on other GPUs: migration is not charged);
- a task not scheduled again is stopped: work since its last checkpoint is lost plus the 120 s
  re-lease overhead, a spot task in the middle of a guarantee period records one failed period
  (fix of spec 8 #7: the released code never counted these), and it waits in the queue with its
  queueing time accumulating across leases (HP included: the other fix of spec 8 #7).
"""

from __future__ import annotations

import math

from services.core.decisions import StartTask
from services.core.guarantee import GUARANTEE_PERIOD_S, remaining_after_eviction, successes_before_eviction
from services.core.ids import PoolId, TaskId
from services.core.pool import RunningTask
from services.core.task import TaskClass
from services.core.victims_lease import RELEASE_OVERHEAD_S
from services.simulator.engine import WINDOW_START, PoolRuntime, Simulation
from services.simulator.lifecycle import overlap

LEASE = 100  # event kind, apart from the engine's 0..5


class LeasedSimulation(Simulation):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lease_s = float(self.policy.lease_s or 0.0)
        self.released: dict[TaskId, RunningTask] = {}
        self.lease_renewals = 0
        self.lease_stops = 0

    def _handle(self, kind: int, payload: object) -> bool:
        if kind == LEASE:
            self._renew()
            return False
        sample = super()._handle(kind, payload)
        if kind == WINDOW_START and self.lease_s > 0:
            self.push(self.now + self.lease_s, LEASE, None)
        return sample

    def _renew(self) -> None:
        if not self.in_window:
            return
        if self.now + self.lease_s < self.w.window_end_s:
            self.push(self.now + self.lease_s, LEASE, None)
        self.lease_renewals += 1
        for pool_id, rt in self.pools.items():
            lives = self.lives
            finishing = frozenset(  # finish at this instant: their finish events handle them
                tid for tid in rt.state.running if lives[tid].start + lives[tid].remaining <= self.now
            )
            for running in rt.state.release_all(keep=finishing):
                spec = running.spec
                self.released[spec.task_id] = running
                (rt.hp if spec.task_class is TaskClass.HP else rt.spot).push(spec, self.now)
            rt.version += 1
            self.dirty.add(pool_id)

    def _start(self, rt: PoolRuntime, d: StartTask) -> None:
        before = self.released.pop(d.task_id, None)
        if before is None:
            super()._start(rt, d)
            return
        spec = before.spec
        (rt.hp if spec.task_class is TaskClass.HP else rt.spot).remove(d.task_id)
        rt.state.add_task(RunningTask(spec, before.start_s, d.placements))  # lease renewed

    def _schedule(self, pool_id: PoolId) -> None:
        super()._schedule(pool_id)
        rt = self.pools[pool_id]
        for tid in [t for t, r in self.released.items() if r.spec.pool == pool_id]:
            self._stop(rt, tid)

    def _stop(self, rt: PoolRuntime, tid: TaskId) -> None:
        """The lease of `tid` was not renewed: it is stopped and waits (already queued)."""
        self.released.pop(tid)
        life = self.lives[tid]
        spec = life.spec
        run = self.now - life.start
        self.lease_stops += 1
        if spec.task_class is TaskClass.SPOT:
            done = successes_before_eviction(run)
            self._log_success(rt, life, done - life.logged)
            rt.useful_gpu_s += spec.total_gpus * overlap(
                life.start, life.start + done * GUARANTEE_PERIOD_S, *self._window()
            )
            if run - done * GUARANTEE_PERIOD_S > 1e-9:  # stopped inside a guarantee period
                life.failed += 1
                life.evictions += 1
                rt.failed_total += 1
                rt.recent_failure.append(self.now)
        else:
            rt.useful_gpu_s += spec.total_gpus * overlap(life.start, self.now, *self._window())
        life.remaining = remaining_after_eviction(
            life.remaining, run, spec.checkpoint_interval_s, RELEASE_OVERHEAD_S
        )
        life.epoch += 1  # its finish / period events are stale now
        life.entered = self.now
        if math.isnan(life.first_start):
            life.first_start = life.start


def simulation_class(lease_s: float | None) -> type[Simulation]:
    """The simulation to run a policy in: leases need the hook, everything else the plain engine."""
    return LeasedSimulation if lease_s else Simulation

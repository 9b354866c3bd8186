"""How runs end in a `PoolRuntime` (runtime.py): a stop and its guarantee accounting, nodes going
down and up, and the leases of lease-based policies; a layer over the limits (runtime_limits.py)."""

from __future__ import annotations

from services.core.feasibility import PoolFeasibility
from services.core.guarantee import GUARANTEE_PERIOD_S, successes_before_eviction
from services.core.ids import TaskId
from services.core.outcomes import Outcome, Stopped
from services.core.pool import RunningTask
from services.core.reasons import EvictionReason
from services.core.runtime_limits import Limits
from services.core.task import TaskClass

_EPS = 1e-9


class Stopping(Limits):
    def _stop(
        self,
        tid: TaskId,
        now: float,
        node: int,
        reason: EvictionReason,
        preemptor: TaskId | None,
        *,
        void_partial: bool,
        requeue: bool,
    ) -> Stopped:
        """Take a running task off its GPUs: completed periods are successes; the interrupted one
        is a failure unless `void_partial`."""
        running = self.state.remove_task(tid)
        if self._track_devices:
            self.devices.release(tid)
        stop = self._end_run(running, now, node, reason, preemptor, fails=not void_partial, inside_only=False)
        if requeue:
            self._queue(running.spec.task_class).push(running.spec, now)
        return stop

    def _end_run(
        self,
        running: RunningTask,
        now: float,
        node: int,
        reason: EvictionReason,
        preemptor: TaskId | None,
        *,
        fails: bool,
        inside_only: bool,
    ) -> Stopped:
        """The guarantee accounting of a run that stops (spec 4.2): its completed periods are
        successes; the interrupted one fails if `fails` (and, with `inside_only`, only when the
        stop really falls inside a period, as for a lease not renewed)."""
        tid, spec = running.spec.task_id, running.spec
        run_s = now - running.start_s
        logged, failed = 0, False
        if spec.task_class is TaskClass.SPOT:
            done = successes_before_eviction(run_s)
            logged = self.ledger.success(now, done - self._logged.pop(tid, 0))
            if fails and (not inside_only or run_s - done * GUARANTEE_PERIOD_S > _EPS):
                self.ledger.failure(now)
                failed = True
            self.tenant_evictions.periods(spec.tenant, logged, failed)
        self._evicted[tid] = (now, node, reason, preemptor, None)
        return Stopped(tid, spec.task_class, node, reason, preemptor, run_s, logged, failed)

    def _forget(self, tid: TaskId) -> None:
        """The task is done with this pool (finished or cancelled)."""
        del self.tasks[tid]
        if self._preemptions:
            self._preemptions.pop(tid, None)
        if self._evicted:
            self._evicted.pop(tid, None)

    def invalidate(self) -> None:
        """A new capacity version: the next pass retries every queue memo (the driver calls it when
        what a pass may do changes, e.g. preemption or the quota switched on or off)."""
        self.version += 1

    # ----- nodes ----------------------------------------------------------------------------------
    def node_down(self, node: int, now: float) -> list[Stopped]:
        """Stop every task with a worker on `node` and take the node out of service (module doc)."""
        self._at(now)
        if not self.state.is_online(node):
            return []
        hit = sorted(
            tid for tid, r in self.state.running.items() if any(p.node == node for p in r.placements)
        )
        stops = [
            self._stop(tid, now, node, EvictionReason.NODE_DOWN, None, void_partial=True, requeue=True)
            for tid in hit
        ]
        self.state.set_online(node, False)
        self.version += 1
        return stops

    def add_node(self, name: str, gpus: int, now: float) -> int:
        """A node that joins the pool (idle, online): its index. Shapes once rejected may fit now."""
        self._at(now)
        index = self.state.add_node(name, gpus)
        self.devices.add_node(gpus)
        self.feasibility = PoolFeasibility(tuple(int(g) for g in self.state.node_cap))
        self._verdicts.clear()
        self.version += 1
        return index

    def node_up(self, node: int, now: float) -> bool:
        self._at(now)
        if self.state.is_online(node):
            return False
        self.state.set_online(node, True)
        self.version += 1
        return True

    # ----- leases (lease-based policies: Chronus) --------------------------------------------------
    def release_leases(self, now: float, keep: frozenset[TaskId] = frozenset()) -> list[TaskId]:
        """Every running task except `keep` gives its GPUs back and is queued again; the next
        `schedule` renews the lease of those it places (same run) and stops the rest (work since
        the last checkpoint is the driver's to charge; a spot task stopped inside a guarantee period
        logs a failed period). `keep`: tasks finishing at this instant."""
        self._at(now)
        released = []
        for running in self.state.release_all(keep=keep):
            tid = running.spec.task_id
            if self._track_devices:
                self.devices.release(tid)
            self._released[tid] = running
            self._queue(running.spec.task_class).push(running.spec, now)
            released.append(tid)
        self.version += 1
        return released

    def _stop_unrenewed(self, now: float) -> list[Outcome]:
        if not self._released:
            return []
        out: list[Outcome] = []
        for tid, running in list(self._released.items()):
            del self._released[tid]
            reason = EvictionReason.LEASE_NOT_RENEWED
            out.append(self._end_run(running, now, -1, reason, None, fails=True, inside_only=True))
        return out

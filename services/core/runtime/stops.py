"""How runs end in a pool: a stop and its guarantee accounting and record, and the leases of
lease-based policies (Chronus), whose released runs are renewed or stopped by the next pass."""

from __future__ import annotations

from collections.abc import Callable

from gfs.services.core.devices import DeviceAllocator
from gfs.services.core.ids import TaskId
from gfs.services.core.outcomes import Outcome, Stopped
from gfs.services.core.pool import PoolState, RunningTask
from gfs.services.core.queues import BucketQueue
from gfs.services.core.reasons import EvictionReason
from gfs.services.core.runtime.guarantee_book import GuaranteeBook
from gfs.services.core.runtime.run_records import RunRecords
from gfs.services.core.task import TaskClass


class RunStops:
    """Owns the runs a lease renewal released and no pass renewed or stopped yet; stops runs on
    the pool state, queues, device indices (None: not tracked), guarantee book and records it is
    given."""

    __slots__ = ("devices", "periods", "queue_of", "records", "released", "state")

    def __init__(
        self,
        state: PoolState,
        queue_of: Callable[[TaskClass], BucketQueue],
        devices: DeviceAllocator | None,
        periods: GuaranteeBook,
        records: RunRecords,
    ) -> None:
        self.state = state
        self.queue_of = queue_of
        self.devices = devices
        self.periods = periods
        self.records = records
        self.released: dict[TaskId, RunningTask] = {}

    def stop(
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
        if self.devices is not None:
            self.devices.release(tid)
        stop = self.end_run(running, now, node, reason, preemptor, fails=not void_partial, inside_only=False)
        if requeue:
            self.queue_of(running.spec.task_class).push(running.spec, now)
        return stop

    def end_run(
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
        """The guarantee accounting of a run that stops (guarantee_book.py), and its record."""
        spec = running.spec
        run_s = now - running.start_s
        logged, failed = self.periods.stopped(spec, run_s, now, fails=fails, inside_only=inside_only)
        self.records.stopped(spec.task_id, now, node, reason, preemptor)
        return Stopped(spec.task_id, spec.task_class, node, reason, preemptor, run_s, logged, failed)

    def stop_node(self, node: int, now: float) -> list[Stopped]:
        """Every task with a worker on `node` stopped (requeued; the interrupted period void) and
        the node taken out of service."""
        hit = sorted(
            tid for tid, r in self.state.running.items() if any(p.node == node for p in r.placements)
        )
        stops = [
            self.stop(tid, now, node, EvictionReason.NODE_DOWN, None, void_partial=True, requeue=True)
            for tid in hit
        ]
        self.state.set_online(node, False)
        return stops

    def release_leases(self, now: float, keep: frozenset[TaskId]) -> list[TaskId]:
        """Every running task except `keep` gives its GPUs back and is queued again."""
        out = []
        for running in self.state.release_all(keep=keep):
            tid = running.spec.task_id
            if self.devices is not None:
                self.devices.release(tid)
            self.released[tid] = running
            self.queue_of(running.spec.task_class).push(running.spec, now)
            out.append(tid)
        return out

    def stop_unrenewed(self, now: float) -> list[Outcome]:
        """The released runs the pass did not renew: stopped, a failed period if inside one."""
        out: list[Outcome] = []
        for tid, running in list(self.released.items()):
            del self.released[tid]
            reason = EvictionReason.LEASE_NOT_RENEWED
            out.append(self.end_run(running, now, -1, reason, None, fails=True, inside_only=True))
        return out

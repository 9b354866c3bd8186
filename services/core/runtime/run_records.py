"""What explanations read (`PoolRuntime.explain`, core/explain.py): each task's last stop, the
plans behind the preemptions a task made, and what the last pass skipped."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gfs.services.core.explain import (
    CandidateNode,
    EvictionRecord,
    Explanation,
    PreemptionRecord,
    QueueStatus,
)
from gfs.services.core.ids import TaskId
from gfs.services.core.pool import PoolState
from gfs.services.core.queues import BucketQueue, SortKey
from gfs.services.core.reasons import EvictionReason, Unschedulable
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.core.victims import PreemptionPlan


class RunRecords:
    """Owns, per task, the preemptions it made (with their plans) and its last stop (with the plan
    that chose it), and the buckets the last pass skipped (and that pass's number)."""

    __slots__ = ("_evicted", "_preemptions", "_skipped", "_skipped_pass")

    def __init__(self) -> None:
        self._preemptions: dict[TaskId, tuple[float, tuple[PreemptionPlan, ...]]] = {}
        # Victim -> (time, node, reason, preemptor, the plan that chose it): its last stop.
        self._evicted: dict[
            TaskId, tuple[float, int, EvictionReason, TaskId | None, PreemptionPlan | None]
        ] = {}
        self._skipped: tuple[tuple[TaskClass, SortKey], ...] = ()
        self._skipped_pass = 0

    def stopped(
        self, tid: TaskId, now: float, node: int, reason: EvictionReason, preemptor: TaskId | None
    ) -> None:
        self._evicted[tid] = (now, node, reason, preemptor, None)

    def preempted(self, tid: TaskId, now: float, plans: tuple[PreemptionPlan, ...]) -> None:
        """`tid` started by preemption: it and each victim remember the plan that chose it."""
        self._preemptions[tid] = (now, plans)
        for plan in plans:
            for victim in plan.victims:
                at, node, reason, preemptor, _ = self._evicted[victim]
                self._evicted[victim] = (at, node, reason, preemptor, plan)

    def passed(self, skipped: tuple[tuple[TaskClass, SortKey], ...], number: int) -> None:
        self._skipped = skipped
        self._skipped_pass = number

    def forget(self, tid: TaskId) -> None:
        """The task is done with the pool (finished or cancelled)."""
        if self._preemptions:
            self._preemptions.pop(tid, None)
        if self._evicted:
            self._evicted.pop(tid, None)

    def explain(
        self,
        task_id: TaskId,
        state: PoolState,
        tasks: Mapping[TaskId, TaskSpec],
        queue_of: Callable[[TaskClass], BucketQueue],
    ) -> Explanation:
        if task_id in state.running:
            where = "running"
        elif task_id in tasks:
            where = "queued"
        else:
            where = "unknown"
        queued = self.queue_status(task_id, tasks, queue_of) if where == "queued" else None
        preemptions: tuple[PreemptionRecord, ...] = ()
        if task_id in self._preemptions:
            at, plans = self._preemptions[task_id]
            preemptions = tuple(_record(state, at, task_id, p) for p in plans)
        last = None
        if task_id in self._evicted:
            at, node, reason, preemptor, plan = self._evicted[task_id]
            record = None if plan is None or preemptor is None else _record(state, at, preemptor, plan)
            name = state.node_names[node] if node >= 0 else "(pool)"
            last = EvictionRecord(at, task_id, name, reason, preemptor, record)
        return Explanation(task_id, where, queued, preemptions, last)

    def queue_status(
        self, task_id: TaskId, tasks: Mapping[TaskId, TaskSpec], queue_of: Callable[[TaskClass], BucketQueue]
    ) -> QueueStatus:
        cls = tasks[task_id].task_class
        queue = queue_of(cls)
        bucket = queue.bucket_of(task_id)
        memo = queue.blocked.get(bucket)
        if memo is not None and memo.head in queue:
            if memo.head == task_id:
                return QueueStatus(memo.reason, None, self._skipped_pass)
            if _behind(queue, bucket, memo.head, task_id):
                return QueueStatus(Unschedulable.HEAD_OF_LINE, memo.head, self._skipped_pass)
        if (cls, bucket) in self._skipped:
            return QueueStatus(Unschedulable.THRESHOLD, None, self._skipped_pass)
        return QueueStatus(Unschedulable.NOT_YET_CONSIDERED, None, self._skipped_pass)


def _candidate(state: PoolState, p: PreemptionPlan) -> CandidateNode:
    rate, lost = p.terms if p.terms is not None else (None, None)
    return CandidateNode(state.node_names[p.node], p.victims, p.cost, rate, lost, p.slot)


def _record(state: PoolState, at: float, preemptor: TaskId, p: PreemptionPlan) -> PreemptionRecord:
    losers = tuple(_candidate(state, a) for a in p.alternatives)
    return PreemptionRecord(at, preemptor, _candidate(state, p), losers, p.considered)


def _behind(queue: BucketQueue, bucket: tuple[float, ...], head: TaskId, task_id: TaskId) -> bool:
    """Is `task_id` after `head` in its bucket's order?"""
    for _, tid in next(entries for b, entries in queue.buckets() if b == bucket):
        if tid == head:
            return True
        if tid == task_id:
            return False
    return False

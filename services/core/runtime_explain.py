"""Why a task is where it is (`explain`) and the runtime's read-only views: a layer of `PoolRuntime`
(runtime.py) over its state (runtime_base.py)."""

from __future__ import annotations

from services.core.explain import (
    CandidateNode,
    EvictionRecord,
    Explanation,
    PreemptionRecord,
    QueueStatus,
)
from services.core.ids import TaskId
from services.core.queues import BucketQueue
from services.core.reasons import Unschedulable
from services.core.runtime_base import RuntimeBase
from services.core.victims import PreemptionPlan


class Explaining(RuntimeBase):
    # ----- explanations ---------------------------------------------------------------------------
    def explain(self, task_id: TaskId) -> Explanation:
        if task_id in self.state.running:
            state = "running"
        elif task_id in self.tasks:
            state = "queued"
        else:
            state = "unknown"
        queued = self._queue_status(task_id) if state == "queued" else None
        preemptions: tuple[PreemptionRecord, ...] = ()
        if task_id in self._preemptions:
            at, plans = self._preemptions[task_id]
            preemptions = tuple(self._record(at, task_id, p) for p in plans)
        last = None
        if task_id in self._evicted:
            at, node, reason, preemptor, plan = self._evicted[task_id]
            record = None if plan is None or preemptor is None else self._record(at, preemptor, plan)
            name = self.state.node_names[node] if node >= 0 else "(pool)"
            last = EvictionRecord(at, task_id, name, reason, preemptor, record)
        return Explanation(task_id, state, queued, preemptions, last)

    def _candidate(self, p: PreemptionPlan) -> CandidateNode:
        rate, lost = p.terms if p.terms is not None else (None, None)
        return CandidateNode(self.state.node_names[p.node], p.victims, p.cost, rate, lost, p.slot)

    def _record(self, at: float, preemptor: TaskId, p: PreemptionPlan) -> PreemptionRecord:
        losers = tuple(self._candidate(a) for a in p.alternatives)
        return PreemptionRecord(at, preemptor, self._candidate(p), losers, p.considered)

    def _queue_status(self, task_id: TaskId) -> QueueStatus:
        cls = self.tasks[task_id].task_class
        queue = self._queue(cls)
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

    # ----- views ------------------------------------------------------------------------------------
    def spot_head_reason(self) -> Unschedulable | None:
        """Why the spot queue's head did not start in the last pass (None: no spot task waits)."""
        head = self.spot.head()
        return None if head is None else self._queue_status(head).reason

    def run_start(self, task_id: TaskId) -> float | None:
        """When the task's current run started (a lease renewal keeps it), None if not running."""
        running = self.state.running.get(task_id) or self._released.get(task_id)
        return None if running is None else running.start_s

    def queued_ids(self) -> list[TaskId]:
        return self.hp.task_ids() + self.spot.task_ids()


def _behind(queue: BucketQueue, bucket: tuple[float, ...], head: TaskId, task_id: TaskId) -> bool:
    """Is `task_id` after `head` in its bucket's order?"""
    for _, tid in next(entries for b, entries in queue.buckets() if b == bucket):
        if tid == head:
            return True
        if tid == task_id:
            return False
    return False

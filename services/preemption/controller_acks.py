"""Acknowledgements from the node agents: each is bound to the command it answers (`refusal`), and
applied (`evict_ack`, `worker_started`, `worker_exited`): victims' acks release held binds, a
run's starts make TaskStarted, its own exits TaskFinished, an evicted attempt's acks and exits
conclude it (controller_endings.py).

Part of the pool controller (controller.py): a class over the endings (controller_endings.py).
"""

from __future__ import annotations

from pydantic import BaseModel

from schemas.commands import EvictAck, EvictOutcome
from schemas.tasks import TaskClass as WireClass
from schemas.tasks import (
    TaskFinished,
    TaskStarted,
)
from schemas.workers import WorkerExited, WorkerStarted
from services.core.ids import TaskId
from services.preemption.attempts import Phase
from services.preemption.controller_endings import Endings
from services.preemption.controller_types import (
    Decision,
    Effects,
    utc,
)


class Acks(Endings):
    def refusal(
        self, ack: EvictAck | WorkerStarted | WorkerExited, source_key: str | None = None
    ) -> str | None:
        """Why `ack` must not be applied (None: it may). An ack is bound to the command it answers:
        the command must be one this pool issued, and the ack's node, tasks, worker and attempt must
        be the command's; `source_key` (the Kafka key the agent published it under, when known)
        must be that node too. A legitimate late ack of an earlier attempt passes (it is applied as
        a no-op); only an ack that cannot be what it claims is refused."""
        if source_key is not None and source_key != ack.node:
            return f"published under key {source_key!r} but claims node {ack.node!r}"
        if isinstance(ack, EvictAck):
            eviction = self.evictions.get(ack.command_id)
            if eviction is None:
                return f"no eviction {ack.command_id} was issued in pool {self.pool!r}"
            if ack.node != eviction.node:
                return f"node {ack.node!r} answered eviction {ack.command_id}, addressed to {eviction.node!r}"
            if tuple(ack.task_ids) != eviction.task_ids:
                return f"tasks {list(ack.task_ids)} differ from the eviction's {list(eviction.task_ids)}"
            if ack.attempt is not None and ack.attempt != eviction.attempt:
                return f"attempt {ack.attempt} differs from the eviction's attempt {eviction.attempt}"
            return None
        bound = self.bound.get(ack.command_id)
        if bound is None:
            return f"no bind {ack.command_id} was issued in pool {self.pool!r}"
        if ack.node != bound.node:
            return f"node {ack.node!r} reported on bind {ack.command_id}, addressed to {bound.node!r}"
        if ack.task_id != bound.task_id:
            return f"task {ack.task_id!r} differs from the bind's {bound.task_id!r}"
        if ack.worker_index not in bound.workers:
            return f"worker {ack.worker_index} is not one of the bind's workers {sorted(bound.workers)}"
        if ack.attempt is not None and ack.attempt != bound.attempt:
            return f"attempt {ack.attempt} differs from the bind's attempt {bound.attempt}"
        return None

    def _refused(self, ack: BaseModel, why: str, now: float) -> Effects:
        # The shell refuses (dead-letters) such acks before journaling them; this guard keeps a
        # direct caller from applying one.
        self.refused += 1
        detail = {"type": type(ack).__name__, "why": why, "command_id": str(getattr(ack, "command_id", ""))}
        return Effects(decisions=[Decision(str(getattr(ack, "task_id", "")), "ack_refused", now, detail)])

    def evict_ack(self, ack: EvictAck, now: float) -> Effects:
        why = self.refusal(ack)
        if why is not None:
            return self._refused(ack, why, now)
        out = Effects()
        eviction = self.evictions[ack.command_id]
        if not eviction.reported:
            eviction.reported = True
            out.decisions.append(
                Decision(
                    eviction.task_ids[0],
                    "evict_acked",
                    now,
                    {
                        "command_id": str(ack.command_id),
                        "node": ack.node,
                        "outcome": ack.outcome.value,
                        "tasks": list(eviction.task_ids),
                        "attempt": eviction.attempt,
                    },
                )
            )
        # The victim's GPUs are free on that node (stopped, or nothing ran): a preemptor may go.
        # A re-issued eviction's ack answers the eviction it stands for (reconcile.py).
        original = self.aliases.get(ack.command_id, ack.command_id)
        for released in self.driver.held.ack(original):  # the held starts that waited for it last
            out.extend(self._release(released, now, "victims acknowledged"))
        for tid in eviction.task_ids:
            ending = self.ending.get(tid)
            if ending is not None and original in ending.commands:
                ending.acked_at.setdefault(eviction.node, ack.acked_at)
                phase = ending.run.ack(eviction.node, ack.outcome.value)
                if phase is not None:
                    out.extend(self._conclude(ending, phase, now))
        if ack.outcome is EvictOutcome.FAILED:
            out.decisions.append(Decision(eviction.task_ids[0], "evict_failed", now, {"detail": ack.detail}))
        return out

    def worker_started(self, ack: WorkerStarted, now: float) -> Effects:
        why = self.refusal(ack)
        if why is not None:
            return self._refused(ack, why, now)
        out = Effects()
        bound = self.bound[ack.command_id]
        ending = self.ending.get(ack.task_id)
        if ending is not None and ending.run.number == bound.attempt:
            # Read after the eviction was decided: the run did start (and may finish on its own).
            ending.started.setdefault(ack.worker_index, ack.started_at.timestamp())
            if ending.run.start(ack.worker_index):
                started = TaskStarted(
                    task_id=ack.task_id, pool=self.pool, task_class=ending.task_class,
                    placements=ending.placements, started_at=utc(max(ending.started.values())),
                    attempt=ending.run.number,
                )  # fmt: skip
                out.events.append(started)
            return out
        task = self.tasks.get(ack.task_id)
        run = None if task is None else task.run
        if task is None or run is None or run.number != bound.attempt:
            return out  # an earlier attempt's start: that attempt is over
        if ack.worker_index not in run.started:
            task.started[ack.worker_index] = ack.started_at.timestamp()
        if run.start(ack.worker_index):
            placements = tuple(p for b in task.binds.values() for p in b.placements)
            out.events.append(
                TaskStarted(
                    task_id=ack.task_id,
                    pool=self.pool,
                    task_class=task.submitted.task_class,
                    placements=tuple(sorted(placements, key=lambda p: p.worker_index)),
                    started_at=utc(max(task.started.values())),
                    attempt=task.attempt,
                )
            )
        return out

    def worker_exited(self, ack: WorkerExited, now: float) -> Effects:
        why = self.refusal(ack)
        if why is not None:
            return self._refused(ack, why, now)
        out = Effects()
        bound = self.bound[ack.command_id]
        tid = ack.task_id
        ending = self.ending.get(tid)
        if ending is not None and ending.run.number == bound.attempt:
            # A late exit of an attempt being evicted: never dropped, it may say the run finished.
            ending.exited_at = max(ending.exited_at or ack.exited_at, ack.exited_at)
            phase = ending.run.exit(ack.worker_index, ack.exit_code, evicted=ack.evicted)
            if phase is not None:
                out.extend(self._conclude(ending, phase, now))
            return out
        task = self.tasks.get(tid)
        run = None if task is None else task.run
        if task is None or run is None or run.number != bound.attempt:
            return out  # an attempt that already ended
        if run.exit(ack.worker_index, ack.exit_code, evicted=ack.evicted) is not Phase.FINISHED:
            return out
        if TaskId(tid) not in self.runtime.state.running:
            return out
        start = self.runtime.run_start(TaskId(tid))
        finished = self.driver.finish(TaskId(tid), now)
        codes = [run.own_exits[w] for w in sorted(run.own_exits)]
        code = next((c for c in codes if c != 0), 0)
        if task.submitted.task_class is WireClass.SPOT and start is not None:
            out.events += self._closes(tid, task, start, now, finished.successes, failed=False)
        out.events.append(TaskFinished(task_id=tid, exit_code=code, finished_at=ack.exited_at))
        out.decisions.append(Decision(tid, "finished", now, {"exit_code": code, "run_s": finished.run_s}))
        self._drop_pending(tid)
        del self.tasks[tid]
        return out

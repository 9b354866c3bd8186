"""Acknowledgements from the node agents, applied: victims' acks release held binds, a run's starts
make TaskStarted, its own exits TaskFinished, and an evicted attempt's acks and exits are handed to
the endings, which conclude it (endings.py).

Each ack is first checked against the command it answers (the ledger's `refusal`): the shell
dead-letters refused acks before journaling them, and `AckHandler` refuses them again, so a direct
caller cannot apply one either.
"""

from __future__ import annotations

import uuid

from pydantic import BaseModel

from gfs.schemas.commands import EvictAck, EvictOutcome
from gfs.schemas.tasks import GuaranteePeriodClosed, TaskFinished, TaskStarted
from gfs.schemas.tasks import TaskClass as WireClass
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.core.driver.pool_driver import PoolDriver
from gfs.services.core.ids import TaskId
from gfs.services.preemption.controller.attempts import Phase
from gfs.services.preemption.controller.binds import Binder
from gfs.services.preemption.controller.endings import Endings
from gfs.services.preemption.controller.ledger import CommandLedger
from gfs.services.preemption.controller.periods import closes, finished_at
from gfs.services.preemption.controller.types import Decision, Effects, _Task, utc


class AckHandler:
    """Applies acks. Owns `refused` (acks refused here: only a caller that skipped the shell's check
    sends one). Reads the ledger; changes the task table's records of running attempts (a finished
    task leaves it); routes what concerns an ending attempt to the endings and what releases a
    held start to the binder."""

    def __init__(
        self,
        pool: str,
        driver: PoolDriver[uuid.UUID],
        tasks: dict[str, _Task],
        ledger: CommandLedger,
        endings: Endings,
        binder: Binder,
    ) -> None:
        self.pool = pool
        self.driver = driver
        self.tasks = tasks
        self.ledger = ledger
        self.endings = endings
        self.binder = binder
        self.refused = 0

    def _refused(self, ack: BaseModel, why: str, now: float) -> Effects:
        self.refused += 1
        detail = {"type": type(ack).__name__, "why": why, "command_id": str(getattr(ack, "command_id", ""))}
        return Effects(decisions=[Decision(str(getattr(ack, "task_id", "")), "ack_refused", now, detail)])

    def evict_ack(self, ack: EvictAck, now: float) -> Effects:
        why = self.ledger.refusal(ack)
        if why is not None:
            return self._refused(ack, why, now)
        out = Effects()
        eviction = self.ledger.evictions[ack.command_id]
        if self.ledger.report(ack.command_id):
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
        original = self.ledger.original(ack.command_id)
        for released in self.driver.held.ack(original):  # the held starts that waited for it last
            out.extend(self.binder.release(released, now, "victims acknowledged"))
        for tid in eviction.task_ids:
            out.extend(
                self.endings.evict_acked(tid, original, eviction.node, ack.outcome.value, ack.acked_at, now)
            )
        if ack.outcome is EvictOutcome.FAILED:
            out.decisions.append(Decision(eviction.task_ids[0], "evict_failed", now, {"detail": ack.detail}))
        return out

    def worker_started(self, ack: WorkerStarted, now: float) -> Effects:
        why = self.ledger.refusal(ack)
        if why is not None:
            return self._refused(ack, why, now)
        bound = self.ledger.bound[ack.command_id]
        ending = self.endings.worker_started(ack, bound.attempt, now)
        if ending is not None:
            return ending
        out = Effects()
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

    def fenced(self, ack: WorkerExited) -> bool:
        """Whether this exit says its node stopped a run on its own: `evicted` for the current
        attempt while the service never stopped it (BOUND or RUNNING, no eviction issued). Only a
        node's self-fence does that (services/node_agent/fence.py); a refused ack is not one."""
        if not ack.evicted or self.ledger.refusal(ack) is not None:
            return False
        bound = self.ledger.bound[ack.command_id]
        task = self.tasks.get(ack.task_id)
        run = None if task is None else task.run
        return (
            run is not None
            and run.number == bound.attempt
            and run.phase in (Phase.BOUND, Phase.RUNNING)
            and ack.task_id not in self.endings
        )

    def worker_exited(self, ack: WorkerExited, now: float) -> Effects:
        why = self.ledger.refusal(ack)
        if why is not None:
            return self._refused(ack, why, now)
        bound = self.ledger.bound[ack.command_id]
        ending = self.endings.worker_exited(ack, bound.attempt, now)
        if ending is not None:
            return ending
        out = Effects()
        tid = ack.task_id
        task = self.tasks.get(tid)
        run = None if task is None else task.run
        if task is None or run is None or run.number != bound.attempt:
            return out  # an attempt that already ended
        if run.exit(ack.worker_index, ack.exit_code, evicted=ack.evicted) is not Phase.FINISHED:
            return out
        runtime = self.driver.runtime
        if TaskId(tid) not in runtime.state.running:
            return out
        start = runtime.run_start(TaskId(tid))
        finished = self.driver.finish(TaskId(tid), now)
        codes = [run.own_exits[w] for w in sorted(run.own_exits)]
        code = next((c for c in codes if c != 0), 0)
        if task.submitted.task_class is WireClass.SPOT and start is not None:
            periods = closes(self.pool, tid, task, start, now, finished.successes, failed=False)
            # The last one ends at the finish, as TaskFinished says (the exit's time, not when it
            # was read here), as a finish during an eviction's does (endings.py).
            if (
                periods
                and isinstance(periods[-1], GuaranteePeriodClosed)
                and periods[-1].period_end == utc(now)
            ):
                periods[-1] = finished_at(periods[-1], ack.exited_at)
            out.events += periods
        out.events.append(TaskFinished(task_id=tid, exit_code=code, finished_at=ack.exited_at))
        out.decisions.append(Decision(tid, "finished", now, {"exit_code": code, "run_s": finished.run_s}))
        self.binder.drop(tid)
        del self.tasks[tid]
        return out

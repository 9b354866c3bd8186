"""The endings of stopped runs: EvictCommands to every node holding one of a stopped run's workers
(`stop`), and, once its acks and exits say what the attempt turned out to be, TaskEvicted or
TaskFinished and the guarantee periods it closed (`_conclude`, docs/attempts.md); a held start
waiting for it goes out (the binder's `release`).

`Endings` owns the evicted attempts whose end is not known yet (`ending`: task -> `_Ending`, the
record of what to report once it is). Only it changes them: the ack handler routes the acks and
exits of such an attempt here (`evict_acked`, `worker_started`, `worker_exited`), the pool's tick
the deadlines that passed (`expire`); the reconciler only reads them. Their deadlines, and the GPUs
they hold per node, are the driver's (core/driver/held.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime

from pydantic import BaseModel

from gfs.schemas.commands import EvictCommand
from gfs.schemas.tasks import EvictionReason, TaskEvicted, TaskFinished, TaskStarted
from gfs.schemas.tasks import TaskClass as WireClass
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.core import reasons as core_reasons
from gfs.services.core.driver.pool_driver import PoolDriver
from gfs.services.core.ids import TaskId
from gfs.services.core.outcomes import Stopped
from gfs.services.preemption.controller.attempts import Phase
from gfs.services.preemption.controller.binds import Binder
from gfs.services.preemption.controller.explanations import explanation_dict
from gfs.services.preemption.controller.ids import CommandIds
from gfs.services.preemption.controller.ledger import CommandLedger
from gfs.services.preemption.controller.periods import closes, cut_short, finished_at
from gfs.services.preemption.controller.quota import PoolQuota
from gfs.services.preemption.controller.settings import ControllerSettings
from gfs.services.preemption.controller.types import (
    _EVICTION_REASONS,
    Decision,
    Effects,
    _Ending,
    _Eviction,
    _Task,
    utc,
)


class Endings:
    """Owns `ending` (module doc). Removes a task from the pool's task table when its run turned
    out finished, or when it was stopped for good (cancelled); records its evictions in the ledger
    and draws their ids from the pool's id source."""

    def __init__(
        self,
        pool: str,
        settings: ControllerSettings,
        driver: PoolDriver[uuid.UUID],
        tasks: dict[str, _Task],
        ids: CommandIds,
        ledger: CommandLedger,
        binder: Binder,
        quota: PoolQuota,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.driver = driver
        self.tasks = tasks
        self.ids = ids
        self.ledger = ledger
        self.binder = binder
        self.quota = quota  # its version names the eviction decisions
        self.ending: dict[str, _Ending] = {}

    def get(self, task_id: str) -> _Ending | None:
        return self.ending.get(task_id)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self.ending

    def values(self) -> list[_Ending]:
        return list(self.ending.values())

    # ----- a run stops ----------------------------------------------------------------------------
    def stop(self, stop: Stopped, now: float, *, grace_s: float) -> Effects:
        """A running task lost its GPUs: EvictCommands to every node holding one of its workers.
        What the attempt turned out to be is reported when its acks and exits say (`_conclude`)."""
        out = Effects()
        tid = stop.task_id
        task = self.tasks[tid]
        reason = _EVICTION_REASONS[stop.reason]
        requeued = stop.reason is not core_reasons.EvictionReason.CANCELLED
        held = tid in self.driver.held.held  # binds never went out: nothing runs, nothing to stop
        self.binder.drop(tid)
        spec = task.submitted
        checkpoint = spec.checkpoint_interval_s
        since_checkpoint = stop.run_s if checkpoint is None else stop.run_s % checkpoint
        lost = since_checkpoint * spec.gpus_per_worker * spec.workers
        period_closes: list[BaseModel] = []
        finish_close = None
        if spec.task_class is WireClass.SPOT:
            start = now - stop.run_s
            period_closes = closes(
                self.pool, tid, task, start, now, stop.successes, failed=stop.failed_period
            )
            finish_close = cut_short(self.pool, tid, task, start, now)
        nodes = sorted({b.node for b in task.binds.values()})
        why = explanation_dict(self.driver.runtime.explain(TaskId(tid)))
        run = task.run
        task.run = None
        if held or not nodes or run is None:
            # A held attempt never reached a node (its binds did not go out), so no period of it
            # ran: reporting one, FAILED, would feed the quota's feedback a failure nobody suffered
            # (found by `gfs livebench races`, docs/decisions.md). The scheduling is the same.
            if not held:
                out.events += period_closes
            out.decisions.append(
                Decision(tid, "evicted", now, {"reason": reason.value, "nodes": [], "explanation": why})
            )
        grace = 0.0 if reason is EvictionReason.NODE_LOST else grace_s
        commands: dict[uuid.UUID, str] = {}
        for node in nodes if run is not None and not held else []:
            assert run is not None
            command = EvictCommand(
                command_id=self.ids.next(), node=node, task_ids=(tid,), reason=reason, grace_seconds=grace,
                preemptor_task_id=stop.preemptor, issued_at=utc(now), attempt=run.number,
            )  # fmt: skip
            self.ledger.eviction_issued(command.command_id, _Eviction(node, (tid,), run.number))
            commands[command.command_id] = node
            out.commands.append(command)
            out.decisions.append(
                Decision(
                    tid,
                    "evicted",
                    now,
                    {
                        "reason": reason.value,
                        "node": node,
                        "command_id": str(command.command_id),
                        "attempt": run.number,
                        "preemptor": stop.preemptor,
                        "lost_gpu_seconds": lost,
                        "run_s": stop.run_s,
                        "quota_version": self.quota.version,
                        "explanation": why,
                    },
                )
            )
        if commands and run is not None and reason is EvictionReason.NODE_LOST:
            # The lost node will not answer: report the eviction now (its command id joins the
            # decision record; a late ack from a node that comes back changes nothing).
            run.lose()
            first = next(iter(commands))
            self.ledger.report(first)
            out.events += period_closes
            out.events.append(
                TaskEvicted(
                    task_id=tid,
                    node=commands[first],
                    command_id=first,
                    reason=reason,
                    evicted_at=utc(now),
                    lost_gpu_seconds=lost,
                    requeued=requeued,
                )
            )
        elif commands and run is not None:
            placements = tuple(
                sorted((p for b in task.binds.values() for p in b.placements), key=lambda p: p.worker_index)
            )
            ending = _Ending(
                tid,
                spec.task_class,
                run,
                commands,
                reason,
                lost,
                requeued,
                period_closes,
                stop.failed_period,
                placements,
                dict(task.started),
                preemptor=stop.preemptor,
                decided_s=self.driver.runtime.now,
                finish_close=finish_close,
            )
            # The driver keeps its deadline and the GPUs it holds per node (held starts wait on them).
            gpus = {n: frozenset(g for p in placements if p.node == n for g in p.gpu_indices) for n in nodes}
            self.driver.held.ending(
                TaskId(tid), commands, gpus, now=now, grace_s=grace, margin_s=self.settings.ack_margin_s
            )
            self.ending[tid] = ending
            phase = run.evict(set(commands.values()))
            if phase is not None:
                out.extend(self._conclude(ending, phase, now))
        task.binds.clear()
        task.started.clear()
        task.evicted = True
        if not requeued:
            del self.tasks[tid]
        return out

    def withdrawn(self, task_id: str) -> None:
        """The task was withdrawn while an attempt of it ends: nothing to undo when that one ends."""
        ending = self.ending.get(task_id)
        if ending is not None:
            ending.requeued = False

    # ----- what the nodes say of an ending attempt ------------------------------------------------
    def evict_acked(
        self, task_id: str, original: uuid.UUID, node: str, outcome: str, acked_at: datetime, now: float
    ) -> Effects:
        """`node` acknowledged the eviction `original` (or one re-issued for it) of `task_id`."""
        ending = self.ending.get(task_id)
        if ending is None or original not in ending.commands:
            return Effects()
        ending.acked_at.setdefault(node, acked_at)
        phase = ending.run.ack(node, outcome)
        return Effects() if phase is None else self._conclude(ending, phase, now)

    def worker_started(self, ack: WorkerStarted, attempt: int, now: float) -> Effects | None:
        """A worker of the ending `attempt` started (None: no such attempt ends here): read after
        the eviction was decided, the run did start (and may finish on its own)."""
        ending = self.ending.get(ack.task_id)
        if ending is None or ending.run.number != attempt:
            return None
        out = Effects()
        ending.started.setdefault(ack.worker_index, ack.started_at.timestamp())
        if ending.run.start(ack.worker_index):
            started = TaskStarted(
                task_id=ack.task_id, pool=self.pool, task_class=ending.task_class,
                placements=ending.placements, started_at=utc(max(ending.started.values())),
                attempt=ending.run.number,
            )  # fmt: skip
            out.events.append(started)
        return out

    def worker_exited(self, ack: WorkerExited, attempt: int, now: float) -> Effects | None:
        """A late exit of the ending `attempt` (None: no such attempt ends here): never dropped, it
        may say the run finished."""
        ending = self.ending.get(ack.task_id)
        if ending is None or ending.run.number != attempt:
            return None
        ending.exited_at = max(ending.exited_at or ack.exited_at, ack.exited_at)
        phase = ending.run.exit(ack.worker_index, ack.exit_code, evicted=ack.evicted)
        return Effects() if phase is None else self._conclude(ending, phase, now)

    def expire(self, now: float, still_running: Callable[[_Ending], bool]) -> Effects:
        """Evicted attempts past grace + margin end (the driver's deadlines), unless their node
        says the attempt still runs (`still_running`: wait for a real end, reconcile.py)."""
        out = Effects()
        for ending in [self.ending[t] for t in self.driver.held.endings_due(now)]:
            if still_running(ending):
                continue
            phase = ending.run.expire()
            if phase is not None:
                out.extend(self._conclude(ending, phase, now))
        return out

    # ----- how it ended ---------------------------------------------------------------------------
    def _conclude(self, ending: _Ending, phase: Phase, now: float) -> Effects:
        """The evicted attempt's end is known (docs/attempts.md): report it as what it was."""
        out = Effects()
        tid = ending.task_id
        del self.ending[tid]
        # The driver forgets the ending; evicted, the task's held next start stops waiting for it.
        released = self.driver.held.end(TaskId(tid), evicted=phase is Phase.EVICTED)
        if phase is Phase.EVICTED:
            for command_id, node in ending.commands.items():
                evicted = TaskEvicted(
                    task_id=tid, node=node, command_id=command_id, reason=ending.reason,
                    evicted_at=ending.acked_at.get(node, utc(now)), lost_gpu_seconds=ending.lost,
                    requeued=ending.requeued,
                )  # fmt: skip
                out.events.append(evicted)
            out.events += ending.closes
            out.decisions.append(Decision(tid, "evict_concluded", now, {"attempt": ending.run.number}))
            if released is not None:
                out.extend(self.binder.release(tid, now, "its previous attempt ended"))
            return out
        # Every worker exited on its own while the eviction was in flight: the run finished. No
        # TaskEvicted; the period the stop cut short closes SUCCEEDED at the exit, as any finished
        # run's last period does (a FAILED one would feed the quota an eviction nobody suffered;
        # none at all would drop a success from its feedback). The requeued task is withdrawn from
        # the runtime (or its next attempt, whose binds are still held, is dropped).
        end_at = ending.exited_at or utc(now)
        out.events += ending.closes[:-1] if ending.failed_close else ending.closes
        if ending.finish_close is not None:
            out.events.append(finished_at(ending.finish_close, end_at))
        # The runtime logged the failure when it decided the eviction: a success instead there too.
        self.driver.runtime.stop_was_finish(
            ending.decided_s if ending.failed_close else None, cut_short=ending.finish_close is not None
        )
        codes = [ending.run.own_exits[w] for w in sorted(ending.run.own_exits)]
        code = next((c for c in codes if c != 0), 0)
        out.events.append(TaskFinished(task_id=tid, exit_code=code, finished_at=end_at))
        detail = {"exit_code": code, "attempt": ending.run.number, "during_eviction": True}
        out.decisions.append(Decision(tid, "finished", now, detail))
        if ending.requeued and tid in self.tasks:
            self.binder.drop(tid)
            self.driver.cancel(TaskId(tid), now)
            del self.tasks[tid]
        return out

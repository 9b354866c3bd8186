"""How a stopped run ends: EvictCommands to every node holding one of its workers (`_stopped`), and,
once its acks and exits say what the attempt turned out to be, TaskEvicted or TaskFinished and
the guarantee periods it closed (`_conclude`, docs/attempts.md); held binds go out (`_release`).

Part of the pool controller (controller.py): a class over its state (controller_base.py).
"""

from __future__ import annotations

import uuid

from pydantic import BaseModel

from schemas.commands import EvictCommand
from schemas.tasks import (
    EvictionReason,
    GuaranteeOutcome,
    GuaranteePeriodClosed,
    TaskEvicted,
    TaskFinished,
)
from schemas.tasks import TaskClass as WireClass
from services.core import reasons as core_reasons
from services.core.guarantee import GUARANTEE_PERIOD_S
from services.core.ids import TaskId
from services.core.outcomes import Stopped
from services.preemption.attempts import Phase
from services.preemption.controller_base import ControllerBase
from services.preemption.controller_types import (
    _EVICTION_REASONS,
    Decision,
    Effects,
    _Ending,
    _Eviction,
    _Task,
    utc,
)
from services.preemption.explanations import explanation_dict


class Endings(ControllerBase):
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
                out.extend(self._release(tid, now, "its previous attempt ended"))
            return out
        # Every worker exited on its own while the eviction was in flight: the run finished. No
        # TaskEvicted, no failed guarantee period; the requeued task is withdrawn from the runtime
        # (or its next attempt, whose binds are still held, is dropped).
        out.events += ending.closes[:-1] if ending.failed_close else ending.closes
        if ending.failed_close:
            # The runtime logged the failure when it decided the eviction: withdraw it there too.
            self.runtime.void_failure(ending.decided_s)
        codes = [ending.run.own_exits[w] for w in sorted(ending.run.own_exits)]
        code = next((c for c in codes if c != 0), 0)
        out.events.append(TaskFinished(task_id=tid, exit_code=code, finished_at=ending.exited_at or utc(now)))
        detail = {"exit_code": code, "attempt": ending.run.number, "during_eviction": True}
        out.decisions.append(Decision(tid, "finished", now, detail))
        if ending.requeued and tid in self.tasks:
            self._drop_pending(tid)
            self.driver.cancel(TaskId(tid), now)
            del self.tasks[tid]
        return out

    def _release(self, tid: str, now: float, why: str) -> Effects:
        """The driver released the task's held start: its binds go out."""
        out = Effects()
        # Re-issued now: the agent checks freshness against issued_at, and the signature covers it.
        for bind in self.held_binds.pop(tid):
            fresh = bind.model_copy(update={"issued_at": utc(now)})
            self.tasks[tid].binds[bind.command_id] = fresh
            out.commands.append(fresh)
        out.decisions.append(Decision(tid, "bound", now, {"why": why}))
        return out

    def _stopped(self, stop: Stopped, now: float, *, grace_s: float) -> Effects:
        """A running task lost its GPUs: EvictCommands to every node holding one of its workers.
        What the attempt turned out to be is reported when its acks and exits say (`_conclude`)."""
        out = Effects()
        tid = stop.task_id
        task = self.tasks[tid]
        reason = _EVICTION_REASONS[stop.reason]
        requeued = stop.reason is not core_reasons.EvictionReason.CANCELLED
        held = tid in self.pending  # binds never went out: nothing runs, nothing to stop
        self._drop_pending(tid)
        spec = task.submitted
        checkpoint = spec.checkpoint_interval_s
        since_checkpoint = stop.run_s if checkpoint is None else stop.run_s % checkpoint
        lost = since_checkpoint * spec.gpus_per_worker * spec.workers
        closes: list[BaseModel] = []
        if spec.task_class is WireClass.SPOT:
            start = now - stop.run_s
            closes = self._closes(tid, task, start, now, stop.successes, failed=stop.failed_period)
        nodes = sorted({b.node for b in task.binds.values()})
        why = explanation_dict(self.runtime.explain(TaskId(tid)))
        run = task.run
        task.run = None
        if held or not nodes or run is None:
            # A held attempt never reached a node (its binds did not go out), so no period of it
            # ran: reporting one, FAILED, would feed the quota's feedback a failure nobody suffered
            # (found by `gfs livebench races`, docs/decisions.md). The scheduling is the same.
            if not held:
                out.events += closes
            out.decisions.append(
                Decision(tid, "evicted", now, {"reason": reason.value, "nodes": [], "explanation": why})
            )
        grace = 0.0 if reason is EvictionReason.NODE_LOST else grace_s
        commands: dict[uuid.UUID, str] = {}
        for node in nodes if run is not None and not held else []:
            assert run is not None
            command = EvictCommand(
                command_id=self._id(), node=node, task_ids=(tid,), reason=reason, grace_seconds=grace,
                preemptor_task_id=stop.preemptor, issued_at=utc(now), attempt=run.number,
            )  # fmt: skip
            self.evictions[command.command_id] = _Eviction(node, (tid,), run.number)
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
                        "quota_version": self.quota_version,
                        "explanation": why,
                    },
                )
            )
        if commands and run is not None and reason is EvictionReason.NODE_LOST:
            # The lost node will not answer: report the eviction now (its command id joins the
            # decision record; a late ack from a node that comes back changes nothing).
            run.lose()
            first = next(iter(commands))
            self.evictions[first].reported = True
            out.events += closes
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
                closes,
                stop.failed_period,
                placements,
                dict(task.started),
                preemptor=stop.preemptor,
                decided_s=self.runtime.now,
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

    def _closes(
        self, tid: str, task: _Task, start: float, now: float, successes: int, *, failed: bool
    ) -> list[BaseModel]:
        """GuaranteePeriodClosed for the periods a stop or finish logged now."""
        events: list[BaseModel] = []
        for _ in range(successes):
            period_start = start + task.periods_closed * GUARANTEE_PERIOD_S
            end = min(now, period_start + GUARANTEE_PERIOD_S)
            task.periods_closed += 1
            events.append(self._close(tid, task, period_start, end, GuaranteeOutcome.SUCCEEDED))
        if failed:
            period_start = start + task.periods_closed * GUARANTEE_PERIOD_S
            events.append(self._close(tid, task, min(period_start, now), now, GuaranteeOutcome.FAILED))
        return events

    def _close(
        self, tid: str, task: _Task, start: float, end: float, outcome: GuaranteeOutcome
    ) -> GuaranteePeriodClosed:
        return GuaranteePeriodClosed(
            task_id=tid, pool=self.pool, guarantee_hours=task.submitted.guarantee_hours,
            period_start=utc(start), period_end=utc(end), outcome=outcome,
        )  # fmt: skip

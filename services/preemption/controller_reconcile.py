"""Reconciliation against what the nodes report they run (the rules are in reconcile.py): binds lost
on the way are issued again, lost evictions re-issued, and work the service does not hold stopped;
an eviction whose node still lists the attempt is waited for rather than assumed done.

Part of the pool controller (controller.py): a class over the endings (controller_endings.py).
"""

from __future__ import annotations

import uuid

from schemas.commands import EvictCommand
from schemas.tasks import (
    EvictionReason,
)
from services.core.ids import TaskId
from services.preemption.attempts import Phase
from services.preemption.controller_endings import Endings
from services.preemption.controller_types import (
    Decision,
    Effects,
    _Bound,
    _Ending,
    _Eviction,
    utc,
)
from services.preemption.reconcile import NodeReport, bind_lost


class Reconciliation(Endings):
    def node_report(self, node: str, report: NodeReport, now: float) -> Effects:
        """A node's report of the workers it runs (journaled when new, reconcile.worth_journaling)."""
        last = self.reports.get(node)
        if node not in self.nodes or (last is not None and report.sampled_at < last.sampled_at):
            return Effects()
        self.reports[node] = report
        self.unknown.observe(node, report, lambda task, attempt: self._holds(node, task, attempt))
        return Effects()

    def _holds(self, node: str, task_id: str, attempt: int) -> bool:
        """Whether the service holds `attempt` of `task_id` on `node` (running, or being evicted)."""
        ending = self.ending.get(task_id)
        if ending is not None and ending.run.number == attempt and node in ending.commands.values():
            return True
        task = self.tasks.get(task_id)
        run = None if task is None else task.run
        if run is None or run.number != attempt or task_id in self.pending:
            return False
        return node in run.workers.values()

    def _runs_on(self, node: str, task_id: str, attempt: int | None) -> bool:
        """The node's last report lists the attempt (a node that does not report, or is down, never)."""
        report = self.reports.get(node)
        if report is None or attempt is None or node in self.down:
            return False
        return report.lists(task_id, attempt)

    def _still_running(self, ending: _Ending) -> bool:
        tid, number = ending.task_id, ending.run.number
        nodes = [n for n in ending.commands.values() if n not in ending.run.acks]
        return any(self._runs_on(node, tid, number) for node in nodes)

    def _eviction_runs(self, command_id: uuid.UUID) -> bool:
        eviction = self.evictions.get(command_id)
        if eviction is None or eviction.reported:
            return False
        return any(self._runs_on(eviction.node, t, eviction.attempt) for t in eviction.task_ids)

    def _reconcile(self, now: float) -> Effects:
        out = Effects()
        # Lost binds: issued again with a new id and a fresh issued_at.
        for tid, task in self.tasks.items():
            run = task.run
            if run is None or run.phase is not Phase.BOUND or tid in self.pending:
                continue
            for cid, bind in list(task.binds.items()):
                workers = {p.worker_index for p in bind.placements}
                if workers & (run.started | run.stopped | set(run.own_exits)):
                    continue
                report = None if bind.node in self.down else self.reports.get(bind.node)
                lost = bind_lost(
                    issued_at=bind.issued_at.timestamp(), now=now,
                    timeout_s=self.settings.bind_start_timeout_s, report=report, task_id=tid,
                    attempt=run.number, workers=workers,
                )  # fmt: skip
                if not lost:
                    continue
                fresh = bind.model_copy(update={"command_id": self._id(), "issued_at": utc(now)})
                del task.binds[cid]
                task.binds[fresh.command_id] = fresh
                self.bound[fresh.command_id] = _Bound(tid, bind.node, run.number, frozenset(workers))
                out.commands.append(fresh)
                detail = {"node": bind.node, "attempt": run.number, "replaces": str(cid),
                          "command_id": str(fresh.command_id)}  # fmt: skip
                out.decisions.append(Decision(tid, "bind_reissued", now, detail))
        if self.controls.kill_switch:
            return out  # no eviction command of any kind while the switch is on
        # Lost evictions: past grace + margin, unanswered, and the node still lists the attempt.
        for ending in list(self.ending.values()):
            if self.driver.held.deadline(TaskId(ending.task_id)) > now:
                continue
            tid, number = ending.task_id, ending.run.number
            reissued = False
            for original, node in list(ending.commands.items()):
                if node in ending.run.acks or not self._runs_on(node, tid, number):
                    continue
                command = EvictCommand(
                    command_id=self._id(), node=node, task_ids=(tid,), reason=ending.reason,
                    grace_seconds=self.settings.grace_s, preemptor_task_id=ending.preemptor,
                    issued_at=utc(now), attempt=number,
                )  # fmt: skip
                self.evictions[command.command_id] = _Eviction(node, (tid,), number)
                self.aliases[command.command_id] = original
                out.commands.append(command)
                detail = {"node": node, "attempt": number, "replaces": str(original),
                          "command_id": str(command.command_id)}  # fmt: skip
                out.decisions.append(Decision(tid, "evict_reissued", now, detail))
                reissued = True
            if reissued:  # the re-issued command gets its own grace period and margin
                self.driver.held.extend(
                    TaskId(tid), now=now, grace_s=self.settings.grace_s, margin_s=self.settings.ack_margin_s
                )
        # Unknown work: an attempt the service does not hold on that node, reported long enough.
        for node, report in sorted(self.reports.items()):
            if node in self.down:
                continue
            for tid, number in self.unknown.due(node, report):
                if self._holds(node, tid, number):
                    continue
                command = EvictCommand(
                    command_id=self._id(), node=node, task_ids=(tid,),
                    reason=EvictionReason.NODE_LOST, grace_seconds=0.0, issued_at=utc(now), attempt=number,
                )  # fmt: skip
                self.evictions[command.command_id] = _Eviction(node, (tid,), number, reported=True)
                self.unknown.mark_stopped(node, tid, number, report.sampled_at)
                out.commands.append(command)
                why = "unknown work: the service does not hold this attempt on this node"
                detail = {"node": node, "attempt": number, "command_id": str(command.command_id), "why": why}
                out.decisions.append(Decision(tid, "unknown_stopped", now, detail))
        return out

"""The reconciler: what the nodes report they run, against what the pool holds (the rules are in
services/preemption/controller/reconcile_rules.py): binds lost on the way are issued again, lost evictions
re-issued, and work the service does not hold stopped; an eviction whose node still lists the
attempt is waited for rather than assumed done.

`Reconciler` owns each reporting node's last journaled report (`reports`) and the unknown attempts
seen there (`unknown`). It reads the task table and the endings, records the commands it issues in
the ledger and draws their ids from the pool's id source.
"""

from __future__ import annotations

import uuid

from gfs.schemas.commands import EvictCommand
from gfs.schemas.tasks import EvictionReason
from gfs.services.core.driver.pool_driver import PoolDriver
from gfs.services.core.ids import TaskId
from gfs.services.preemption.controller.attempts import Phase
from gfs.services.preemption.controller.endings import Endings
from gfs.services.preemption.controller.ids import CommandIds
from gfs.services.preemption.controller.ledger import CommandLedger
from gfs.services.preemption.controller.reconcile_rules import NodeReport, UnknownWork, bind_lost
from gfs.services.preemption.controller.settings import ControllerSettings
from gfs.services.preemption.controller.types import Decision, Effects, _Bound, _Ending, _Eviction, _Task, utc


class Reconciler:
    def __init__(
        self,
        settings: ControllerSettings,
        driver: PoolDriver[uuid.UUID],
        tasks: dict[str, _Task],
        ids: CommandIds,
        ledger: CommandLedger,
        endings: Endings,
    ) -> None:
        self.settings = settings
        self.driver = driver
        self.tasks = tasks
        self.ids = ids
        self.ledger = ledger
        self.endings = endings
        self.reports: dict[str, NodeReport] = {}
        self.unknown = UnknownWork(settings.unknown_after_s)

    # ----- what the nodes report ------------------------------------------------------------------
    def node_report(self, node: str, report: NodeReport) -> None:
        """A node's report of the workers it runs (journaled when new, reconcile.worth_journaling);
        a report of an unknown node, or older than the last one, is ignored."""
        last = self.reports.get(node)
        if node not in self.driver.nodes or (last is not None and report.sampled_at < last.sampled_at):
            return
        self.reports[node] = report
        self.unknown.observe(node, report, lambda task, attempt: self.holds(node, task, attempt))

    def forget(self, node: str) -> None:
        """The node went down: what it runs is known again from its first report back."""
        self.reports.pop(node, None)
        self.unknown.forget(node)

    def holds(self, node: str, task_id: str, attempt: int) -> bool:
        """Whether the service holds `attempt` of `task_id` on `node` (running, or being evicted)."""
        ending = self.endings.get(task_id)
        if ending is not None and ending.run.number == attempt and node in ending.commands.values():
            return True
        task = self.tasks.get(task_id)
        run = None if task is None else task.run
        if run is None or run.number != attempt or task_id in self.driver.held.held:
            return False
        return node in run.workers.values()

    def _runs_on(self, node: str, task_id: str, attempt: int | None) -> bool:
        """The node's last report lists the attempt (a node that does not report, or is down, never)."""
        report = self.reports.get(node)
        if report is None or attempt is None or node in self.driver.down:
            return False
        return report.lists(task_id, attempt)

    def still_running(self, ending: _Ending) -> bool:
        """A node that has not acknowledged the ending attempt's eviction still lists it."""
        tid, number = ending.task_id, ending.run.number
        nodes = [n for n in ending.commands.values() if n not in ending.run.acks]
        return any(self._runs_on(node, tid, number) for node in nodes)

    def eviction_runs(self, command_id: uuid.UUID) -> bool:
        """The unanswered eviction's node still lists an attempt it stops."""
        eviction = self.ledger.unanswered(command_id)
        if eviction is None:
            return False
        return any(self._runs_on(eviction.node, t, eviction.attempt) for t in eviction.task_ids)

    # ----- reconciliation -------------------------------------------------------------------------
    def reconcile(self, now: float, *, kill_switch: bool) -> Effects:
        """Lost binds issued again; unless the kill switch is on (no eviction command of any kind),
        lost evictions re-issued and unknown work stopped."""
        out = self._lost_binds(now)
        if kill_switch:
            return out
        out.extend(self._lost_evictions(now))
        out.extend(self._unknown_work(now))
        return out

    def _lost_binds(self, now: float) -> Effects:
        """Binds none of whose workers started in time: issued again with a new id and a fresh
        issued_at."""
        out = Effects()
        for tid, task in self.tasks.items():
            run = task.run
            if run is None or run.phase is not Phase.BOUND or tid in self.driver.held.held:
                continue
            for cid, bind in list(task.binds.items()):
                workers = {p.worker_index for p in bind.placements}
                if workers & (run.started | run.stopped | set(run.own_exits)):
                    continue
                report = None if bind.node in self.driver.down else self.reports.get(bind.node)
                lost = bind_lost(
                    issued_at=bind.issued_at.timestamp(), now=now,
                    timeout_s=self.settings.bind_start_timeout_s, report=report, task_id=tid,
                    attempt=run.number, workers=workers,
                )  # fmt: skip
                if not lost:
                    continue
                fresh = bind.model_copy(update={"command_id": self.ids.next(), "issued_at": utc(now)})
                del task.binds[cid]
                task.binds[fresh.command_id] = fresh
                self.ledger.bind_issued(
                    fresh.command_id, _Bound(tid, bind.node, run.number, frozenset(workers))
                )
                out.commands.append(fresh)
                detail = {"node": bind.node, "attempt": run.number, "replaces": str(cid),
                          "command_id": str(fresh.command_id)}  # fmt: skip
                out.decisions.append(Decision(tid, "bind_reissued", now, detail))
        return out

    def _lost_evictions(self, now: float) -> Effects:
        """Past grace + margin, unanswered, and the node still lists the attempt: re-issued, each
        standing for the eviction it replaces (the ledger's aliases)."""
        out = Effects()
        for ending in self.endings.values():
            if self.driver.held.deadline(TaskId(ending.task_id)) > now:
                continue
            tid, number = ending.task_id, ending.run.number
            reissued = False
            for original, node in list(ending.commands.items()):
                if node in ending.run.acks or not self._runs_on(node, tid, number):
                    continue
                command = EvictCommand(
                    command_id=self.ids.next(), node=node, task_ids=(tid,), reason=ending.reason,
                    grace_seconds=self.settings.grace_s, preemptor_task_id=ending.preemptor,
                    issued_at=utc(now), attempt=number,
                )  # fmt: skip
                self.ledger.eviction_issued(
                    command.command_id, _Eviction(node, (tid,), number), replaces=original
                )
                out.commands.append(command)
                detail = {"node": node, "attempt": number, "replaces": str(original),
                          "command_id": str(command.command_id)}  # fmt: skip
                out.decisions.append(Decision(tid, "evict_reissued", now, detail))
                reissued = True
            if reissued:  # the re-issued command gets its own grace period and margin
                self.driver.held.extend(
                    TaskId(tid), now=now, grace_s=self.settings.grace_s, margin_s=self.settings.ack_margin_s
                )
        return out

    def _unknown_work(self, now: float) -> Effects:
        """An attempt the service does not hold on that node, reported long enough: stopped."""
        out = Effects()
        for node, report in sorted(self.reports.items()):
            if node in self.driver.down:
                continue
            for tid, number in self.unknown.due(node, report):
                if self.holds(node, tid, number):
                    continue
                command = EvictCommand(
                    command_id=self.ids.next(), node=node, task_ids=(tid,),
                    reason=EvictionReason.NODE_LOST, grace_seconds=0.0, issued_at=utc(now), attempt=number,
                )  # fmt: skip
                self.ledger.eviction_issued(
                    command.command_id, _Eviction(node, (tid,), number, reported=True)
                )
                self.unknown.mark_stopped(node, tid, number, report.sampled_at)
                out.commands.append(command)
                why = "unknown work: the service does not hold this attempt on this node"
                detail = {"node": node, "attempt": number, "command_id": str(command.command_id), "why": why}
                out.decisions.append(Decision(tid, "unknown_stopped", now, detail))
        return out

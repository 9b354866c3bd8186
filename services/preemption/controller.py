"""One pool in the live scheduler: wire events in, the core's runtime decides, wire effects out.

`PoolController` is the preemption service's I/O-free heart. The service shell feeds it decoded
payloads with the wall-clock time they are handled at; the controller drives the core's
`PoolDriver` (services/core/driver: the runtime, the pass trigger, the guarantee-period and
quota-expiry timers, the same driver the simulator's engine uses) and returns `Effects`: lifecycle events,
unsigned node commands, and decision records with their explanation. It reads no clock, makes no
random choice and does no I/O, so replaying the same inputs at the same times rebuilds the same
state: the shell journals every input and rebuilds a pool after a restart or a failover by
replaying its journal (`services.preemption.journal`). Command ids are derived from the pool, an
id salt and a counter for the same reason: the shell sets the salt to the owner's fencing epoch
(the one recorded with each journal row on replay), so a replay re-derives the ids of journaled
commands while commands decided again after a lost commit get ids never used before.

Rules (docs/services.md, "Preemption service"):
- An HP task placed by preemption gets its BindCommands held until every victim's EvictAck came
  back, or the grace period plus a margin passed (then the agent has killed them anyway).
- A task is TaskStarted when every worker reported WorkerStarted, and finished when every worker
  exited on its own (TaskFinished carries the first non-zero exit code).
- Attempts (docs/attempts.md, `services.preemption.attempts`): every run of a task has a number
  carried by its bind, evict and ack messages. An eviction does not end a run: its acks and exits
  do. A run whose every worker exited on its own finished, even with an eviction in flight (no
  TaskEvicted, no failed guarantee period, the requeue withdrawn); otherwise TaskEvicted and the
  guarantee periods are reported once every node answered (or at grace + margin).
- A task's next run is bound only after its previous run ended on every node (its binds are held
  like a preemptor's), so an agent never holds two runs of one task (docs/decisions.md).
- Acks are bound to what they acknowledge (`refusal`): command id, task, attempt, worker and node
  must match the command, and the record must come from that node's key; the shell dead-letters
  anything else with the reason.
- Cancel: a queued task is withdrawn; a running one is stopped with reason CANCELLED, never
  requeued.
- A node whose heartbeat stopped is marked down by the shell (`node_down`): its tasks are stopped
  and requeued per the runtime's rule, and every node holding one of their workers gets an
  EvictCommand (reason NODE_LOST, no grace) so no task ever runs twice if the node comes back.
- When the quota in force expires (valid_until passed, no newer SpotQuota), the quota is frozen
  at the spot GPUs running then: no new spot admissions above what runs, and no eviction.
  Before the first SpotQuota a pool admits no spot task.
- SRE controls (`control`, a journaled entry, so a replay restores them): the kill switch turns
  preemption off in every pass; a quota freeze keeps the quota in force (SpotQuota messages are
  recorded, not applied), an override puts given values in force, and clearing either applies the
  last SpotQuota received; the eviction cap is the core's per-pass budget
  (`PoolRuntime.set_eviction_cap`).
"""

from __future__ import annotations

import math
import uuid

from pydantic import BaseModel

from schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from schemas.pool_status import PoolStatus
from schemas.quota import SpotQuota
from schemas.tasks import (
    EvictionReason,
    GuaranteeOutcome,
    Placement,
    RejectionReason,
    TaskAccepted,
    TaskFinished,
    TaskRejected,
    TaskStarted,
    TaskSubmitted,
    TaskWithdrawn,
)
from schemas.tasks import TaskClass as WireClass
from schemas.workers import WorkerExited, WorkerStarted
from services.core import reasons as core_reasons
from services.core.explain import Explanation
from services.core.feasibility import rejection_message
from services.core.guarantee import GUARANTEE_PERIOD_S
from services.core.ids import PoolId, TaskId, TenantId
from services.core.outcomes import Started, Stopped
from services.core.task import TaskClass, TaskSpec
from services.preemption.attempts import Attempt, Phase
from services.preemption.controller_endings import Endings
from services.preemption.controller_types import (
    _REJECTIONS,
    DEFAULT_CHECKPOINT_S,
    ID_NAMESPACE,
    ControllerSettings,
    Controls,
    Decision,
    Effects,
    _Bound,
    _Ending,
    _Eviction,
    _Pending,
    _Task,
    command_id,
    id_salt,
    utc,
)
from services.preemption.explanations import explanation_dict
from services.preemption.reconcile import NodeReport, bind_lost
from services.preemption.survival_quote import survival_on_accept
from services.preemption.tenant_budgets import (
    apply_tenant_budgets,
)

# The names other modules and tests import from here (moved to controller_types.py).
__all__ = [
    "ID_NAMESPACE",
    "ControllerSettings",
    "Controls",
    "Decision",
    "Effects",
    "PoolController",
    "command_id",
    "id_salt",
    "utc",
]


class PoolController(Endings):
    # ----- nodes ------------------------------------------------------------------------------
    def node_seen(self, name: str, gpus: int, now: float) -> Effects:
        """A heartbeat of `name` (NodeTelemetry): a new node joins, a down one comes back."""
        out = Effects()
        known = name in self.nodes
        if not self.driver.node_seen(name, gpus, now):
            return out
        if known:
            out.decisions.append(Decision("", "node_up", now, {"node": name}))
        else:
            out.decisions.append(Decision("", "node_joined", now, {"node": name, "gpus": gpus}))
        return out

    def node_down(self, name: str, now: float) -> Effects:
        """The node's heartbeat stopped: stop and requeue its tasks (module doc)."""
        out = Effects()
        if name not in self.nodes or name in self.down:
            return out
        self.reports.pop(name, None)  # what it ran is known again from its first report back
        self.unknown.forget(name)
        stops = self.driver.node_down(name, now)
        out.decisions.append(
            Decision("", "node_down", now, {"node": name, "stopped": [s.task_id for s in stops]})
        )
        for stop in stops:
            out.extend(self._stopped(stop, now, grace_s=0.0))
        return out

    # ----- submissions -------------------------------------------------------------------------
    def submit(self, task: TaskSubmitted, now: float, *, duplicate: bool = False) -> Effects:
        out = Effects()
        tid = task.task_id
        self.seen.expire(now, self.tasks, self.ending)  # at the entry's time: a replay forgets alike
        if duplicate or tid in self.seen:
            message = f"task id {tid} was already submitted; pick a new id"
            out.events.append(
                TaskRejected(task_id=tid, reason=RejectionReason.DUPLICATE_TASK_ID, message=message)
            )
            out.decisions.append(
                Decision(tid, "rejected", now, {"reason": "DUPLICATE_TASK_ID", "message": message})
            )
            return out
        self.seen.add(tid, now)
        cls = TaskClass.HP if task.task_class is WireClass.HP else TaskClass.SPOT
        spec = TaskSpec(
            task_id=TaskId(tid),
            tenant=TenantId(task.tenant),
            pool=PoolId(self.pool),
            task_class=cls,
            gpus_per_worker=task.gpus_per_worker,
            workers=task.workers,
            submit_s=now,
            duration_s=task.expected_duration_s or 0.0,
            guarantee_hours=task.guarantee_hours,
            checkpoint_interval_s=task.checkpoint_interval_s or DEFAULT_CHECKPOINT_S,
        )
        rejection = self.driver.submit(spec, now) if self.nodes else core_reasons.Rejection.UNKNOWN_POOL
        if rejection is not None:
            reason = _REJECTIONS[rejection]
            message = rejection_message(rejection, task.gpus_per_worker, task.workers, self.pool)
            out.events.append(TaskRejected(task_id=tid, reason=reason, message=message))
            out.decisions.append(Decision(tid, "rejected", now, {"reason": reason.value, "message": message}))
            return out
        self.tasks[tid] = _Task(task)
        survival = survival_on_accept(self.runtime, spec, self.last_quota, now)  # spot only (issue 27)
        out.events.append(
            TaskAccepted(task_id=tid, pool=self.pool, task_class=task.task_class, survival=survival)
        )
        out.decisions.append(Decision(tid, "accepted", now, {"class": task.task_class.value}))
        return out

    def cancel(self, task_id: str, tenant: str, reason: str, now: float) -> Effects:
        out = Effects()
        task = self.tasks.get(task_id)
        if task is None:
            out.decisions.append(
                Decision(task_id, "cancel_ignored", now, {"why": "not queued or running here"})
            )
            return out
        if task.submitted.tenant != tenant:
            why = f"tenant {tenant!r} does not own the task (owner {task.submitted.tenant!r})"
            out.decisions.append(Decision(task_id, "cancel_refused", now, {"why": why}))
            return out
        # Held binds are dropped by `_stopped`, which must see them to know nothing went out.
        stop = self.driver.cancel(TaskId(task_id), now)
        if stop is None:
            del self.tasks[task_id]
            ending = self.ending.get(task_id)
            if ending is not None:
                ending.requeued = False  # withdrawn now: nothing to undo when that attempt ends
            out.events.append(
                TaskWithdrawn(task_id=task_id, pool=self.pool, withdrawn_at=utc(now), reason=reason)
            )
            out.decisions.append(Decision(task_id, "withdrawn", now, {"reason": reason}))
            return out
        out.extend(self._stopped(stop, now, grace_s=self.settings.grace_s))
        return out

    # ----- quota ----------------------------------------------------------------------------------
    def quota(self, quota: SpotQuota, now: float) -> Effects:
        self.last_quota = quota
        if self.controls.quota_mode is not None:  # frozen or overridden by an SRE: recorded only
            out = Effects()
            given = self._quota_values({q.guarantee_hours: q.quota_gpus for q in quota.quotas})
            version = f"{quota.forecast_version}@{quota.valid_from.isoformat()}"
            held = {str(h): v for h, v in given.items()}
            detail = {"mode": self.controls.quota_mode, "quota": held, "version": version}
            out.decisions.append(Decision("", "quota_held", now, detail))
            return out
        return self._apply_quota(quota, now)

    def _quota_values(self, given: dict[int, float]) -> dict[int, float]:
        values: dict[int, float] = {}
        for hours in sorted(self.runtime.quota):
            # A duration not offered (3 h) takes the next longer one's quota (tasks cannot ask it).
            longer = [given[h] for h in sorted(given) if h >= hours]
            values[hours] = longer[0] if longer else min(given.values())
        return values

    def _apply_quota(self, quota: SpotQuota, now: float) -> Effects:
        out = Effects()
        values = self._quota_values({q.guarantee_hours: q.quota_gpus for q in quota.quotas})
        at = self._now(now)
        changed = self.driver.apply_quota(values, quota.eta, now, valid_until=quota.valid_until.timestamp())
        # The simulator refreshes the node eviction scores with every quota refresh; the live
        # scheduler does it with every quota it applies, so both place on the same scores.
        self.runtime.refresh_eviction_scores(at)
        self.quota_version = f"{quota.forecast_version}@{quota.valid_from.isoformat()}"
        out.decisions.append(
            Decision(
                "",
                "quota",
                now,
                {
                    "quota": {str(h): v for h, v in values.items()},
                    "eta": quota.eta,
                    "version": self.quota_version,
                    "changed": changed,
                },
            )
        )
        return out

    # ----- acknowledgements -----------------------------------------------------------------------
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
        for pending in list(self.pending.values()):
            if original in pending.waiting:
                pending.waiting.discard(original)
                if not pending.waiting and not pending.own:
                    out.extend(self._release(pending, now, "victims acknowledged"))
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

    # ----- time -----------------------------------------------------------------------------------
    def tick(self, now: float, *, reconcile: bool = False) -> Effects:
        """Timers due at `now`: guarantee periods that closed, held binds past their deadline, an
        expired quota. `reconcile`: the shell's input is current, so lost binds and evictions may
        be issued again and unknown work stopped (reconcile.py); the waits never depend on it."""
        out = Effects()
        now = self._now(now)
        if reconcile:
            out.extend(self._reconcile(now))
        for closed in self.driver.advance(now):  # a finished or evicted run's are not due
            tid = str(closed.task_id)
            task = self.tasks.get(tid)
            if task is None:  # cannot happen: every path that forgets a running task stops it
                continue
            period_start = closed.run_start + task.periods_closed * GUARANTEE_PERIOD_S
            task.periods_closed += 1
            out.events.append(self._close(tid, task, period_start, closed.end, GuaranteeOutcome.SUCCEEDED))
        # Evicted attempts past grace + margin end first, so a held next attempt is released (or
        # dropped, when the run turned out finished) by its own rule rather than by the deadline.
        for ending in [e for e in self.ending.values() if e.deadline_s <= now]:
            if self._still_running(ending):
                continue  # its node says the attempt still runs: wait for a real end (reconcile.py)
            phase = ending.run.expire()
            if phase is not None:
                out.extend(self._conclude(ending, phase, now))
        for pending in list(self.pending.values()):
            if pending.deadline_s <= now and not any(self._eviction_runs(c) for c in pending.waiting):
                out.extend(self._release(pending, now, "grace period passed without every acknowledgement"))
        # An SRE's freeze or override holds the quota: it does not expire meanwhile.
        if self.controls.quota_mode is None and (expired := self.driver.expire_quota(now)) is not None:
            detail = {"frozen_at_gpus": expired.frozen_at_gpus}
            out.decisions.append(Decision("", "quota_expired", now, detail))
        return out

    # ----- reconciliation (reconcile.py) -------------------------------------------------------
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
            if ending.deadline_s > now:
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
                ending.deadline_s = now + self.settings.grace_s + self.settings.ack_margin_s
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

    def schedule(self, now: float, *, preemption: bool = True) -> Effects:
        """One scheduling pass: starts become BindCommands (held while victims stop), evictions
        EvictCommands."""
        out = Effects()
        preemption = preemption and not self.controls.kill_switch
        result = self.driver.run_pass(now, preemption=preemption, quota=True, force=True)
        assert result is not None  # forced
        victims: dict[str, list[uuid.UUID]] = {}
        for outcome in result.outcomes:
            if isinstance(outcome, Stopped):
                effects = self._stopped(outcome, now, grace_s=self.settings.grace_s)
                if outcome.preemptor is not None:
                    ids = [c.command_id for c in effects.commands if isinstance(c, EvictCommand)]
                    victims.setdefault(outcome.preemptor, []).extend(ids)
                out.extend(effects)
            else:
                out.extend(self._started(outcome, now, victims.get(outcome.task_id, [])))
        self.decided += len(result.outcomes)
        return out

    def clock(self, phase: str, sequence: int, at: float) -> Effects:
        """A tick of the controllable clock (schemas/clock.py): ADVANCE runs the timers due by
        `at`, STATUS reports the pool's status at `at` (the quota service computes the quota for
        that instant from it), PASS runs one scheduling pass. A tick seen before does nothing."""
        if sequence <= self.clock_sequence:
            return Effects()
        self.clock_sequence = sequence
        if phase == "ADVANCE":
            return self.tick(at)
        if phase == "STATUS":
            return Effects(events=[self.status(at)]) if self.nodes else Effects()
        if phase == "PASS":
            return self.schedule(at) if self.dirty else Effects()
        raise ValueError(f"unknown clock phase {phase!r}")

    def status(self, now: float) -> PoolStatus:
        """The pool's status for the quota service: what `PoolRuntime.quota_inputs` sees at `now`."""
        rt = self.runtime
        inputs = rt.quota_inputs(self._now(now), None)
        return PoolStatus(
            pool=self.pool,
            observed_at=utc(now),
            capacity_gpus=int(inputs.capacity),
            idle_gpus=int(inputs.idle_gpus),
            spot_in_use_gpus=max(0.0, float(inputs.spot_in_use)),
            hp_running_gpus=max(0.0, float(rt.state.hp_in_use)),
            hp_queued_gpus=max(0.0, float(rt.hp.gpus)),
            spot_head_wait_s=None if inputs.head_wait_s is None else max(0.0, inputs.head_wait_s),
            quota_held_wait_s=None if (held := inputs.quota_held_wait_s) is None else max(0.0, held),
            hp_placeable_gpus=None if inputs.hp_placeable is None else max(0.0, inputs.hp_placeable),
            reserved_task_id=None if (res := rt.reservation) is None else str(res.task_id),
            reserved_nodes=0 if res is None else len(res.nodes),
            spot_head_held_by=None if (why := rt.spot_head_reason()) is None else why.name,
        )

    # ----- SRE controls -----------------------------------------------------------------------------
    def control(self, wanted: Controls, now: float, *, audit_id: int | None = None) -> Effects:
        """Put the SRE controls `wanted` in force (module doc); a `control` decision record."""
        out = Effects()
        before = self.controls
        if wanted == before:
            return out
        self.controls = wanted
        self.driver.trigger.set()
        if wanted.kill_switch != before.kill_switch:
            self.driver.invalidate()  # HP tasks held by the switch are retried
        if (wanted.max_evictions, wanted.interval_s) != (before.max_evictions, before.interval_s):
            self.runtime.set_eviction_cap(wanted.max_evictions, wanted.interval_s)
        if wanted.tenant_budgets != before.tenant_budgets:
            apply_tenant_budgets(self.runtime, before.tenant_budgets, wanted.tenant_budgets)
        if (wanted.quota_mode, wanted.quota_gpus) != (before.quota_mode, before.quota_gpus):
            if wanted.quota_mode == "override":
                self.driver.hold_quota(self._quota_values(dict(wanted.quota_gpus)), self.runtime.eta)
            elif wanted.quota_mode is None:  # back to the quota service's: the last one received
                if self.last_quota is not None:
                    out.extend(self._apply_quota(self.last_quota, now))
                else:
                    self.driver.hold_quota(dict.fromkeys(self.runtime.quota, 0.0), self.runtime.eta)
            # "freeze": the quota in force stays
        detail = {"controls": wanted.as_dict(), "previous": before.as_dict(), "audit_id": audit_id,
                  "quota_in_force": {str(h): q for h, q in sorted(self.runtime.quota.items())}}  # fmt: skip
        out.decisions.append(Decision("", "control", now, detail))
        return out

    # ----- internals ------------------------------------------------------------------------------

    def _started(self, started: Started, now: float, victim_commands: list[uuid.UUID]) -> Effects:
        out = Effects()
        tid = started.task_id
        task = self.tasks[tid]
        spec = task.submitted
        task.attempt += 1
        task.binds.clear()
        task.started.clear()
        task.periods_closed = 0
        per_node: dict[str, list[Placement]] = {}
        worker = 0
        whole = max(1, math.ceil(spec.gpus_per_worker - 1e-9))
        for binding in started.devices:
            node = self.runtime.state.node_names[binding.node]
            if binding.slot >= 0:
                groups = [binding.devices]
                fraction = binding.fraction
            else:
                groups = [binding.devices[i : i + whole] for i in range(0, len(binding.devices), whole)]
                fraction = 1.0
            for devices in groups:
                per_node.setdefault(node, []).append(
                    Placement(
                        worker_index=worker, node=node, gpu_indices=tuple(devices), gpu_fraction=fraction
                    )
                )
                worker += 1
        task.run = Attempt(task.attempt, {p.worker_index: node for node, ps in per_node.items() for p in ps})
        # The start pays the eviction/restart delay when it needed evictions or resumes an evicted
        # run (spec 5.4): the task is told, so a fake task models it the way the simulator does.
        core_spec = self.runtime.state.running[TaskId(tid)].spec
        overhead = core_spec.restart_overhead_s if started.preempted or task.evicted else None
        binds = []
        for node, placements in per_node.items():
            command = BindCommand(
                command_id=self._id(), node=node, task_id=tid, task_class=spec.task_class,
                placements=tuple(placements), command=spec.command,
                checkpoint_interval_s=spec.checkpoint_interval_s, restart_overhead_s=overhead,
                issued_at=utc(now), attempt=task.attempt,
            )  # fmt: skip
            binds.append(command)
            task.binds[command.command_id] = command
            self.bound[command.command_id] = _Bound(
                tid, node, task.attempt, frozenset(p.worker_index for p in placements)
            )
        why = self.runtime.explain(TaskId(tid))
        detail = {
            "attempt": task.attempt,
            "nodes": {n: [list(p.gpu_indices) for p in ps] for n, ps in per_node.items()},
            "preempted": started.preempted,
            "quota_version": self.quota_version,
            "explanation": explanation_dict(why),
        }
        out.decisions.append(Decision(tid, "started", now, detail))
        # Its guarantee periods' timer was armed by the driver's pass.
        previous = self.ending.get(tid)
        own = set() if previous is None else set(previous.commands)
        # Any task placed on GPUs an evicted attempt still holds waits for that eviction's ack,
        # not only the preemptor it was evicted for: the runtime frees a victim's GPUs when it
        # decides the eviction, and the same or a later pass may give the rest of them to
        # another task (found by `gfs livebench races`: a spot task started on a victim's GPUs
        # 0.2 s before the victim stopped).
        occupied, occupied_until = self._occupied(tid, per_node)
        victims = set(victim_commands) | occupied
        if victims or own:
            # Held until the victims answered and, for a task run again, until its previous
            # attempt ended on every node (docs/decisions.md, "per-node order").
            deadline = max(now + self.settings.grace_s + self.settings.ack_margin_s, occupied_until)
            if previous is not None:
                deadline = max(deadline, previous.deadline_s)
            self.pending[tid] = _Pending(tid, binds, victims, deadline, own)
            waiting = [str(c) for c in [*sorted(victims), *sorted(own)]]
            out.decisions.append(
                Decision(tid, "bind_held", now, {"waiting_for": waiting, "deadline_s": deadline})
            )
        else:
            out.commands += binds
        return out

    def _occupied(self, tid: str, per_node: dict[str, list[Placement]]) -> tuple[set[uuid.UUID], float]:
        """The eviction commands (their original ids) of other tasks' attempts still ending on a
        GPU that `per_node` places a worker on, whose node has not acknowledged yet; and the
        latest of those attempts' deadlines. A shared (fractional) GPU counts as occupied too."""
        found: set[uuid.UUID] = set()
        until = -math.inf
        for ending in self.ending.values():
            if ending.task_id == tid:
                continue  # its own previous attempt: the `own` wait
            for command_id, node in ending.commands.items():
                if node in ending.run.acks or node not in per_node:
                    continue
                held = {g for p in ending.placements if p.node == node for g in p.gpu_indices}
                wanted = {g for p in per_node[node] for g in p.gpu_indices}
                if held & wanted:
                    found.add(command_id)
                    until = max(until, ending.deadline_s)
        return found, until

    # ----- views ------------------------------------------------------------------------------------
    def explain(self, task_id: str) -> Explanation:
        return self.runtime.explain(TaskId(task_id))

    def running_and_queued(self) -> dict[str, int]:
        rt = self.runtime
        hp_run = sum(1 for r in rt.state.running.values() if r.spec.task_class is TaskClass.HP)
        return {
            "hp_running": hp_run,
            "spot_running": len(rt.state.running) - hp_run,
            "hp_queued": len(rt.hp.task_ids()),
            "spot_queued": len(rt.spot.task_ids()),
        }

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

The controller is one object built of parts, a class per concept, each in its own module and
importing only the parts below it (an import-linter layers contract in pyproject.toml):
`controller` (this module: the inputs and the pass) <- `controller_acks` (acks bound to their
command) | `controller_reconcile` (what the nodes report) | `controller_binds` (a start becomes
binds, held or sent) <- `controller_endings` (a stopped run's evictions and how it ended) <-
`controller_base` (the state) <- `controller_types` (settings, controls, effects, ids, records).
"""

from __future__ import annotations

import uuid

from schemas.commands import EvictCommand
from schemas.pool_status import PoolStatus
from schemas.quota import SpotQuota
from schemas.tasks import (
    GuaranteeOutcome,
    RejectionReason,
    TaskAccepted,
    TaskRejected,
    TaskSubmitted,
    TaskWithdrawn,
)
from schemas.tasks import TaskClass as WireClass
from services.core import reasons as core_reasons
from services.core.explain import Explanation
from services.core.feasibility import rejection_message
from services.core.guarantee import GUARANTEE_PERIOD_S
from services.core.ids import PoolId, TaskId, TenantId
from services.core.outcomes import Stopped
from services.core.task import TaskClass, TaskSpec
from services.preemption.controller_acks import Acks
from services.preemption.controller_binds import Binds
from services.preemption.controller_reconcile import Reconciliation
from services.preemption.controller_types import (
    _REJECTIONS,
    DEFAULT_CHECKPOINT_S,
    ID_NAMESPACE,
    ControllerSettings,
    Controls,
    Decision,
    Effects,
    _Task,
    command_id,
    id_salt,
    utc,
)
from services.preemption.demand_levels import DemandLevels
from services.preemption.pool_views import pool_status
from services.preemption.reclaim_warnings import ReclaimWarnings
from services.preemption.survival_quote import survival_on_accept
from services.preemption.tenant_budgets import apply_tenant_budgets
from services.preemption.work_conservation import IdleWhileWorkFits

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


class PoolController(Acks, Reconciliation, Binds):
    """One pool: the inputs the shell feeds (nodes, submissions, cancels, quotas, acks, reports,
    controls, ticks) in, `Effects` out (module doc). The parts it is built of are its bases."""

    def __init__(self, pool: str, settings: ControllerSettings | None = None) -> None:
        super().__init__(pool, settings)
        self.warnings = ReclaimWarnings()  # early reclaim warnings (reclaim_warnings.py, issue 27)
        self.demand = DemandLevels()  # the servable demand last published (demand_levels.py)
        self.idle_fit = IdleWhileWorkFits()  # idle GPUs queued work would fit on (work_conservation.py)

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
        quote = None if survival is None else survival.model_dump()  # the dashboard shows it
        detail = {"class": task.task_class.value, "survival": quote}
        out.decisions.append(Decision(tid, "accepted", now, detail))
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
        # The deadlines are the driver's (core/driver/held.py); what the nodes report is ours.
        for ending in [self.ending[t] for t in self.driver.held.endings_due(now)]:
            if self._still_running(ending):
                continue  # its node says the attempt still runs: wait for a real end (reconcile.py)
            phase = ending.run.expire()
            if phase is not None:
                out.extend(self._conclude(ending, phase, now))
        for tid in self.driver.held.due(now, self._eviction_runs):
            out.extend(self._release(tid, now, "grace period passed without every acknowledgement"))
        # An SRE's freeze or override holds the quota: it does not expire meanwhile.
        if self.controls.quota_mode is None and (expired := self.driver.expire_quota(now)) is not None:
            detail = {"frozen_at_gpus": expired.frozen_at_gpus}
            out.decisions.append(Decision("", "quota_expired", now, detail))
        out.extend(self.warnings.check(self, now))
        return out

    # ----- passes and clock ticks -----------------------------------------------------------------

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
        level = self.demand.after_pass(self.pool, self.runtime, self._now(now))
        if level is not None:
            out.events.append(level)
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
        """The pool's status for the quota service (pool_views.pool_status); the idle GPUs queued
        work would fit on are read at the same instant (work_conservation.py)."""
        at = self._now(now)
        self.idle_fit.observe(self.runtime, at)
        return pool_status(self.pool, self.runtime, at, observed_at=now)

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

"""`PoolController`: one pool in the live scheduler, the façade the rest of the preemption service
calls (the package doc says what it does and the rules it keeps).

It is the composition root of the pool's collaborators: it builds each with what it needs and feeds
each input to the one that owns the state the input changes. It owns the task table (`tasks`: the
tasks accepted here, queued or running, lent to the collaborators that change their records), the
SRE controls in force (`controls`), the last controllable-clock tick applied (`clock_sequence`),
the count of outcomes decided (`decided`) and the views kept beside the pool: the reclaim warnings
(reclaim_warnings.py), the servable demand last published (demand_levels.py) and the idle GPUs
queued work would fit on (work_conservation.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from gfs.schemas.commands import EvictAck, EvictCommand
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.quota import SpotQuota
from gfs.schemas.tasks import TaskSubmitted
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.core.driver.held import Held
from gfs.services.core.driver.pool_driver import PoolDriver
from gfs.services.core.explain import Explanation
from gfs.services.core.ids import PoolId, TaskId
from gfs.services.core.outcomes import Stopped
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.pool import PoolState
from gfs.services.core.runtime import PoolRuntime, RuntimeSettings
from gfs.services.core.task import TaskClass
from gfs.services.preemption.controller.acks import AckHandler
from gfs.services.preemption.controller.admission import Admission
from gfs.services.preemption.controller.binds import Binder
from gfs.services.preemption.controller.demand_levels import DemandLevels
from gfs.services.preemption.controller.endings import Endings
from gfs.services.preemption.controller.ids import CommandIds
from gfs.services.preemption.controller.ledger import CommandLedger
from gfs.services.preemption.controller.periods import ran_out
from gfs.services.preemption.controller.pool_views import pool_status
from gfs.services.preemption.controller.quota import PoolQuota
from gfs.services.preemption.controller.reclaim_warnings import ReclaimWarnings
from gfs.services.preemption.controller.reconcile import Reconciler
from gfs.services.preemption.controller.reconcile_rules import NodeReport
from gfs.services.preemption.controller.seen_tasks import SeenTasks
from gfs.services.preemption.controller.settings import ControllerSettings, Controls
from gfs.services.preemption.controller.tenant_budgets import apply_tenant_budgets
from gfs.services.preemption.controller.types import Decision, Effects, _Bound, _Ending, _Eviction, _Task
from gfs.services.preemption.controller.work_conservation import IdleWhileWorkFits


class PoolController:
    """One pool: the inputs the shell feeds (nodes, submissions, cancels, quotas, acks, reports,
    controls, ticks) in, `Effects` out (the package doc). Built of collaborators (module doc)."""

    def __init__(self, pool: str, settings: ControllerSettings | None = None) -> None:
        self.pool = pool
        self.settings = s = settings or ControllerSettings()
        # The driver owns the runtime, the pass trigger (`dirty`), the guarantee-period timers and
        # the quota's expiry, the held starts and ending attempts with their deadlines (`pending`);
        # the collaborators keep the wire: ids, the binds held, acks, attempts.
        self.driver: PoolDriver[uuid.UUID] = PoolDriver(
            PoolRuntime(
                PoolState(PoolId(pool), (), ()),
                build_policy(s.policy),
                RuntimeSettings(t_win_s=s.t_win_s, cost_weight=s.cost_weight),
            )
        )
        self.tasks: dict[str, _Task] = {}
        self.ids = CommandIds(pool)
        self.ledger = CommandLedger(pool)
        self.pool_quota = PoolQuota(self.driver)  # holds a zero quota until the first SpotQuota
        self.binder = Binder(s, self.driver, self.tasks, self.ids, self.ledger, self.pool_quota)
        self.endings = Endings(
            pool, s, self.driver, self.tasks, self.ids, self.ledger, self.binder, self.pool_quota
        )
        self.acks = AckHandler(pool, self.driver, self.tasks, self.ledger, self.endings, self.binder)
        self.reconciler = Reconciler(s, self.driver, self.tasks, self.ids, self.ledger, self.endings)
        self.admission = Admission(pool, s, self.driver, self.tasks, self.endings, self.pool_quota)
        self.controls = Controls()
        self.decided = 0
        self.clock_sequence = -1  # the last controllable-clock tick applied (schemas/clock.py)
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
        """The node's heartbeat stopped: stop and requeue its tasks (the package doc)."""
        out = Effects()
        if name not in self.nodes or name in self.down:
            return out
        self.reconciler.forget(name)
        stops = self.driver.node_down(name, now)
        out.decisions.append(
            Decision("", "node_down", now, {"node": name, "stopped": [s.task_id for s in stops]})
        )
        for stop in stops:
            out.extend(self.endings.stop(stop, now, grace_s=0.0))
        return out

    def node_report(self, node: str, report: NodeReport, now: float) -> Effects:
        """A node's report of the workers it runs (the reconciler's)."""
        self.reconciler.node_report(node, report)
        return Effects()

    # ----- submissions, quotas, acks: the collaborators' ----------------------------------------
    def submit(self, task: TaskSubmitted, now: float, *, duplicate: bool = False) -> Effects:
        return self.admission.submit(task, now, duplicate=duplicate)

    def cancel(self, task_id: str, tenant: str, reason: str, now: float) -> Effects:
        return self.admission.cancel(task_id, tenant, reason, now)

    def quota(self, quota: SpotQuota, now: float) -> Effects:
        """A SpotQuota: applied, or recorded only while an SRE freezes or overrides the quota."""
        return self.pool_quota.receive(quota, now, mode=self.controls.quota_mode)

    def refusal(
        self, ack: EvictAck | WorkerStarted | WorkerExited, source_key: str | None = None
    ) -> str | None:
        """Why `ack` must not be applied (None: it may): the ledger's check (ledger.py)."""
        return self.ledger.refusal(ack, source_key)

    def evict_ack(self, ack: EvictAck, now: float) -> Effects:
        return self.acks.evict_ack(ack, now)

    def worker_started(self, ack: WorkerStarted, now: float) -> Effects:
        return self.acks.worker_started(ack, now)

    def worker_exited(self, ack: WorkerExited, now: float) -> Effects:
        if self.acks.fenced(ack):
            # The node stopped a run nobody asked it to stop: it fenced itself (no heartbeat
            # reached the broker for its fence time, services/node_agent/fence.py), so every run
            # it held is stopped. The node is down from here, as if declared lost, and its next
            # heartbeat brings it back (docs/attempts.md, "No two runs at once").
            out = Effects()
            out.decisions.append(
                Decision(ack.task_id, "node_fenced", now, {"node": ack.node, "detail": ack.detail})
            )
            out.extend(self.node_down(ack.node, now))
            return out
        return self.acks.worker_exited(ack, now)

    # ----- time -----------------------------------------------------------------------------------
    def tick(self, now: float, *, reconcile: bool = False) -> Effects:
        """Timers due at `now`: guarantee periods that closed, held binds past their deadline, an
        expired quota. `reconcile`: the shell's input is current, so lost binds and evictions may
        be issued again and unknown work stopped (reconcile.py); the waits never depend on it.

        1. reconciliation (when asked);
        2. the guarantee periods that ran out;
        3. evicted attempts past grace + margin end first, so a held next attempt is released (or
           dropped, when the run turned out finished) by its own rule rather than by the deadline;
        4. held starts past their deadline go out;
        5. the quota expires (unless an SRE holds it);
        6. reclaim warnings."""
        out = Effects()
        now = self.driver.at(now)
        if reconcile:
            out.extend(self.reconciler.reconcile(now, kill_switch=self.controls.kill_switch))
        for closed in self.driver.advance(now):  # a finished or evicted run's are not due
            tid = str(closed.task_id)
            task = self.tasks.get(tid)
            if task is None:  # cannot happen: every path that forgets a running task stops it
                continue
            out.events.append(ran_out(self.pool, tid, task, closed.run_start, closed.end))
        # The deadlines are the driver's (core/driver/held.py); what the nodes report, the reconciler's.
        out.extend(self.endings.expire(now, self.reconciler.still_running))
        for tid in self.driver.held.due(now, self.reconciler.eviction_runs):
            out.extend(self.binder.release(tid, now, "grace period passed without every acknowledgement"))
        out.extend(self.pool_quota.expire(now, mode=self.controls.quota_mode))
        warnings = self.warnings.check(
            self.pool, self.runtime, self.tasks, self.pending, kill_switch=self.controls.kill_switch,
            last_quota=self.last_quota, now=now,
        )  # fmt: skip
        out.extend(warnings)
        self.ledger.sweep(now, self._in_pool, self.settings.command_keep_s)
        return out

    def _in_pool(self, task_id: str) -> bool:
        """Queued, running or with an attempt still ending: its commands may still be answered."""
        return task_id in self.tasks or task_id in self.endings

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
                effects = self.endings.stop(outcome, now, grace_s=self.settings.grace_s)
                if outcome.preemptor is not None:
                    ids = [c.command_id for c in effects.commands if isinstance(c, EvictCommand)]
                    victims.setdefault(outcome.preemptor, []).extend(ids)
                out.extend(effects)
            else:
                out.extend(self.binder.start(outcome, now, victims.get(outcome.task_id, [])))
        self.decided += len(result.outcomes)
        level = self.demand.after_pass(self.pool, self.runtime, self.driver.at(now))
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
        at = self.driver.at(now)
        self.idle_fit.observe(self.runtime, at)
        return pool_status(self.pool, self.runtime, at, observed_at=now)

    # ----- SRE controls -----------------------------------------------------------------------------
    def control(self, wanted: Controls, now: float, *, audit_id: int | None = None) -> Effects:
        """Put the SRE controls `wanted` in force (the package doc); a `control` decision record."""
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
        out.extend(self.pool_quota.controls_changed(before, wanted, now))
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

    # ----- the collaborators' state, read by the shell, the read side and the tests ---------------
    @property
    def runtime(self) -> PoolRuntime:
        return self.driver.runtime

    @property
    def nodes(self) -> dict[str, int]:
        """The driver's: node name -> the runtime's index."""
        return self.driver.nodes

    @property
    def down(self) -> set[str]:
        return self.driver.down

    @property
    def dirty(self) -> bool:
        """Something a pass could act on changed since the last pass (the driver's pass trigger:
        a task arrived, finished or was cancelled, the quota or the nodes changed). A PASS tick
        runs a pass only then, as the simulator does; wall-clock passes run on every batch."""
        return self.driver.dirty

    @property
    def pending(self) -> dict[TaskId, Held[uuid.UUID]]:
        """The held starts (task -> what it waits for and until when): the driver's."""
        return self.driver.held.held

    @property
    def quota_valid_until(self) -> float | None:
        return self.driver.quota_valid_until

    @property
    def quota_frozen(self) -> bool:
        return self.driver.quota_frozen

    @property
    def quota_version(self) -> str:
        return self.pool_quota.version

    @property
    def last_quota(self) -> SpotQuota | None:
        return self.pool_quota.last

    @property
    def seen(self) -> SeenTasks:
        return self.admission.seen

    @property
    def ending(self) -> Mapping[str, _Ending]:
        return self.endings.ending

    @property
    def evictions(self) -> Mapping[uuid.UUID, _Eviction]:
        return self.ledger.evictions

    @property
    def bound(self) -> Mapping[uuid.UUID, _Bound]:
        return self.ledger.bound

    @property
    def reports(self) -> Mapping[str, NodeReport]:
        return self.reconciler.reports

    @property
    def counter(self) -> int:
        """Command ids drawn so far (ids.py)."""
        return self.ids.counter

    @property
    def id_salt(self) -> str:
        """Set by the shell to the owner's fencing epoch (ids.id_salt)."""
        return self.ids.salt

    @id_salt.setter
    def id_salt(self, salt: str) -> None:
        self.ids.salt = salt

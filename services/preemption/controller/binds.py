"""The binder: a start becomes BindCommands, one per node, held while the GPUs it was given are still
held by an evicted attempt (the preemptor's victims, another task's ending run, or its own previous
run), and sent at once otherwise (the package doc, "held binds").

The driver's held starts decide whether a start waits, for what and until when
(services/core/driver/held.py); the binder owns the BindCommands of the held starts until they go
out (`release`) or are dropped (`drop`).
"""

from __future__ import annotations

import math
import uuid

from gfs.schemas.commands import BindCommand
from gfs.schemas.tasks import Placement
from gfs.services.core.driver.pool_driver import PoolDriver
from gfs.services.core.ids import TaskId
from gfs.services.core.outcomes import Started
from gfs.services.preemption.controller.attempts import Attempt
from gfs.services.preemption.controller.explanations import explanation_dict
from gfs.services.preemption.controller.ids import CommandIds
from gfs.services.preemption.controller.ledger import CommandLedger
from gfs.services.preemption.controller.quota import PoolQuota
from gfs.services.preemption.controller.settings import ControllerSettings
from gfs.services.preemption.controller.types import Decision, Effects, _Bound, _Task, utc


class Binder:
    """Owns `held`: task -> the BindCommands of its held start. Reads and updates the task's record
    in the pool's task table (`tasks`: its attempt, binds and run), records every bind in the
    ledger, and draws command ids from the pool's id source."""

    def __init__(
        self,
        settings: ControllerSettings,
        driver: PoolDriver[uuid.UUID],
        tasks: dict[str, _Task],
        ids: CommandIds,
        ledger: CommandLedger,
        quota: PoolQuota,
    ) -> None:
        self.settings = settings
        self.driver = driver
        self.tasks = tasks
        self.ids = ids
        self.ledger = ledger
        self.quota = quota  # its version names the start decisions
        self.held: dict[str, list[BindCommand]] = {}

    def start(self, started: Started, now: float, victim_commands: list[uuid.UUID]) -> Effects:
        """The runtime started a task: its next attempt's binds, held or sent (module doc)."""
        out = Effects()
        runtime = self.driver.runtime
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
            node = runtime.state.node_names[binding.node]
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
        core_spec = runtime.state.running[TaskId(tid)].spec
        overhead = core_spec.restart_overhead_s if started.preempted or task.evicted else None
        binds = []
        for node, placements in per_node.items():
            command = BindCommand(
                command_id=self.ids.next(), node=node, task_id=tid, task_class=spec.task_class,
                placements=tuple(placements), command=spec.command,
                checkpoint_interval_s=spec.checkpoint_interval_s, restart_overhead_s=overhead,
                issued_at=utc(now), attempt=task.attempt,
            )  # fmt: skip
            binds.append(command)
            task.binds[command.command_id] = command
            self.ledger.bind_issued(
                command.command_id,
                _Bound(tid, node, task.attempt, frozenset(p.worker_index for p in placements)),
            )
        why = runtime.explain(TaskId(tid))
        detail = {
            "attempt": task.attempt,
            "nodes": {n: [list(p.gpu_indices) for p in ps] for n, ps in per_node.items()},
            "preempted": started.preempted,
            "quota_version": self.quota.version,
            "explanation": explanation_dict(why),
        }
        out.decisions.append(Decision(tid, "started", now, detail))
        # Its guarantee periods' timer was armed by the driver's pass. Any task placed on GPUs an
        # evicted attempt still holds waits for that eviction's ack, not only the preemptor it
        # was evicted for: the runtime frees a victim's GPUs when it decides the eviction, and the
        # same or a later pass may give the rest of them to another task (found by `gfs livebench
        # races`: a spot task started on a victim's GPUs 0.2 s before the victim stopped). A task
        # run again waits for its previous attempt to end on every node (docs/decisions.md,
        # "per-node order"). The driver's held starts apply those rules (core/driver/held.py).
        gpus = {n: frozenset(g for p in ps for g in p.gpu_indices) for n, ps in per_node.items()}
        held = self.driver.held.place(
            TaskId(tid), gpus, victim_commands, now=now, grace_s=self.settings.grace_s,
            margin_s=self.settings.ack_margin_s,
        )  # fmt: skip
        if held is not None:
            self.held[tid] = binds
            waiting = [str(c) for c in [*sorted(held.waiting), *sorted(held.own)]]
            detail = {"waiting_for": waiting, "deadline_s": held.deadline}
            out.decisions.append(Decision(tid, "bind_held", now, detail))
        else:
            out.commands += binds
        return out

    def release(self, tid: str, now: float, why: str) -> Effects:
        """The driver released the task's held start: its binds go out."""
        out = Effects()
        # Re-issued now: the agent checks freshness against issued_at, and the signature covers it.
        for bind in self.held.pop(tid):
            fresh = bind.model_copy(update={"issued_at": utc(now)})
            self.tasks[tid].binds[bind.command_id] = fresh
            out.commands.append(fresh)
        out.decisions.append(Decision(tid, "bound", now, {"why": why}))
        return out

    def drop(self, tid: str) -> None:
        """The task's held start, if any, will not go out: forgotten here and by the driver."""
        self.driver.held.drop(TaskId(tid))
        self.held.pop(tid, None)

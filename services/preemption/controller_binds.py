"""A start becomes BindCommands, one per node, held while the GPUs it was given are still held by
an evicted attempt (the preemptor's victims, another task's ending run, or its own previous run),
and sent at once otherwise (controller.py's module doc, "held binds").

Part of the pool controller (controller.py): a class over the endings (controller_endings.py).
"""

from __future__ import annotations

import math
import uuid

from schemas.commands import BindCommand
from schemas.tasks import (
    Placement,
)
from services.core.ids import TaskId
from services.core.outcomes import Started
from services.preemption.attempts import Attempt
from services.preemption.controller_endings import Endings
from services.preemption.controller_types import (
    Decision,
    Effects,
    _Bound,
    _Pending,
    utc,
)
from services.preemption.explanations import explanation_dict


class Binds(Endings):
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

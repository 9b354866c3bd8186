"""`gfs simulate --decisions OUT.jsonl`: every applied decision, in order, one JSON object a line.

The reference side of the sim/live parity test: the live preemption service drives the same core
runtime and must log the same lines for the same inputs. Each line has the policy, the simulated
time, the pool, the pool's pass number, the task and the action:
- `start` / `renew` (a lease renewed): the placements, each a node name with its GPU indices, or a
  node, one shared GPU index and the fraction; `preempted` and, for a preempting HP task, the victims;
- `evict` / `stop`: the node (null for a lease stop), the reason code and message, the preemptor;
- `cancel` (a trace's cancel_time; no pass number, written when it happens, so before the lines of
  the pass at that instant): the node the task ran on (its first worker's), null if it was queued.
  A task already finished at its cancel time writes nothing.
"""

from __future__ import annotations

import json
from typing import IO, TYPE_CHECKING, Any

from gfs.services.core.ids import TaskId
from gfs.services.core.runtime import PassResult, PoolRuntime, Started, Stopped

if TYPE_CHECKING:
    from gfs.services.simulator.engine import Simulation


def started_line(rt: PoolRuntime, o: Started) -> dict[str, Any]:
    names = rt.state.node_names
    placements: list[dict[str, Any]] = []
    for b in o.devices:
        if b.slot >= 0:
            placements.append({"node": names[b.node], "gpu": b.devices[0], "fraction": b.fraction})
        else:
            placements.append({"node": names[b.node], "gpus": list(b.devices)})
    line: dict[str, Any] = {"action": "renew" if o.renewed else "start", "placements": placements}
    if o.preempted:
        line["preempted"] = True
    return line


def stopped_line(rt: PoolRuntime, o: Stopped) -> dict[str, Any]:
    return {
        "action": "evict" if o.preemptor is not None else "stop",
        "node": rt.state.node_names[o.node] if o.node >= 0 else None,
        "reason": o.reason.name,
        "message": o.reason.message,
        "preemptor": o.preemptor,
    }


class DecisionLog:
    """A decision sink for `Simulation` writing JSON lines to an open text stream."""

    def __init__(self, out: IO[str], policy: str) -> None:
        self.out = out
        self.policy = policy
        self.lines = 0

    def __call__(self, sim: Simulation, rt: PoolRuntime, result: PassResult) -> None:
        victims: dict[str, list[str]] = {}
        for o in result.outcomes:
            if isinstance(o, Stopped) and o.preemptor is not None:
                victims.setdefault(o.preemptor, []).append(o.task_id)
        for o in result.outcomes:
            head = {"policy": self.policy, "t": result.at_s, "pool": rt.state.pool, "pass": result.number}
            if isinstance(o, Started):
                body = started_line(rt, o)
                if o.task_id in victims:
                    body["victims"] = victims[o.task_id]
            else:
                body = stopped_line(rt, o)
            self.out.write(json.dumps({**head, "task": o.task_id, **body}, separators=(",", ":")) + "\n")
            self.lines += 1

    def cancelled(self, sim: Simulation, rt: PoolRuntime, task_id: TaskId, node: str | None) -> None:
        """The engine's cancel sink: one `cancel` line."""
        line = {
            "policy": self.policy,
            "t": sim.now,
            "pool": rt.state.pool,
            "task": task_id,
            "action": "cancel",
            "node": node,
        }
        self.out.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.lines += 1

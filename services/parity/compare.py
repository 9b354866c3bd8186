"""Decision logs in one canonical form, from the simulator and from the live service, and their diff.

The simulator writes JSON lines (`gfs simulate --decisions`, services/simulator/decision_log.py);
the live preemption service records decisions in Postgres (`preemption_decision`). Both are
reduced to `Line`s that keep what the parity promise covers: when (seconds since the trace's
start), which pool, what (start, evict, cancel), which task, where (per node, the GPU indices its
workers got; fractional workers name their shared GPU) and, for an eviction, the preemptor (the
preempting task's victims are exactly the evictions naming it).

Two representational differences are folded away, not hidden:
- the live service sends an eviction to every node holding one of the victim's workers and
  records one decision per node; the simulator logs one line per victim. An eviction is therefore
  compared by (task, preemptor), and the nodes it freed show in the preemptor's start line;
- a live cancel is `withdrawn` (it was queued) or `evicted` with reason CANCELLED (it was
  running); the simulator logs `cancel` with the node, or null when it was queued.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True, order=True)
class Line:
    t: float
    pool: str
    index: int  # order within the pool's log (ties at one instant keep their order)
    action: str  # start, evict, cancel
    task: str
    where: tuple[tuple[str, tuple[int, ...]], ...] = ()  # start: (node, GPU indices) per node
    preemptor: str | None = None  # evict: the HP task it made room for
    running: bool | None = None  # cancel: it was running (True) or queued (False)

    def key(self) -> tuple[Any, ...]:
        """What must be equal: everything but the per-pool index."""
        return (self.t, self.pool, self.action, self.task, self.where, self.preemptor, self.running)

    def describe(self) -> str:
        if self.action == "start":
            where = ", ".join(f"{n}:{list(g)}" for n, g in self.where)
            return f"t={self.t:g} {self.pool} start {self.task} on {where}"
        if self.action == "evict":
            return f"t={self.t:g} {self.pool} evict {self.task} for {self.preemptor}"
        return f"t={self.t:g} {self.pool} cancel {self.task} ({'running' if self.running else 'queued'})"


def _merge(per_node: Iterable[tuple[str, Sequence[int]]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    merged: dict[str, list[int]] = {}
    for node, gpus in per_node:
        merged.setdefault(node, []).extend(int(g) for g in gpus)
    return tuple((n, tuple(sorted(g))) for n, g in sorted(merged.items()))


def sim_lines(path: Path) -> list[Line]:
    """The simulator's decision log (JSON lines) as canonical lines."""
    out: list[Line] = []
    counters: dict[str, int] = {}
    for raw in path.read_text().splitlines():
        if not raw.strip():
            continue
        d = json.loads(raw)
        pool = str(d["pool"])
        index = counters[pool] = counters.get(pool, -1) + 1
        head = (float(d["t"]), pool, index)
        action = d["action"]
        if action in ("start", "renew"):
            nodes = [(p["node"], p["gpus"] if "gpus" in p else [p["gpu"]]) for p in d["placements"]]
            out.append(Line(*head, "start", str(d["task"]), _merge(nodes)))
        elif action == "evict":
            out.append(Line(*head, "evict", str(d["task"]), preemptor=d.get("preemptor")))
        elif action == "cancel":
            out.append(Line(*head, "cancel", str(d["task"]), running=d.get("node") is not None))
        # "stop" (a lease not renewed) does not occur for the live service's policies
    return out


def live_lines(
    rows: Iterable[Mapping[str, Any]], *, base_s: float, tasks: Mapping[str, str], nodes: Mapping[str, str],
    pools: Mapping[str, str],
) -> list[Line]:  # fmt: skip
    """Postgres decision rows (in id order: pool, task_id, kind, at (epoch s), detail) as canonical
    lines; `tasks`, `nodes` and `pools` map the run's live names back to the trace's."""
    out: list[Line] = []
    counters: dict[str, int] = {}
    evicted: set[tuple[float, str]] = set()

    def add(t: float, pool: str, action: str, task: str, **more: Any) -> None:
        index = counters[pool] = counters.get(pool, -1) + 1
        out.append(Line(t, pool, index, action, task, **more))

    for row in rows:
        kind, detail = row["kind"], row["detail"]
        live_task = str(row["task_id"])
        if live_task not in tasks:
            continue
        task, pool, t = tasks[live_task], pools[str(row["pool"])], float(row["at"]) - base_s
        if kind == "started":
            placed = [
                (nodes[n], [g for worker in gpus for g in worker]) for n, gpus in detail["nodes"].items()
            ]
            add(t, pool, "start", task, where=_merge(placed))
        elif kind == "evicted" and (t, task) not in evicted:
            evicted.add((t, task))  # one record per node of the victim: one line per victim
            if detail.get("reason") == "CANCELLED":
                add(t, pool, "cancel", task, running=True)
            else:
                preemptor = detail.get("preemptor")
                add(t, pool, "evict", task, preemptor=tasks.get(preemptor, preemptor) if preemptor else None)
        elif kind == "withdrawn":
            add(t, pool, "cancel", task, running=False)
    return out


@dataclass(frozen=True, slots=True)
class Diff:
    sim: int
    live: int
    first_difference: int | None  # index in the merged order; None: identical
    sim_line: Line | None
    live_line: Line | None
    actions: Mapping[str, int]  # counts in the simulator's log

    @property
    def identical(self) -> bool:
        return self.first_difference is None

    def describe(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.actions.items()))
        if self.identical:
            return f"identical: {self.sim} decisions ({counts})"
        where = f"first difference at decision {self.first_difference}"
        left = self.sim_line.describe() if self.sim_line else "(nothing)"
        right = self.live_line.describe() if self.live_line else "(nothing)"
        head = f"DIFFERENT ({self.sim} simulated, {self.live} live; {counts}); {where}:"
        return f"{head}\n  sim:  {left}\n  live: {right}"


def compare(sim: Sequence[Line], live: Sequence[Line]) -> Diff:
    """Both logs in the order (time, pool, order within the pool), compared line by line."""
    a, b = sorted(sim), sorted(live)
    actions: dict[str, int] = {}
    for line in a:
        actions[line.action] = actions.get(line.action, 0) + 1
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x is None or y is None or x.key() != y.key():
            return Diff(len(a), len(b), i, x, y, actions)
    return Diff(len(a), len(b), None, None, None, actions)

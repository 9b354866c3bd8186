"""The canonical decision lines: the simulator's JSON lines and the live decision rows of the same
decisions compare equal; one GPU index or one victim off is the first difference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gfs.services.parity.compare import compare, live_lines, sim_lines

BASE = 1_000_000.0
TASKS = {"h1-r": "h1", "s1-r": "s1", "s2-r": "s2", "f1-r": "f1", "q1-r": "q1"}
NODES = {"n0-r": "n0", "n1-r": "n1"}
POOLS = {"A-r": "A"}


def _sim(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "sim.jsonl"
    path.write_text("".join(json.dumps({"policy": "gfs", "pool": "A", "pass": 1, **d}) + "\n" for d in lines))
    return path


SIM = [
    # s1 is a gang on both nodes; f1 two fractional workers sharing GPU 3 of n1.
    {"t": 0.0, "task": "s1", "action": "start",
     "placements": [{"node": "n0", "gpus": [0, 1]}, {"node": "n1", "gpus": [2]}]},
    {"t": 0.0, "task": "f1", "action": "start", "placements": [
        {"node": "n1", "gpu": 3, "fraction": 0.5}, {"node": "n1", "gpu": 3, "fraction": 0.5}]},
    {"t": 60.0, "task": "q1", "action": "cancel", "node": None},
    {"t": 80.0, "task": "s1", "action": "evict", "node": "n0", "reason": "PREEMPTED_BY_HP", "message": "",
     "preemptor": "h1"},
    {"t": 80.0, "task": "h1", "action": "start", "placements": [{"node": "n0", "gpus": [0, 1]}],
     "preempted": True, "victims": ["s1"]},
    {"t": 100.0, "task": "s2", "action": "cancel", "node": "n1"},
]  # fmt: skip


def _row(kind: str, task: str, t: float, **detail: Any) -> dict[str, Any]:
    return {"pool": "A-r", "task_id": task, "kind": kind, "at": BASE + t, "detail": detail}


LIVE = [
    _row("accepted", "s1-r", 0.0),
    _row("started", "s1-r", 0.0, nodes={"n0-r": [[0, 1]], "n1-r": [[2]]}),
    _row("started", "f1-r", 0.0, nodes={"n1-r": [[3], [3]]}),
    _row("withdrawn", "q1-r", 60.0, reason="trace cancellation"),
    # A victim with workers on two nodes: one eviction record per node, one line.
    _row("evicted", "s1-r", 80.0, reason="PREEMPTED_BY_HP", node="n0-r", preemptor="h1-r"),
    _row("evicted", "s1-r", 80.0, reason="PREEMPTED_BY_HP", node="n1-r", preemptor="h1-r"),
    _row("started", "h1-r", 80.0, nodes={"n0-r": [[0, 1]]}),
    _row("bind_held", "h1-r", 80.0),
    _row("evicted", "s2-r", 100.0, reason="CANCELLED", node="n1-r", preemptor=None),
    _row("node_joined", "", 0.0),
]


def _live(rows: list[dict[str, Any]]) -> Any:
    return live_lines(rows, base_s=BASE, tasks=TASKS, nodes=NODES, pools=POOLS)


def test_the_same_decisions_compare_identical(tmp_path: Path) -> None:
    diff = compare(sim_lines(_sim(tmp_path, SIM)), _live(LIVE))
    assert diff.identical, diff.describe()
    assert (diff.sim, diff.live) == (6, 6)
    assert dict(diff.actions) == {"start": 3, "evict": 1, "cancel": 2}


def test_one_gpu_index_off_is_the_first_difference(tmp_path: Path) -> None:
    live = [dict(r) for r in LIVE]
    live[6] = _row("started", "h1-r", 80.0, nodes={"n0-r": [[0, 2]]})
    diff = compare(sim_lines(_sim(tmp_path, SIM)), _live(live))
    assert not diff.identical
    # Sorted by (t, pool, order in the pool): s1, f1, q1, s1 evicted, h1 started.
    assert diff.first_difference == 4
    assert diff.sim_line is not None and diff.sim_line.where == (("n0", (0, 1)),)
    assert diff.live_line is not None and diff.live_line.where == (("n0", (0, 2)),)


def test_a_different_preemptor_or_a_missing_cancel_differs(tmp_path: Path) -> None:
    live = [dict(r) for r in LIVE]
    live[4] = _row("evicted", "s1-r", 80.0, reason="PREEMPTED_BY_HP", node="n0-r", preemptor="s2-r")
    live[5] = _row("evicted", "s1-r", 80.0, reason="PREEMPTED_BY_HP", node="n1-r", preemptor="s2-r")
    assert compare(sim_lines(_sim(tmp_path, SIM)), _live(live)).first_difference == 3
    shorter = compare(sim_lines(_sim(tmp_path, SIM)), _live(LIVE[:-2]))
    assert shorter.first_difference == 5 and shorter.live_line is None

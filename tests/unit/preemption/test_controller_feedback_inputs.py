"""Issue 22 item 10, rule (b) in the live services: only an eviction to make room for an HP task
is a failed guarantee period, both in the quota service's book (fed the controller's
GuaranteePeriodClosed events: eta's feedback) and in the controller's runtime ledger (the node
cost's F_v). Not failures: a lost node, a cancel, a worker's own non-zero exit, an eviction that
met a run which had already exited (a finish: its period succeeded).

World: test_controller's `_spot_world` (two 2-GPU nodes; spot A on n0 since t=1, spot B on n1
since t=1001, both 2 GPUs, quota 4). Each row stops B around t=2000 (B ran 999 s: no period
completed); A keeps running and closes nothing before t=3601.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from test_controller import T0, World, _one, _spot_world, _task
from test_controller_attempts import _ack, _exit

from gfs.schemas.commands import BindCommand, EvictCommand, EvictOutcome
from gfs.schemas.tasks import GuaranteePeriodClosed, TaskCancelled, TaskClass
from gfs.services.preemption.controller.types import Effects
from gfs.services.quota.book import PoolBook


def _evict_b(w: World) -> EvictCommand:
    evict = _one(w.event(_task("H", TaskClass.HP), 2000).commands, EvictCommand)
    assert isinstance(evict, EvictCommand) and evict.task_ids == ("B",)
    return evict


def _preempted(w: World, bind_b: BindCommand) -> list[Effects]:
    evict = _evict_b(w)
    return [
        w.event(_ack(evict, EvictOutcome.KILLED, 2001), 2001),
        w.event(_exit(bind_b, 143, 2001, evicted=True), 2001),
    ]


def _evicted_after_exit(w: World, bind_b: BindCommand) -> list[Effects]:
    evict = _evict_b(w)
    # B's worker had exited 0 at 1999; the agent answers NOT_RUNNING, then the exit is read.
    return [w.event(_ack(evict, EvictOutcome.NOT_RUNNING, 2002), 2002), w.event(_exit(bind_b, 0, 1999), 2003)]


def _node_lost(w: World, bind_b: BindCommand) -> list[Effects]:
    return [w.feed(("node_down", {"node": "n1"}, T0 + 2000))]


def _cancelled(w: World, bind_b: BindCommand) -> list[Effects]:
    evict = _one(w.event(TaskCancelled(task_id="B", tenant="org-a"), 2000).commands, EvictCommand)
    assert isinstance(evict, EvictCommand)
    return [w.event(_ack(evict, EvictOutcome.KILLED, 2001), 2001)]


def _own_non_zero_exit(w: World, bind_b: BindCommand) -> list[Effects]:
    return [w.event(_exit(bind_b, 3, 2000), 2000)]


@dataclass(frozen=True)
class Row:
    id: str
    stop: Callable[[World, BindCommand], list[Effects]]
    failed: int  # in the book's window and in the runtime's ledger
    succeeded: int


ROWS = [
    Row("preempted-by-hp", _preempted, 1, 0),
    # The run finished on its own (docs/attempts.md): no period fails, and its first period is a
    # success, as any finish's (the row below).
    Row("evicted-after-it-exited", _evicted_after_exit, 0, 1),
    Row("node-lost", _node_lost, 0, 0),
    Row("cancelled", _cancelled, 0, 0),
    # A finish: one success for the partial first period (spec 4.2), exit code 3 or not.
    Row("own-non-zero-exit", _own_non_zero_exit, 0, 1),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_only_an_eviction_for_hp_is_a_failed_period_live(row: Row) -> None:
    w, _, bind_b = _spot_world()
    book = PoolBook("A100")
    for effects in row.stop(w, bind_b):
        for e in effects.events:
            if isinstance(e, GuaranteePeriodClosed):
                ok = e.outcome.value == "SUCCEEDED"
                book.record_outcome(e.task_id, e.period_start.timestamp(), e.period_end.timestamp(), ok)
    assert book.recent(T0 + 2010) == (row.failed, row.succeeded)
    ledger = w.c.runtime.ledger  # what the node cost of the next preemption reads
    assert (ledger.failed_total, ledger.succeeded_total) == (row.failed, row.succeeded)

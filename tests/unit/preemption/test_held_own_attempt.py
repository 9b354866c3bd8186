"""A held start waiting for its task's own previous attempt (`own`, services/core/driver/held.py)
is not released by its deadline while a node still reports that attempt running: an agent never
holds two runs of one task, so the next run's bind would meet the previous run still on its node.

Hand-worked on the `_evicted_b` world of test_controller_attempts (A on n0 since t=1, B on n1
since t=1001, both 2 GPUs; H, HP, evicts B at t=2000; grace 30 s, margin 10 s)."""

from __future__ import annotations

from test_controller import T0, World, _one
from test_controller_attempts import _ack, _evicted_b, _exit

from gfs.schemas.commands import BindCommand, EvictOutcome


def _report(w: World, node: str, t: float, *running: tuple[str, int, int]) -> None:
    w.feed(
        ("node_report", {"node": node, "sampled_at": T0 + t, "running": [list(r) for r in running]}, T0 + t)
    )


def _binds(out: object, task_id: str) -> list[BindCommand]:
    return [c for c in out.commands if isinstance(c, BindCommand) and c.task_id == task_id]  # type: ignore[attr-defined]


def test_a_start_held_for_its_own_attempt_waits_while_the_node_still_reports_that_attempt() -> None:
    w, bind_a, _, evict = _evicted_b()
    w.event(_exit(bind_a, 0, 2001), 2001)  # A finishes: B's attempt 2 placed on n0, held for attempt 1
    held = w.c.driver.held.held["B"]  # type: ignore[index]
    assert held.own == {evict.command_id} and not held.waiting
    # B's ending is due at 2000 + 30 + 10 = 2040; its held start at max(2001 + 40, 2040) = 2041.
    assert held.deadline == T0 + 2041
    _report(w, "n1", 2039, ("B", 1, 0))  # n1 still runs B's attempt 1
    out = w.feed(("tick", {}, T0 + 2041))
    assert not _binds(out, "B")  # attempt 2 would run beside attempt 1
    assert "B" in w.c.pending
    # The node's next report no longer lists attempt 1: the deadline releases attempt 2 then.
    _report(w, "n1", 2045)
    out = w.feed(("tick", {}, T0 + 2046))
    bind = _one(_binds(out, "B"), BindCommand)  # type: ignore[arg-type]
    assert isinstance(bind, BindCommand) and bind.node == "n0" and bind.attempt == 2


def test_the_own_attempts_ack_still_releases_the_held_start_at_once() -> None:
    w, bind_a, _, evict = _evicted_b()
    w.event(_exit(bind_a, 0, 2001), 2001)
    _report(w, "n1", 2039, ("B", 1, 0))
    assert not _binds(w.feed(("tick", {}, T0 + 2041)), "B")
    out = w.event(_ack(evict, EvictOutcome.KILLED, 2042), 2042)  # attempt 1 ended: attempt 2 goes
    bind = _one(_binds(out, "B"), BindCommand)  # type: ignore[arg-type]
    assert isinstance(bind, BindCommand) and bind.attempt == 2

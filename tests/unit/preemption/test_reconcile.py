"""Reconciliation (issue 22 item 7, services/preemption/controller/reconcile_rules.py): hand-worked scenarios.

The world of test_controller: n0 and n1 with 2 GPUs each, A on n0 since t=1, B on n1 since
t=1001; grace 30 s, margin 10 s; defaults bind_start_timeout_s=120, unknown_after_s=60."""

from __future__ import annotations

from test_controller import T0, World, _at, _one, _quota, _spot_world, _task

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.tasks import EvictionReason, TaskClass, TaskEvicted, TaskStarted
from gfs.schemas.workers import WorkerStarted
from gfs.services.preemption.controller.reconcile_rules import (
    NodeReport,
    UnknownWork,
    bind_lost,
    worth_journaling,
)
from gfs.services.preemption.controller.settings import Controls


def _report(w: World, node: str, t: float, *running: tuple[str, int, int]) -> None:
    w.feed(
        ("node_report", {"node": node, "sampled_at": T0 + t, "running": [list(r) for r in running]}, T0 + t)
    )


def _tick(w: World, t: float, *, reconcile: bool = True) -> list[object]:
    out = w.feed(("tick", {"reconcile": reconcile}, T0 + t))
    return list(out.commands) + list(out.events)


# ----- the pure helpers --------------------------------------------------------------------------
def test_reports_are_journaled_when_new_or_every_interval() -> None:
    a = NodeReport(100.0, frozenset({("T", 1, 0)}))
    assert worth_journaling(None, a, 60)
    assert not worth_journaling(a, NodeReport(159.0, a.running), 60)  # same, 59 s later
    assert worth_journaling(a, NodeReport(160.0, a.running), 60)  # same, 60 s later
    assert worth_journaling(a, NodeReport(101.0, frozenset()), 60)  # changed
    assert not worth_journaling(a, NodeReport(99.0, frozenset()), 60)  # older than the last


def test_a_bind_is_lost_only_after_the_timeout_and_a_report_since_it_without_its_workers() -> None:
    empty = NodeReport(50.0, frozenset())
    args = {"issued_at": 10.0, "timeout_s": 120.0, "task_id": "T", "attempt": 1, "workers": [0]}
    assert not bind_lost(now=129.0, report=empty, **args)  # type: ignore[arg-type]  # 119 s
    assert bind_lost(now=130.0, report=empty, **args)  # type: ignore[arg-type]
    assert not bind_lost(now=130.0, report=None, **args)  # type: ignore[arg-type]  # no report
    assert not bind_lost(now=130.0, report=NodeReport(10.0, frozenset()), **args)  # type: ignore[arg-type]
    listed = NodeReport(50.0, frozenset({("T", 1, 0)}))
    assert not bind_lost(now=130.0, report=listed, **args)  # type: ignore[arg-type]


def test_unknown_work_is_due_after_being_reported_that_long_and_again_if_it_stays() -> None:
    u = UnknownWork(after_s=60.0)
    known = {("K", 1)}

    def holds(task: str, attempt: int) -> bool:
        return (task, attempt) in known

    r = NodeReport(100.0, frozenset({("X", 2, 0), ("K", 1, 0)}))
    u.observe("n", r, holds)
    assert u.due("n", r) == []
    r2 = NodeReport(160.0, r.running)
    u.observe("n", r2, holds)
    assert u.due("n", r2) == [("X", 2)]  # K is held: never unknown
    u.mark_stopped("n", "X", 2, 160.0)
    r3 = NodeReport(219.0, r.running)
    u.observe("n", r3, holds)
    assert u.due("n", r3) == []  # stopped 59 s ago
    r4 = NodeReport(220.0, r.running)
    u.observe("n", r4, holds)
    assert u.due("n", r4) == [("X", 2)]  # still there 60 s after the stop: stopped again
    u.observe("n", NodeReport(230.0, frozenset()), holds)
    assert u.since == {} and u.stopped == {}


# ----- a stale bind ------------------------------------------------------------------------------
def _bound_c() -> tuple[World, BindCommand]:
    w = World()
    w.node("n0", 2, 0)
    w.event(_quota(4.0), 0)
    bind = _one(w.event(_task("C", TaskClass.SPOT), 10).commands, BindCommand)
    assert isinstance(bind, BindCommand) and bind.attempt == 1
    return w, bind


def test_a_bind_the_agent_refused_is_issued_again_with_a_new_id_after_the_timeout() -> None:
    w, bind = _bound_c()
    _report(w, "n0", 20)  # the agent runs nothing (it refused the bind as stale)
    assert _tick(w, 129) == []  # 119 s after the bind
    assert _tick(w, 130, reconcile=False) == []  # the input lags: nothing acts
    again = _tick(w, 130)
    assert len(again) == 1 and isinstance(again[0], BindCommand)
    fresh = again[0]
    assert fresh.command_id != bind.command_id and fresh.issued_at == _at(130)
    assert (fresh.task_id, fresh.node, fresh.attempt, fresh.placements) == ("C", "n0", 1, bind.placements)
    assert _tick(w, 131) == []  # not again before another timeout
    started = WorkerStarted(command_id=fresh.command_id, node="n0", task_id="C", worker_index=0, pid=7,
                            started_at=_at(132), attempt=1)  # fmt: skip
    assert w.c.refusal(started) is None
    assert isinstance(_one(w.event(started, 132).events, TaskStarted), TaskStarted)
    assert _tick(w, 400) == []


def test_no_bind_is_issued_again_for_a_node_that_does_not_report_or_lists_the_worker() -> None:
    w, _ = _bound_c()
    assert _tick(w, 500) == []  # an older agent: no report, no reconciliation
    _report(w, "n0", 20, ("C", 1, 0))  # it runs; only its WorkerStarted is late
    assert _tick(w, 500) == []


# ----- a stale eviction --------------------------------------------------------------------------
def test_an_eviction_refused_as_stale_is_issued_again_and_the_hp_bind_waits_for_a_real_end() -> None:
    w, _, bind_b = _spot_world()
    _report(w, "n0", 1500, ("A", 1, 0))
    _report(w, "n1", 1500, ("B", 1, 0))
    out = w.event(_task("H", TaskClass.HP), 2000)
    evict = _one(out.commands, EvictCommand)
    assert isinstance(evict, EvictCommand) and evict.task_ids == ("B",)
    _report(w, "n1", 2039, ("B", 1, 0))  # no ack; B still runs on n1
    assert _tick(w, 2039) == []  # grace + margin not passed yet
    again = _tick(w, 2040)
    assert len(again) == 1 and isinstance(again[0], EvictCommand)  # and no BindCommand for H
    fresh = again[0]
    assert fresh.command_id != evict.command_id and fresh.issued_at == _at(2040)
    assert (fresh.node, fresh.task_ids, fresh.attempt, fresh.preemptor_task_id) == ("n1", ("B",), 1, "H")
    assert (fresh.reason, fresh.grace_seconds) == (EvictionReason.PREEMPTED_BY_HP, 30.0)
    assert _tick(w, 2079) == []  # the re-issued command's own grace + margin
    assert [type(c) for c in _tick(w, 2080, reconcile=False)] == []  # lagging: waits, sends nothing
    # The agent answers the re-issued command: H goes, B's eviction is reported once.
    ack = EvictAck(command_id=fresh.command_id, node="n1", task_ids=("B",), outcome=EvictOutcome.KILLED,
                   acked_at=_at(2085), attempt=1)  # fmt: skip
    assert w.c.refusal(ack, "n1") is None
    out = w.event(ack, 2085)
    bind_h = _one(out.commands, BindCommand)
    assert isinstance(bind_h, BindCommand) and bind_h.task_id == "H" and bind_h.node == "n1"
    evicted = _one(out.events, TaskEvicted)
    assert isinstance(evicted, TaskEvicted) and evicted.command_id == evict.command_id
    assert bind_b.node == "n1"


def test_a_report_without_the_victim_ends_the_wait_at_the_deadline() -> None:
    w, _, _ = _spot_world()
    _report(w, "n1", 1500, ("B", 1, 0))
    w.event(_task("H", TaskClass.HP), 2000)
    _report(w, "n1", 2035)  # the agent killed B; its ack was lost
    out = _tick(w, 2040)
    assert [type(c).__name__ for c in out if isinstance(c, BindCommand | EvictCommand)] == ["BindCommand"]
    assert isinstance(_one(out, TaskEvicted), TaskEvicted)


def test_the_kill_switch_stops_re_issued_evictions_and_the_hp_bind_keeps_waiting() -> None:
    w, _, _ = _spot_world()
    _report(w, "n1", 1500, ("B", 1, 0))
    w.event(_task("H", TaskClass.HP), 2000)
    w.feed(("control", {"controls": Controls(kill_switch=True).as_dict()}, T0 + 2001))
    assert [c for c in _tick(w, 2100) if isinstance(c, BindCommand | EvictCommand)] == []


# ----- unknown work ------------------------------------------------------------------------------
def test_a_node_back_from_a_long_partition_is_told_to_stop_the_attempt_rerun_elsewhere() -> None:
    w, _, _ = _spot_world()
    _report(w, "n1", 1500, ("B", 1, 0))
    w.feed(("node_down", {"node": "n1"}, T0 + 1600))  # B's attempt 1 ended (NODE_LOST)
    w.node("n2", 2, 1700)
    out = w.feed(("schedule", {}, T0 + 1700))
    rebind = _one(out.commands, BindCommand)
    assert isinstance(rebind, BindCommand) and (rebind.node, rebind.attempt) == ("n2", 2)
    w.started(rebind, 1701)
    # n1 comes back long after: its agent refused the stale NODE_LOST eviction and still runs B/1.
    w.node("n1", 2, 2000)
    _report(w, "n1", 2001, ("B", 1, 0))
    assert _tick(w, 2002) == []
    _report(w, "n1", 2060, ("B", 1, 0))
    assert _tick(w, 2060) == []  # reported unknown for 59 s
    _report(w, "n1", 2061, ("B", 1, 0))
    stop = _tick(w, 2061)
    assert len(stop) == 1 and isinstance(stop[0], EvictCommand)
    assert (stop[0].node, stop[0].task_ids, stop[0].attempt, stop[0].grace_seconds) == ("n1", ("B",), 1, 0.0)
    ack = EvictAck(command_id=stop[0].command_id, node="n1", task_ids=("B",), outcome=EvictOutcome.KILLED,
                   acked_at=_at(2062), attempt=1)  # fmt: skip
    assert w.c.refusal(ack, "n1") is None
    out2 = w.event(ack, 2062)  # the stop changes nothing about attempt 2 on n2
    assert not [e for e in out2.events if isinstance(e, TaskEvicted)] and not out2.commands
    assert w.c.tasks["B"].run is not None and w.c.tasks["B"].run.number == 2
    _report(w, "n2", 2062, ("B", 2, 0))  # the current attempt is never unknown
    assert _tick(w, 2200) == []


def test_unknown_work_is_not_stopped_under_the_kill_switch_or_while_the_input_lags() -> None:
    w, _, _ = _spot_world()
    w.node("n1", 2, 0)
    _report(w, "n1", 1500, ("Z", 3, 0))
    _report(w, "n1", 1600, ("Z", 3, 0))
    assert _tick(w, 1600, reconcile=False) == []
    w.feed(("control", {"controls": Controls(kill_switch=True).as_dict()}, T0 + 1600))
    assert _tick(w, 1601) == []
    w.feed(("control", {"controls": Controls().as_dict()}, T0 + 1602))
    stop = _tick(w, 1603)
    assert len(stop) == 1 and isinstance(stop[0], EvictCommand) and stop[0].task_ids == ("Z",)


def test_replay_rebuilds_the_reconciled_state_and_ids() -> None:
    w, _ = _bound_c()
    _report(w, "n0", 20)
    fresh = _tick(w, 130)
    replayed = World()
    for entry in w.journal:
        replayed.feed(entry)
    assert replayed.c.tasks["C"].binds.keys() == w.c.tasks["C"].binds.keys()
    assert isinstance(fresh[0], BindCommand) and fresh[0].command_id in replayed.c.bound

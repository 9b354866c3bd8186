"""The controller's attempts (docs/attempts.md): acks bound to their command, an eviction that
meets a finished run, a late exit, a re-bind held until the previous attempt ended. Hand-worked
scenarios on the `_spot_world` of test_controller (A on n0 since t=1, B on n1 since t=1001, both
2 GPUs; H, an HP task of 2 GPUs, evicts B at t=2000)."""

from __future__ import annotations

from test_controller import T0, World, _at, _one, _quota, _spot_world, _task

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.tasks import (
    GuaranteeOutcome,
    GuaranteePeriodClosed,
    TaskCancelled,
    TaskClass,
    TaskEvicted,
    TaskFinished,
)
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.preemption.journal.inputs import entry_for


def _evicted_b() -> tuple[World, BindCommand, BindCommand, EvictCommand]:
    w, bind_a, bind_b = _spot_world()
    out = w.event(_task("H", TaskClass.HP), 2000)
    evict = _one(out.commands, EvictCommand)
    assert isinstance(evict, EvictCommand) and evict.task_ids == ("B",) and evict.attempt == 1
    assert bind_b.attempt == 1
    return w, bind_a, bind_b, evict


def _ack(evict: EvictCommand, outcome: EvictOutcome, t: float, **changes: object) -> EvictAck:
    fields: dict[str, object] = {
        "command_id": evict.command_id, "node": evict.node, "task_ids": evict.task_ids, "outcome": outcome,
        "acked_at": _at(t), "attempt": evict.attempt,
    }  # fmt: skip
    return EvictAck.model_validate(fields | changes)


def _exit(
    bind: BindCommand, code: int, t: float, *, evicted: bool = False, **changes: object
) -> WorkerExited:
    fields: dict[str, object] = {
        "command_id": bind.command_id, "node": bind.node, "task_id": bind.task_id, "worker_index": 0,
        "exit_code": code, "exited_at": _at(t), "evicted": evicted, "attempt": bind.attempt,
    }  # fmt: skip
    return WorkerExited.model_validate(fields | changes)


def test_acks_that_do_not_match_their_command_are_refused_with_the_reason() -> None:
    w, bind_a, bind_b, evict = _evicted_b()
    c = w.c
    assert c.refusal(_ack(evict, EvictOutcome.KILLED, 2001)) is None
    wrong_node = c.refusal(_ack(evict, EvictOutcome.KILLED, 2001, node="n0"))
    assert wrong_node == f"node 'n0' answered eviction {evict.command_id}, addressed to 'n1'"
    assert "attempt 2 differs" in (c.refusal(_ack(evict, EvictOutcome.KILLED, 2001, attempt=2)) or "")
    assert "tasks ['A']" in (c.refusal(_ack(evict, EvictOutcome.KILLED, 2001, task_ids=("A",))) or "")
    assert "key 'n0'" in (c.refusal(_ack(evict, EvictOutcome.KILLED, 2001), "n0") or "")
    unknown = _ack(evict, EvictOutcome.KILLED, 2001, command_id=bind_a.command_id)
    assert "no eviction" in (c.refusal(unknown) or "")
    # Worker acks: the bind's node, task, worker and attempt.
    assert c.refusal(_exit(bind_a, 0, 2001)) is None
    assert "addressed to 'n0'" in (c.refusal(_exit(bind_a, 0, 2001, node="n1")) or "")
    assert "task 'B' differs" in (c.refusal(_exit(bind_a, 0, 2001, task_id="B")) or "")
    assert "worker 1 is not one" in (c.refusal(_exit(bind_a, 0, 2001, worker_index=1)) or "")
    assert "attempt 3 differs" in (c.refusal(_exit(bind_a, 0, 2001, attempt=3)) or "")
    started = WorkerStarted(command_id=bind_b.command_id, node="n0", task_id="B", worker_index=0, pid=9,
                            started_at=_at(2001))  # fmt: skip
    assert "addressed to 'n1'" in (c.refusal(started) or "")
    # Applied anyway by a direct caller, a refused ack changes nothing: H stays held.
    out = w.event(_ack(evict, EvictOutcome.KILLED, 2001, node="n0"), 2001)
    assert not out.commands and not out.events and [d.kind for d in out.decisions] == ["ack_refused"]


def test_an_exit_0_that_arrives_after_the_not_running_ack_is_a_normal_finish() -> None:
    w, _, bind_b, evict = _evicted_b()
    # The ack first (the two travel on different topics): nothing is concluded, H may go.
    out = w.event(_ack(evict, EvictOutcome.NOT_RUNNING, 2002), 2002)
    assert _one(out.commands, BindCommand)  # H bound: nothing of B runs on n1
    assert not [e for e in out.events if isinstance(e, TaskEvicted | GuaranteePeriodClosed)]
    out = w.event(_exit(bind_b, 0, 2001), 2003)
    finished = _one(out.events, TaskFinished)
    assert isinstance(finished, TaskFinished) and finished.exit_code == 0
    assert finished.finished_at == _at(2001)
    assert not [e for e in out.events if isinstance(e, TaskEvicted)]
    # B ran under an hour: its first period closes SUCCEEDED at the exit, as any finish's last
    # period does (never FAILED: nothing was evicted), once; and B is not queued.
    closed = [e for e in out.events if isinstance(e, GuaranteePeriodClosed)]
    assert [(c.outcome, c.period_end) for c in closed] == [(GuaranteeOutcome.SUCCEEDED, _at(2001))]
    assert closed[0].period_start < closed[0].period_end and closed[0].task_id == "B"
    assert [type(e).__name__ for e in out.events] == ["GuaranteePeriodClosed", "TaskFinished"]
    # The runtime's ledger agrees: the failure it logged at the decision became a success.
    assert (w.c.runtime.ledger.failed_total, w.c.runtime.ledger.succeeded_total) == (0, 1)
    assert "B" not in w.c.tasks and "B" not in w.c.runtime.queued_ids()


def test_a_start_read_after_the_eviction_then_an_exit_0_is_started_then_finished() -> None:
    # As _spot_world, but B's WorkerStarted is still in flight when H evicts B.
    w = World()
    w.node("n0", 2, 0)
    w.node("n1", 2, 0)
    w.event(_quota(4.0), 0)
    bind_a = _one(w.event(_task("A", TaskClass.SPOT), 0).commands, BindCommand)
    assert isinstance(bind_a, BindCommand)
    w.started(bind_a, 1)
    bind_b = _one(w.event(_task("B", TaskClass.SPOT), 1000).commands, BindCommand)
    assert isinstance(bind_b, BindCommand)
    evict = _one(w.event(_task("H", TaskClass.HP), 2000).commands, EvictCommand)
    assert isinstance(evict, EvictCommand) and evict.task_ids == ("B",)
    started = w.started(bind_b, 1002)
    assert [type(e).__name__ for e in started.events] == ["TaskStarted"]
    w.event(_ack(evict, EvictOutcome.NOT_RUNNING, 2003), 2003)
    out = w.event(_exit(bind_b, 0, 2001), 2004)
    assert [type(e).__name__ for e in out.events] == ["GuaranteePeriodClosed", "TaskFinished"]
    closed = _one(out.events, GuaranteePeriodClosed)
    assert isinstance(closed, GuaranteePeriodClosed) and closed.outcome is GuaranteeOutcome.SUCCEEDED


def test_an_attempt_never_started_because_the_eviction_came_first_was_evicted() -> None:
    w, _, bind_b, evict = _evicted_b()
    w.event(_ack(evict, EvictOutcome.NOT_RUNNING, 2002), 2002)
    # The agent read the bind after the eviction: exit 127, evicted.
    out = w.event(_exit(bind_b, 127, 2003, evicted=True), 2003)
    evicted = _one(out.events, TaskEvicted)
    assert isinstance(evicted, TaskEvicted) and evicted.requeued and evicted.evicted_at == _at(2002)
    closed = _one(out.events, GuaranteePeriodClosed)
    assert isinstance(closed, GuaranteePeriodClosed) and closed.outcome is GuaranteeOutcome.FAILED


def test_a_not_running_ack_whose_exits_never_come_ends_as_evicted_at_grace_plus_margin() -> None:
    w, _, _, evict = _evicted_b()
    w.event(_ack(evict, EvictOutcome.NOT_RUNNING, 2002), 2002)
    assert not w.feed(("tick", {}, T0 + 2039)).events
    out = w.feed(("tick", {}, T0 + 2040))  # 30 s grace + 10 s margin after the eviction
    assert isinstance(_one(out.events, TaskEvicted), TaskEvicted)


def test_the_next_attempt_waits_for_the_previous_one_and_is_dropped_when_that_one_finished() -> None:
    w, bind_a, bind_b, evict = _evicted_b()
    # A finishes: B (requeued) is placed on n0 at once, but its bind is held.
    out = w.event(_exit(bind_a, 0, 2001), 2001)
    assert not [c for c in out.commands if isinstance(c, BindCommand) and c.task_id == "B"]
    assert "B" in w.c.pending and w.c.tasks["B"].attempt == 2
    # Then the truth arrives: B's first attempt had exited 0 on its own.
    w.event(_exit(bind_b, 0, 1999), 2002)
    out = w.event(_ack(evict, EvictOutcome.NOT_RUNNING, 2003), 2003)
    assert not [c for c in out.commands if isinstance(c, BindCommand) and c.task_id == "B"]
    assert "B" not in w.c.pending and "B" not in w.c.tasks
    assert "B" not in w.c.runtime.state.running and "B" not in w.c.runtime.queued_ids()


def test_the_next_attempt_is_bound_once_the_previous_one_was_stopped() -> None:
    w, bind_a, bind_b, evict = _evicted_b()
    w.event(_exit(bind_a, 0, 2001), 2001)
    out = w.event(_ack(evict, EvictOutcome.KILLED, 2005), 2005)
    rebind = [c for c in out.commands if isinstance(c, BindCommand) and c.task_id == "B"]
    assert len(rebind) == 1 and rebind[0].attempt == 2 and rebind[0].node == "n0"
    assert isinstance(_one(out.events, TaskEvicted), TaskEvicted)
    # A late exit of attempt 1 (legitimate, so not refused) changes nothing now: attempt 2 runs.
    late = w.event(_exit(bind_b, 0, 2006), 2006)
    assert not late.events and not late.commands and not late.decisions
    assert w.c.tasks["B"].attempt == 2


def test_cancelling_a_task_whose_binds_are_held_sends_no_eviction() -> None:
    w, bind_a, _, _ = _evicted_b()
    w.event(_exit(bind_a, 0, 2001), 2001)  # B's next attempt placed on n0, its bind held
    assert "B" in w.c.pending
    out = w.event(TaskCancelled(task_id="B", tenant="org-a"), 2002)
    assert not [c for c in out.commands if isinstance(c, EvictCommand)]  # its bind never went out
    assert "B" not in w.c.pending


def test_an_attempt_preempted_while_its_bind_is_held_closes_no_failed_period() -> None:
    # Found by `gfs livebench races` (issue 22): a spot task requeued by an eviction was placed
    # again while its first attempt was still ending, so its bind was held; an HP task then took
    # those GPUs. Nothing of that attempt ever reached a node, no EvictCommand and no TaskEvicted
    # went out, yet a FAILED guarantee period was published: a failure the quota's feedback counts
    # for a run that never happened.
    w, bind_a, _, evict = _evicted_b()
    w.event(_exit(bind_a, 0, 2001), 2001)  # A finishes: B's attempt 2 placed on n0, its bind held
    assert "B" in w.c.pending and w.c.tasks["B"].attempt == 2
    out = w.event(_task("H2", TaskClass.HP), 2002)  # H2 needs n0's 2 GPUs: B's held attempt goes
    assert "B" not in w.c.pending
    assert not [c for c in out.commands if isinstance(c, EvictCommand)]  # nothing to stop
    assert not [e for e in out.events if isinstance(e, TaskEvicted)]
    assert not [e for e in out.events if isinstance(e, GuaranteePeriodClosed)]
    # Attempt 1's own eviction still ends as it should: one TaskEvicted, one FAILED period.
    out = w.event(_ack(evict, EvictOutcome.KILLED, 2005), 2005)
    assert isinstance(_one(out.events, TaskEvicted), TaskEvicted)
    periods = [e for e in out.events if isinstance(e, GuaranteePeriodClosed)]
    assert [p.outcome for p in periods] == [GuaranteeOutcome.FAILED]


def test_a_task_placed_on_a_victims_other_gpus_waits_for_that_victims_ack_too() -> None:
    # Found by `gfs livebench races` (issue 22): V (spot, 4 GPUs) is evicted for H (HP, 2 GPUs);
    # the runtime frees V's 4 GPUs at once, H takes 2 and waits for V's ack, and S (spot, 2 GPUs,
    # submitted in the same batch) gets the other 2 in the same pass. S's bind went out at once
    # and S started on 2 GPUs V still ran on.
    w = World()
    w.node("n0", 4, 0)
    w.event(_quota(4.0), 0)
    bind_v = _one(w.event(_task("V", TaskClass.SPOT, gpus=4), 1).commands, BindCommand)
    assert isinstance(bind_v, BindCommand)
    w.started(bind_v, 2)
    submitted = entry_for(_task("S", TaskClass.SPOT, gpus=2), T0 + 100)
    assert submitted is not None
    w.feed(submitted)  # read in the same batch as H: one scheduling pass for both
    out = w.event(_task("H", TaskClass.HP, gpus=2), 100)
    evict = _one(out.commands, EvictCommand)
    assert isinstance(evict, EvictCommand) and evict.task_ids == ("V",)
    assert not [c for c in out.commands if isinstance(c, BindCommand)]  # H and S both wait
    assert {"H", "S"} <= set(w.c.pending)
    assert evict.command_id in w.c.pending["S"].waiting
    # V stops: both binds go out, on GPUs V no longer holds.
    out = w.event(_ack(evict, EvictOutcome.CHECKPOINTED, 101), 101)
    binds = {c.task_id: c for c in out.commands if isinstance(c, BindCommand)}
    assert set(binds) == {"H", "S"}
    gpus = [g for b in binds.values() for p in b.placements for g in p.gpu_indices]
    assert sorted(gpus) == [0, 1, 2, 3]


def test_a_task_placed_on_a_victims_gpus_in_a_later_pass_waits_too() -> None:
    # The same, one pass later: S arrives after V's eviction was decided, before its ack.
    w = World()
    w.node("n0", 4, 0)
    w.event(_quota(4.0), 0)
    bind_v = _one(w.event(_task("V", TaskClass.SPOT, gpus=4), 1).commands, BindCommand)
    assert isinstance(bind_v, BindCommand)
    w.started(bind_v, 2)
    evict = _one(w.event(_task("H", TaskClass.HP, gpus=2), 100).commands, EvictCommand)
    assert isinstance(evict, EvictCommand)
    out = w.event(_task("S", TaskClass.SPOT, gpus=2), 100.5)
    assert not [c for c in out.commands if isinstance(c, BindCommand)]
    assert "S" in w.c.pending and evict.command_id in w.c.pending["S"].waiting
    # Without an ack the hold ends as the preemptor's does: grace (30 s) + margin (10 s) later.
    assert not [c for c in w.c.tick(T0 + 139).commands if isinstance(c, BindCommand)]
    released = {c.task_id for c in w.c.tick(T0 + 140.5).commands if isinstance(c, BindCommand)}
    assert released == {"H", "S"}


def test_the_commands_of_a_task_that_left_the_pool_are_dropped_a_day_later() -> None:
    w, bind_a, bind_b, evict = _evicted_b()
    w.event(_ack(evict, EvictOutcome.NOT_RUNNING, 2002), 2002)
    w.event(_exit(bind_b, 0, 2001), 2003)  # B finished during its eviction: out of the pool
    ledger = w.c.ledger
    assert bind_b.command_id in ledger.bound and evict.command_id in ledger.evictions
    w.feed(("tick", {}, T0 + 2004))  # the sweep finds B gone
    w.feed(("tick", {}, T0 + 2004 + 86400 - 3600))  # under a day: kept
    assert bind_b.command_id in ledger.bound
    w.feed(("tick", {}, T0 + 2004 + 86400))
    assert bind_b.command_id not in ledger.bound and evict.command_id not in ledger.evictions
    assert bind_a.command_id in ledger.bound  # A still runs: its commands stay


def test_a_run_its_node_stopped_unasked_takes_the_node_down_and_requeues_the_task() -> None:
    """A node that fenced itself (services/node_agent/fence.py) reports its runs' exits evicted
    although the service never stopped them: the node is down from that exit, every run on it is
    requeued (NODE_LOST, its interrupted period void, like a node declared lost), and its next
    heartbeat brings it back, where the task runs again as attempt 2."""
    w, _, bind_b = _spot_world()
    out = w.event(_exit(bind_b, -15, 1500, evicted=True, detail="fenced"), 1500)
    assert [d.kind for d in out.decisions][:2] == ["node_fenced", "node_down"]
    evict = _one(out.commands, EvictCommand)
    assert isinstance(evict, EvictCommand) and evict.node == "n1" and evict.attempt == 1
    lost = _one(out.events, TaskEvicted)
    assert isinstance(lost, TaskEvicted) and lost.task_id == "B" and lost.requeued
    assert not [e for e in out.events if isinstance(e, GuaranteePeriodClosed | TaskFinished)]
    assert w.c.tasks["B"].run is None
    # A second worker's exit of the same fence changes nothing more.
    again = w.event(_exit(bind_b, -9, 1501, evicted=True), 1501)
    assert not again.commands and not again.events
    w.node("n1", 2, 1600)  # its heartbeat: back
    rebind = _one(w.feed(("schedule", {}, T0 + 1601)).commands, BindCommand)
    assert isinstance(rebind, BindCommand) and (rebind.task_id, rebind.attempt) == ("B", 2)


def test_an_evicted_exit_of_a_run_being_evicted_is_no_fence() -> None:
    # B is being evicted by H: its worker's exit as stopped is the eviction's, not a fence.
    w, _, bind_b, _ = _evicted_b()
    out = w.event(_exit(bind_b, -15, 2001, evicted=True), 2001)
    assert "node_fenced" not in [d.kind for d in out.decisions]
    assert "n1" not in w.c.down

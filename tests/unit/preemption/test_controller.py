"""The preemption service's pure controller: wire events in, runtime decisions, wire effects out.
Worked by hand on two 2-GPU nodes (the same world as the runtime's explanation test)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import (
    EvictionReason,
    GuaranteeOutcome,
    GuaranteePeriodClosed,
    RejectionReason,
    TaskAccepted,
    TaskClass,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
    TaskStarted,
    TaskSubmitted,
    TaskWithdrawn,
)
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.settings import ControllerSettings
from gfs.services.preemption.controller.types import Effects
from gfs.services.preemption.journal.inputs import Entry, apply, entry_for

T0 = 1_800_000_000.0


def _at(s: float) -> datetime:
    return datetime.fromtimestamp(T0 + s, UTC)


def _task(tid: str, cls: TaskClass, gpus: float = 2, workers: int = 1, **kw: object) -> TaskSubmitted:
    return TaskSubmitted(
        task_id=tid,
        tenant="org-a",
        gpu_model="A100",
        gpus_per_worker=gpus,
        workers=workers,
        task_class=cls,
        command=("gfs", "fake-task"),
        **kw,
    )  # type: ignore[arg-type]


def _quota(gpus: float, until: float = 3600.0) -> SpotQuota:
    return SpotQuota(
        pool="A100",
        quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=gpus) for h in (1, 2, 4)),
        eta=1.0,
        capacity_gpus=4,
        valid_from=_at(0),
        valid_until=_at(until),
        forecast_version="m:1",
    )


class World:
    """A controller plus a journal of what it was fed (to check replays)."""

    def __init__(self) -> None:
        self.c = PoolController("A100", ControllerSettings(grace_s=30.0, ack_margin_s=10.0))
        self.journal: list[Entry] = []

    def feed(self, entry: Entry) -> Effects:
        self.journal.append(entry)
        return apply(self.c, entry)

    def event(self, payload: object, t: float) -> Effects:
        entry = entry_for(payload, T0 + t)  # type: ignore[arg-type]
        assert entry is not None
        out = self.feed(entry)
        out.extend(self.feed(("schedule", {}, T0 + t)))
        return out

    def node(self, name: str, gpus: int, t: float) -> None:
        self.feed(("node_seen", {"node": name, "gpus": gpus}, T0 + t))

    def started(self, bind: BindCommand, t: float) -> Effects:
        out = Effects()
        for p in bind.placements:
            ack = WorkerStarted(
                command_id=bind.command_id,
                node=bind.node,
                task_id=bind.task_id,
                worker_index=p.worker_index,
                pid=100 + p.worker_index,
                started_at=_at(t),
            )
            out.extend(self.event(ack, t))
        return out


def _one(items: list[object], kind: type) -> object:
    found = [i for i in items if isinstance(i, kind)]
    assert len(found) == 1, found
    return found[0]


def _spot_world() -> tuple[World, BindCommand, BindCommand]:
    w = World()
    w.node("n0", 2, 0)
    w.node("n1", 2, 0)
    w.event(_quota(4.0), 0)
    a = w.event(_task("A", TaskClass.SPOT), 0)
    assert isinstance(a.events[0], TaskAccepted)
    bind_a = _one(a.commands, BindCommand)
    assert (
        isinstance(bind_a, BindCommand) and bind_a.node == "n0" and bind_a.placements[0].gpu_indices == (0, 1)
    )
    started = w.started(bind_a, 1)
    assert isinstance(_one(started.events, TaskStarted), TaskStarted)
    b = w.event(_task("B", TaskClass.SPOT), 1000)
    bind_b = _one(b.commands, BindCommand)
    assert isinstance(bind_b, BindCommand) and bind_b.node == "n1"
    w.started(bind_b, 1001)
    return w, bind_a, bind_b


def test_an_hp_task_evicts_the_cheaper_victim_and_is_bound_only_after_the_ack() -> None:
    w, _, _bind_b = _spot_world()
    out = w.event(_task("H", TaskClass.HP), 2000)
    evict = _one(out.commands, EvictCommand)
    assert isinstance(evict, EvictCommand)
    # B ran 1000 s, A 2000 s: B loses less work (runtime test), so B on n1 is the victim.
    assert evict.node == "n1" and evict.task_ids == ("B",) and evict.preemptor_task_id == "H"
    assert evict.reason is EvictionReason.PREEMPTED_BY_HP and evict.grace_seconds == 30.0
    assert not [c for c in out.commands if isinstance(c, BindCommand)]  # held
    # B's period is not closed yet: B might have finished on its own meanwhile (docs/attempts.md).
    assert not [e for e in out.events if isinstance(e, GuaranteePeriodClosed)]
    held = next(d for d in out.decisions if d.kind == "evicted")
    assert held.detail["explanation"]["last_eviction"]["plan"]["winner"]["node"] == "n1"
    assert held.detail["explanation"]["last_eviction"]["plan"]["alternatives"][0]["victims"] == ["A"]

    ack = EvictAck(
        command_id=evict.command_id,
        node="n1",
        task_ids=("B",),
        outcome=EvictOutcome.CHECKPOINTED,
        acked_at=_at(2005),
    )
    after = w.event(ack, 2005)
    bind_h = _one(after.commands, BindCommand)
    assert (
        isinstance(bind_h, BindCommand) and bind_h.node == "n1" and bind_h.placements[0].gpu_indices == (0, 1)
    )
    assert bind_h.issued_at == _at(2005)
    evicted = _one(after.events, TaskEvicted)
    assert isinstance(evicted, TaskEvicted) and evicted.task_id == "B" and evicted.requeued
    # The ack says B was stopped: its interrupted first period failed.
    closed = _one(after.events, GuaranteePeriodClosed)
    assert isinstance(closed, GuaranteePeriodClosed) and closed.outcome is GuaranteeOutcome.FAILED
    # No checkpoint interval declared: all 1,000 s x 2 GPUs are lost.
    assert evicted.lost_gpu_seconds == pytest.approx(2000.0)
    # A repeated ack changes nothing.
    assert not w.event(ack, 2006).commands


def test_held_binds_go_out_when_the_grace_period_and_margin_pass() -> None:
    w, _, _ = _spot_world()
    w.event(_task("H", TaskClass.HP), 2000)
    assert not w.feed(("tick", {}, T0 + 2039)).commands
    out = w.feed(("tick", {}, T0 + 2040))
    bind = _one(out.commands, BindCommand)
    assert isinstance(bind, BindCommand) and bind.task_id == "H"


def test_a_task_finishes_when_every_worker_exited_and_frees_its_gpus() -> None:
    w, bind_a, _ = _spot_world()
    w.event(_task("C", TaskClass.SPOT), 1500)  # queued: no GPU left
    exit_a = WorkerExited(
        command_id=bind_a.command_id, node="n0", task_id="A", worker_index=0, exit_code=3, exited_at=_at(1600)
    )
    out = w.event(exit_a, 1600)
    finished = _one(out.events, TaskFinished)
    assert isinstance(finished, TaskFinished) and finished.exit_code == 3
    ok = _one(out.events, GuaranteePeriodClosed)
    assert isinstance(ok, GuaranteePeriodClosed) and ok.outcome is GuaranteeOutcome.SUCCEEDED
    bind_c = _one(out.commands, BindCommand)
    assert isinstance(bind_c, BindCommand) and bind_c.task_id == "C" and bind_c.node == "n0"


def test_rejections_name_the_reason() -> None:
    w = World()
    assert isinstance(_one(w.event(_task("X", TaskClass.HP), 0).events, TaskRejected), TaskRejected)
    w.node("n0", 2, 0)
    big = _one(w.event(_task("Y", TaskClass.HP, gpus=4), 1).events, TaskRejected)
    assert isinstance(big, TaskRejected) and big.reason is RejectionReason.REQUEST_LARGER_THAN_ANY_NODE
    gang = _one(w.event(_task("Z", TaskClass.HP, gpus=2, workers=2), 2).events, TaskRejected)
    assert isinstance(gang, TaskRejected) and gang.reason is RejectionReason.GANG_LARGER_THAN_POOL
    w.event(_task("ok", TaskClass.HP, gpus=1), 3)
    dup = _one(w.event(_task("ok", TaskClass.HP, gpus=1), 4).events, TaskRejected)
    assert isinstance(dup, TaskRejected) and dup.reason is RejectionReason.DUPLICATE_TASK_ID


def test_cancel_withdraws_a_queued_task_and_stops_a_running_one_without_requeue() -> None:
    w, _bind_a, _ = _spot_world()
    w.event(_task("Q", TaskClass.SPOT), 1100)
    from gfs.schemas.tasks import TaskCancelled

    out = w.event(TaskCancelled(task_id="Q", tenant="org-a"), 1200)
    assert isinstance(_one(out.events, TaskWithdrawn), TaskWithdrawn)
    refused = w.event(TaskCancelled(task_id="A", tenant="org-b"), 1200)
    assert not refused.commands and refused.decisions[0].kind == "cancel_refused"
    out = w.event(TaskCancelled(task_id="A", tenant="org-a"), 1300)
    evict = _one(out.commands, EvictCommand)
    assert isinstance(evict, EvictCommand) and evict.reason is EvictionReason.CANCELLED and evict.node == "n0"
    ack = EvictAck(
        command_id=evict.command_id,
        node="n0",
        task_ids=("A",),
        outcome=EvictOutcome.KILLED,
        acked_at=_at(1310),
    )
    gone = _one(w.event(ack, 1310).events, TaskEvicted)
    assert isinstance(gone, TaskEvicted) and not gone.requeued
    assert "A" not in w.c.tasks


def test_a_lost_node_requeues_its_task_and_tells_the_node_to_stop_it() -> None:
    w, _, bind_b = _spot_world()
    out = w.feed(("node_down", {"node": "n1"}, T0 + 1500))
    evict = _one(out.commands, EvictCommand)
    assert (
        isinstance(evict, EvictCommand)
        and evict.reason is EvictionReason.NODE_LOST
        and evict.grace_seconds == 0
    )
    lost = _one(out.events, TaskEvicted)
    assert isinstance(lost, TaskEvicted) and lost.task_id == "B" and lost.requeued
    # B waits for GPUs: n1 is down and n0 is full.
    assert not w.feed(("schedule", {}, T0 + 1501)).commands
    w.node("n1", 2, 1600)  # back
    again = _one(w.feed(("schedule", {}, T0 + 1601)).commands, BindCommand)
    assert isinstance(again, BindCommand) and again.task_id == "B" and again.command_id != bind_b.command_id


def test_spot_waits_for_a_quota_and_an_expired_quota_freezes_admissions() -> None:
    w = World()
    w.node("n0", 2, 0)
    w.node("n1", 2, 0)
    assert not w.event(_task("A", TaskClass.SPOT, gpus=1), 0).commands  # no quota yet
    assert w.event(_quota(4.0, until=100.0), 1).commands  # A starts
    w.feed(("tick", {}, T0 + 101))  # the quota expired: frozen at the 1 GPU running
    assert not w.event(_task("B", TaskClass.SPOT, gpus=1), 102).commands
    assert w.event(_quota(4.0, until=1000.0), 103).commands  # a fresh quota admits B


def test_replaying_the_journal_rebuilds_the_same_state_and_ids() -> None:
    w, _, _ = _spot_world()
    out = w.event(_task("H", TaskClass.HP), 2000)
    w.feed(("tick", {}, T0 + 2100))
    again = PoolController("A100", w.c.settings)
    for entry in w.journal:
        apply(again, entry)
    assert again.counter == w.c.counter
    assert sorted(again.runtime.state.running) == sorted(w.c.runtime.state.running)
    assert again.runtime.spot.task_ids() == w.c.runtime.spot.task_ids()
    assert set(again.evictions) == set(w.c.evictions)
    assert {c.command_id for c in out.commands} <= set(again.evictions)


def test_a_gang_gets_one_bind_per_node_with_its_workers_device_indices() -> None:
    w = World()
    w.node("n0", 4, 0)
    w.node("n1", 4, 0)
    out = w.event(_task("G", TaskClass.HP, gpus=2, workers=3), 0)
    binds = sorted((c for c in out.commands if isinstance(c, BindCommand)), key=lambda b: b.node)
    workers = [(b.node, p.worker_index, p.gpu_indices) for b in binds for p in b.placements]
    assert sorted(i for _, i, _ in workers) == [0, 1, 2]
    per_node = {n: sorted(d for node, _, idx in workers if node == n for d in idx) for n in ("n0", "n1")}
    assert sorted(len(v) for v in per_node.values()) == [2, 4]
    assert all(len(set(v)) == len(v) for v in per_node.values())


def test_lease_policies_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="lease"):
        ControllerSettings(policy="chronus")


def test_restart_overhead_goes_to_the_preempting_start_and_to_the_evicted_tasks_restart() -> None:
    w, bind_a, bind_b = _spot_world()
    # Neither spot start needed evictions nor resumed an evicted run: no overhead told.
    assert bind_a.restart_overhead_s is None and bind_b.restart_overhead_s is None
    out = w.event(_task("H", TaskClass.HP), 2000)
    evict = _one(out.commands, EvictCommand)
    assert isinstance(evict, EvictCommand)
    ack = EvictAck(command_id=evict.command_id, node="n1", task_ids=("B",),
                   outcome=EvictOutcome.CHECKPOINTED, acked_at=_at(2001))  # fmt: skip
    bind_h = _one(w.event(ack, 2001).commands, BindCommand)
    # H (2 GPUs per worker, <= 8) needed an eviction: spec 5.4's 40 s.
    assert isinstance(bind_h, BindCommand) and bind_h.restart_overhead_s == 40.0
    # A finishes; B (requeued) restarts on n0 and pays the restart overhead too.
    for p in bind_a.placements:
        exited = WorkerExited(command_id=bind_a.command_id, node="n0", task_id="A",
                              worker_index=p.worker_index, exit_code=0, exited_at=_at(2100))  # fmt: skip
        out = w.event(exited, 2100)
    bind_b2 = _one(out.commands, BindCommand)
    assert isinstance(bind_b2, BindCommand) and bind_b2.task_id == "B" and bind_b2.restart_overhead_s == 40.0


def test_clock_ticks_run_timers_status_and_the_pass_only_in_their_phase() -> None:
    w = World()
    w.node("n0", 2, 0)
    w.node("n1", 2, 0)
    w.feed(entry_for(_quota(4.0), T0))  # type: ignore[arg-type]
    # Submitted without a pass (on the clock, passes run on PASS ticks only).
    accepted = w.feed(entry_for(_task("A", TaskClass.SPOT), T0 + 20))  # type: ignore[arg-type]
    assert isinstance(accepted.events[0], TaskAccepted) and not accepted.commands

    def tick(phase: str, seq: int, t: float) -> Effects:
        return w.feed(("clock", {"phase": phase, "sequence": seq}, T0 + t))

    assert not tick("ADVANCE", 1, 20).commands
    status = tick("STATUS", 2, 20).events
    assert len(status) == 1 and isinstance(status[0], PoolStatus)
    # Nothing runs yet: 4 GPUs idle, no spot in use, A (2 GPUs) waited 0 s at the head.
    assert (status[0].capacity_gpus, status[0].idle_gpus, status[0].spot_in_use_gpus) == (4, 4, 0.0)
    assert status[0].observed_at == _at(20)
    bind = _one(tick("PASS", 3, 20).commands, BindCommand)
    assert isinstance(bind, BindCommand) and bind.issued_at == _at(20)
    # A tick already seen (a redelivery, or the same tick routed again) does nothing.
    assert not tick("PASS", 3, 20)
    assert not tick("STATUS", 2, 20)
    with pytest.raises(ValueError, match="unknown clock phase"):
        tick("LATER", 4, 20)

"""Typed journal entries keep the journal's rows as they were (issue 23 item 1).

The rows below are written by hand in the format the release before typed entries journaled
(`preemption_journal(kind, data, at_s)`: the kind strings and JSON shapes of its `entry_for`, its
timers, reconciliation and controls). A journal of that release must replay unchanged, and the rows
this one writes must be the same bytes, so the previous release can replay them after a rollback.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from gfs.schemas.clock import ClockPhase, ClockTick
from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import TaskCancelled, TaskClass, TaskFinished, TaskStarted, TaskSubmitted
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.preemption.controller import reconcile_rules
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.settings import ControllerSettings, Controls
from gfs.services.preemption.journal.entries import (
    ControlEntry,
    Entry,
    NodeDownEntry,
    NodeReportEntry,
    ScheduleEntry,
    TickEntry,
    from_row,
)
from gfs.services.preemption.journal.inputs import apply, entry_for

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
BIND = "11111111-1111-4111-8111-111111111111"
EVICT = "22222222-2222-4222-8222-222222222222"
TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}

SPOT_TASK = {
    "task_id": "s1", "tenant": "org-a", "gpu_model": "A100", "gpus_per_worker": 2.0, "workers": 1,
    "task_class": "SPOT", "guarantee_hours": 1, "expected_duration_s": None, "checkpoint_interval_s": None,
    "command": ["gfs", "fake-task"],
}  # fmt: skip
HP_TASK = {**SPOT_TASK, "task_id": "h1", "task_class": "HP", "command": "sleep 60"}
CONTROLS = {
    "kill_switch": False, "quota_mode": "override", "quota_gpus": {"1": 2.0}, "max_evictions": 5,
    "interval_s": 3600.0, "tenant_budgets": {},
}  # fmt: skip
QUOTA = {
    "pool": "A100", "quotas": [{"guarantee_hours": 1, "quota_gpus": 4.0}], "eta": 1.0, "capacity_gpus": 4,
    "valid_from": "2027-01-15T08:00:00Z", "valid_until": "2027-01-16T08:00:00Z",
    "forecast_version": "m:1", "hp_demand": None,
}  # fmt: skip
EVICT_ACK = {
    "command_id": EVICT, "node": "n0", "task_ids": ["s1"], "outcome": "CHECKPOINTED",
    "acked_at": "2027-01-15T08:00:04Z", "detail": "", "attempt": 1,
}  # fmt: skip
STARTED = {
    "command_id": BIND, "node": "n0", "task_id": "s1", "worker_index": 0, "pid": 4242,
    "started_at": "2027-01-15T08:00:05Z", "attempt": 1,
}  # fmt: skip
EXITED = {
    "command_id": BIND, "node": "n0", "task_id": "s1", "worker_index": 0, "exit_code": 0,
    "exited_at": "2027-01-15T08:00:06Z", "evicted": False, "detail": "", "attempt": 1,
}  # fmt: skip

# One row of every kind (two of `submit` and `tick`), as (kind, data, at_s).
ROWS: list[tuple[str, dict[str, Any], float]] = [
    ("node_seen", {"node": "n0", "gpus": 2}, T0),
    ("submit", {"task": SPOT_TASK, "duplicate": False, "trace": TRACE}, T0 + 1),
    ("submit", {"task": HP_TASK, "duplicate": True}, T0 + 1.5),
    ("cancel", {"task_id": "s1", "tenant": "org-a", "reason": "done"}, T0 + 2),
    ("quota", QUOTA, T0 + 3),
    ("evict_ack", EVICT_ACK, T0 + 4),
    ("worker_started", STARTED, T0 + 5),
    ("worker_exited", EXITED, T0 + 6),
    ("node_down", {"node": "n1"}, T0 + 7),
    ("node_report", {"node": "n0", "sampled_at": T0 + 7.5, "running": [["h1", 1, 0], ["s1", 1, 0]]}, T0 + 8),
    ("tick", {}, T0 + 9),
    ("tick", {"reconcile": True}, T0 + 9.5),
    ("schedule", {}, T0 + 10),
    ("clock", {"phase": "PASS", "sequence": 3}, T0 + 11),
    ("control", {"controls": CONTROLS, "audit_id": 7}, T0 + 12),
]


def _at(s: float) -> datetime:
    return datetime.fromtimestamp(T0 + s, UTC)


@pytest.mark.parametrize("row", ROWS, ids=[f"{i}-{r[0]}" for i, r in enumerate(ROWS)])
def test_a_row_of_the_previous_release_reads_into_an_entry_that_writes_the_same_bytes(
    row: tuple[str, dict[str, Any], float],
) -> None:
    entry = from_row(*row)
    assert entry.kind == row[0] and entry.at == row[2]
    again = entry.to_row()
    assert again == row
    assert json.dumps(again[1]) == json.dumps(row[1])  # key order too: the same text to Postgres


def _live_entries() -> list[Entry]:
    """The same inputs as ROWS, built the way the live shell builds them."""
    task = TaskSubmitted(task_id="s1", tenant="org-a", gpu_model="A100", gpus_per_worker=2, workers=1,
                         task_class=TaskClass.SPOT, command=("gfs", "fake-task"))  # fmt: skip
    hp = task.model_copy(update={"task_id": "h1", "task_class": TaskClass.HP, "command": "sleep 60"})
    gpus = tuple(
        GpuSample(index=i, utilisation_pct=0, memory_used_mib=0, memory_total_mib=1) for i in range(2)
    )
    quota = SpotQuota(
        pool="A100", quotas=(GuaranteeQuota(guarantee_hours=1, quota_gpus=4),), eta=1, capacity_gpus=4,
        valid_from=_at(0), valid_until=_at(86400), forecast_version="m:1",
    )  # fmt: skip
    payloads = [
        entry_for(NodeTelemetry(node="n0", gpu_model="A100", sampled_at=_at(0), gpus=gpus), T0),
        entry_for(task, T0 + 1, trace=dict(TRACE)),
        entry_for(hp, T0 + 1.5, duplicate=True),
        entry_for(TaskCancelled(task_id="s1", tenant="org-a", reason="done"), T0 + 2),
        entry_for(quota, T0 + 3),
        entry_for(EvictAck(command_id=uuid.UUID(EVICT), node="n0", task_ids=("s1",), attempt=1,
                           outcome=EvictOutcome.CHECKPOINTED, acked_at=_at(4), signature="ab" * 32), T0 + 4),
        entry_for(WorkerStarted(command_id=uuid.UUID(BIND), node="n0", task_id="s1", worker_index=0,
                                pid=4242, started_at=_at(5), attempt=1, signature="cd" * 32), T0 + 5),
        entry_for(WorkerExited(command_id=uuid.UUID(BIND), node="n0", task_id="s1", worker_index=0,
                               exit_code=0, exited_at=_at(6), attempt=1), T0 + 6),
    ]  # fmt: skip
    report = reconcile_rules.report_of(T0 + 7.5, [("s1", 1, 0), ("h1", 1, 0), ("x", None, 0)])
    tick = ClockTick(clock="c", at=_at(11), sequence=3, phase=ClockPhase.PASS)
    return [
        *payloads,
        NodeDownEntry(node="n1", at=T0 + 7),
        NodeReportEntry(node="n0", report=report, at=T0 + 8),
        TickEntry(reconcile=False, at=T0 + 9),
        TickEntry(reconcile=True, at=T0 + 9.5),
        ScheduleEntry(at=T0 + 10),
        entry_for(tick, 0.0),  # played at the tick's own instant
        ControlEntry(
            controls=Controls(quota_mode="override", quota_gpus=((1, 2.0),), max_evictions=5),
            audit_id=7,
            at=T0 + 12,
        ),
    ]


def test_what_the_live_shell_journals_is_the_previous_release_s_rows() -> None:
    written = [entry.to_row() for entry in _live_entries()]
    assert [json.dumps(r) for r in written] == [json.dumps(r) for r in ROWS]  # signatures left out


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown journal entry kind 'resize'"):
        from_row("resize", {}, T0)


def test_rows_of_every_kind_play_as_the_previous_release_played_them() -> None:
    """Hand-worked: two 2-GPU nodes, a 4-GPU spot quota; spot s1 (2 GPUs) is bound and starts,
    HP h1 arrives flagged a duplicate by the router (rejected: DUPLICATE_TASK_ID), so its cancel
    finds nothing; s1 finishes; n1 is lost; the SRE overrides the quota and caps evictions."""
    c = PoolController("A100", ControllerSettings())

    def play(kind: str, data: dict[str, Any], at: float) -> Any:
        return apply(c, from_row(kind, data, at))

    play(*ROWS[0])
    play("node_seen", {"node": "n1", "gpus": 2}, T0)
    play(*ROWS[4])  # the quota
    assert c.nodes.keys() >= {"n0", "n1"}
    accepted = play(*ROWS[1])
    assert [d.kind for d in accepted.decisions] == ["accepted"]
    (bind,) = [m for m in play("schedule", {}, T0 + 1).commands if isinstance(m, BindCommand)]
    assert (bind.task_id, len(bind.placements)) == ("s1", 1)
    started = {**ROWS[6][1], "command_id": str(bind.command_id), "node": bind.node}
    assert [type(e) for e in play("worker_started", started, T0 + 5).events] == [TaskStarted]
    report = {**ROWS[9][1], "node": bind.node, "running": [["s1", 1, 0]]}
    assert not play("node_report", report, T0 + 8).commands  # what it runs is what was bound
    exited = {**ROWS[7][1], "command_id": str(bind.command_id), "node": bind.node}
    assert TaskFinished in [type(e) for e in play("worker_exited", exited, T0 + 9).events]
    (rejected,) = play(*ROWS[2]).decisions
    assert (rejected.kind, rejected.detail["reason"]) == ("rejected", "DUPLICATE_TASK_ID")
    cancelled = play("cancel", {"task_id": "h1", "tenant": "org-a", "reason": ""}, T0 + 9)
    assert [d.kind for d in cancelled.decisions] == ["cancel_ignored"]
    play(*ROWS[8])  # n1 lost
    assert "n1" in c.down
    unknown = play(*ROWS[5])  # an ack of no eviction of this pool: refused, as before
    assert [d.kind for d in unknown.decisions] == ["ack_refused"]
    play(*ROWS[10])
    play(*ROWS[11])
    play(*ROWS[12])
    play(*ROWS[13])
    assert c.clock_sequence == 3
    play(*ROWS[14])
    assert c.controls == Controls(quota_mode="override", quota_gpus=((1, 2.0),), max_evictions=5)


def test_a_live_payload_is_played_as_decoded_never_validated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    task = TaskSubmitted.model_validate(SPOT_TASK)

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("validated a second time")

    monkeypatch.setattr(TaskSubmitted, "model_validate", refuse)
    c = PoolController("A100", ControllerSettings())
    apply(c, ROWS[0])
    entry = entry_for(task, T0)
    assert [d.kind for d in apply(c, entry).decisions] == ["accepted"]


def test_an_evict_command_and_its_ack_replay_from_rows() -> None:
    """A running spot task cancelled: its eviction goes out, and the ack row (today's shape) is
    matched to it on replay: the eviction is acknowledged, and a CHECKPOINTED ack ends it."""
    c = PoolController("A100", ControllerSettings())
    apply(c, ("node_seen", {"node": "n0", "gpus": 2}, T0))
    apply(c, ROWS[4])
    apply(c, ROWS[1])
    (bind,) = [m for m in apply(c, ("schedule", {}, T0 + 1)).commands if isinstance(m, BindCommand)]
    apply(c, ("worker_started", {**ROWS[6][1], "command_id": str(bind.command_id)}, T0 + 5))
    (evict,) = [m for m in apply(c, ROWS[3]).commands if isinstance(m, EvictCommand)]
    ack = {**ROWS[5][1], "command_id": str(evict.command_id)}
    acked = apply(c, from_row("evict_ack", ack, T0 + 4))
    assert [d.kind for d in acked.decisions] == ["evict_acked", "evict_concluded"]

"""SRE controls at the controller (journaled `control` entries) and their desired state
(services/preemption/journal/desired_controls.py): kill switch, quota freeze and override, eviction cap."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from test_controller import T0, World, _one, _quota, _spot_world, _task

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.tasks import TaskClass
from gfs.services.core.reasons import Unschedulable
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.settings import Controls
from gfs.services.preemption.journal.desired_controls import ALL, ControlRow, desired, entries
from gfs.services.preemption.journal.inputs import Entry, apply


def _control(w: World, t: float, **kw: object) -> None:
    controls = Controls(**kw)  # type: ignore[arg-type]
    out = w.feed(("control", {"controls": controls.as_dict(), "audit_id": 7}, T0 + t))
    (record,) = [d for d in out.decisions if d.kind == "control"]
    assert record.detail["audit_id"] == 7


def _row(control: str, scope: str, value: dict[str, object], audit_id: int = 1) -> ControlRow:
    return ControlRow(control, scope, value, "sre", datetime.now(UTC), "test", audit_id)


def test_the_kill_switch_holds_a_preempting_hp_task_until_it_is_off() -> None:
    w, _, _ = _spot_world()
    _control(w, 1500, kill_switch=True)
    out = w.event(_task("H", TaskClass.HP), 2000)
    assert not out.commands  # no EvictCommand, no bind
    assert w.c.running_and_queued()["hp_queued"] == 1
    assert not w.feed(("tick", {}, T0 + 2100)).commands
    _control(w, 2200)  # off: the next pass preempts
    out = w.feed(("tick", {}, T0 + 2200))
    evict = _one(out.commands, EvictCommand)
    assert isinstance(evict, EvictCommand) and evict.preemptor_task_id == "H"


def test_the_kill_switch_does_not_stop_placement_without_preemption() -> None:
    w = World()
    w.node("n0", 2, 0)
    _control(w, 0, kill_switch=True)
    assert _one(w.event(_task("H", TaskClass.HP), 1).commands, BindCommand)


def test_a_frozen_quota_records_new_spot_quotas_without_applying_them() -> None:
    w = World()
    w.node("n0", 2, 0)
    w.node("n1", 2, 0)
    w.event(_quota(2.0), 0)
    _control(w, 1, quota_mode="freeze")
    out = w.event(_quota(4.0), 2)
    assert [d.kind for d in out.decisions][:1] == ["quota_held"]
    assert w.c.runtime.quota[1] == 2.0
    assert w.event(_task("A", TaskClass.SPOT), 3).commands  # 2 GPUs: within the frozen 2
    assert not w.event(_task("B", TaskClass.SPOT), 4).commands  # 4 > 2: held
    _control(w, 5)  # cleared: the last quota received (4 GPUs) is in force
    assert w.c.runtime.quota[1] == 4.0
    assert _one(w.feed(("schedule", {}, T0 + 5)).commands, BindCommand)


def test_a_frozen_quota_does_not_expire() -> None:
    w = World()
    w.node("n0", 2, 0)
    w.event(_quota(2.0, until=100.0), 0)
    _control(w, 1, quota_mode="freeze")
    w.feed(("tick", {}, T0 + 200))
    assert not w.c.quota_frozen and w.c.runtime.quota[1] == 2.0


def test_an_override_admits_spot_up_to_its_values_per_guarantee_hours() -> None:
    w = World()
    w.node("n0", 2, 0)
    w.node("n1", 2, 0)
    w.event(_quota(0.0), 0)
    assert not w.event(_task("A", TaskClass.SPOT), 1).commands  # quota 0
    _control(w, 2, quota_mode="override", quota_gpus=((1, 2.0), (4, 4.0)))
    # 2 and 3 hours take the next longer one's value (4 h: 4 GPUs); 1 hour: 2 GPUs.
    assert w.c.runtime.quota == {1: 2.0, 2: 4.0, 3: 4.0, 4: 4.0}
    assert _one(w.feed(("schedule", {}, T0 + 2)).commands, BindCommand)  # A: 2 <= 2
    assert not w.event(_task("B", TaskClass.SPOT), 3).commands  # 1 h: 4 > 2
    assert _one(w.event(_task("C", TaskClass.SPOT, guarantee_hours=4), 4).commands, BindCommand)
    assert w.event(_quota(0.0), 5).decisions[0].kind == "quota_held"  # the quota service is ignored


def test_an_eviction_cap_lets_one_preemption_through_per_interval() -> None:
    w, _, _ = _spot_world()
    _control(w, 1500, max_evictions=1, interval_s=3600.0)
    first = w.event(_task("H1", TaskClass.HP), 2000)
    evict = _one(first.commands, EvictCommand)
    assert isinstance(evict, EvictCommand) and evict.preemptor_task_id == "H1"
    second = w.event(_task("H2", TaskClass.HP), 2001)
    assert not [c for c in second.commands if isinstance(c, EvictCommand)]
    queued = w.c.explain("H2").queued
    assert queued is not None and queued.reason is Unschedulable.EVICTION_BUDGET
    ack = EvictAck(
        command_id=evict.command_id,
        node=evict.node,
        task_ids=evict.task_ids,
        outcome=EvictOutcome.CHECKPOINTED,
        acked_at=datetime.fromtimestamp(T0 + 2002, UTC),
    )
    w.event(ack, 2002)
    assert not [c for c in w.feed(("tick", {}, T0 + 5000)).commands if isinstance(c, EvictCommand)]
    # An hour after the first eviction the budget is back: H2 preempts the other spot task.
    later = w.feed(("tick", {}, T0 + 5601))
    evict2 = _one(later.commands, EvictCommand)
    assert isinstance(evict2, EvictCommand) and evict2.preemptor_task_id == "H2"


def test_controls_replay_from_the_journal() -> None:
    w, _, _ = _spot_world()
    _control(w, 1500, kill_switch=True, max_evictions=3, interval_s=600.0)
    w.event(_task("H", TaskClass.HP), 2000)
    again = PoolController("A100", w.c.settings)
    for entry in w.journal:
        apply(again, entry)
    assert again.controls == w.c.controls and again.runtime.cap.cap == (3, 600.0)
    assert again.running_and_queued() == w.c.running_and_queued()


def test_desired_controls_combine_cluster_wide_and_pool_rows() -> None:
    rows = [
        _row("kill_switch", ALL, {"on": True}, 3),
        _row("eviction_cap", ALL, {"max_evictions": 5, "interval_s": 3600.0}, 4),
        _row("eviction_cap", "A100", {"max_evictions": 1, "interval_s": 60.0}, 5),
        _row("quota", "A100", {"mode": "override", "quota_gpus": {"1": 3.0}}, 6),
    ]
    a100, audit = desired("A100", rows)
    assert a100 == Controls(True, "override", ((1, 3.0),), 1, 60.0) and audit == 6
    h800, audit = desired("H800", rows)
    assert h800 == Controls(kill_switch=True, max_evictions=5, interval_s=3600.0) and audit == 4
    assert desired("H800", []) == (Controls(), None)


def test_entries_are_journaled_only_for_pools_whose_controls_changed() -> None:
    a, b = PoolController("A"), PoolController("B")
    rows = [_row("kill_switch", "A", {"on": True}, 9)]
    found = entries({"A": a, "B": b}, rows, 10.0)
    assert [(pool, entry.to_row()) for pool, entry in found] == [
        ("A", ("control", {"controls": Controls(kill_switch=True).as_dict(), "audit_id": 9}, 10.0))
    ]
    entry: Entry = found[0][1]
    apply(a, entry)
    assert entries({"A": a, "B": b}, rows, 11.0) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"quota_mode": "thaw"},
        {"quota_mode": "override"},
        {"max_evictions": -1},
        {"max_evictions": 1, "interval_s": 0.0},
        {"quota_mode": "override", "quota_gpus": ((0, 1.0),)},
    ],
)
def test_invalid_controls_raise(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Controls(**bad)  # type: ignore[arg-type]

"""The controller's held starts now live in the core driver (services/core/driver/held.py): the
driver's `next_due` names the held start's and the ending's deadline, so a timer can wake exactly
then, and the binds go out at that deadline and not before. Worked by hand on the `_spot_world`
of test_controller (A on n0 since t=1, B on n1 since t=1001; H, HP, evicts B at t=2000; grace 30 s,
margin 10 s)."""

from __future__ import annotations

from test_controller import T0, _one, _spot_world, _task

from gfs.schemas.commands import BindCommand, EvictCommand
from gfs.schemas.tasks import TaskClass
from gfs.services.preemption.journal import snapshots


def test_the_drivers_next_due_is_the_held_starts_deadline_and_the_binds_go_out_then() -> None:
    w, _, _ = _spot_world()
    out = w.event(_task("H", TaskClass.HP), 2000)
    evict = _one(out.commands, EvictCommand)
    assert isinstance(evict, EvictCommand) and evict.task_ids == ("B",)
    held = [d for d in out.decisions if d.kind == "bind_held"]
    assert len(held) == 1 and held[0].detail["deadline_s"] == T0 + 2040  # 2000 + 30 + 10
    assert held[0].detail["waiting_for"] == [str(evict.command_id)]
    # Without the held start the next timer would be the quota's expiry (T0 + 3600) or A's first
    # guarantee period (T0 + 3601); B's ending and H's held start are both due at T0 + 2040.
    assert w.c.driver.next_due == T0 + 2040
    assert not w.feed(("tick", {}, T0 + 2039.5)).commands
    assert "H" in w.c.pending
    out = w.feed(("tick", {}, T0 + 2040))
    bind = _one(out.commands, BindCommand)
    assert isinstance(bind, BindCommand) and bind.task_id == "H" and "H" not in w.c.pending
    bound = [d for d in out.decisions if d.kind == "bound"]
    assert bound[0].detail["why"] == "grace period passed without every acknowledgement"
    assert w.c.driver.next_due == T0 + 3600  # only the quota's expiry and A's periods are left


def test_a_snapshot_records_the_held_starts_module_and_restores_the_held_start() -> None:
    w, _, _ = _spot_world()
    w.event(_task("H", TaskClass.HP), 2000)
    blob, version, modules = snapshots.encode(snapshots.Image({"A100": w.c}), w.c.settings)
    assert "gfs.services.core.driver.held" in modules  # its source is part of the snapshot's version
    image = snapshots.decode(blob, version, modules, w.c.settings)
    assert image is not None
    restored = image.controllers["A100"]
    assert list(restored.pending) == ["H"] and restored.pending["H"].deadline == T0 + 2040
    bind = _one(restored.tick(T0 + 2040).commands, BindCommand)  # released by the restored deadline
    assert isinstance(bind, BindCommand) and bind.task_id == "H"

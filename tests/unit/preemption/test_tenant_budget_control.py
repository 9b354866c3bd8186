"""Per-tenant eviction budgets as an SRE control (issue 27 item 3): the desired state from the
control rows, the controller's journaled `control` entry putting them in force on the runtime,
their replay, and the remaining budgets the API and dashboard show (tenant_budgets.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from test_controller import T0, World, _one, _quota

from gfs.schemas.commands import BindCommand, EvictCommand
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.settings import Controls
from gfs.services.preemption.controller.tenant_budgets import budgets_view
from gfs.services.preemption.journal.desired_controls import ControlRow, desired
from gfs.services.preemption.journal.inputs import apply


def _task(tid: str, cls: TaskClass, tenant: str) -> TaskSubmitted:
    return TaskSubmitted(
        task_id=tid, tenant=tenant, gpu_model="A100", gpus_per_worker=2, workers=1, task_class=cls,
        command=("gfs", "fake-task"),
    )  # fmt: skip


def _control(w: World, t: float, budgets: tuple[tuple[str, int, str], ...]) -> None:
    controls = Controls(tenant_budgets=budgets)
    w.feed(("control", {"controls": controls.as_dict(), "audit_id": 3}, T0 + t))


def _two_tenants() -> World:
    """n0 and n1 (2 GPUs each): A of org-x on n0 from t=1, B of org-y on n1 from t=1001. At
    t=2000, B has run 1000 s and A 2000 s: B is the cheaper victim (the controller's own test)."""
    w = World()
    w.node("n0", 2, 0)
    w.node("n1", 2, 0)
    w.event(_quota(4.0), 0)
    bind_a = _one(w.event(_task("A", TaskClass.SPOT, "org-x"), 0).commands, BindCommand)
    assert isinstance(bind_a, BindCommand)
    w.started(bind_a, 1)
    bind_b = _one(w.event(_task("B", TaskClass.SPOT, "org-y"), 1000).commands, BindCommand)
    assert isinstance(bind_b, BindCommand)
    w.started(bind_b, 1001)
    return w


def _victims(w: World, t: float) -> tuple[str, ...]:
    evict = _one(w.event(_task("H", TaskClass.HP, "org-hp"), t).commands, EvictCommand)
    assert isinstance(evict, EvictCommand)
    return evict.task_ids


@pytest.mark.parametrize(
    ("budgets", "victims"),
    [
        ((), ("B",)),  # no budget: the cheaper victim
        ((("org-y", 1, "day"),), ("B",)),  # org-y may still lose one
        ((("org-y", 0, "day"),), ("A",)),  # org-y may lose none: org-x's task goes instead
        ((("org-y", 0, "periods"),), ("A",)),
    ],
)
def test_a_tenant_budget_control_steers_the_victim(
    budgets: tuple[tuple[str, int, str], ...], victims: tuple[str, ...]
) -> None:
    w = _two_tenants()
    _control(w, 1500, budgets)
    assert _victims(w, 2000) == victims


def test_the_budget_in_force_replays_from_the_journal_and_shows_what_is_left() -> None:
    w = _two_tenants()
    _control(w, 1500, (("org-x", 1, "day"), ("org-y", 2, "day")))
    assert _victims(w, 2000) == ("B",)  # org-y: one of two spent
    view = budgets_view(w.c.runtime, T0 + 2000)
    assert view == {
        "org-x": {"max_evictions": 1, "per": "day", "used": 0, "left": 1},
        "org-y": {"max_evictions": 2, "per": "day", "used": 1, "left": 1},
    }
    again = PoolController("A100", w.c.settings)
    for entry in w.journal:
        apply(again, entry)
    assert again.controls == w.c.controls
    assert budgets_view(again.runtime, T0 + 2000) == view
    # A day after the eviction its count is gone.
    assert budgets_view(w.c.runtime, T0 + 2000 + 86400)["org-y"]["left"] == 2
    # Lifting one budget leaves the other.
    _control(w, 3000, (("org-x", 1, "day"),))
    assert set(budgets_view(w.c.runtime, T0 + 3000)) == {"org-x"}


def _row(control: str, scope: str, value: dict[str, object], audit_id: int) -> ControlRow:
    return ControlRow(control, scope, value, "sre", datetime.now(UTC), "test", audit_id)


def test_desired_controls_carry_every_tenant_budget_to_every_pool() -> None:
    rows = [
        _row("tenant_budget", "org-y", {"max_evictions": 2, "per": "day"}, 8),
        _row("tenant_budget", "org-x", {"max_evictions": 5, "per": "periods"}, 4),
        _row("eviction_cap", "A100", {"max_evictions": 1, "interval_s": 60.0}, 5),
    ]
    budgets = (("org-x", 5, "periods"), ("org-y", 2, "day"))
    assert desired("H800", rows) == (Controls(tenant_budgets=budgets), 8)
    a100, audit = desired("A100", rows)
    assert a100 == Controls(max_evictions=1, interval_s=60.0, tenant_budgets=budgets) and audit == 8


def test_a_control_entry_journaled_before_budgets_existed_still_decodes() -> None:
    old = {"kill_switch": False, "quota_mode": None, "quota_gpus": {}, "max_evictions": 2, "interval_s": 60.0}
    assert Controls.from_dict(old) == Controls(max_evictions=2, interval_s=60.0)
    assert Controls.from_dict(Controls(tenant_budgets=(("t", 1, "day"),)).as_dict()).tenant_budgets == (
        ("t", 1, "day"),
    )


@pytest.mark.parametrize("bad", [("t", -1, "day"), ("t", 1, "week")])
def test_invalid_tenant_budgets_raise(bad: tuple[str, int, str]) -> None:
    with pytest.raises(ValueError):
        Controls(tenant_budgets=(bad,))

"""Expiry of ended tasks' ids (issue 25, services/preemption/controller/seen_tasks.py): a redelivered
submission within the redelivery window is still rejected as a duplicate; after the window an
ended task's id is forgotten (memory released), while a task the pool still runs keeps its id."""

from __future__ import annotations

from gfs.schemas.tasks import TaskCancelled, TaskClass, TaskSubmitted
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.seen_tasks import SeenTasks
from gfs.services.preemption.controller.settings import ControllerSettings
from gfs.services.preemption.journal.inputs import Entry, apply, entry_for

T0 = 1_800_000_000.0
WINDOW = 3600.0


def test_ids_expire_a_window_after_they_were_added_unless_still_known() -> None:
    seen = SeenTasks(100.0)
    seen.add("a", 0.0)
    seen.add("b", 10.0)
    seen.add("a", 50.0)  # already there: keeps its first time
    assert seen.expire(99.0) == 0 and set(seen) == {"a", "b"}
    assert seen.expire(100.0, {"b"}) == 1  # a: added at 0, ended -> forgotten at 0 + 100
    assert "a" not in seen and "b" in seen
    assert seen.expire(110.0, {"b"}) == 0  # b: 100s old but still known: kept, looked at again at 210
    assert seen.expire(209.0) == 0 and "b" in seen
    assert seen.expire(210.0) == 1 and len(seen) == 0


def _controller() -> PoolController:
    c = PoolController("A100", ControllerSettings(seen_window_s=WINDOW))
    apply(c, ("node_seen", {"node": "n0", "gpus": 2}, T0))
    return c


def _submit(tid: str, at: float, cls: TaskClass = TaskClass.HP) -> Entry:
    task = TaskSubmitted(task_id=tid, tenant="org-a", gpu_model="A100", gpus_per_worker=1, workers=1,
                         task_class=cls, command=("gfs", "fake-task"))  # fmt: skip
    entry = entry_for(task, at)
    assert entry is not None
    return entry


def _cancel(tid: str, at: float) -> Entry:
    entry = entry_for(TaskCancelled(task_id=tid, tenant="org-a", reason="done"), at)
    assert entry is not None
    return entry


def _decision(c: PoolController, entry: Entry) -> str:
    (decision,) = apply(c, entry).decisions
    return f"{decision.kind}:{decision.detail.get('reason', '')}"


def test_a_redelivered_submission_within_the_window_is_still_a_duplicate() -> None:
    c = _controller()
    assert _decision(c, _submit("a", T0 + 1)) == "accepted:"
    assert _decision(c, _cancel("a", T0 + 2)) == "withdrawn:done"  # ended
    # Redelivered 59 minutes after its submission: still rejected, the task does not run twice.
    assert _decision(c, _submit("a", T0 + 1 + WINDOW - 60)) == "rejected:DUPLICATE_TASK_ID"


def test_an_ended_tasks_id_is_released_after_the_window_a_running_ones_is_kept() -> None:
    c = _controller()
    assert _decision(c, _submit("ended", T0 + 1)) == "accepted:"
    assert _decision(c, _cancel("ended", T0 + 2)) == "withdrawn:done"
    assert _decision(c, _submit("queued", T0 + 3)) == "accepted:"  # never ends in this test
    assert set(c.seen) == {"ended", "queued"}
    # The next submission after the window: "ended" is forgotten, "queued" is still known.
    assert _decision(c, _submit("other", T0 + 1 + WINDOW)) == "accepted:"
    assert set(c.seen) == {"queued", "other"}
    assert _decision(c, _submit("queued", T0 + 2 + WINDOW)) == "rejected:DUPLICATE_TASK_ID"
    # After the window "ended" is a new task (its duplicate could no longer be in flight).
    assert _decision(c, _submit("ended", T0 + 5 + WINDOW)) == "accepted:"


def test_memory_stays_flat_over_many_windows() -> None:
    c = _controller()
    sizes = []
    for hour in range(10):  # 10 windows, 100 tasks an hour, each submitted then cancelled
        for i in range(100):
            at = T0 + hour * WINDOW + i * 30
            apply(c, _submit(f"t{hour}-{i}", at))
            apply(c, _cancel(f"t{hour}-{i}", at + 1))
        sizes.append(len(c.seen))
    # Hand-worked: task i of hour h is submitted at h*3600 + 30*i, so each submission of hour h
    # is exactly a window after task i of hour h-1 and forgets it (expiry at <= now - window):
    # at the end of every hour only that hour's 100 ids remain. Before issue 25: 100 * (h + 1).
    assert sizes == [100] * 10

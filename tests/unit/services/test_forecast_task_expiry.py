"""The forecast stream forgets ended tasks (issue 25: its `tasks` table kept every task ever seen):
the ending is timed on the record, and each partition's ended tasks come due `keep_s` after their
ending, in ending order, on the stream's clock (hand-worked times)."""

from __future__ import annotations

import pytest
from aiokafka.partitioner import DefaultPartitioner

from schemas.tasks import TaskAccepted, TaskClass, TaskFinished, TaskSubmitted
from services.forecast.pipeline import TaskRecord, apply_task_event
from services.forecast.task_expiry import EndedTasks, partition_of

T0 = 1_800_000_000.0


def test_the_ending_is_timed_on_the_record_and_survives_the_changelog() -> None:
    submit = TaskSubmitted(task_id="a", tenant="org", gpu_model="A100", gpus_per_worker=2, workers=1,
                           task_class=TaskClass.HP, command="serve")  # fmt: skip
    record, _ = apply_task_event(None, submit, T0)
    record, _ = apply_task_event(
        record, TaskAccepted(task_id="a", pool="A100", task_class=TaskClass.HP), T0 + 1
    )
    assert record is not None and record.ended_s is None
    finished = TaskFinished.model_validate(
        {"task_id": "a", "exit_code": 0, "finished_at": "2027-01-15T08:00:00Z"}
    )
    ended, delta = apply_task_event(record, finished, T0 + 600)
    assert ended is not None and ended.ended and ended.ended_s == T0 + 600
    assert delta is not None and delta.gpus == -2.0
    assert TaskRecord.from_json(ended.to_json()) == ended
    # A record written before the field existed still reads (not ended-timed).
    old = {
        "tenant": "org",
        "gpus": 2.0,
        "hp": True,
        "pool": "A100",
        "accepted_s": T0,
        "counted": False,
        "ended": True,
    }
    assert TaskRecord.from_json(old).ended_s is None


def test_ended_tasks_come_due_per_partition_keep_s_after_their_ending() -> None:
    ended = EndedTasks(keep_s=3600.0)
    ended.add(0, T0, "a")
    ended.add(0, T0 + 100, "b")
    ended.add(1, T0 + 50, "c")
    assert ended.due(0, T0 + 3599) == []
    assert ended.due(0, T0 + 3600) == ["a"]  # a ended at T0: due an hour later, not b yet
    assert ended.due(1, T0 + 3600) == []
    assert ended.due(0, T0 + 9999) == ["b"]
    assert ended.due(0, T0 + 9999) == []  # handed out once
    assert len(ended) == 1 and ended.due(1, T0 + 3650) == ["c"]


def test_seeding_learns_the_tables_ended_records_and_untimed_ones_go_first() -> None:
    ended = EndedTasks(keep_s=60.0)
    table = [
        ("live", {"ended": False, "ended_s": None}),
        ("late", {"ended": True, "ended_s": T0 + 30}),
        ("early", {"ended": True, "ended_s": T0}),
        ("legacy", {"ended": True}),  # from before `ended_s`: counts as ended at 0, due at once
    ]
    assert ended.seed(table, lambda tid: 0) == 3 and ended.seeded
    assert ended.due(0, 0.0 + 60) == ["legacy"]
    assert ended.due(0, T0 + 60) == ["early"]
    assert ended.due(0, T0 + 90) == ["late"]
    ended.reset()
    assert not ended.seeded and len(ended) == 0
    with pytest.raises(ValueError, match="keep"):
        EndedTasks(keep_s=-1)


@pytest.mark.parametrize("task_id", ["a", "task-0001", "ümlaut", "x" * 200])
def test_a_tasks_partition_is_the_default_producer_partitioners(task_id: str) -> None:
    partitions = list(range(6))
    assert partition_of(task_id, 6) == DefaultPartitioner()(task_id.encode(), partitions, partitions)

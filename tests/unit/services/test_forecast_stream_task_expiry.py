"""The forecast stream forgets ended tasks (issue 25: its `tasks` table kept every task ever seen):
the ending is timed on the record, and each partition's ended tasks come due `keep_s` after their
ending, in ending order, on the stream's clock (hand-worked times)."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.partitioner import DefaultPartitioner

from gfs.schemas.tasks import TaskAccepted, TaskClass, TaskFinished, TaskSubmitted
from gfs.services.forecast.pipeline import TaskRecord, apply_task_event
from gfs.services.forecast.task_expiry import EndedTasks, delete_due, partition_of

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


def test_the_table_stays_bounded_as_tasks_end() -> None:
    # 10,000 tasks of one partition, each ended at second i (expiry clock), one event a second:
    # with a 60 s window the table holds the last 60 ended records (plus the one live task),
    # never more, and an ended task's record goes exactly 60 s after its ending.
    table: dict[str, Any] = {"live": {"ended": False}}
    ended = EndedTasks(keep_s=60.0)
    sizes = []
    for i in range(10_000):
        tid = f"t{i}"
        table[tid] = {"ended": True, "ended_s": float(i)}
        ended.add(0, float(i), tid)
        delete_due(table, ended, 0, float(i), 6)
        sizes.append(len(table))
    assert max(sizes) == 62 and sizes[-1] == 62  # t(i-60) .. t(i), and "live"
    assert "t9939" not in table and "t9940" in table and "live" in table


def test_a_record_that_is_no_longer_ended_or_gone_is_left_alone() -> None:
    table: dict[str, Any] = {"a": {"ended": False}}
    ended = EndedTasks(keep_s=0.0)
    ended.seed([], lambda _: 0)
    ended.add(0, 1.0, "a")
    ended.add(0, 1.0, "gone")
    assert delete_due(table, ended, 0, 5.0, 6) == 0 and table == {"a": {"ended": False}}

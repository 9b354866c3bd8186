"""`--since` (services/whatif/log_reader.py): how far back, and which records it keeps."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from gfs.schemas.tasks import Placement, TaskClass, TaskStarted, TaskSubmitted
from gfs.services.whatif.log_reader import Log, LogRecord, keep_since, parse_since
from gfs.services.whatif.rebuild import rebuild

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC).timestamp()


def test_since_reads_days_hours_minutes_seconds_and_weeks() -> None:
    assert parse_since("7d") == 7 * 86400.0
    assert parse_since("12h") == 43200.0
    assert parse_since("30m") == 1800.0
    assert parse_since("90s") == 90.0
    assert parse_since("90") == 90.0
    assert parse_since("2w") == 14 * 86400.0
    assert parse_since("1.5h") == 5400.0
    for bad in ("", "7x", "d", "-1d", "0h", "7 days"):
        with pytest.raises(ValueError, match="positive duration"):
            parse_since(bad)


def _submitted(tid: str) -> TaskSubmitted:
    return TaskSubmitted(
        task_id=tid, tenant="org", gpu_model="A100", gpus_per_worker=1, workers=1,
        task_class=TaskClass.SPOT, expected_duration_s=600.0, command=("true",),
    )  # fmt: skip


def _started(tid: str, at: float) -> TaskStarted:
    return TaskStarted(
        task_id=tid, pool="A100", task_class=TaskClass.SPOT,
        placements=(Placement(worker_index=0, node="n0", gpu_indices=(0,)),),
        started_at=datetime.fromtimestamp(at, UTC),
    )  # fmt: skip


def test_records_written_before_since_are_left_out_and_each_event_is_read_once() -> None:
    since_ms = 1_000_000
    again = uuid.uuid4()
    records = [
        LogRecord("gfs.tasks.submit", since_ms - 1, T0, _submitted("old"), uuid.uuid4()),
        LogRecord("gfs.tasks.submit", since_ms, T0 + 60, _submitted("new"), again),
        LogRecord("gfs.tasks.submit", since_ms + 5, T0 + 60, _submitted("new"), again),  # redelivered
        LogRecord("gfs.tasks.lifecycle", since_ms + 9, T0 + 120, _started("old", T0 + 120), uuid.uuid4()),
        LogRecord("gfs.tasks.lifecycle", since_ms + 9, T0 + 180, _started("new", T0 + 180), uuid.uuid4()),
    ]
    log = keep_since(records, since_ms, Log())
    assert [r.payload.task_id for r in log.records] == ["new", "old", "new"]
    assert (log.before_since, log.duplicates) == (1, 1)
    # A task submitted before --since cannot be replayed (its shape is not in the range): its
    # later lifecycle events do not make it one.
    rebuilt = rebuild(log.records)
    assert list(rebuilt.tasks) == ["new"]
    assert [j.name for j in rebuilt.trace.jobs] == ["new"]

"""Which lifecycle events end a task's route (router/expiry.py, issue 25), and the prune schedule.

Hand-worked: a task ends when it finished, was withdrawn from its queue, was evicted without going
back to its queue, or was rejected for anything but being a duplicate (a duplicate's rejection is
about a second submission of an id whose first task may still run)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from gfs.schemas.tasks import (
    EvictionReason,
    RejectionReason,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
    TaskStarted,
    TaskWithdrawn,
)
from gfs.services.preemption.router.expiry import RouteExpiry, ended_tasks

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _evicted(tid: str, *, requeued: bool) -> TaskEvicted:
    return TaskEvicted(task_id=tid, node="n0", command_id=uuid.uuid4(), reason=EvictionReason.CANCELLED,
                       evicted_at=AT, lost_gpu_seconds=0.0, requeued=requeued)  # fmt: skip


def test_only_the_events_that_end_a_task_end_its_route() -> None:
    events = [
        TaskFinished(task_id="done", exit_code=0, finished_at=AT),
        TaskFinished(task_id="failed", exit_code=3, finished_at=AT),
        TaskWithdrawn(task_id="withdrawn", pool="P", withdrawn_at=AT),
        _evicted("cancelled-running", requeued=False),
        _evicted("preempted-spot", requeued=True),  # back in its queue: lives on
        TaskRejected(task_id="too-big", reason=RejectionReason.GANG_LARGER_THAN_POOL, message="m"),
        TaskRejected(task_id="again", reason=RejectionReason.DUPLICATE_TASK_ID, message="m"),
    ]
    assert ended_tasks(events) == ["done", "failed", "withdrawn", "cancelled-running", "too-big"]


def test_a_started_task_is_not_ended() -> None:
    started = TaskStarted.model_construct(task_id="run")  # only its type matters here
    assert ended_tasks([started]) == []


@pytest.mark.parametrize(("keep_s", "every_s"), [(0.0, 1.0), (5.0, 1.0), (300.0, 30.0), (86_400.0, 60.0)])
def test_the_prune_runs_every_tenth_of_the_window_between_a_second_and_a_minute(
    keep_s: float, every_s: float
) -> None:
    expiry = RouteExpiry.for_window(keep_s)
    assert (expiry.keep_s, expiry.every_s) == (keep_s, every_s)


def test_a_negative_window_or_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="keep_s"):
        RouteExpiry(keep_s=-1.0)
    with pytest.raises(ValueError, match="batch"):
        RouteExpiry(batch=0)

"""Which dead letters a filter selects, and what replaying one does (services/platform/dead_letters)."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta

from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.topics import encode
from gfs.services.platform.dead_letters import REPLAY_HEADER, Letter, Selection, Verdict, plan_replay

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


ERROR = "Schema_Version 2 is not supported"


def _letter(value: bytes, *, offset: int = 7, topic: str = "gfs.tasks.submit", error: str = ERROR,
            failed_at: datetime = T0, truncated: bool = False, sha: str | None = None) -> Letter:  # fmt: skip
    letter = DeadLetter(
        original=base64.b64encode(value).decode(),
        error=error,
        source_topic=topic,
        source_partition=3,
        source_offset=41,
        failed_at=failed_at,
        consumer_group="gfs-preemption-router",
        original_size=len(value),
        original_sha256=sha if sha is not None else hashlib.sha256(value).hexdigest(),
        truncated=truncated,
    )
    return Letter(0, offset, letter)


def _submission() -> bytes:
    task = TaskSubmitted(task_id="job-9", tenant="org-a", gpu_model="A100", gpus_per_worker=1, workers=1,
                         task_class=TaskClass.SPOT, command=("true",))  # fmt: skip
    return encode(wrap(task, producer="test", occurred_at=T0))


def test_a_valid_record_replays_byte_for_byte_under_its_registry_key() -> None:
    value = _submission()
    plan = plan_replay(_letter(value))
    assert plan.verdict is Verdict.REPLAY
    assert plan.value == value  # same bytes, so the same event_id
    assert plan.key == b"job-9"
    assert plan.topic == "gfs.tasks.submit"
    assert plan.headers == [(REPLAY_HEADER, b"gfs.deadletter/0/7")]


def test_a_record_that_still_fails_is_reported_with_todays_reason() -> None:
    plan = plan_replay(_letter(b'{"event_type": "TaskSubmitted"'))
    assert plan.verdict is Verdict.STILL_INVALID
    assert "malformed JSON" in plan.detail
    wrong_topic = plan_replay(_letter(_submission(), topic="gfs.commands.bind"))
    assert wrong_topic.verdict is Verdict.STILL_INVALID and "TaskSubmitted" in wrong_topic.detail


def test_truncated_and_corrupt_letters_are_never_replayed() -> None:
    value = _submission()
    truncated = plan_replay(_letter(value[:20], truncated=True, sha=hashlib.sha256(value).hexdigest()))
    assert truncated.verdict is Verdict.TRUNCATED and "gfs.tasks.submit/3/41" in truncated.detail
    corrupt = plan_replay(_letter(value, sha="0" * 64))
    assert corrupt.verdict is Verdict.CORRUPT and corrupt.value is None


def test_selection_criteria_all_hold() -> None:
    item = _letter(b"x", offset=7)
    assert Selection().empty and Selection().matches(item)
    assert Selection(offsets=frozenset({7})).matches(item)
    assert not Selection(offsets=frozenset({8})).matches(item)
    assert Selection(topic="gfs.tasks.submit").matches(item)
    assert not Selection(topic="gfs.quotas").matches(item)
    assert Selection(reason="schema_VERSION").matches(item)  # any case
    assert not Selection(reason="malformed").matches(item)
    assert Selection(since=T0).matches(item)  # since is inclusive
    assert not Selection(since=T0 + timedelta(seconds=1)).matches(item)
    assert not Selection(until=T0).matches(item)  # until is exclusive
    later = T0 + timedelta(seconds=1)
    assert Selection(until=later, topic="gfs.tasks.submit", offsets=frozenset({7})).matches(item)
    assert not Selection(until=later, topic="gfs.quotas").matches(item)

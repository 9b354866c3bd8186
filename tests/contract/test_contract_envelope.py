"""The envelope: wrapping, UTC normalisation, event_type consistency, compact encoding."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID

import pytest
from pydantic import ValidationError

from gfs.schemas.envelope import CURRENT_SCHEMA_VERSION, Envelope, wrap
from gfs.schemas.tasks import TaskCancelled, TaskClass, TaskSubmitted
from gfs.schemas.topics import decode, encode, key_of


def a_submission(**overrides: object) -> TaskSubmitted:
    fields: dict[str, object] = {
        "task_id": "job-1",
        "tenant": "org-a",
        "gpu_model": "H800",
        "gpus_per_worker": 0.5,
        "workers": 1,
        "task_class": TaskClass.HP,
        "command": "python serve.py",
    }
    fields.update(overrides)
    return TaskSubmitted.model_validate(fields)


def test_wrap_fills_the_envelope() -> None:
    at = datetime(2024, 8, 3, 9, 0, tzinfo=UTC)
    env = wrap(a_submission(), producer="gfs-cli", occurred_at=at)
    assert (env.event_type, env.schema_version, env.producer, env.occurred_at) == (
        "TaskSubmitted",
        CURRENT_SCHEMA_VERSION,
        "gfs-cli",
        at,
    )
    assert isinstance(env.event_id, UUID)
    assert wrap(a_submission(), producer="gfs-cli", occurred_at=at).event_id != env.event_id


def test_wrap_defaults_occurred_at_to_now_in_utc() -> None:
    before = datetime.now(UTC)
    env = wrap(a_submission(), producer="gfs-cli")
    assert before <= env.occurred_at <= datetime.now(UTC)
    assert env.occurred_at.utcoffset() == timedelta(0)


@pytest.mark.parametrize("offset_hours", [8, -5, 0, 5.5], ids=["beijing", "new-york", "utc", "india"])
def test_occurred_at_is_normalised_to_utc(offset_hours: float) -> None:
    local = datetime(2024, 8, 3, 12, 0, tzinfo=timezone(timedelta(hours=offset_hours)))
    env = wrap(a_submission(), producer="p", occurred_at=local)
    assert env.occurred_at == local  # the same instant...
    assert env.occurred_at.tzinfo is UTC  # ...expressed in UTC
    assert env.occurred_at.hour == (12 - offset_hours) % 24 // 1


def test_naive_occurred_at_is_rejected_with_a_clear_error() -> None:
    with pytest.raises(ValidationError) as info:
        wrap(a_submission(), producer="p", occurred_at=datetime(2024, 8, 3, 12, 0))
    error = info.value.errors()[0]
    assert error["loc"] == ("occurred_at",)
    assert "timezone" in error["msg"]


def test_event_type_must_name_the_payload_class() -> None:
    with pytest.raises(ValidationError, match="does not match the payload, which is a TaskSubmitted"):
        Envelope[TaskSubmitted](
            event_type="TaskCancelled",
            occurred_at=datetime(2024, 8, 3, tzinfo=UTC),
            producer="p",
            payload=a_submission(),
        )


def test_envelope_and_payload_are_immutable() -> None:
    env = wrap(a_submission(), producer="p")
    with pytest.raises(ValidationError):
        env.producer = "q"
    with pytest.raises(ValidationError):
        env.payload.workers = 3


def test_encode_is_compact_utf8_json() -> None:
    env = wrap(
        TaskCancelled(task_id="job-ü", tenant="org-a", reason="dupe"),
        producer="p",
        occurred_at=datetime(2024, 8, 3, tzinfo=UTC),
    )
    raw = encode(env)
    assert raw == json.dumps(json.loads(raw), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert "job-ü".encode() in raw
    assert json.loads(raw)["occurred_at"] == "2024-08-03T00:00:00Z"


def test_wrapped_message_round_trips_and_is_keyed_by_task() -> None:
    env = wrap(a_submission(task_id="job-42", command=["python", "x.py"]), producer="p")
    decoded = decode("gfs.tasks.submit", encode(env))
    assert decoded == env
    assert isinstance(decoded.payload, TaskSubmitted)
    assert decoded.payload.command == ("python", "x.py")
    assert key_of(env) == b"job-42"


@pytest.mark.parametrize(
    ("gpus", "valid"),
    [
        (0.25, True),
        (0.999, True),
        (1, True),
        (1.0, True),
        (2, True),
        (8.0, True),
        (1.5, False),
        (2.01, False),
    ],
    ids=lambda value: str(value),
)
def test_gpus_per_worker_fraction_rule(gpus: float, valid: bool) -> None:
    if valid:
        assert a_submission(gpus_per_worker=gpus).gpus_per_worker == gpus
    else:
        with pytest.raises(ValidationError, match="gpus_per_worker"):
            a_submission(gpus_per_worker=gpus)

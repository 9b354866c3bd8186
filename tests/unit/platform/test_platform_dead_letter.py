"""Dead-letter records and their readable reasons, from real decode failures of the registry."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime

import pytest

from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.topics import decode, encode
from gfs.services.platform.kafka.dead_letter import (
    MAX_ORIGINAL_BYTES,
    MAX_REASON_CHARS,
    FailedRecord,
    Refused,
    build_dead_letter,
    describe_error,
    reason_code,
)

SUBMIT = "gfs.tasks.submit"
FAILED_AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _submitted_dict(**payload_changes: object) -> dict[str, object]:
    payload = TaskSubmitted(
        task_id="job-1", tenant="org-a", gpu_model="A100", gpus_per_worker=1.0, workers=2,
        task_class=TaskClass.HP, command="python train.py",
    )  # fmt: skip
    data = json.loads(encode(wrap(payload, producer="test", occurred_at=FAILED_AT)))
    data["payload"].update(payload_changes)
    return data


def _decode_error(raw: bytes) -> ValueError:
    with pytest.raises(ValueError) as caught:
        decode(SUBMIT, raw)
    return caught.value


def _reason_for(raw: bytes) -> str:
    return describe_error(_decode_error(raw))


@pytest.mark.parametrize(
    ("raw", "expected_fragments"),
    [
        (b'{"event_type": "TaskSubmitted", ', ["malformed JSON", "line 1 column"]),
        (b'{"a": "\xff"}', ["not UTF-8", "byte 7"]),
        (
            json.dumps(_submitted_dict(workers=0)).encode(),
            ["payload.workers", "greater than or equal to 1", "0"],
        ),
        (json.dumps(_submitted_dict(task_id="")).encode(), ["payload.task_id"]),
        (json.dumps({**_submitted_dict(), "event_type": "Nope"}).encode(), ["event_type", "Nope"]),
        (b"[1, 2]", ["must be a JSON object"]),
    ],
    ids=[
        "truncated-json",
        "not-utf8",
        "workers-zero",
        "empty-task-id",
        "unknown-event-type",
        "not-an-object",
    ],
)
def test_reason_names_the_problem(raw: bytes, expected_fragments: list[str]) -> None:
    reason = _reason_for(raw)
    for fragment in expected_fragments:
        assert fragment in reason, reason


def test_missing_field_is_named() -> None:
    data = _submitted_dict()
    del data["payload"]["gpu_model"]
    reason = _reason_for(json.dumps(data).encode())
    assert "payload.gpu_model: Field required" in reason


def test_many_errors_are_summarised_and_bounded() -> None:
    data = _submitted_dict()
    data["payload"] = {f"unexpected_{i}": "x" * 500 for i in range(40)}
    reason = _reason_for(json.dumps(data).encode())
    assert "more" in reason
    assert len(reason) <= MAX_REASON_CHARS


def test_other_errors_keep_type_and_message() -> None:
    assert describe_error(KeyError("gfs.nope")) == "KeyError: 'gfs.nope'"


def test_dead_letter_keeps_original_bytes_and_coordinates() -> None:
    raw = b'{"not": "an envelope"} \x00\xff'
    record = FailedRecord(topic=SUBMIT, partition=3, offset=41, value=raw, consumer_group="quota")
    envelope = build_dead_letter(record, error=ValueError("boom"), failed_at=FAILED_AT, producer="gfs-quota")
    letter = envelope.payload
    assert isinstance(letter, DeadLetter)
    assert base64.b64decode(letter.original) == raw
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == (SUBMIT, 3, 41)
    assert (letter.consumer_group, letter.failed_at, letter.error) == ("quota", FAILED_AT, "ValueError: boom")
    assert (envelope.event_type, envelope.producer, envelope.occurred_at) == (
        "DeadLetter",
        "gfs-quota",
        FAILED_AT,
    )
    # It is itself a valid message of the dead-letter topic.
    assert decode("gfs.deadletter", encode(envelope)).payload == letter


def test_oversized_record_is_kept_truncated_with_size_and_hash() -> None:
    # 2 MB of garbage: the letter keeps the first MAX_ORIGINAL_BYTES, the full size and the
    # SHA-256 of the whole value, and encodes well under the broker's 1 MiB message limit.
    raw = bytes(range(256)) * (2_000_000 // 256)
    record = FailedRecord(topic=SUBMIT, partition=0, offset=7, value=raw, consumer_group="g")
    envelope = build_dead_letter(record, error=ValueError("too big"), failed_at=FAILED_AT, producer="p")
    letter = envelope.payload
    assert letter.truncated and letter.original_size == len(raw)
    assert letter.original_sha256 == hashlib.sha256(raw).hexdigest()
    assert base64.b64decode(letter.original) == raw[:MAX_ORIGINAL_BYTES]
    assert len(encode(envelope)) < 1_048_576
    # A small record is kept whole (not truncated), with the same bookkeeping.
    small = build_dead_letter(
        FailedRecord(topic=SUBMIT, partition=0, offset=8, value=b"x" * 10, consumer_group="g"),
        error=ValueError("bad"),
        failed_at=FAILED_AT,
        producer="p",
    ).payload
    assert (small.truncated, small.original_size) == (False, 10)


def test_tombstone_value_is_an_empty_original() -> None:
    record = FailedRecord(topic=SUBMIT, partition=0, offset=0, value=None, consumer_group="g")
    letter = build_dead_letter(record, error=ValueError("empty"), failed_at=FAILED_AT, producer="p").payload
    assert letter.original == ""


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b'{"event_type": "TaskSubmitted", ', "malformed_json"),
        (b'{"a": "\xff"}', "not_utf8"),
        (b"[1, 2]", "envelope_type"),
        (json.dumps({**_submitted_dict(), "event_type": 7}).encode(), "missing_event_type"),
        (json.dumps({**_submitted_dict(), "event_type": "Nope"}).encode(), "unknown_event_type"),
        (json.dumps({**_submitted_dict(), "schema_version": 2}).encode(), "unsupported_schema_version"),
        (json.dumps(_submitted_dict(workers=0)).encode(), "invalid_payload"),
    ],
)
def test_each_decode_failure_has_its_reason_code(raw: bytes, code: str) -> None:
    assert reason_code(_decode_error(raw)) == code


def test_a_refusal_and_an_error_that_names_its_code_keep_it_and_anything_else_is_failed() -> None:
    refused = Refused("signature_mismatch", "EvictAck refused: signed under another key")
    record = FailedRecord(
        topic="gfs.commands.evict-ack", partition=0, offset=3, value=b"{}", consumer_group="g"
    )
    letter = build_dead_letter(record, error=refused, failed_at=FAILED_AT, producer="test").payload
    assert letter.reason == "signature_mismatch"
    assert letter.error == "Refused: EvictAck refused: signed under another key"

    class Named(RuntimeError):
        reason_code = "store_failed"

    assert reason_code(Named("x")) == "store_failed"
    assert reason_code(RuntimeError("boom")) == "failed"
    # The code is part of the wire contract: a letter with a malformed code does not validate.
    with pytest.raises(ValueError, match="reason"):
        DeadLetter.model_validate(letter.model_dump() | {"reason": "Not A Code"})

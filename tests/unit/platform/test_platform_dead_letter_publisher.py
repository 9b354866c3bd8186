"""The one way a consumer dead-letters a record: `DeadLetterPublisher` builds the letter from the
consumed record's coordinates, publishes it on gfs.deadletter through the consumer's sink (awaited),
and counts it; the failure time is the publisher's clock unless the caller gives its own."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import Envelope
from gfs.services.platform.kafka.dead_letter import DeadLetterPublisher

CLOCK = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RECEIVED = datetime(2026, 3, 1, 11, 59, 30, tzinfo=UTC)


@dataclass(frozen=True)
class Record:  # the fields of aiokafka's ConsumerRecord a letter needs
    topic: str
    partition: int
    offset: int
    value: bytes | None


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Envelope[Any]]] = []

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> object:
        self.sent.append((topic_name, envelope))
        return None


async def test_a_letter_carries_the_record_its_reason_and_the_group_and_goes_to_the_dead_letter_topic() -> (
    None
):
    sink = Sink()
    letters = DeadLetterPublisher(
        sink=sink, consumer_group="gfs-quota", producer="gfs-quota", now=lambda: CLOCK
    )
    raw = b'{"not": "an envelope"'
    try:
        json.loads(raw)
    except ValueError as exc:
        error = exc

    letter = await letters.publish(Record("gfs.forecasts", 2, 41, raw), error)

    assert [(topic, env.event_id) for topic, env in sink.sent] == [("gfs.deadletter", letter.event_id)]
    payload = sink.sent[0][1].payload
    assert isinstance(payload, DeadLetter)
    assert (payload.source_topic, payload.source_partition, payload.source_offset) == ("gfs.forecasts", 2, 41)
    assert payload.consumer_group == "gfs-quota"
    assert base64.b64decode(payload.original) == raw
    assert payload.original_size == 21  # {, "not" (5), :, space, "an envelope" (13)
    assert payload.original_sha256 == hashlib.sha256(raw).hexdigest()
    # json's own message for a missing closing brace, one past the 21 bytes.
    assert payload.error == "malformed JSON: Expecting ',' delimiter at line 1 column 22"
    assert payload.failed_at == CLOCK
    assert sink.sent[0][1].producer == "gfs-quota"
    assert letters.published == 1


async def test_the_caller_may_say_when_the_record_failed_and_an_empty_value_is_kept_as_empty() -> None:
    sink = Sink()
    letters = DeadLetterPublisher(sink=sink, consumer_group="gfs-agent-n1", producer="gfs-node-agent")
    try:
        DeadLetter.model_validate({})
    except ValidationError as exc:
        error = exc

    await letters.publish(Record("gfs.commands.bind", 0, 7, None), error, failed_at=RECEIVED)
    await letters.publish(Record("gfs.commands.bind", 0, 8, None), error, failed_at=RECEIVED)

    assert [env.payload.source_offset for _, env in sink.sent] == [7, 8]
    first = sink.sent[0][1].payload
    assert first.failed_at == RECEIVED
    assert (first.original, first.original_size, first.truncated) == ("", 0, False)
    assert first.error.startswith("validation failed: original: Field required")
    assert letters.published == 2

"""Undecodable records on gfs.tasks.submit go to gfs.deadletter with a readable reason, and the
consumer carries on with the next good record."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid

import pytest
from kafka_harness import consume_until, dead_letters_of, start_at_end
from payload_examples import task_submitted

from gfs.schemas.envelope import wrap
from gfs.schemas.topics import DEAD_LETTER_TOPIC, encode
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport

pytestmark = pytest.mark.integration

SUBMIT = "gfs.tasks.submit"


async def _from_now(bootstrap: str, group: str) -> None:
    # The test's group and its dead-letter reader read only what the test publishes.
    await start_at_end(bootstrap, {group: [SUBMIT], f"{group}-reader": [DEAD_LETTER_TOPIC]})


async def test_bad_records_are_dead_lettered_and_the_next_good_one_is_handled(
    registry_topics: TopicsReport, kafka_bootstrap: str, unique_group: str
) -> None:
    task_id = f"job-{uuid.uuid4().hex[:8]}"
    key = task_id.encode()  # one key -> one partition -> bad, bad, good arrive in this order
    malformed = b'{"event_type": "TaskSubmitted", "payload": {'
    invalid = json.loads(encode(wrap(task_submitted(task_id), producer="it-dlq")))
    invalid["payload"]["workers"] = 0  # schema: workers >= 1
    invalid_bytes = json.dumps(invalid).encode()
    good = wrap(task_submitted(task_id), producer="it-dlq")

    await _from_now(kafka_bootstrap, unique_group)
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        bad_json_at = await producer.send_raw(SUBMIT, value=malformed, key=key)
        bad_schema_at = await producer.send_raw(SUBMIT, value=invalid_bytes, key=key)
        await producer.send(SUBMIT, good)

    received, stats = await consume_until(
        SUBMIT, unique_group, bootstrap_servers=kafka_bootstrap,
        done=lambda got: good.event_id in got.event_ids(),
    )  # fmt: skip
    assert good.event_id in received.event_ids()
    assert stats.dead_lettered >= 2  # ours; older runs' bad records on the topic add to this

    by_offset = await dead_letters_of(
        unique_group, [bad_json_at, bad_schema_at], bootstrap_servers=kafka_bootstrap
    )

    json_letter = by_offset[bad_json_at.offset]
    assert json_letter.source_topic == SUBMIT
    assert base64.b64decode(json_letter.original) == malformed
    assert json_letter.error.startswith("malformed JSON:"), json_letter.error

    schema_letter = by_offset[bad_schema_at.offset]
    assert base64.b64decode(schema_letter.original) == invalid_bytes
    assert "payload.workers" in schema_letter.error, schema_letter.error
    assert "greater than or equal to 1" in schema_letter.error


async def test_a_newer_schema_version_and_a_large_record_are_dead_lettered_with_their_reason(
    registry_topics: TopicsReport, kafka_bootstrap: str, unique_group: str
) -> None:
    # A record from a producer upgraded first (schema_version 2), and a 900 KB record the broker
    # accepts but whose dead letter, whole, would not fit in one message (base64 is 4/3 larger):
    # both land in the dead-letter topic with their reason, and the next good record is handled.
    task_id = f"job-{uuid.uuid4().hex[:8]}"
    key = task_id.encode()
    future = json.loads(encode(wrap(task_submitted(task_id), producer="it-dlq")))
    future["schema_version"] = 2
    future_bytes = json.dumps(future).encode()
    large = b"x" * 900_000
    good = wrap(task_submitted(task_id), producer="it-dlq")
    await _from_now(kafka_bootstrap, unique_group)
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        future_at = await producer.send_raw(SUBMIT, value=future_bytes, key=key)
        large_at = await producer.send_raw(SUBMIT, value=large, key=key)
        await producer.send(SUBMIT, good)
    await consume_until(
        SUBMIT, unique_group, bootstrap_servers=kafka_bootstrap,
        done=lambda got: good.event_id in got.event_ids(),
    )  # fmt: skip
    by_offset = await dead_letters_of(unique_group, [future_at, large_at], bootstrap_servers=kafka_bootstrap)
    version_letter = by_offset[future_at.offset]
    assert "schema_version 2 is not supported" in version_letter.error
    assert base64.b64decode(version_letter.original) == future_bytes and not version_letter.truncated
    large_letter = by_offset[large_at.offset]
    assert large_letter.truncated and large_letter.original_size == len(large)
    assert large_letter.original_sha256 == hashlib.sha256(large).hexdigest()
    assert large_letter.error.startswith("malformed JSON:")

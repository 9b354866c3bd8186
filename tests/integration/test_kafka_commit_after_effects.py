"""Commit-after-effects: a record whose handler raised is not committed, so the next consumer of
the same group gets it again, and records the first consumer handled stay committed."""

from __future__ import annotations

import uuid

import pytest
from kafka_harness import consume_until
from payload_examples import task_submitted

from gfs.schemas.envelope import wrap
from gfs.services.platform.kafka.processing import HandlerFailedError, RetryPolicy
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport

pytestmark = pytest.mark.integration

SUBMIT = "gfs.tasks.submit"


async def test_a_failed_handler_does_not_commit_and_the_record_is_redelivered(
    registry_topics: TopicsReport, kafka_bootstrap: str, unique_group: str
) -> None:
    task_id = f"job-{uuid.uuid4().hex[:8]}"
    first = wrap(task_submitted(task_id), producer="it-commit")
    poison = wrap(task_submitted(task_id, workers=3), producer="it-commit")
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        first_at = await producer.send(SUBMIT, first)
        poison_at = await producer.send(SUBMIT, poison)
    assert (first_at.partition, first_at.offset + 1) == (poison_at.partition, poison_at.offset)

    # Consumer 1 handles `first` (and any older records), then fails on `poison` twice (retried
    # once in-process) and stops without committing it.
    with pytest.raises(HandlerFailedError) as failed:
        await consume_until(
            SUBMIT, unique_group, bootstrap_servers=kafka_bootstrap,
            done=lambda _: False,
            fail_on=lambda envelope: envelope.event_id == poison.event_id,
            retry=RetryPolicy(attempts=2, initial_backoff_s=0.05),
        )  # fmt: skip
    assert (failed.value.partition, failed.value.offset) == (poison_at.partition, poison_at.offset)

    # Consumer 2, same group: resumes at the committed position of that partition, which is the
    # poison record (first was committed after its handler returned; poison was not).
    received, _ = await consume_until(
        SUBMIT, unique_group, bootstrap_servers=kafka_bootstrap,
        done=lambda got: poison.event_id in got.event_ids(),
    )  # fmt: skip
    same_partition = [
        (envelope.event_id, context.offset)
        for envelope, context in received.items
        if context.partition == poison_at.partition
    ]
    assert same_partition[0] == (poison.event_id, poison_at.offset)
    assert first.event_id not in received.event_ids()

"""Run the platform's `consume` loop in a test until a condition holds, then stop it cleanly (and so
read the dead letters a group wrote); where a topic ends now (to read only what a test publishes
after)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import Envelope
from gfs.schemas.topics import DEAD_LETTER_TOPIC
from gfs.services.platform.kafka.consumer import consume
from gfs.services.platform.kafka.processing import NO_RETRY, ConsumeStats, MessageContext, RetryPolicy

# Generous per-wait bound: a consumer group join plus a fetch takes ~1-3 s on the dev broker;
# the bound only matters when something is broken, and then the test should fail, not hang.
WAIT_S = 60.0  # an upper bound: loops stop as soon as they see what they wait for


@dataclass
class Received:
    """Everything a test handler saw, in arrival order."""

    items: list[tuple[Envelope[Any], MessageContext]] = field(default_factory=list)

    def event_ids(self) -> set[Any]:
        return {envelope.event_id for envelope, _ in self.items}


async def consume_until(
    topics: str | Sequence[str],
    group: str,
    *,
    bootstrap_servers: str,
    done: Callable[[Received], bool],
    fail_on: Callable[[Envelope[Any]], bool] = lambda _: False,
    retry: RetryPolicy = NO_RETRY,
) -> tuple[Received, ConsumeStats]:
    """Consume `topics` as `group`, recording every handled envelope, until `done(received)`.

    `fail_on(envelope)` makes the handler raise for chosen envelopes (to test commit semantics).
    Errors from the loop (e.g. HandlerFailedError) propagate to the caller.
    """
    received = Received()
    stop = asyncio.Event()

    async def handler(envelope: Envelope[Any], context: MessageContext) -> None:
        if fail_on(envelope):
            raise RuntimeError(f"test handler refuses {envelope.event_id}")
        received.items.append((envelope, context))
        if done(received):
            stop.set()

    stats = await asyncio.wait_for(
        consume(topics, group, handler, bootstrap_servers=bootstrap_servers, stop=stop, retry=retry),
        timeout=WAIT_S,
    )
    return received, stats


async def dead_letters_of(
    group: str, sent: Sequence[Any], *, bootstrap_servers: str
) -> dict[int, DeadLetter]:
    """The dead letters `group` wrote for the records at `sent` (the producer's RecordMetadata of
    each), by source offset, read by a group of their own (`group`-reader) until there is one each."""
    ours = {(where.partition, where.offset) for where in sent}

    def is_ours(envelope: Envelope[Any]) -> bool:
        letter = envelope.payload
        return letter.consumer_group == group and (letter.source_partition, letter.source_offset) in ours

    letters, _ = await consume_until(
        DEAD_LETTER_TOPIC, f"{group}-reader", bootstrap_servers=bootstrap_servers,
        done=lambda got: sum(is_ours(envelope) for envelope, _ in got.items) == len(ours),
    )  # fmt: skip
    return {env.payload.source_offset: env.payload for env, _ in letters.items if is_ours(env)}


async def _end_offsets(kafka_bootstrap: str, topic_name: str) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await consumer.start()
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic_name])
        parts = [TopicPartition(topic_name, p["partition"]) for p in described["partitions"]]
        return dict(await consumer.end_offsets(parts))
    finally:
        await consumer.stop()
        await admin.close()


async def start_at_end(bootstrap: str, groups: dict[str, Sequence[str]]) -> None:
    """Commit each new group's offsets at its topics' current ends, so it reads from now on: a
    fresh group reads retained history from the start, which on a long-lived dev broker (days of
    other runs' records, floods of bad ones among them) outlasts a test's wait."""
    for group, topic_names in groups.items():
        ends: dict[TopicPartition, int] = {}
        for name in topic_names:
            ends |= await _end_offsets(bootstrap, name)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign(list(ends))
            await consumer.commit(ends)
        finally:
            await consumer.stop()

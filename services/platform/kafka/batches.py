"""The consume loop's batch mode: a fetched batch handled as one unit, one span, one commit.

`consume(..., batch=BatchMode(...))` runs this loop instead of the per-record one. Per fetched
batch: every record goes through the same `RecordProcessor` as in the per-record loop (decode,
dead-letter a bad record with the reason, hand a good one to the handler), inside one CONSUMER
span linked to each record's trace (issue 23: a span per record cost more than the work); then
`flush` completes the batch's effects (a forwarder waits for the broker's acks there); only then
are the batch's offsets committed. At-least-once, as the per-record loop, with one commit per batch.

The commit runs while the next batch is read and handled (issue 22: on a busy broker it was a
serial round trip of tens of ms before every fetch). It is issued only after `flush`, and commits
stay in order (each waits for the one before), so a failed commit stops the loop at the next batch
instead of this one (its records are read again; handlers must be idempotent, as always). A commit
the group refused because it rebalanced is not an error: the partitions' new owner reads those
records again from the last commit (`settle_commit`), and a rebalance waits for the commit in
flight (`CommitInFlight`), so the new owner starts after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError
from opentelemetry import trace

from gfs.services.platform.kafka.processing import RecordProcessor

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchMode:
    """What a batch consumer adds to the loop: `flush` after each batch's records were handled
    (before its commit), `after_poll` after every fetch, empty or not, with the consumer (to read
    positions and lag), and the name of the batch's span."""

    flush: Callable[[], Awaitable[None]]
    span_name: str
    after_poll: Callable[[AIOKafkaConsumer], Awaitable[None]] | None = None
    max_records: int = 2000


class CommitInFlight(ConsumerRebalanceListener):  # type: ignore[misc]
    """Lets the last batch's offset commit land before the group takes partitions away, so their
    new owner starts after it instead of reading the batch again (issue 23: a second instance
    joining while the first had a commit in flight crashed the first)."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if self.task is not None:
            await settle_commit(self.task)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        return None


async def settle_commit(commit: asyncio.Task[None]) -> None:
    """Wait for an offset commit. One the group refused because it rebalanced (the partitions are
    no longer ours, or the generation moved on) is not an error for an at-least-once consumer:
    the partitions' new owner reads those records again from the last committed offset. Any other
    failure stops the loop."""
    try:
        await commit
    except (CommitFailedError, IllegalStateError) as exc:
        log.warning("offset commit refused by a rebalance, the records will be read again: %r", exc)


def assigned_offsets(
    batch: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]], assigned: set[TopicPartition]
) -> dict[TopicPartition, int]:
    """The next offset to read of each partition in `batch` that is still assigned to us."""
    return {tp: records[-1].offset + 1 for tp, records in batch.items() if tp in assigned and records}


async def consume_batches(
    consumer: AIOKafkaConsumer,
    topics: Sequence[str],
    processor: RecordProcessor,
    mode: BatchMode,
    stop: asyncio.Event,
    *,
    poll_timeout_ms: int,
) -> None:
    """Subscribe `consumer` (not started yet) to `topics` and run the batch loop until `stop`."""
    tracer = processor.tracer
    in_flight = CommitInFlight()
    consumer.subscribe(list(topics), listener=in_flight)
    await consumer.start()
    committing: asyncio.Task[None] | None = None
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=poll_timeout_ms, max_records=mode.max_records)
            if batch:
                attributes: dict[str, Any] = {
                    "messaging.system": "kafka", "messaging.consumer.group.name": processor.group,
                    "messaging.batch.message_count": sum(len(r) for r in batch.values()),
                }  # fmt: skip
                span = tracer.start_as_current_span(
                    mode.span_name, kind=trace.SpanKind.CONSUMER, attributes=attributes
                )
                with span:
                    for records in batch.values():
                        for record in records:
                            await processor.process(record)
                    await mode.flush()
                if committing is not None:
                    await settle_commit(committing)
                # Only partitions still ours: a rebalance during the batch may have taken some
                # away (committing them would be refused, and their new owner reads them anyway).
                offsets = assigned_offsets(batch, consumer.assignment())
                committing = asyncio.create_task(consumer.commit(offsets)) if offsets else None
                in_flight.task = committing
            if mode.after_poll is not None:
                await mode.after_poll(consumer)
        if committing is not None:
            await settle_commit(committing)
    finally:
        if committing is not None and not committing.done():
            committing.cancel()
        if committing is not None:
            await asyncio.gather(committing, return_exceptions=True)
        await consumer.stop()

"""The consumer loop: decode, dead-letter or handle, and commit only after the effects.

Delivery contract (at-least-once, commit-after-effects):

1. Each record is decoded and validated through the topic registry (`gfs.schemas.topics.decode`).
2. A record that fails decoding is published to `gfs.deadletter` (original bytes, readable reason,
   topic/partition/offset, group) and, once the broker acked the dead letter, its offset is
   committed and the loop goes on. A bad record never blocks its partition.
3. A good record is passed to the async handler inside one CONSUMER span whose parent is the
   trace context found in the record headers. The offset (`offset + 1`) is committed only after
   the handler returned, i.e. after its effects (DB writes, published events) are durable.
4. A handler exception is retried in-process per `RetryPolicy` (bounded, exponential backoff).
   When the attempts are exhausted the loop STOPS and raises `HandlerFailedError` without
   committing: the record is redelivered to the next consumer of the same group (after a
   restart or a rebalance), together with anything after it on that partition. Handlers must
   therefore be idempotent (commands carry `command_id`/`eviction_id` for that). We stop loudly
   rather than skip, because skipping a command silently loses it, and rather than retry forever,
   because a silent crash loop hides the failure; the supervisor (systemd, the stack script,
   k8s) decides whether to restart.
5. Setting the `stop` event ends the loop after the current record; fetched but unprocessed
   records are simply not committed and come back to the group. A commit refused because of a
   rebalance drops the rest of that partition's batch (see `_process_in_order`).

Records on `gfs.deadletter` that themselves fail decoding are logged and skipped (committed)
instead of being dead-lettered again, which would loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError

from gfs.services.platform import deployment as deployment_ids
from gfs.services.platform.kafka.batches import BatchMode, consume_batches
from gfs.services.platform.kafka.processing import (
    DEFAULT_RETRY,
    ConsumeStats,
    EnvelopeSink,
    Handler,
    RecordProcessor,
    RetryPolicy,
)
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity

log = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


async def consume(
    topics: str | Sequence[str],
    group: str,
    handler: Handler,
    *,
    bootstrap_servers: list[str] | str,
    stop: asyncio.Event | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
    dead_letter_producer: EnvelopeSink | None = None,
    producer_name: str = "gfs-consumer",
    now: Callable[[], datetime] = _utc_now,
    poll_timeout_ms: int = 500,
    stats: ConsumeStats | None = None,
    security: KafkaSecurity = PLAINTEXT,
    batch: BatchMode | None = None,
    offset_reset: str = "earliest",
    deployment: str | None = None,
) -> ConsumeStats:
    """Run the loop on `topics` as consumer `group` until `stop` is set (or forever).

    Returns the stats when stopped; raises `HandlerFailedError` per the module contract.
    A new group starts from `offset_reset` (the earliest offset by default). `batch`: handle each
    fetched batch as one unit (`batches.py`: one span, `flush`, one commit per batch) instead of
    committing record by record. `security` (TLS/SASL, default plaintext) applies to
    the consumer and to the dead-letter producer made here. `dead_letter_producer` is created (and closed)
    here when not given. `deployment`: only records of this deployment are handled, the others
    skipped (services/platform/deployment.py; None: GFS_DEPLOYMENT).
    """
    own = deployment_ids.current() if deployment is None else deployment_ids.check(deployment)
    names = [topics] if isinstance(topics, str) else list(topics)
    stop = stop or asyncio.Event()
    stats = stats if stats is not None else ConsumeStats()
    async with AsyncExitStack() as resources:
        producer: EnvelopeSink
        if dead_letter_producer is not None:
            producer = dead_letter_producer
        else:
            producer = await resources.enter_async_context(
                EnvelopeProducer(
                    bootstrap_servers=bootstrap_servers,
                    client_id=f"{group}-deadletter",
                    security=security,
                    deployment=own,
                )
            )
        processor = RecordProcessor(
            sink=producer, group=group, handler=handler, retry=retry,
            producer_name=producer_name, now=now, stats=stats, span_per_record=batch is None,
            deployment=own,
        )  # fmt: skip
        consumer = AIOKafkaConsumer(
            *([] if batch is not None else names),  # batch mode subscribes with its rebalance listener
            bootstrap_servers=bootstrap_servers,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset=offset_reset,
            # Read only what producers committed, so aborted transactional writes never arrive.
            isolation_level="read_committed",
            **security.client_kwargs(),
        )
        if batch is not None:
            await consume_batches(consumer, names, processor, batch, stop, poll_timeout_ms=poll_timeout_ms)
            return stats
        await consumer.start()
        # consumer.stop() leaves uncommitted offsets uncommitted (auto-commit is off).
        resources.push_async_callback(consumer.stop)
        while not stop.is_set():
            fetched = await consumer.getmany(timeout_ms=poll_timeout_ms)
            for tp, records in fetched.items():
                await _process_in_order(consumer, processor, tp, records, stop)
                if stop.is_set():
                    break
    return stats


async def _process_in_order(
    consumer: AIOKafkaConsumer,
    processor: RecordProcessor,
    tp: TopicPartition,
    records: Sequence[ConsumerRecord[bytes, bytes]],
    stop: asyncio.Event,
) -> None:
    """Process one partition's fetched records in offset order, committing each after its effects.

    Stops early on `stop` (the rest is redelivered: it was never committed). When a commit is
    refused because a rebalance happened, the rest of this partition's batch is dropped: if the
    partition moved away, its new owner resumes from the last commit (at-least-once redelivery);
    if it is still ours, we seek back to just after the processed record so nothing is skipped.
    """
    for record in records:
        await processor.process(record)
        try:
            await consumer.commit({tp: record.offset + 1})
        except (CommitFailedError, IllegalStateError) as exc:
            log.warning(
                "commit refused after a rebalance topic=%s partition=%d offset=%d error=%r",
                record.topic, record.partition, record.offset, exc,
            )  # fmt: skip
            if tp in consumer.assignment():
                consumer.seek(tp, record.offset + 1)
            return
        if stop.is_set():
            return

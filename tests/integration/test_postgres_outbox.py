"""The transactional outbox on the real Postgres and Kafka: a rolled-back transaction publishes
nothing; committed rows reach the topic in order with the writer's trace context; a relay that
dies between the publish and the mark loses nothing and republishes the same event ids."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterable

import asyncpg
import pytest
import pytest_asyncio
from kafka_harness import consume_until
from opentelemetry.sdk.trace import TracerProvider
from payload_examples import task_submitted

from gfs.schemas.envelope import wrap
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.migrations import discover, migrate
from gfs.services.platform.outbox import OutboxRelay, OutboxTopicError, enqueue, unpublished
from gfs.services.platform.tracing import traceparent_of

pytestmark = pytest.mark.integration

SUBMIT = "gfs.tasks.submit"


@pytest_asyncio.fixture(loop_scope="session")
async def pool(database_url: str, scratch_schema: str) -> AsyncIterator[asyncpg.Pool]:
    settings = {"search_path": scratch_schema}
    connection = await asyncpg.connect(database_url, server_settings=settings)
    try:
        await migrate(connection, discover())
    finally:
        await connection.close()
    created = await asyncpg.create_pool(database_url, min_size=1, max_size=3, server_settings=settings)
    try:
        yield created
    finally:
        await created.close()


class DiesAfter:
    """A sink that publishes `n` rows for real, then fails like a relay killed mid-batch."""

    def __init__(self, inner: EnvelopeProducer, n: int) -> None:
        self.inner, self.left = inner, n

    async def send_raw(
        self, topic_name: str, *, value: bytes, key: bytes | None, headers: Iterable[tuple[str, bytes]] = ()
    ) -> object:
        if self.left == 0:
            raise ConnectionResetError("relay killed between publish and mark")
        self.left -= 1
        return await self.inner.send_raw(topic_name, value=value, key=key, headers=headers)


async def test_rolled_back_state_publishes_nothing(pool: asyncpg.Pool) -> None:
    with pytest.raises(RuntimeError, match="state write failed"):
        async with pool.acquire() as connection, connection.transaction():
            await enqueue(connection, SUBMIT, wrap(task_submitted("rolled-back"), producer="it-outbox"))
            raise RuntimeError("state write failed")
    async with pool.acquire() as connection:
        assert await unpublished(connection) == []
        with pytest.raises(OutboxTopicError, match=r"cannot be published on gfs\.quotas"):
            await enqueue(connection, "gfs.quotas", wrap(task_submitted("x"), producer="it-outbox"))


async def test_relay_publishes_in_order_and_a_crash_loses_nothing(
    pool: asyncpg.Pool, registry_topics: TopicsReport, kafka_bootstrap: str, unique_group: str
) -> None:
    run = uuid.uuid4().hex[:8]
    tracer = TracerProvider().get_tracer("it-outbox")
    # One task id: one key, one partition, so the consumer sees the publish order.
    envelopes = [wrap(task_submitted(f"ob-{run}", workers=i + 1), producer="it-outbox") for i in range(3)]
    with tracer.start_as_current_span("decide") as span:
        async with pool.acquire() as connection, connection.transaction():
            for envelope in envelopes:
                await enqueue(connection, SUBMIT, envelope)
        writer_trace = span.get_span_context().trace_id
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        # The relay dies after publishing 2 of the 3 rows: none is marked, all stay pending.
        with pytest.raises(ConnectionResetError):
            await OutboxRelay(pool, DiesAfter(producer, 2)).publish_pending()
        async with pool.acquire() as connection:
            assert len(await unpublished(connection)) == 3
        # A new relay publishes the whole batch again and marks it.
        assert await OutboxRelay(pool, producer).drain() == 3
        async with pool.acquire() as connection:
            assert await unpublished(connection) == []
    wanted = {e.event_id for e in envelopes}
    received, _ = await consume_until(
        SUBMIT,
        unique_group,
        bootstrap_servers=kafka_bootstrap,
        done=lambda got: sum(1 for env, _ in got.items if env.event_id in wanted) >= 5,
    )
    ours = [(env, ctx) for env, ctx in received.items if env.event_id in wanted]
    ids = [env.event_id for env, _ in ours]
    # At-least-once: the first two twice (same event ids, so consumers dedupe), then all three
    # in the order they were written. Nothing lost.
    assert ids == [envelopes[0].event_id, envelopes[1].event_id, *(e.event_id for e in envelopes)]
    for _, ctx in ours:
        parent = traceparent_of(ctx.headers)
        assert parent is not None and parent.split("-")[1] == f"{writer_trace:032x}"


class CommitLandsAfterTheLastLook(OutboxRelay):
    """A relay whose writer commits a row and wakes it just after it read an empty outbox, before
    it waits again: the race of a service committing while its relay finishes a batch."""

    landed = False

    async def publish_pending(self) -> int:
        published = await super().publish_pending()
        if published == 0 and not self.landed:
            self.landed = True
            async with self.pool.acquire() as connection, connection.transaction():
                await enqueue(connection, SUBMIT, wrap(task_submitted("woken-late"), producer="it-outbox"))
            self.wake()
        return published


async def test_a_wake_during_the_relays_last_look_is_not_lost(
    pool: asyncpg.Pool, registry_topics: TopicsReport, kafka_bootstrap: str
) -> None:
    """Issue 22 (accepting takes milliseconds): the relay used to clear its wake-up after reading
    the outbox, forgetting a commit that landed in between; its rows then waited the whole poll
    interval (0.5 s in the preemption service, 30 s here so a forgotten wake cannot pass)."""
    stop = asyncio.Event()
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        relay = CommitLandsAfterTheLastLook(pool, producer, poll_interval_s=30.0)
        running = asyncio.create_task(relay.run(stop))
        try:
            deadline = time.monotonic() + 5.0
            while not (relay.landed and relay.published >= 1) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            async with pool.acquire() as connection:
                left = await unpublished(connection)
        finally:
            stop.set()
            await running
    assert relay.landed, "the relay never read an empty outbox"
    assert left == [] and relay.published == 1, f"the woken row waited for the poll: {left}"

"""Ownership keyed by deployment (issue 22, item 9), on the real broker and Postgres: a --dry-run
shadow started beside a live owner on the live one's schema refuses to run and the live owner keeps
its partitions and processes every input; two live deployments with their own inbox topics share a
schema without fencing each other, and a restart replays only its own pools; rows written before
migration 0006 keep working."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from live_harness import Tap, tap_and_producer
from preemption_world import TAPPED, Cluster, _service, _settings
from quota_harness import _dsn, _migrated

from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.migrations import discover, migrate
from gfs.services.preemption.journal import store
from gfs.services.preemption.service import run_preemption_service

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(loop_scope="session")
async def world(
    database_url: str, kafka_bootstrap: str, registry_topics: TopicsReport, scratch_schema: str
) -> AsyncIterator[tuple[EnvelopeProducer, Tap, str]]:
    dsn = await _migrated(database_url, scratch_schema)
    async with tap_and_producer(kafka_bootstrap, TAPPED, "it-deployments") as (tap, producer):
        yield producer, tap, dsn


@pytest.mark.asyncio(loop_scope="session")
async def test_a_dry_run_beside_a_live_owner_refuses_and_the_live_owner_keeps_its_partitions(
    world: tuple[EnvelopeProducer, Tap, str], kafka_bootstrap: str
) -> None:
    producer, tap, dsn = world
    c = Cluster(producer, tap)
    live = _settings(dsn, kafka_bootstrap, c.pool)
    # The shadow as docs/operations.md describes it: its own groups and inbox topic, same pools,
    # same database and schema.
    shadow = _settings(dsn, kafka_bootstrap, c.pool, preemption_dry_run=True)
    async with _service(live) as (decider, _):
        await c.up(decider, 1, gpus=4)
        await c.spot_running(f"{c.pool}-a", gpus=1)
        owned = sorted(decider.partitions)

        stop, ready = asyncio.Event(), asyncio.Event()
        shadow_run = asyncio.create_task(run_preemption_service(shadow, stop, ready=ready))
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait([shadow_run, waiting], timeout=40, return_when=asyncio.FIRST_COMPLETED)
        try:
            # The live owner goes on: every input after the shadow's start is processed.
            await c.spot_running(f"{c.pool}-b", gpus=1)
            await c.spot_running(f"{c.pool}-c", gpus=1)
            assert sorted(decider.partitions) == owned and decider.stats.fenced == 0
            # The shadow refused the live schema, with the reason.
            assert shadow_run.done(), "the dry run started on a live schema"
            exc = shadow_run.exception()
            assert isinstance(exc, store.ModeConflictError) and "--dry-run refuses schema" in str(exc), exc
        finally:
            stop.set()
            waiting.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(shadow_run, timeout=20)


@pytest.mark.asyncio(loop_scope="session")
async def test_two_deployments_with_their_own_inboxes_share_a_schema(
    world: tuple[EnvelopeProducer, Tap, str], kafka_bootstrap: str
) -> None:
    producer, tap, dsn = world
    first, second = Cluster(producer, tap), Cluster(producer, tap)
    s1 = _settings(dsn, kafka_bootstrap, first.pool)
    s2 = _settings(dsn, kafka_bootstrap, second.pool)
    async with _service(s1) as (d1, _):
        await first.up(d1, 1, gpus=4)
        await first.spot_running(f"{first.pool}-a", gpus=1)
        async with _service(s2) as (d2, _):  # same partition numbers, another inbox topic
            await second.up(d2, 1, gpus=4)
            await second.spot_running(f"{second.pool}-a", gpus=1)
            await first.spot_running(f"{first.pool}-b", gpus=1)  # the first one was not fenced
            assert d1.stats.fenced == 0 and d2.stats.fenced == 0
    async with _service(s2) as (again, _):  # a restart replays its own journal only
        assert set(again.owned_pools()) == {second.pool}
        assert set(again.owned_pools()[second.pool].seen) == {f"{second.pool}-a"}


@pytest.mark.asyncio(loop_scope="session")
async def test_rows_from_before_the_migration_keep_working(database_url: str, scratch_schema: str) -> None:
    connection = await asyncpg.connect(_dsn(database_url, scratch_schema))
    try:
        await migrate(connection, [m for m in discover() if m.version <= 5])
        await connection.execute(
            "INSERT INTO preemption_partition (partition, epoch, owner, next_offset) VALUES (0, 4, 'old', 17)"
        )
        event = uuid.uuid4()
        await connection.execute(
            """INSERT INTO preemption_journal (partition, pool, kind, at_s, data, event_id)
               VALUES (0, 'A100', 'node_seen', 1.0, '{"node": "n0", "gpus": 2}', $1)""",
            event,
        )
        await migrate(connection, discover())
        claim = await store.claim(connection, 0, "new")  # the default inbox topic
        assert (claim.epoch, claim.next_offset, claim.topic) == (5, 17, "gfs-preemption-inbox")
        rows: list[Any] = await store.journal(connection, 0)
        assert rows == [("A100", ("node_seen", {"node": "n0", "gpus": 2}, 1.0), None)]
        assert await store.seen_events(connection, [event]) == {event}
        assert await store.seen_events(connection, [event], topic="other-inbox") == set()
        other = await store.claim(connection, 0, "other", topic="other-inbox")
        assert (other.epoch, other.next_offset) == (1, 0)
        with pytest.raises(store.ModeConflictError):
            await store.claim(connection, 0, "shadow", dry_run=True)  # a live deployment's partition
        with pytest.raises(store.ModeConflictError, match="--dry-run refuses schema"):
            await store.refuse_live_schema(connection)
    finally:
        await connection.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_a_live_service_refuses_to_adopt_a_shadows_partitions(
    world: tuple[EnvelopeProducer, Tap, str], kafka_bootstrap: str
) -> None:
    producer, tap, dsn = world
    c = Cluster(producer, tap)
    shadow = _settings(dsn, kafka_bootstrap, c.pool, preemption_dry_run=True, preemption_inbox_partitions=1)
    async with _service(shadow):  # the shadow claims partition 0 of its inbox (on an empty schema)
        pass
    # A live deployment pointed at the same inbox topic would replay decisions never published.
    live = _settings(
        dsn, kafka_bootstrap, c.pool, preemption_inbox_topic=shadow.preemption_inbox_topic,
        preemption_inbox_partitions=1,
    )  # fmt: skip
    with pytest.raises(store.ModeConflictError, match="belongs to a --dry-run shadow"):
        await asyncio.wait_for(run_preemption_service(live, asyncio.Event()), timeout=40)

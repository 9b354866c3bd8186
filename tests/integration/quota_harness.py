"""The quota service on the real broker and Postgres, as the integration tests run it: a migrated
schema of its own, settings with a group and fence key of their own, the group started at the
topics' ends, and readers of what it published (moved from test_quota_service.py as is); the
inputs of its hand-worked case; a fresh scratch schema, and one query on a connection of its own."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from gfs.schemas.envelope import Envelope
from gfs.schemas.forecast import HourlyDemand, PoolDemandForecast
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.topics import decode
from gfs.services.platform.migrations import discover, migrate
from gfs.services.quota.service import QuotaServiceSettings
from gfs.services.toolkit.processes import free_port

READY_S = 30.0


def _dsn(database_url: str, schema: str) -> str:
    parts = urlsplit(database_url)
    query = "&".join(filter(None, [parts.query, urlencode({"search_path": schema})]))
    return urlunsplit(parts._replace(query=query))


@contextlib.asynccontextmanager
async def _fresh_schema(database_url: str) -> AsyncIterator[str]:
    """A fresh, empty Postgres schema of its own, dropped after the block."""
    name = f"it_{uuid.uuid4().hex[:12]}"
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(f'CREATE SCHEMA "{name}"')
        yield name
    finally:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await connection.close()


async def _migrated(database_url: str, schema: str) -> str:
    dsn = _dsn(database_url, schema)
    connection = await asyncpg.connect(dsn)
    try:
        await migrate(connection, discover())
    finally:
        await connection.close()
    return dsn


async def _fetch(dsn: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    """The rows of one query, on a connection of its own (closed after)."""
    connection = await asyncpg.connect(dsn)
    try:
        return list(await connection.fetch(sql, *args))
    finally:
        await connection.close()


async def _fetchval(dsn: str, sql: str, *args: Any) -> Any:
    """The first value of one query, on a connection of its own (closed after)."""
    connection = await asyncpg.connect(dsn)
    try:
        return await connection.fetchval(sql, *args)
    finally:
        await connection.close()


def _settings(dsn: str, kafka: str, key: int, **kw: Any) -> QuotaServiceSettings:
    values: dict[str, Any] = {
        "database_url": dsn,
        "kafka_bootstrap_servers": kafka,
        "quota_refresh_s": 0.3,
        "quota_group": f"it-quota-{uuid.uuid4().hex[:8]}",
        "quota_api_port": 0,
        "quota_fence_poll_s": 0.2,
        "quota_fence_key": key,
    }
    return QuotaServiceSettings(**(values | kw))


_free_port = free_port  # below the ephemeral range (services/toolkit/processes.py says why)


def _hour(h: int, q90: float) -> HourlyDemand:
    return HourlyDemand(hour_ahead=h, mean=q90 - 5.0, std=4.0, quantiles={"0.5": q90 - 5.0, "0.9": q90})


def _forecast(
    pool: str, at: datetime, q90: tuple[float, ...] = (40.5, 60.0, 10.0, 10.0), **fields: Any
) -> PoolDemandForecast:
    """An HP demand forecast of `pool` from `at`'s hour (the LSTM's, of 2 tenants, version it-<pool>:
    `fields` where a test wants others), `q90` its 0.9-quantile for each hour ahead."""
    values: dict[str, Any] = {
        "pool": pool,
        "origin_time": at.replace(minute=0, second=0, microsecond=0),
        "tenants": 2,
        "model_name": "lstm",
        "model_version": f"it-{pool}",
        "horizon": tuple(_hour(h, q) for h, q in enumerate(q90, start=1)),
    }
    return PoolDemandForecast(**(values | fields))


def _hand_worked(pool: str, at: datetime, **forecast: Any) -> tuple[PoolStatus, PoolDemandForecast]:
    """The quota's hand-worked inputs (test_quota_service.py): 100 GPUs of which 30 idle, 10 in spot
    use, 50 running HP and 5 queued, at `at`; the forecast's q90 [40.5, 60, 10, 10] (`forecast`: its
    fields where a test wants others). Floor 50 + 5 = 55 over that q90: spare [45, 40, 45, 45], so
    at eta 1 Q(1) = 45, Q(2) = Q(4) = 40."""
    status = PoolStatus(
        pool=pool, observed_at=at, capacity_gpus=100, idle_gpus=30, spot_in_use_gpus=10.0,
        hp_running_gpus=50.0, hp_queued_gpus=5.0,
    )  # fmt: skip
    return status, _forecast(pool, at, **forecast)


async def _start_at_the_end(kafka_bootstrap: str, group: str, topics: tuple[str, ...]) -> None:
    """Commit `group` at the current end of `topics`: the service then reads only what the test
    publishes. On the topic clock every status older tests left would otherwise be quoted (and
    published) first, for pools that are not ours."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    try:
        described = await admin.describe_topics(list(topics))
        parts = [TopicPartition(d["topic"], p["partition"]) for d in described for p in d["partitions"]]
        consumer.assign(parts)
        await consumer.commit(dict(await consumer.end_offsets(parts)))
    finally:
        await consumer.stop()
        await admin.close()


async def _read_from(
    kafka_bootstrap: str,
    topic_name: str,
    offsets: dict[TopicPartition, int],
    key: bytes,
    done: Callable[[list[Envelope[Any]]], bool],
    mine: asyncpg.Connection | None = None,
) -> list[Envelope[Any]]:
    """The envelopes keyed `key` after `offsets` (no group: nothing older is read, so no wait
    behind the thousands of records older runs left), deduplicated by event id (the outbox
    publishes at least once), until `done` says enough. `mine`: the schema of the quota instance
    under test; only the quotes it wrote count (its `quota_version.event_id`s): the topic is
    shared, and another deployment's quota service quotes every pool it reads (ours too) unless
    its QUOTA_POOLS leaves ours out."""
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    found: list[Envelope[Any]] = []
    try:
        consumer.assign(list(offsets))
        for tp, offset in offsets.items():
            consumer.seek(tp, offset)
        deadline = asyncio.get_running_loop().time() + READY_S
        while not done(found) and asyncio.get_running_loop().time() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    envelope = decode(topic_name, record.value or b"")
                    if record.key != key or envelope.event_id in {e.event_id for e in found}:
                        continue
                    if mine is not None and not await mine.fetchval(
                        "SELECT count(*) FROM quota_version WHERE event_id = $1", envelope.event_id
                    ):
                        continue  # a neighbour's quote of our pool
                    found.append(envelope)
    finally:
        await consumer.stop()
    assert done(found), f"not enough records keyed {key!r} on {topic_name}: {found}"
    return found


async def _committed_past(kafka_bootstrap: str, group: str, where: Any) -> None:
    """Wait until `group` committed past the record `where` (a producer's RecordMetadata)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        tp = TopicPartition(where.topic, where.partition)
        for _ in range(300):
            committed = (await admin.list_consumer_group_offsets(group)).get(tp)
            if committed is not None and committed.offset > where.offset:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{where.topic}[{where.partition}]@{where.offset} was never committed")
    finally:
        await admin.close()

"""The quota service's effects under crashes, on the real Postgres and Kafka, driving its handlers
and refresh directly (the run loop only schedules them):
- killed after the quota's DB write and before its publish: the next instance publishes it, once,
  with the event id written in the same transaction; the dead instance can no longer write;
- killed after an input's effects and before its offset commit: the redelivered input changes
  nothing (outcomes by task and period, status and forecast by their time);
- the quota's spans and the published SpotQuota continue the trace of the forecast that fed it,
  which continues the task event's trace."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from kafka_harness import consume_until
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from quota_harness import _hand_worked, _migrated

from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.quota import SpotQuota
from gfs.schemas.tasks import GuaranteeOutcome, GuaranteePeriodClosed
from gfs.services.platform.clock import ManualClock
from gfs.services.platform.kafka.processing import MessageContext
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.outbox import OutboxRelay, unpublished
from gfs.services.platform.tracing import traceparent_of
from gfs.services.quota.service import QuotaService, QuotaServiceSettings
from gfs.services.quota.store import FenceLostError

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC).replace(minute=5, second=0, microsecond=0)


@pytest_asyncio.fixture(loop_scope="session")
async def pool(database_url: str, scratch_schema: str) -> AsyncIterator[asyncpg.Pool]:
    dsn = await _migrated(database_url, scratch_schema)
    created = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    try:
        yield created
    finally:
        await created.close()


def _pool_of(payload: bytes) -> str:
    return str(json.loads(payload)["payload"]["pool"])


def _service(pool: asyncpg.Pool, **kw: Any) -> QuotaService:
    settings = QuotaServiceSettings(quota_refresh_s=300.0, quota_fence_key=random.getrandbits(48))
    return QuotaService(pool, settings, ManualClock(NOW.timestamp()), **kw)


def _context(ctx: otel_context.Context | None = None) -> MessageContext:
    return MessageContext(
        topic="t", partition=0, offset=0, key=None, headers=(), consumer_group="g",
        trace_context=ctx if ctx is not None else otel_context.get_current(), span=trace.INVALID_SPAN,
    )  # fmt: skip


def _inputs(name: str) -> list[Envelope[Any]]:
    status, forecast = _hand_worked(name, NOW, tenants=1, model_version="it")
    return [wrap(status, producer="it"), wrap(forecast, producer="it")]


async def test_killed_after_the_db_write_publishes_once_on_restart(
    pool: asyncpg.Pool, registry_topics: TopicsReport, kafka_bootstrap: str
) -> None:
    name = f"QC-{uuid.uuid4().hex[:8]}"
    first = _service(pool)
    for envelope in _inputs(name):  # the forecast's arrival computes a quota at once (version 1)
        await first.handle(envelope, _context())
    (computed,) = [c for c in await first.refresh() if c.pool == name]  # the timer's (version 2)
    # ... and the process dies here: both quotas are in Postgres, their SpotQuotas only in the outbox.
    async with pool.acquire() as connection:
        rows = await connection.fetch(
            "SELECT version, event_id FROM quota_version WHERE pool = $1 ORDER BY version", name
        )
        pending = [r for r in await unpublished(connection) if _pool_of(r.payload) == name]
    assert [r["version"] for r in rows] == [1, 2] and len(pending) == 2
    second = _service(pool)
    await second.load()  # resumes from Postgres alone: version, eta, the latest inputs
    assert (second.books[name].version, second.books[name].status is not None) == (2, True)
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        await OutboxRelay(pool, producer).drain()
    received, _ = await consume_until(
        "gfs.quotas", f"it-qc-{name}", bootstrap_servers=kafka_bootstrap,
        done=lambda got: sum(env.payload.pool == name for env, _ in got.items) >= 2,
    )  # fmt: skip
    ours = [env for env, _ in received.items if env.payload.pool == name]
    assert [env.event_id for env in ours] == [r["event_id"] for r in rows]  # each once, in order
    assert {q.guarantee_hours: q.quota_gpus for q in ours[-1].payload.quotas} == dict(computed.quota)
    # The new instance writes version 3; the old one, had it survived, still expects 2: refused.
    assert [c.pool for c in await second.refresh() if c.pool == name] == [name]
    with pytest.raises(FenceLostError):
        await first.refresh()


async def test_a_redelivered_input_changes_nothing(pool: asyncpg.Pool) -> None:
    name = f"QR-{uuid.uuid4().hex[:8]}"
    service = _service(pool)
    closed = wrap(
        GuaranteePeriodClosed(task_id=f"{name}-t", pool=name, period_start=NOW - timedelta(hours=1),
                              period_end=NOW, outcome=GuaranteeOutcome.FAILED), producer="it",
    )  # fmt: skip
    for envelope in [*_inputs(name), closed, *_inputs(name), closed]:  # everything twice
        await service.handle(envelope, _context())
    async with pool.acquire() as connection:
        outcomes = await connection.fetchval(
            "SELECT count(*) FROM guarantee_period_outcome WHERE pool = $1", name
        )
        inputs = await connection.fetchval("SELECT count(*) FROM quota_input_latest WHERE pool = $1", name)
    assert (outcomes, inputs) == (1, 2)
    assert service.books[name].recent(NOW.timestamp()) == (1, 0)


async def test_quota_spans_and_its_message_continue_the_task_events_trace(pool: asyncpg.Pool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    name = f"QT-{uuid.uuid4().hex[:8]}"
    service = _service(pool, tracer_provider=provider)
    task_event = provider.get_tracer("producer").start_span("TaskFinished")  # where the trace began
    fed = trace.set_span_in_context(task_event)
    status, forecast = _inputs(name)
    await service.handle(status, _context())
    await service.handle(forecast, _context(fed))  # the forecast carried the task event's context
    task_event.end()
    await service.refresh()
    trace_id = task_event.get_span_context().trace_id
    spans = {s.name: s for s in exporter.get_finished_spans() if s.attributes.get("gfs.pool") == name}
    assert {"quota.compute", "quota.persist"} <= set(spans)
    assert all(s.context.trace_id == trace_id for s in spans.values())
    async with pool.acquire() as connection:
        rows = [r for r in await unpublished(connection) if _pool_of(r.payload) == name]
    parent = traceparent_of(rows[-1].headers)
    assert parent is not None and parent.split("-")[1] == f"{trace_id:032x}"
    assert isinstance(SpotQuota.model_validate(json.loads(rows[-1].payload)["payload"]), SpotQuota)

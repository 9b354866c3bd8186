"""The router on the real Postgres and Kafka: a batch's submission routes are stored with one
statement (issue 22: one query per record made the router fall behind at 200 submissions/s),
and routing is unchanged: records keep their order, a resubmitted task id is marked duplicate, a
cancel finds the route its submission stored earlier in the same batch, and every forwarded
record continues its own trace."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from quota_harness import _migrated

from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.tasks import TaskCancelled, TaskClass, TaskSubmitted
from gfs.schemas.topics import decode
from gfs.services.platform.kafka.processing import MessageContext
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport, ensure_topics
from gfs.services.platform.postgres import open_pool
from gfs.services.platform.tracing import traceparent_of
from gfs.services.preemption.journal import store
from gfs.services.preemption.router.routing import DUPLICATE_HEADER, Router, inbox_spec

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(loop_scope="session")
async def pg(database_url: str, scratch_schema: str) -> AsyncIterator[asyncpg.Pool]:
    dsn = await _migrated(database_url, scratch_schema)
    async with open_pool(dsn) as pool:
        yield pool


def _submitted(task_id: str, pool: str) -> TaskSubmitted:
    return TaskSubmitted(task_id=task_id, tenant="org-a", gpu_model=pool, gpus_per_worker=1.0, workers=1,
                         task_class=TaskClass.SPOT, command=("python", "train.py"))  # fmt: skip


async def _inbox(kafka: str, inbox: str, n: int) -> list[tuple[Envelope[Any], dict[str, bytes]]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(inbox, p) for p in range(2)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out: list[tuple[Envelope[Any], dict[str, bytes]]] = []
        for _ in range(100):
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for r in records:
                    headers = dict(r.headers or ())
                    source = headers["gfs-source-topic"].decode()
                    out.append((decode(source, r.value or b""), headers))
            if len(out) >= n:
                break
        return out
    finally:
        await consumer.stop()


async def test_a_batchs_routes_are_stored_with_one_statement_and_routed_in_order(
    pg: asyncpg.Pool, kafka_bootstrap: str, registry_topics: TopicsReport, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = uuid.uuid4().hex[:8]
    pool_name, inbox = f"RT-{run}", f"it-inbox-{run}"
    await ensure_topics(kafka_bootstrap, [replace(inbox_spec(2), name=inbox)])
    statements: list[str] = []
    for name in ("route_task", "route_tasks"):
        original = getattr(store, name, None)
        if original is None:  # a router from before the batch statement
            continue

        async def counted(*args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
            statements.append(_name)
            return await _original(*args, **kw)

        monkeypatch.setattr(store, name, counted)
    tracer = TracerProvider().get_tracer("it-router")
    # One fetched batch: five submissions, the third task id submitted again, the second cancelled.
    envelopes = [wrap(_submitted(f"{run}-t{i}", pool_name), producer="it") for i in range(5)]
    envelopes.append(wrap(_submitted(f"{run}-t2", pool_name), producer="it"))
    envelopes.append(wrap(TaskCancelled(task_id=f"{run}-t1", tenant="org-a", reason="user"), producer="it"))
    traces: list[int] = []
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        router = Router(pg, producer, inbox=inbox, pools=frozenset({pool_name}))
        for offset, envelope in enumerate(envelopes):
            with tracer.start_as_current_span("process gfs.tasks.submit") as span:
                traces.append(span.get_span_context().trace_id)
                context = MessageContext(
                    topic="gfs.tasks.submit", partition=0, offset=offset, key=None, headers=(),
                    consumer_group="it", trace_context=otel_context.get_current(), span=span,
                )  # fmt: skip
                await router.handle(envelope, context)
        await router.flush()
    assert router.routed == 7 and router.unroutable == 0 and router.poisoned == 0
    # The five first submissions in one statement; the repeat of t2 alone (it is that task id's
    # second submission in the batch); the cancel looks the route up.
    assert statements == ["route_tasks", "route_task"], statements
    got = await _inbox(kafka_bootstrap, inbox, 7)
    assert [e.event_id for e, _ in got] == [e.event_id for e in envelopes]  # one pool: one partition
    assert [DUPLICATE_HEADER in h for _, h in got] == [False] * 5 + [True, False]
    for (_, headers), trace_id in zip(got, traces, strict=True):
        parent = traceparent_of(list(headers.items()))
        assert parent is not None and parent.split("-")[1] == f"{trace_id:032x}"

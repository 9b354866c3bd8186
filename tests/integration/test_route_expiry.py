"""The router's task routes expire after their task ended (issue 25: `preemption_task_route` kept a
row per task ever submitted), on the real Postgres and Kafka:

- a route is deleted `keep_s` after its task ended, never while the task lives: a cancel for a
  long-running task (route never marked ended) and one for a task that ended recently still reach
  the pool; a cancel later than the window is dead-lettered with a reason that says the route may
  have expired (nothing is dropped silently), in bounded delete statements;
- end to end in the service: the decider marks the route of a task it withdrew (cancelled while
  queued), the router deletes it (window 0 here), and the route of a running task stays, so the
  running task's cancel still evicts it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from live_harness import Tap
from opentelemetry import context as otel_context
from preemption_world import TAPPED, Cluster, _registered, _service, _settings, _until, cluster_world
from quota_harness import _migrated
from test_preemption_router import _inbox, _submitted

from gfs.schemas.commands import EvictCommand
from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.tasks import TaskCancelled, TaskClass, TaskWithdrawn
from gfs.services.platform.kafka.processing import MessageContext
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport, ensure_topics
from gfs.services.platform.postgres import open_pool
from gfs.services.preemption.router.expiry import RouteExpiry, mark_ended
from gfs.services.preemption.router.routing import Router, inbox_spec

pytestmark = pytest.mark.integration

DEAD = "gfs.deadletter"


@pytest_asyncio.fixture(loop_scope="session")
async def pg(database_url: str, scratch_schema: str) -> AsyncIterator[asyncpg.Pool]:
    dsn = await _migrated(database_url, scratch_schema)
    async with open_pool(dsn) as pool:
        yield pool


async def _routed(router: Router, envelopes: list[Envelope[Any]], topic: str) -> None:
    for offset, envelope in enumerate(envelopes):
        context = MessageContext(
            topic=topic,
            partition=0,
            offset=offset,
            key=None,
            headers=(),
            consumer_group="it",
            trace_context=otel_context.get_current(),
            span=None,
        )
        await router.handle(envelope, context)
    await router.flush()


async def _routes(pg: asyncpg.Pool, run: str) -> dict[str, bool]:
    rows = await pg.fetch(
        "SELECT task_id, ended_at FROM preemption_task_route WHERE task_id LIKE $1", f"{run}-%"
    )
    return {str(r["task_id"]).removeprefix(f"{run}-"): r["ended_at"] is not None for r in rows}


@pytest.mark.asyncio(loop_scope="session")
async def test_a_route_expires_only_after_its_task_ended_and_a_late_cancel_is_dead_lettered(
    pg: asyncpg.Pool, kafka_bootstrap: str, registry_topics: TopicsReport
) -> None:
    run = uuid.uuid4().hex[:8]
    pool_name, inbox, source = f"RX-{run}", f"it-inbox-{run}", "gfs.tasks.submit"
    await ensure_topics(kafka_bootstrap, [replace(inbox_spec(2), name=inbox)])
    tap = await Tap(kafka_bootstrap, (DEAD,)).start()
    try:
        async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
            # No allow-list: an unknown task's cancel is dead-lettered, not left to another deployment.
            router = Router(
                pg, producer, inbox=inbox, expiry=RouteExpiry(keep_s=3600.0, batch=1, max_batches=2)
            )
            names = ("live", "recent", "old1", "old2", "old3")
            await _routed(
                router, [wrap(_submitted(f"{run}-{n}", pool_name), producer="it") for n in names], source
            )
            async with pg.acquire() as connection:
                assert await mark_ended(connection, [f"{run}-{n}" for n in names[1:]]) == 4
                assert await mark_ended(connection, [f"{run}-recent"]) == 0  # the first end counts
                # The old ones ended two hours ago, beyond the hour's window; `live` still runs (a
                # route of any age whose task has not ended is kept).
                await connection.execute(
                    "UPDATE preemption_task_route SET ended_at = now() - interval '2 hours'"
                    " WHERE task_id = ANY($1)",
                    [f"{run}-old{i}" for i in (1, 2, 3)],
                )
            assert await _routes(pg, run) == {
                "live": False,
                "recent": True,
                "old1": True,
                "old2": True,
                "old3": True,
            }
            # Bounded: one row a statement, two statements a round (3 due: 2 now, 1 next round).
            assert await router.expiry.maybe_prune(pg) == 2  # type: ignore[union-attr]
            assert await router.expiry.maybe_prune(pg) == 0  # type: ignore[union-attr]  # not due yet
            router.expiry.next_at = 0.0  # type: ignore[union-attr]
            assert await router.expiry.maybe_prune(pg) == 1  # type: ignore[union-attr]
            assert await _routes(pg, run) == {"live": False, "recent": True}

            cancels = [
                wrap(TaskCancelled(task_id=f"{run}-{n}", tenant="org-a", reason="user"), producer="it")
                for n in ("live", "recent", "old1")
            ]
            await _routed(router, cancels, source)
            assert (router.routed, router.unroutable) == (7, 1)
            got = await _inbox(kafka_bootstrap, inbox, 7)
            assert [e.event_id for e, _ in got][-2:] == [cancels[0].event_id, cancels[1].event_id]
            letters = await tap.wait(
                DeadLetter, lambda d: d.source_topic == source and run in d.error, timeout=20
            )
            assert len(letters) == 1 and letters[0].source_offset == 2
            assert f"cancel for task '{run}-old1': no route" in letters[0].error
            assert (
                "ended longer ago than the routes are kept (3600 s after the task ended)" in letters[0].error
            )
    finally:
        await tap.stop()


@pytest.mark.asyncio(loop_scope="session")
async def test_the_service_expires_the_route_of_an_ended_task_and_keeps_a_running_ones(
    database_url: str, kafka_bootstrap: str, registry_topics: TopicsReport, scratch_schema: str
) -> None:
    async with cluster_world(database_url, kafka_bootstrap, scratch_schema, TAPPED) as (c, dsn):
        await _expiry_in_the_service(c, dsn, kafka_bootstrap)


async def _expiry_in_the_service(c: Cluster, dsn: str, kafka_bootstrap: str) -> None:
    # Window 0: a route goes at the router's next prune (every second) after its task ended.
    settings = _settings(dsn, kafka_bootstrap, c.pool, preemption_route_keep_s=0.0)
    connection = await asyncpg.connect(dsn)
    try:

        async def routes() -> dict[str, bool]:
            rows = await connection.fetch("SELECT task_id, ended_at FROM preemption_task_route")
            return {str(r["task_id"]): r["ended_at"] is not None for r in rows}

        async with _service(settings) as (decider, _):
            await c.telemetry(c.node(0), 2)
            await c.quota(2.0)
            await _until(_registered(decider, c.pool, 1))
            await c.submit("RUN", TaskClass.HP, gpus=2)
            await c.started((await c.bind_of("RUN"))[0])
            await c.submit("WAIT", TaskClass.HP, gpus=2)  # no room: queued behind RUN
            await _until(lambda: "WAIT" in decider.owned_pools()[c.pool].tasks)
            await c.producer.send(
                "gfs.tasks.submit", wrap(TaskCancelled(task_id="WAIT", tenant="org-it"), producer="it")
            )
            await c.tap.wait(TaskWithdrawn, lambda w: w.task_id == "WAIT")
            for _ in range(100):
                if await routes() == {"RUN": False}:
                    break
                await asyncio.sleep(0.1)
            assert await routes() == {"RUN": False}
            # The running task's route was kept however old: its cancel still reaches the pool.
            await c.producer.send(
                "gfs.tasks.submit", wrap(TaskCancelled(task_id="RUN", tenant="org-it"), producer="it")
            )
            await c.tap.wait(EvictCommand, lambda e: "RUN" in e.task_ids)
    finally:
        await connection.close()

"""`gfs serve preemption`: task submissions, quotas, telemetry and acks in; commands and lifecycle out.

Shape (docs/services.md, "Preemption service"):
- The router (`router/routing.py`, every instance, one consumer group) re-keys every input by pool onto
  the inbox. The deciders (every instance, another group) own the inbox's partitions, so each
  pool is decided by the one instance its partition is assigned to; a standby (or the surviving
  instance) gets a dead one's partitions at the group's next rebalance.
- Owning a partition: claim it in Postgres (a new epoch fences the previous owner), rebuild its
  pools by replaying their journal through the controllers, then read the inbox from the offset
  stored with the last committed batch. Inbox offsets live in Postgres, not in Kafka.
- A batch of inbox records of one partition: decide (controller), then in ONE transaction check
  the epoch, append the inputs to the journal, record the decisions, enqueue the events and the
  signed commands in the outbox and store the next offset; then wake the relay. A failed
  transaction rebuilds the partition from Postgres, so memory never runs ahead of what is durable.
  After a batch failed with an error a record may cause (`poison.py`), the records up to that
  batch's end are decided one per transaction; the one that fails alone is dead-lettered with the
  error and its offset stored, so one record never stops a partition (issue 22).
- On the wall clock, a timer armed at the owned pools' earliest `next_due` (`DueWake`,
  decider/due_wake.py) runs the tick's path for the pools due, so deadlines and period ends are
  acted on at their time.
- A timer (every `preemption_tick_s`) runs the controllers' periodic work (guarantee periods,
  held binds past their deadline, an expired quota, a scheduling pass) and marks nodes whose
  heartbeat stopped as down (by the rules of liveness.py: silence counts only while the service
  can hear, and a mass silence or the kill switch holds it), journaled the same way; every
  `preemption_status_s` it publishes each owned pool's PoolStatus for the quota service.
- Dry run: everything is decided and recorded, nothing is published; it refuses a Postgres schema
  where a live deployment keeps its state (store.refuse_live_schema). Ownership and the journal are
  keyed by (inbox topic, partition), so deployments with their own inbox topics never fence each other.

The decider (the `decider/` package; its `__init__` lists its collaborators) is built here, with
the router, the outbox relay, the timers and the SRE API: `run_preemption_service` is the
composition root. The router and the decider are wired to each other through what they share,
built first: the node keys and the report check (`report_auth`), the router's hearing (how far it
has read, which the decider's node liveness waits on), and the decider's handoff and refusal count,
which the router is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import replace

from aiohttp import web
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from gfs.schemas.topics import CLOCK_TOPIC
from gfs.services.platform.clock import Clock, SystemClock, TickClock
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import ensure_topics
from gfs.services.platform.metrics import configure_metrics
from gfs.services.platform.outbox import OutboxRelay
from gfs.services.platform.postgres import open_pool
from gfs.services.platform.retention import OUTBOX_RULE, PREEMPTION_RULES, pruning
from gfs.services.platform.signing import node_key
from gfs.services.platform.timer import every, failure_counter
from gfs.services.preemption.decider import Decider, DueWake, NodeKeys
from gfs.services.preemption.decider.counters import Stats
from gfs.services.preemption.decider.names import PRODUCER, TRACER
from gfs.services.preemption.journal import store
from gfs.services.preemption.metrics import register_metrics
from gfs.services.preemption.router.expiry import RouteExpiry
from gfs.services.preemption.router.heard import Heard, caught_up_at
from gfs.services.preemption.router.report_auth import ReportAuth
from gfs.services.preemption.router.routing import ROUTED_TOPICS, Router, inbox_spec, route
from gfs.services.preemption.service_settings import PreemptionSettings
from gfs.services.preemption.sre.api import build_api

log = logging.getLogger(__name__)


def report_auth(settings: PreemptionSettings, key_of: Callable[[str], bytes], instance: str) -> ReportAuth:
    """How this instance checks the agents' signatures (report_auth.py), said in its start-up log."""
    previous = settings.previous_secret()
    previous_keys: dict[str, bytes] = {}

    def previous_key(node: str) -> bytes:
        assert previous is not None
        found = previous_keys.get(node)
        if found is None:
            found = previous_keys[node] = node_key(previous, node)
        return found

    if previous is not None:
        log.warning(
            "preemption %s: GFS_COMMAND_SECRET_PREVIOUS is set: acks and telemetry signed with the "
            "previous secret's node keys are accepted (a rotation) until %s", instance,
            settings.gfs_command_secret_previous_until or "no end (set GFS_COMMAND_SECRET_PREVIOUS_UNTIL)",
        )  # fmt: skip
    if settings.preemption_require_signed_acks:
        log.info("preemption %s: acks and telemetry must be signed with their node's key", instance)
    else:
        log.warning(
            "preemption %s: PREEMPTION_REQUIRE_SIGNED_ACKS is off: UNSIGNED acks and telemetry are "
            "applied (counted in gfs_preemption_acks_unsigned_total); wrongly signed ones are still "
            "refused. Turn it on once every agent signs (docs/operations.md).", instance,
        )  # fmt: skip
    return ReportAuth(
        key_of, require_signed=settings.preemption_require_signed_acks,
        previous_key_of=previous_key if previous is not None else None,
        previous_until=settings.gfs_command_secret_previous_until,
    )  # fmt: skip


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, decider: Decider, consumer: AIOKafkaConsumer, ready: asyncio.Event) -> None:
        self.decider = decider
        self.consumer = consumer
        self.ready = ready

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        for tp in revoked:
            await self.decider.drop(tp.partition)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        for tp in assigned:
            try:
                offset = await self.decider.take(tp.partition)
            except store.ModeConflictError as exc:  # a dry run and a live one on one inbox: stop
                log.error("preemption: %s", exc)
                self.decider.fatal = exc
                return
            self.consumer.seek(tp, offset)
        self.ready.set()


async def _decide(consumer: AIOKafkaConsumer, decider: Decider, stop: asyncio.Event) -> None:
    while not stop.is_set():
        batch = await consumer.getmany(timeout_ms=200, max_records=500)
        fetched_at = time.time()  # the batch's stage stamp (platform/stage_stamps.py)
        if decider.fatal is not None:
            raise decider.fatal
        for tp, records in batch.items():
            try:
                await decider.handle_inbox(tp.partition, records, fetched_at)
            except Exception:
                # The partition was dropped (memory ahead of Postgres): take it again and re-read.
                await asyncio.sleep(0.5)
                if tp in consumer.assignment():
                    consumer.seek(tp, await decider.take(tp.partition))
        for tp in consumer.assignment():  # how far the inbox was heard (liveness.py)
            state = decider.partitions.get(tp.partition)
            if state is not None:
                decider.note_heard(tp.partition, caught_up_at(consumer, tp, state.next_offset))


async def run_preemption_service(
    settings: PreemptionSettings,
    stop: asyncio.Event,
    *,
    clock: Clock | None = None,
    ready: asyncio.Event | None = None,
    started: Callable[[Decider], None] | None = None,
) -> Stats:
    """Run the router, the decider, the timers, the outbox relay and the SRE API until `stop`."""
    clock = clock or (TickClock() if settings.topic_clock else SystemClock())
    ready = ready or asyncio.Event()
    secret = settings.master_secret()
    instance = settings.preemption_instance or f"{socket.gethostname()}-{os.getpid()}"
    metrics = configure_metrics(settings.otel_service_name or PRODUCER)
    inbox = replace(inbox_spec(settings.preemption_inbox_partitions), name=settings.preemption_inbox_topic)
    runner: web.AppRunner | None = None
    async with (
        # No session reset on release: the service keeps no session state (its advisory locks are
        # transaction-level), and the reset was one more round trip per acquisition (issue 22).
        open_pool(settings.database_url, max_size=6, reset_session=False) as pool,
        EnvelopeProducer(
            bootstrap_servers=settings.bootstrap_servers,
            client_id=f"gfs-preemption-{instance}",
            security=settings.kafka_security,
            deployment=settings.gfs_deployment,
        ) as producer,
    ):
        if settings.preemption_dry_run:  # before anything is claimed, routed or created
            async with pool.acquire() as connection:
                await store.refuse_live_schema(connection)
        await ensure_topics(settings.bootstrap_servers, [inbox], security=settings.kafka_security)
        relay = OutboxRelay(pool, producer, poll_interval_s=0.5)
        keys = NodeKeys(secret)  # the decider signs commands with them; the report check verifies
        auth = report_auth(settings, keys.key, instance)
        hearing = Heard()  # how far the router has read every input (router/heard.py)
        decider = Decider(
            pool, settings, clock, instance, keys, producer=producer, on_committed=relay.wake, auth=auth,
            router_heard=lambda: hearing.at,
        )  # fmt: skip
        register_metrics(metrics.meter(TRACER), decider)
        relay.restamp = decider.commit_times.restamp  # the commit's stage stamp (stage_stamps.py)
        # One decode per record: what this instance routes to a partition it decides crosses in
        # memory, validated (handoff.py).
        router = Router(pool, producer, inbox=inbox.name, pools=settings.pool_allowlist(),
                        clock_name=settings.preemption_clock_name, auth=auth, hearing=hearing,
                        on_refused=decider.letters.note_refused, handoff=decider.handoff,
                        expiry=RouteExpiry.for_window(settings.preemption_route_keep_s))  # fmt: skip
        try:
            if settings.preemption_api_port:
                runner = web.AppRunner(build_api(decider, metrics, ready))
                await runner.setup()
                host = settings.bind_host(settings.preemption_api_host)
                await web.TCPSite(runner, host, settings.preemption_api_port).start()
            consumer = AIOKafkaConsumer(
                bootstrap_servers=settings.bootstrap_servers,
                group_id=settings.preemption_group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level="read_committed",
                session_timeout_ms=settings.preemption_session_timeout_ms,
                heartbeat_interval_ms=max(500, settings.preemption_session_timeout_ms // 4),
                client_id=f"gfs-preemption-{instance}",
                **settings.kafka_security.client_kwargs(),
            )
            consumer.subscribe([inbox.name], listener=_Listener(decider, consumer, ready))
            decider.consumer = consumer
            await consumer.start()
            if started is not None:
                started(decider)
            jobs = [
                asyncio.create_task(_decide(consumer, decider, stop)),
                asyncio.create_task(
                    route(
                        router,
                        bootstrap_servers=settings.bootstrap_servers,
                        group=settings.preemption_router_group,
                        stop=stop,
                        offset_reset=settings.preemption_router_offset_reset,
                        topics=(*ROUTED_TOPICS, CLOCK_TOPIC) if settings.topic_clock else ROUTED_TOPICS,
                        security=settings.kafka_security,
                        deployment=settings.gfs_deployment,
                    )
                ),
                asyncio.create_task(relay.run(stop)),
            ]
            timer_failures = failure_counter(metrics.meter(TRACER))
            if not settings.topic_clock:  # on the controllable clock, ticks drive the timers
                # The pools' due times wake the decider at once; the periodic tick is the safety
                # net (DueWake). Every commit may move the earliest due time.
                wake = DueWake(decider.timers, then=relay.wake, failures=timer_failures)
                decider.on_committed = wake
                jobs.append(asyncio.create_task(every(
                    settings.preemption_tick_s, stop, wake.tick, name="preemption.tick",
                    failures=timer_failures,
                )))  # fmt: skip
                jobs.append(asyncio.create_task(wake.run()))
            # History older than the window goes (services/platform/retention.py).
            pruned = pruning(pool, (*PREEMPTION_RULES, OUTBOX_RULE), settings, clock.now, stop,
                             name="preemption.retention", failures=timer_failures)  # fmt: skip
            jobs += [asyncio.create_task(pruned)] if pruned else []
            try:
                done, _ = await asyncio.wait(
                    [*jobs, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED
                )
                for job in done:
                    if job in jobs and job.exception() is not None:
                        raise job.exception()  # type: ignore[misc]
            finally:
                stop.set()
                ready.clear()
                for job in jobs:
                    job.cancel()
                await asyncio.gather(*jobs, return_exceptions=True)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(relay.drain(), timeout=10.0)
                with contextlib.suppress(Exception):
                    await consumer.stop()
        finally:
            if runner is not None:
                await runner.cleanup()
            metrics.shutdown()
    return decider.stats

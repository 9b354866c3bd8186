"""The router: re-keys the scheduler's inputs by pool onto the inbox, so pools can be owned.

Submissions and cancels are keyed by task, telemetry and acks by node, quotas by pool; the
deciding instances own pools through consumer-group assignment of the pool-keyed inbox
(`INBOX_TOPIC`), so every input must first be re-keyed by its pool. The router is stateless
apart from two Postgres maps (a task's pool, recorded at its first submission; a node's pool,
from its telemetry), runs in every instance under one consumer group, and forwards each record's
value as it was read (validated once, not re-encoded) with its own trace context, the source topic
in a header and, for a task id submitted before, a duplicate mark. A fetched batch is one span
(`BATCH_SPAN`) linked to each record's trace, not a span per record (issue 23). Delivery is
at-least-once (the platform's consume loop commits after the inbox acked); the deciders dedupe by
event_id.

Records whose pool cannot be found (a cancel for a task never submitted, an ack from a node that
never sent telemetry) go to the dead-letter topic with the reason, and so does a record whose
route could not be stored twice with an error the record causes (`poison.py`): one bad record
must not stop the router's partition, and then every instance that takes it over.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import asyncpg
from aiokafka.structs import RecordMetadata

from gfs.schemas.clock import CLOCK_KEY, ClockTick
from gfs.schemas.commands import EvictAck
from gfs.schemas.envelope import Envelope
from gfs.schemas.quota import SpotQuota
from gfs.schemas.tasks import TaskCancelled, TaskSubmitted
from gfs.schemas.telemetry import NodeTelemetry
from gfs.schemas.topics import (
    EVICT_ACK_TOPIC,
    QUOTAS_TOPIC,
    TASK_SUBMIT_TOPIC,
    TELEMETRY_TOPIC,
    WORKER_ACK_TOPIC,
    TopicSpec,
    encode,
)
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.platform.kafka.batches import BatchMode
from gfs.services.platform.kafka.consumer import consume
from gfs.services.platform.kafka.dead_letter import DeadLetterPublisher, Refused
from gfs.services.platform.kafka.processing import NO_RETRY, ConsumeStats, MessageContext
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity
from gfs.services.platform.stage_stamps import STAMP_HEADERS, routed_header
from gfs.services.platform.tracing import inject_headers
from gfs.services.preemption.journal import store
from gfs.services.preemption.router.expiry import RouteExpiry
from gfs.services.preemption.router.handoff import Handoff
from gfs.services.preemption.router.heard import Heard
from gfs.services.preemption.router.poison import (
    STORE_ATTEMPTS,
    StoreFailedError,
    caused_by_record,
    store_failed,
)
from gfs.services.preemption.router.report_auth import ReportAuth

log = logging.getLogger(__name__)

INBOX_TOPIC = store.INBOX_TOPIC
SOURCE_HEADER = "gfs-source-topic"
# The Kafka key the record had on its source topic: an agent keys its acks by its node, and the
# decider refuses an ack whose claimed node is not that key (controller.refusal).
SOURCE_KEY_HEADER = "gfs-source-key"
DUPLICATE_HEADER = "gfs-duplicate"
ROUTED_TOPICS = (TASK_SUBMIT_TOPIC, TELEMETRY_TOPIC, QUOTAS_TOPIC, EVICT_ACK_TOPIC, WORKER_ACK_TOPIC)
# CLOCK_TOPIC (gfs.schemas.topics) is routed too when the service runs on the controllable clock.
UNKNOWN_NODE_TTL_S = 30.0
BATCH_SPAN = "route batch"  # the router's span of one fetched batch, linked to each record's trace
_TRACE_HEADERS = frozenset({"traceparent", "tracestate"})
# Headers only the router sets on an inbox record: a producer's own copies are dropped.
_OWN_HEADERS = frozenset({SOURCE_HEADER, DUPLICATE_HEADER, SOURCE_KEY_HEADER, *STAMP_HEADERS})


def inbox_spec(partitions: int) -> TopicSpec:
    """The inbox as a topic spec (for `ensure_topics`): internal, keyed by pool, kept a week."""
    return TopicSpec(
        name=INBOX_TOPIC, key_field="pool", payload_types=(), partitions=partitions,
        retention_ms=7 * 86_400_000, compacted=False,
        description="The preemption service's inputs re-keyed by pool (internal).",
    )  # fmt: skip


class UnroutableError(LookupError):
    """No pool is known for the record (sent to the dead-letter topic)."""

    reason_code = "unroutable"


@dataclass(slots=True)
class Router:
    pool: asyncpg.Pool
    producer: EnvelopeProducer
    producer_name: str = "gfs-preemption-router"
    inbox: str = INBOX_TOPIC
    # The pools this deployment schedules (None: all). Records of other pools, and records whose
    # pool is unknown, are skipped rather than dead-lettered: another scheduler may own them.
    pools: frozenset[str] | None = None
    clock_name: str = CLOCK_KEY  # the controllable clock followed; ticks of other clocks are skipped
    nodes: dict[str, str] = field(default_factory=dict)  # node -> pool, cached
    routed: int = 0
    unroutable: int = 0
    skipped: int = 0
    poisoned: int = 0  # records dead-lettered because their route could not be stored
    in_flight: list[asyncio.Future[Any]] = field(default_factory=list)
    # Until `flush`, with when each was read (wall clock: the stage stamps, platform/stage_stamps.py).
    held: list[tuple[Envelope[Any], MessageContext, float]] = field(default_factory=list)
    unknown_nodes: dict[str, float] = field(default_factory=dict)  # node -> monotonic retry time
    # How far the router has heard (router/heard.py): the decider does not count a node's
    # silence past it (liveness.py).
    hearing: Heard = field(default_factory=Heard)
    # Telemetry not signed by its node (report_auth.py) is dead-lettered here, before its node's
    # pool is stored: a forged sample must not move a node to another pool (its real acks would
    # then be routed there and refused). Acks are checked by the decider (decider/reading.py).
    auth: ReportAuth | None = None
    on_refused: Callable[[NodeTelemetry, str], None] = lambda _sample, _reason: None
    unauthenticated: int = 0
    # Where this instance's decider takes the validated envelopes of the records it will decide,
    # instead of decoding them again (handoff.py; None: it decodes every record).
    handoff: Handoff | None = None
    # Deletes task routes a while after their task ended (router/expiry.py); None: routes are kept.
    expiry: RouteExpiry | None = None

    @property
    def heard(self) -> float | None:
        """Every input sent before this time has been forwarded (None: not known yet)."""
        return self.hearing.at

    async def after_poll(self, consumer: Any) -> None:
        """After every fetch: how far the router has heard, and the routes' pruning when due."""
        await self.hearing.note(consumer)
        if self.expiry is not None:
            await self.expiry.maybe_prune(self.pool)

    async def handle(self, envelope: Envelope[Any], context: MessageContext) -> None:
        """Hold a decoded record until the batch is forwarded (`flush`): the routes of a batch's
        submissions are then stored in one round trip, not one per record (issue 22: at 200
        submissions/s the router spent its time on per-record queries and fell behind)."""
        self.held.append((envelope, context, time.time()))

    async def _route(
        self,
        envelope: Envelope[Any],
        context: MessageContext,
        stored: dict[uuid.UUID, tuple[str, bool]],
        read_at: float,
    ) -> None:
        """Route one held record, in the batch's order (a cancel after its submission finds the
        route the batch stored); `stored` has the routes of the batch's submissions."""
        if isinstance(envelope.payload, ClockTick):
            if envelope.payload.clock != self.clock_name:
                self.skipped += 1  # another replay's clock on the shared topic
                return
            # Every pool plays every tick: one copy per pool, in the pool's inbox order.
            for pool in await self._clock_pools():
                await self._forward(envelope, context, pool, read_at, duplicate=False)
            return
        if self.pools is not None and not self._maybe_ours(envelope.payload):
            self.skipped += 1
            return
        if isinstance(envelope.payload, NodeTelemetry) and self.auth is not None:
            verdict = self.auth.check(envelope.payload)
            if verdict.refusal is not None:
                self.unauthenticated += 1
                self.on_refused(envelope.payload, verdict.refusal.value)
                why = f"NodeTelemetry refused: {verdict.why(envelope.payload)}"
                await self._dead_letter(envelope, context, Refused(verdict.refusal.value, why))
                return
        try:
            found = stored.get(envelope.event_id) or await self._pool_of_stored(envelope)
        except UnroutableError as exc:
            if self.pools is not None:
                self.skipped += 1
                return
            await self._dead_letter(envelope, context, exc)
            self.unroutable += 1
            return
        if isinstance(found, StoreFailedError):
            await self._dead_letter(envelope, context, found)
            self.poisoned += 1
            return
        pool, duplicate = found
        if self.pools is not None and pool not in self.pools:
            self.skipped += 1
            return
        await self._forward(envelope, context, pool, read_at, duplicate=duplicate)

    async def _forward(
        self, envelope: Envelope[Any], context: MessageContext, pool: str, read_at: float, *, duplicate: bool
    ) -> None:
        headers = [(k, v) for k, v in context.headers if k not in _TRACE_HEADERS and k not in _OWN_HEADERS]
        headers.append(routed_header(read_at, time.time()))
        headers.append((SOURCE_HEADER, context.topic.encode()))
        if context.key is not None:
            headers.append((SOURCE_KEY_HEADER, context.key))
        if duplicate:
            headers.append((DUPLICATE_HEADER, b"1"))
        # The record's own trace (the producer's span when `route` runs a batch in one span; the
        # record's consume span with a span per record): the decisions continue the task's trace.
        carried = inject_headers(headers, context=context.trace_context)
        # The value as it was read: validated once, here, and not re-encoded (issue 23); the
        # decider decodes it against its source topic, as it decoded the re-encoded envelope.
        value = context.value if context.value is not None else encode(envelope)
        sent = await self.producer.send_raw_later(self.inbox, value=value, key=pool.encode(), headers=carried)
        if self.handoff is not None:
            sent.add_done_callback(partial(_hand_over, self.handoff, envelope))
        self.in_flight.append(sent)
        self.routed += 1

    async def flush(self) -> None:
        """Route and forward the held records in their order, then wait for the broker's ack of
        everything forwarded (before the batch's offsets are committed)."""
        held, self.held = self.held, []
        stored = await self._store_submissions([envelope for envelope, _, _ in held])
        for envelope, context, read_at in held:
            await self._route(envelope, context, stored, read_at)
        in_flight, self.in_flight = self.in_flight, []
        if in_flight:
            await asyncio.gather(*in_flight)

    async def _store_submissions(self, envelopes: list[Envelope[Any]]) -> dict[uuid.UUID, tuple[str, bool]]:
        """Store the routes of the batch's submissions in one round trip: event id -> (pool,
        duplicate?). Left out (routed one by one, as before): a task id's later submissions in the
        same batch, submissions of other deployments' pools, and everything when the batch's
        statement failed with an error a record may cause (the poison rule then finds the record)."""
        rows: dict[str, tuple[str, str, uuid.UUID]] = {}
        for envelope in envelopes:
            payload = envelope.payload
            if not isinstance(payload, TaskSubmitted) or payload.task_id in rows:
                continue
            if self.pools is not None and payload.gpu_model not in self.pools:
                continue
            rows[payload.task_id] = (payload.task_id, payload.gpu_model, envelope.event_id)
        if not rows:
            return {}
        try:
            async with self.pool.acquire() as connection:
                found = await store.route_tasks(connection, list(rows.values()))
        except Exception as exc:
            if not caused_by_record(exc):
                raise
            log.warning("router: storing %d routes at once failed, one by one now: %r", len(rows), exc)
            return {}
        out: dict[uuid.UUID, tuple[str, bool]] = {}
        for task_id, _, event_id in rows.values():
            if task_id in found:
                pool, first = found[task_id]
                out[event_id] = (pool, first != event_id)
        return out

    async def _clock_pools(self) -> list[str]:
        """The pools a clock tick goes to: the allow-list, else every pool a node reported."""
        if self.pools is not None:
            return sorted(self.pools)
        async with self.pool.acquire() as connection:
            return await store.known_pools(connection)

    async def _pool_of_stored(self, envelope: Envelope[Any]) -> tuple[str, bool] | StoreFailedError:
        """`_pool_of`, tried twice when the record's own data makes the store fail; the error to
        dead-letter it with when it failed both times. Other errors propagate: the loop stops and
        the record is read again, as before."""
        error = StoreFailedError("not tried")
        for attempt in range(1, STORE_ATTEMPTS + 1):
            try:
                return await self._pool_of(envelope.payload, envelope)
            except UnroutableError:
                raise
            except Exception as exc:
                if not caused_by_record(exc):
                    raise
                log.warning("router: storing the route of %s failed (attempt %d/%d): %r",
                            envelope.event_id, attempt, STORE_ATTEMPTS, exc)  # fmt: skip
                error = store_failed(exc)
        return error

    def _maybe_ours(self, payload: object) -> bool:
        """Cheap pre-filter for records that name their pool."""
        pools = self.pools or frozenset()
        if isinstance(payload, TaskSubmitted | NodeTelemetry):
            return payload.gpu_model in pools
        if isinstance(payload, SpotQuota):
            return payload.pool in pools
        return True

    async def _pool_of(self, payload: object, envelope: Envelope[Any]) -> tuple[str, bool]:
        if isinstance(payload, TaskSubmitted):
            async with self.pool.acquire() as connection:
                return await store.route_task(
                    connection, payload.task_id, payload.gpu_model, envelope.event_id
                )
        if isinstance(payload, TaskCancelled):
            async with self.pool.acquire() as connection:
                found = await store.task_pool(connection, payload.task_id)
            if found is None:
                raise UnroutableError(
                    f"cancel for task {payload.task_id!r}: no route, the task was never submitted or ended"
                    f" longer ago than the routes are kept ({self._keep()})"
                )
            return found, False
        if isinstance(payload, NodeTelemetry):
            if self.nodes.get(payload.node) != payload.gpu_model:
                async with self.pool.acquire() as connection:
                    await store.route_node(connection, payload.node, payload.gpu_model)
                self.nodes[payload.node] = payload.gpu_model
                self.unknown_nodes.pop(payload.node, None)
            return payload.gpu_model, False
        if isinstance(payload, SpotQuota):
            return payload.pool, False
        if isinstance(payload, EvictAck | WorkerStarted | WorkerExited):
            return await self._node_pool(payload.node), False
        raise UnroutableError(f"{type(payload).__name__} is not a scheduler input")

    def _keep(self) -> str:
        return "for ever" if self.expiry is None else f"{self.expiry.keep_s:.0f} s after the task ended"

    async def _node_pool(self, node: str) -> str:
        found = self.nodes.get(node)
        if found is None:
            # A node looked up in vain is not asked again for a while (acks of a cluster this
            # deployment does not schedule would otherwise cost a query each).
            now = time.monotonic()
            if self.unknown_nodes.get(node, -math.inf) > now:
                raise UnroutableError(f"node {node!r} never sent telemetry: its pool is unknown")
            async with self.pool.acquire() as connection:
                found = await store.node_pool(connection, node)
            if found is None:
                self.unknown_nodes[node] = now + UNKNOWN_NODE_TTL_S
                raise UnroutableError(f"node {node!r} never sent telemetry: its pool is unknown")
            self.nodes[node] = found
        return found

    async def _dead_letter(self, envelope: Envelope[Any], context: MessageContext, exc: Exception) -> None:
        letters = DeadLetterPublisher(
            sink=self.producer, consumer_group=context.consumer_group, producer=self.producer_name
        )
        value = context.value if context.value is not None else encode(envelope)
        await letters.publish(_Read(context.topic, context.partition, context.offset, value), exc)
        log.warning("router: dead-lettered %s@%d: %s", context.topic, context.offset, exc)


def _hand_over(handoff: Handoff, envelope: Envelope[Any], sent: asyncio.Future[RecordMetadata]) -> None:
    """Leave a forwarded record's envelope for the decider, where the broker's ack put it; as soon
    as the ack arrives (not after the batch), so the decider rarely reads the record first."""
    if not sent.cancelled() and sent.exception() is None:
        landed = sent.result()
        handoff.put(landed.partition, landed.offset, envelope)


@dataclass(frozen=True, slots=True)
class _Read:
    """A record as the dead-letter publisher needs it: where it was read, and its bytes."""

    topic: str
    partition: int
    offset: int
    value: bytes | None


async def route(
    router: Router,
    *,
    bootstrap_servers: list[str],
    group: str,
    stop: asyncio.Event,
    stats: ConsumeStats | None = None,
    offset_reset: str = "earliest",
    topics: tuple[str, ...] = ROUTED_TOPICS,
    security: KafkaSecurity = PLAINTEXT,
    deployment: str | None = None,
) -> None:
    """The router on the platform's consume loop in batch mode (services/platform/kafka/batches.py):
    per fetched batch, decode (bad records to the dead-letter topic), store the batch's routes (one
    round trip for its submissions), forward every record without waiting, then wait for all the
    acks (`flush`) and commit the batch's offsets. At-least-once, one commit and one round of acks
    per batch instead of per record; one span per batch (`BATCH_SPAN`) linked to each record's trace."""
    mode = BatchMode(flush=router.flush, span_name=BATCH_SPAN, after_poll=router.after_poll)
    await consume(
        topics, group, router.handle, bootstrap_servers=bootstrap_servers, stop=stop, retry=NO_RETRY,
        dead_letter_producer=router.producer, producer_name=router.producer_name, poll_timeout_ms=200,
        stats=stats, security=security, batch=mode, offset_reset=offset_reset, deployment=deployment,
    )  # fmt: skip

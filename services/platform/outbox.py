"""The transactional outbox: state and the events it implies commit together, a relay publishes.

A service writes its state change and `enqueue`s the envelopes that change must publish on the
same asyncpg connection, inside one transaction: either both are durable or neither is. The
`OutboxRelay` then publishes unpublished rows in id order and marks them published.

Delivery: at-least-once. The relay marks rows only after the broker acknowledged them, in the
same transaction that locked them; a crash between the publish and that commit republishes the
rows (same bytes, same `event_id`), so consumers dedupe by `event_id`. Nothing is lost: a row is
never marked before its publish was acknowledged. One relay publishes at a time (the rows are
locked `FOR UPDATE`, a second relay waits), which keeps per-key order on the wire.

The envelope is encoded once, at `enqueue`, with the trace context of the writing transaction in
its headers: the relay publishes the stored bytes and headers as they are, so the consumer's span
continues the trace of the decision that produced the event, not the relay's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import asyncpg
from opentelemetry import trace

from gfs.schemas.envelope import Envelope
from gfs.schemas.topics import encode, key_of, topic
from gfs.services.platform.tracing import TRACER_NAME, extract_context, inject_headers

log = logging.getLogger(__name__)

_INSERT = "INSERT INTO outbox (topic, key, payload, headers) VALUES ($1, $2, $3, $4::jsonb) RETURNING id"
_INSERT_MANY = "INSERT INTO outbox (topic, key, payload, headers) VALUES ($1, $2, $3, $4::jsonb)"
_PENDING = """
SELECT id, topic, key, payload, headers FROM outbox
WHERE published_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE
"""
_MARK = "UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[])"


class RawSink(Protocol):
    """Publishes encoded bytes and waits for the broker's ack (`EnvelopeProducer.send_raw`)."""

    async def send_raw(
        self, topic_name: str, *, value: bytes, key: bytes | None, headers: Iterable[tuple[str, bytes]] = ()
    ) -> object: ...


class OutboxTopicError(ValueError):
    """The envelope's payload does not belong on the topic (checked before anything is written)."""


async def enqueue(
    connection: asyncpg.Connection,
    topic_name: str,
    envelope: Envelope[Any],
    *,
    headers: Iterable[tuple[str, bytes]] = (),
) -> int:
    """Add `envelope` for `topic_name` to the outbox on `connection` (call it inside the
    transaction that writes the state it reports). Returns the row id."""
    spec = topic(topic_name)
    if not isinstance(envelope.payload, tuple(spec.payload_types)):
        allowed = ", ".join(t.__name__ for t in spec.payload_types)
        raise OutboxTopicError(
            f"{type(envelope.payload).__name__} cannot be published on {topic_name} (allowed: {allowed})"
        )
    carried = [[name, base64.b64encode(value).decode("ascii")] for name, value in inject_headers(headers)]
    value = encode(envelope)
    row_id = await connection.fetchval(_INSERT, topic_name, key_of(envelope), value, json.dumps(carried))
    return int(row_id)


OutboxValues = tuple[str, bytes | None, bytes, str]
"""One outbox row as its column values: topic, key, payload (the encoded envelope), headers (JSON)."""


def outbox_values(
    items: Sequence[tuple[str, Envelope[Any], Iterable[tuple[str, bytes]]]],
) -> list[OutboxValues]:
    """The outbox rows of (topic, envelope, headers) items, checked and encoded, not written: for a
    writer that inserts them in a statement of its own (the preemption service's one-statement
    commit, `gfs.services.preemption.journal.store.commit_batch`). Raises `OutboxTopicError` before
    any I/O."""
    rows: list[OutboxValues] = []
    for topic_name, envelope, headers in items:
        spec = topic(topic_name)
        if not isinstance(envelope.payload, tuple(spec.payload_types)):
            allowed = ", ".join(t.__name__ for t in spec.payload_types)
            raise OutboxTopicError(
                f"{type(envelope.payload).__name__} cannot be published on {topic_name} (allowed: {allowed})"
            )
        carried = [[name, base64.b64encode(value).decode("ascii")] for name, value in headers]
        rows.append((topic_name, key_of(envelope), encode(envelope), json.dumps(carried)))
    return rows


async def enqueue_many(
    connection: asyncpg.Connection,
    items: Sequence[tuple[str, Envelope[Any], Iterable[tuple[str, bytes]]]],
) -> None:
    """`enqueue` for several envelopes in one round trip (topic, envelope, headers each); the
    headers must already carry the trace context the row should continue."""
    await connection.executemany(_INSERT_MANY, outbox_values(items))


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    topic: str
    key: bytes | None
    payload: bytes
    headers: tuple[tuple[str, bytes], ...]


def _row(record: asyncpg.Record) -> OutboxRow:
    raw = record["headers"]
    pairs = json.loads(raw) if isinstance(raw, str) else raw
    headers = tuple((str(name), base64.b64decode(value)) for name, value in pairs)
    key = record["key"]
    return OutboxRow(int(record["id"]), str(record["topic"]), None if key is None else bytes(key),
                     bytes(record["payload"]), headers)  # fmt: skip


@dataclass(slots=True)
class OutboxRelay:
    """Publishes the outbox in id order: lock a batch, publish each row (awaiting the ack), mark
    the batch, commit. `wake()` lets a writer in the same process skip the poll interval."""

    pool: asyncpg.Pool
    sink: RawSink
    batch: int = 500
    poll_interval_s: float = 0.2
    published: int = 0
    # Headers added to a row as it is published, given the time (the preemption service's stage
    # stamps, platform/stage_stamps.py); None: the stored headers as they are.
    restamp: Callable[[tuple[tuple[str, bytes], ...], float], tuple[tuple[str, bytes], ...]] | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    def wake(self) -> None:
        self._wake.set()

    async def publish_pending(self) -> int:
        """One batch: how many rows were published (0 when the outbox is drained). A failed
        publish rolls the batch back (none of it marked) and raises; it is retried later."""
        async with self.pool.acquire() as connection, connection.transaction():
            rows = [_row(r) for r in await connection.fetch(_PENDING, self.batch)]
            tracer = trace.get_tracer(TRACER_NAME)
            # A sink that can queue without waiting (EnvelopeProducer) gets the whole batch at
            # once and the acks are awaited together: one round trip per batch, not per row. The
            # producer keeps each partition's order, so per-key order on the wire is unchanged.
            later = getattr(self.sink, "send_raw_later", None)
            acks = []
            for row in rows:
                headers = row.headers if self.restamp is None else self.restamp(row.headers, time.time())
                # The publish continues the trace of the transaction that wrote the row.
                with tracer.start_as_current_span(
                    f"publish {row.topic}",
                    context=extract_context(row.headers),
                    kind=trace.SpanKind.PRODUCER,
                    attributes={"messaging.system": "kafka", "messaging.destination.name": row.topic,
                                "gfs.outbox.id": row.id},
                ):  # fmt: skip
                    if later is not None:
                        acks.append(await later(row.topic, value=row.payload, key=row.key, headers=headers))
                    else:
                        await self.sink.send_raw(row.topic, value=row.payload, key=row.key, headers=headers)
            if acks:
                await asyncio.gather(*acks)
            if rows:
                await connection.execute(_MARK, [row.id for row in rows])
        self.published += len(rows)
        return len(rows)

    async def drain(self) -> int:
        """Publish until the outbox is empty; the number published."""
        total = 0
        while (n := await self.publish_pending()) > 0:
            total += n
        return total

    async def run(self, stop: asyncio.Event, *, retry_after_s: float = 1.0) -> None:
        """Publish until `stop` is set; a failing batch is logged and retried after a pause."""
        while not stop.is_set():
            # Cleared BEFORE the outbox is read, never after: a writer that commits and wakes us
            # while a batch is being published (or just after the last look found nothing) must
            # not be forgotten, or its rows wait a whole poll interval (issue 22: most of the
            # submit -> TaskAccepted tail at 200/s). A wake during the batch makes the wait below
            # return at once and the outbox is read again.
            self._wake.clear()
            try:
                # A short batch means nothing else was committed when it was read; anything
                # committed since comes with a wake (or the poll): no extra empty look.
                while await self.publish_pending() >= self.batch:
                    pass
            except Exception as exc:  # broker down (KafkaError kin), Postgres gone, a timeout
                # Nothing was marked: the batch is published again on the next try.
                log.warning("outbox relay: publish failed, retrying in %.1fs: %r", retry_after_s, exc)
                await _sleep_or_stop(stop, retry_after_s)
                continue
            waiters = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
            _, rest = await asyncio.wait(
                waiters, timeout=self.poll_interval_s, return_when=asyncio.FIRST_COMPLETED
            )
            for task in rest:
                task.cancel()


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


async def unpublished(connection: asyncpg.Connection) -> Sequence[OutboxRow]:
    """Rows not published yet, oldest first (operations and tests)."""
    query = "SELECT id, topic, key, payload, headers FROM outbox WHERE published_at IS NULL ORDER BY id"
    return [_row(r) for r in await connection.fetch(query)]

"""Processing one consumed record: decode, dead-letter or handle (with bounded retries), in a span.

Kafka-free on purpose: `RecordProcessor` takes plain `ConsumerRecord` values and an `EnvelopeSink`,
so the whole per-record contract is unit-tested with a recording fake sink; `consumer.consume`
adds polling and commits around it. The delivery contract is documented in `consumer`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from aiokafka import ConsumerRecord
from opentelemetry import context as otel_context
from opentelemetry import trace

from gfs.schemas.envelope import Envelope
from gfs.schemas.topics import DEAD_LETTER_TOPIC, decode
from gfs.services.platform import deployment as deployment_ids
from gfs.services.platform.kafka.dead_letter import DeadLetterPublisher, describe_error
from gfs.services.platform.tracing import TRACER_NAME, extract_context

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageContext:
    """What a handler knows about the record besides its envelope."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    consumer_group: str
    # The context current while the handler runs (the consume span is its active span), so
    # anything the handler publishes continues the same trace.
    trace_context: otel_context.Context
    span: trace.Span
    # The record's value as read (a router forwards it as it came, not re-encoded: issue 23).
    value: bytes | None = None


Handler = Callable[[Envelope[Any], MessageContext], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often a failing handler is retried in-process before the loop stops."""

    attempts: int = 3
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be at least 1 (the first try counts)")

    def backoff_s(self, failed_attempt: int) -> float:
        """Delay after the `failed_attempt`-th failure (1-based): doubling, capped."""
        return min(self.max_backoff_s, self.initial_backoff_s * 2.0 ** (failed_attempt - 1))


NO_RETRY = RetryPolicy(attempts=1)
# The default of `consume`: three tries 0.2 s and 0.4 s apart, then stop (see the contract).
DEFAULT_RETRY = RetryPolicy()


class HandlerFailedError(RuntimeError):
    """The handler kept failing on one record; its offset was not committed."""

    def __init__(self, *, topic: str, partition: int, offset: int, attempts: int) -> None:
        super().__init__(
            f"handler failed {attempts} time(s) on {topic}[{partition}]@{offset}; "
            "offset not committed, the record will be redelivered to this consumer group"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset


@dataclass(slots=True)
class ConsumeStats:
    """Counts for logs and tests; mutated only by the loop that owns it."""

    handled: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    foreign: int = 0  # records of another deployment, ignored (services/platform/deployment.py)


class EnvelopeSink(Protocol):
    """Where dead letters go (`EnvelopeProducer` in production, a recording fake in unit tests)."""

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> object: ...


@dataclass(slots=True, kw_only=True)
class RecordProcessor:
    """Steps 1-4 of the contract in `gfs.services.platform.kafka.consumer`, for one record and
    without the Kafka consumer: decode, dead-letter or handle with retries. Returning normally
    means the offset may be committed; `HandlerFailedError` means it must not be."""

    sink: EnvelopeSink
    group: str
    handler: Handler
    retry: RetryPolicy
    producer_name: str
    now: Callable[[], datetime]
    stats: ConsumeStats
    # Looked up per processor (not at import) so a provider installed by configure_tracing, or a
    # test's local provider, is the one used.
    tracer: trace.Tracer = field(default_factory=lambda: trace.get_tracer(TRACER_NAME))

    # False: no span per record (issue 23, spans that cost little). The caller runs a batch in
    # one span of its own; each record's trace is linked from it (at most the SDK's link limit,
    # 128 by default) and handed to the handler as `trace_context`, so what it publishes still
    # continues the record's own trace.
    span_per_record: bool = True
    # The deployment whose records are handled; another's are skipped before decoding (their
    # offsets are committed like any record's). Default: GFS_DEPLOYMENT.
    deployment: str = field(default_factory=deployment_ids.current)

    async def process(self, record: ConsumerRecord[bytes, bytes]) -> None:
        if deployment_ids.foreign(record.headers, self.deployment):
            self.stats.foreign += 1
            return
        if not self.span_per_record:
            await self._process_in_batch(record)
            return
        tracer = self.tracer
        attributes = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.destination.name": record.topic,
            "messaging.destination.partition.id": str(record.partition),
            "messaging.kafka.offset": record.offset,
            "messaging.consumer.group.name": self.group,
        }
        with tracer.start_as_current_span(
            f"process {record.topic}",
            context=extract_context(record.headers),
            kind=trace.SpanKind.CONSUMER,
            attributes=attributes,
        ) as span:
            try:
                envelope = decode(record.topic, record.value or b"")
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                await self._reject(record, exc, span)
                return
            await self._handle(envelope, record, span)

    async def _process_in_batch(self, record: ConsumerRecord[bytes, bytes]) -> None:
        batch = trace.get_current_span()
        try:
            envelope = decode(record.topic, record.value or b"")
        except ValueError as exc:
            await self._reject(record, exc, batch)
            return
        own = extract_context(record.headers)
        if batch.is_recording():
            linked = trace.get_current_span(own).get_span_context()
            if linked.is_valid:
                batch.add_link(linked)
        await self._handle(envelope, record, batch, own)

    async def _reject(self, record: ConsumerRecord[bytes, bytes], exc: ValueError, span: trace.Span) -> None:
        reason = describe_error(exc)
        if self.span_per_record:
            span.set_attribute("gfs.dead_letter.reason", reason)
        else:  # the batch's span: one event per refused record
            span.add_event(
                "dead letter", {"messaging.kafka.offset": record.offset, "gfs.dead_letter.reason": reason}
            )
        if record.topic == DEAD_LETTER_TOPIC:
            log.error(
                "undecodable dead letter skipped topic=%s partition=%d offset=%d reason=%s",
                record.topic, record.partition, record.offset, reason,
            )  # fmt: skip
            self.stats.skipped += 1
            return
        letters = DeadLetterPublisher(
            sink=self.sink, consumer_group=self.group, producer=self.producer_name, now=self.now
        )
        await letters.publish(record, exc)
        log.warning(
            "dead-lettered topic=%s partition=%d offset=%d reason=%s",
            record.topic, record.partition, record.offset, reason,
        )  # fmt: skip
        self.stats.dead_lettered += 1

    async def _handle(
        self,
        envelope: Envelope[Any],
        record: ConsumerRecord[bytes, bytes],
        span: trace.Span,
        trace_context: otel_context.Context | None = None,
    ) -> None:
        context = MessageContext(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            headers=tuple(record.headers or ()),
            consumer_group=self.group,
            trace_context=otel_context.get_current() if trace_context is None else trace_context,
            span=span,
            value=record.value,
        )
        for attempt in range(1, self.retry.attempts + 1):
            try:
                await self.handler(envelope, context)
            except Exception as exc:
                span.record_exception(exc)
                log.warning(
                    "handler failed attempt=%d/%d topic=%s partition=%d offset=%d event_id=%s error=%r",
                    attempt, self.retry.attempts, record.topic, record.partition, record.offset,
                    envelope.event_id, exc,
                )  # fmt: skip
                if attempt == self.retry.attempts:
                    span.set_status(trace.Status(trace.StatusCode.ERROR, "handler failed"))
                    raise HandlerFailedError(
                        topic=record.topic, partition=record.partition, offset=record.offset,
                        attempts=attempt,
                    ) from exc  # fmt: skip
                await asyncio.sleep(self.retry.backoff_s(attempt))
            else:
                self.stats.handled += 1
                return

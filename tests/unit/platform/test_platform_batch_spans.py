"""Records processed in a batch's span (issue 23, spans that cost little), and the router forwarding
each record as it was read (one decode per record). No Kafka: real `ConsumerRecord` values, a
recording sink and a recording producer."""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka.structs import ConsumerRecord
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gfs.schemas.envelope import Envelope
from gfs.schemas.topics import DEAD_LETTER_TOPIC
from gfs.services.platform.kafka.processing import ConsumeStats, MessageContext, RecordProcessor, RetryPolicy
from gfs.services.platform.tracing import traceparent_of
from gfs.services.preemption.router.routing import SOURCE_HEADER, Router

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GOLDEN = Path(__file__).resolve().parents[2] / "contract" / "golden" / "v1"
QUOTAS = "gfs.quotas"
# Two producers' traces (W3C traceparent: version-trace id-span id-flags).
TRACE_A = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_B = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@dataclass
class Recorded:
    sent: list[tuple[str, Envelope[Any]]] = field(default_factory=list)
    raw: list[tuple[str, bytes, bytes | None, list[tuple[str, bytes]]]] = field(default_factory=list)
    calls: list[tuple[Envelope[Any], MessageContext]] = field(default_factory=list)

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> None:
        self.sent.append((topic_name, envelope))

    async def send_raw_later(
        self, topic_name: str, *, value: bytes, key: bytes | None, headers: Any = ()
    ) -> asyncio.Future[None]:
        self.raw.append((topic_name, value, key, list(headers)))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def handle(self, envelope: Envelope[Any], context: MessageContext) -> None:
        self.calls.append((envelope, context))


def a_quota_value() -> bytes:
    """The golden SpotQuota as a producer may well write it: indented, keys in its own order (not
    the bytes `encode` would give for the same envelope)."""
    return json.dumps(json.loads((GOLDEN / "SpotQuota.json").read_text()), indent=3).encode()


def a_record(value: bytes, *, offset: int, traceparent: str | None = None) -> ConsumerRecord[bytes, bytes]:
    headers = [("traceparent", traceparent.encode())] if traceparent else []
    return ConsumerRecord(
        topic=QUOTAS, partition=1, offset=offset, timestamp=0, timestamp_type=0, key=b"A100-SXM4-80GB",
        value=value, checksum=None, serialized_key_size=14, serialized_value_size=len(value),
        headers=tuple(headers),
    )  # fmt: skip


def a_processor(handler: Any, sink: Recorded, *, per_record: bool) -> RecordProcessor:
    batched: dict[str, Any] = {} if per_record else {"span_per_record": False}  # default: per record
    return RecordProcessor(
        sink=sink, group="g1", handler=handler, retry=RetryPolicy(attempts=1), producer_name="gfs-test",
        now=lambda: NOW, stats=ConsumeStats(), **batched,
    )  # fmt: skip


def a_tracer() -> tuple[trace.Tracer, InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return provider.get_tracer("test"), spans


async def test_a_batch_is_one_span_linked_to_each_records_trace_and_handlers_get_their_own_trace() -> None:
    tracer, spans = a_tracer()
    recorded = Recorded()
    processor = a_processor(recorded.handle, recorded, per_record=False)
    records = [
        a_record(a_quota_value(), offset=1, traceparent=TRACE_A),
        a_record(a_quota_value(), offset=2, traceparent=TRACE_B),
        a_record(a_quota_value(), offset=3),  # no trace: nothing to link
    ]
    with tracer.start_as_current_span("route batch"):
        for record in records:
            await processor.process(record)
    [batch] = spans.get_finished_spans()  # no span per record
    assert batch.name == "route batch"
    assert [(link.context.trace_id, link.context.span_id) for link in batch.links] == [
        (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7),
        (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331),
    ]
    # What a handler publishes continues its record's trace (the producer's span as the parent),
    # not the batch's; a record without a trace gets none.
    parents = [trace.get_current_span(c.trace_context).get_span_context() for _, c in recorded.calls]
    assert [(p.trace_id, p.span_id) for p in parents] == [
        (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7),
        (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331),
        (0, 0),
    ]
    assert [c.value for _, c in recorded.calls] == [r.value for r in records]
    assert processor.stats.handled == 3


async def test_a_bad_record_in_a_batch_is_dead_lettered_with_its_reason_on_the_batch_span() -> None:
    tracer, spans = a_tracer()
    recorded = Recorded()
    processor = a_processor(recorded.handle, recorded, per_record=False)
    bad = json.loads(a_quota_value())
    bad["payload"]["eta"] = "high"
    value = json.dumps(bad).encode()
    with tracer.start_as_current_span("route batch"):
        await processor.process(a_record(value, offset=7, traceparent=TRACE_A))
    [(topic_name, letter)] = recorded.sent
    assert topic_name == DEAD_LETTER_TOPIC and "payload.eta" in letter.payload.error
    assert base64.b64decode(letter.payload.original) == value
    assert recorded.calls == [] and processor.stats.dead_lettered == 1
    [batch] = spans.get_finished_spans()
    [event] = batch.events
    assert event.name == "dead letter" and event.attributes is not None
    assert event.attributes["messaging.kafka.offset"] == 7
    assert "payload.eta" in str(event.attributes["gfs.dead_letter.reason"])


async def test_the_router_forwards_a_record_as_it_was_read_in_its_own_trace() -> None:
    """Validated once by the router, the record goes to the inbox byte for byte (it is not
    re-encoded), keyed by its pool, with its source topic and its producer's trace."""
    recorded = Recorded()
    router = Router(pool=None, producer=recorded)  # type: ignore[arg-type]  # a quota names its pool: no Postgres
    processor = a_processor(router.handle, recorded, per_record=True)
    value = a_quota_value()
    await processor.process(a_record(value, offset=4, traceparent=TRACE_A))
    await router.flush()
    [(inbox, forwarded, key, headers)] = recorded.raw
    assert (inbox, key) == (router.inbox, b"A100-SXM4-80GB")
    assert forwarded == value
    assert (SOURCE_HEADER, QUOTAS.encode()) in headers
    parent = traceparent_of(headers)
    assert parent is not None and parent.split("-")[1] == "4bf92f3577b34da6a3ce929d0e0e4736"

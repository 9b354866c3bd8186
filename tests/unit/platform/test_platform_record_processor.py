"""The per-record half of the consumer loop, driven with real records and a recording fake sink.

No Kafka here: `RecordProcessor` gets aiokafka `ConsumerRecord` values (plain data) and publishes
dead letters to a fake `EnvelopeSink` that records what it was sent.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.topics import DEAD_LETTER_TOPIC, encode
from gfs.services.platform.kafka.processing import (
    ConsumeStats,
    HandlerFailedError,
    MessageContext,
    RecordProcessor,
    RetryPolicy,
)

SUBMIT = "gfs.tasks.submit"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@dataclass
class RecordingSink:
    sent: list[tuple[str, Envelope[Any]]] = field(default_factory=list)

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> None:
        self.sent.append((topic_name, envelope))


@dataclass
class ScriptedHandler:
    """Fails the first `failures` calls, then succeeds; records every call."""

    failures: int = 0
    calls: list[tuple[Envelope[Any], MessageContext]] = field(default_factory=list)

    async def __call__(self, envelope: Envelope[Any], context: MessageContext) -> None:
        self.calls.append((envelope, context))
        if len(self.calls) <= self.failures:
            raise RuntimeError(f"transient failure {len(self.calls)}")


def a_record(value: bytes | None, *, topic: str = SUBMIT, offset: int = 5, headers=()) -> ConsumerRecord:
    return ConsumerRecord(
        topic=topic, partition=2, offset=offset, timestamp=0, timestamp_type=0, key=b"job-1", value=value,
        checksum=None, serialized_key_size=5, serialized_value_size=len(value or b""), headers=tuple(headers),
    )  # fmt: skip


def a_good_value() -> bytes:
    payload = TaskSubmitted(
        task_id="job-1", tenant="org-a", gpu_model="A100", gpus_per_worker=0.5, workers=1,
        task_class=TaskClass.SPOT, command="sleep 1",
    )  # fmt: skip
    return encode(wrap(payload, producer="test", occurred_at=NOW))


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def a_processor(
    handler: ScriptedHandler, sink: RecordingSink, spans: InMemorySpanExporter, *, attempts: int = 3
) -> RecordProcessor:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return RecordProcessor(
        sink=sink, group="g1", handler=handler, retry=RetryPolicy(attempts=attempts, initial_backoff_s=0.0),
        producer_name="gfs-test", now=lambda: NOW, stats=ConsumeStats(), tracer=provider.get_tracer("test"),
    )  # fmt: skip


async def test_good_record_reaches_the_handler_in_a_child_span_of_the_producer(
    spans: InMemorySpanExporter,
) -> None:
    handler, sink = ScriptedHandler(), RecordingSink()
    processor = a_processor(handler, sink, spans)
    await processor.process(a_record(a_good_value(), headers=[("traceparent", TRACEPARENT.encode())]))
    [(envelope, context)] = handler.calls
    assert envelope.payload.task_id == "job-1"
    assert (context.topic, context.partition, context.offset, context.key) == (SUBMIT, 2, 5, b"job-1")
    assert context.consumer_group == "g1"
    # The handler runs inside the consume span, which continues the producer's trace.
    current = trace.get_current_span(context.trace_context).get_span_context()
    assert current.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    [span] = spans.get_finished_spans()
    assert span.parent is not None and span.parent.span_id == 0x00F067AA0BA902B7
    assert span.kind is trace.SpanKind.CONSUMER
    assert span.attributes["messaging.kafka.offset"] == 5
    assert (processor.stats.handled, sink.sent) == (1, [])


@pytest.mark.parametrize(
    ("value", "reason_fragment"),
    [(b"{oops", "malformed JSON"), (b'{"event_type": "TaskSubmitted"}', "payload: Field required")],
    ids=["malformed-json", "schema-invalid"],
)
async def test_bad_record_is_dead_lettered_and_not_handled(
    spans: InMemorySpanExporter, value: bytes, reason_fragment: str
) -> None:
    handler, sink = ScriptedHandler(), RecordingSink()
    processor = a_processor(handler, sink, spans)
    await processor.process(a_record(value, offset=9))
    [(topic_name, envelope)] = sink.sent
    letter = envelope.payload
    assert topic_name == DEAD_LETTER_TOPIC
    assert reason_fragment in letter.error
    assert base64.b64decode(letter.original) == value
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == (SUBMIT, 2, 9)
    assert (letter.consumer_group, letter.failed_at) == ("g1", NOW)
    assert (handler.calls, processor.stats.dead_lettered) == ([], 1)


async def test_undecodable_dead_letter_is_skipped_not_dead_lettered_again(
    spans: InMemorySpanExporter,
) -> None:
    handler, sink = ScriptedHandler(), RecordingSink()
    processor = a_processor(handler, sink, spans)
    await processor.process(a_record(b"not json", topic=DEAD_LETTER_TOPIC))
    assert (sink.sent, handler.calls, processor.stats.skipped) == ([], [], 1)


async def test_transient_handler_failures_are_retried_within_the_policy(spans: InMemorySpanExporter) -> None:
    handler, sink = ScriptedHandler(failures=2), RecordingSink()
    processor = a_processor(handler, sink, spans, attempts=3)
    await processor.process(a_record(a_good_value()))
    assert (len(handler.calls), processor.stats.handled) == (3, 1)


async def test_persistent_handler_failure_stops_with_the_record_coordinates(
    spans: InMemorySpanExporter,
) -> None:
    handler, sink = ScriptedHandler(failures=99), RecordingSink()
    processor = a_processor(handler, sink, spans, attempts=2)
    with pytest.raises(HandlerFailedError, match=r"gfs\.tasks\.submit\[2\]@5") as caught:
        await processor.process(a_record(a_good_value()))
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert (len(handler.calls), processor.stats.handled, sink.sent) == (2, 0, [])
    [span] = spans.get_finished_spans()
    assert span.status.status_code is trace.StatusCode.ERROR


@pytest.mark.parametrize(
    ("failed_attempt", "expected_s"),
    [(1, 0.2), (2, 0.4), (3, 0.8), (10, 5.0)],
    ids=["1st", "2nd", "3rd", "capped"],
)
def test_backoff_doubles_and_is_capped(failed_attempt: int, expected_s: float) -> None:
    assert RetryPolicy().backoff_s(failed_attempt) == pytest.approx(expected_s)


def test_retry_policy_needs_at_least_one_attempt() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(attempts=0)

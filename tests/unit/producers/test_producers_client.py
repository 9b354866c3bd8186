"""`GfsClient` without a broker: validation, keys, trace headers, outage errors, task states."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import TracebackType
from typing import Any
from uuid import uuid4

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.tasks import (
    EvictionReason,
    GuaranteeOutcome,
    GuaranteePeriodClosed,
    RejectionReason,
    TaskAccepted,
    TaskCancelled,
    TaskClass,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
    TaskSubmitted,
    TaskWithdrawn,
)
from gfs.schemas.topics import key_of
from gfs.services.platform.tracing import extract_context
from gfs.services.producers.client import GfsClient
from gfs.services.producers.errors import ClientNotStartedError, KafkaUnavailableError
from gfs.services.producers.task_state import TaskState, is_terminal, state_after

NOW = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
FIELDS: dict[str, Any] = {
    "task_id": "t-1", "tenant": "org-a", "gpu_model": "A100", "gpus_per_worker": 1,
    "workers": 1, "task_class": "SPOT", "command": ["python", "train.py"],
}  # fmt: skip


class FakeProducer:
    def __init__(self, *, fail_start: Exception | None = None, fail_send: Exception | None = None,
                 hang: bool = False) -> None:  # fmt: skip
        self.fail_start, self.fail_send, self.hang = fail_start, fail_send, hang
        self.sent: list[tuple[str, Envelope[Any], list[tuple[str, bytes]]]] = []
        self.started = self.stopped = False

    async def __aenter__(self) -> FakeProducer:
        if self.fail_start:
            raise self.fail_start
        self.started = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stopped = True

    async def send(self, topic_name: str, envelope: Envelope[Any], *, headers: Any = ()) -> None:
        if self.hang:
            await asyncio.sleep(3600)
        if self.fail_send:
            raise self.fail_send
        self.sent.append((topic_name, envelope, list(headers)))


def client_with(producer: FakeProducer, **kwargs: Any) -> tuple[GfsClient, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = GfsClient(
        bootstrap_servers="fake:9092", producer_factory=lambda: producer, tracer_provider=provider,
        now=lambda: NOW, **kwargs,
    )  # fmt: skip
    return client, exporter


async def test_submit_sends_a_keyed_envelope_inside_a_producer_span() -> None:
    producer = FakeProducer()
    client, exporter = client_with(producer)
    async with client:
        envelope = await client.submit_new(**FIELDS)
    assert producer.started and producer.stopped
    [(topic_name, sent, headers)] = producer.sent
    assert topic_name == "gfs.tasks.submit"
    assert sent is envelope
    assert envelope.event_type == "TaskSubmitted"
    assert envelope.producer == "gfs-client"
    assert envelope.occurred_at == NOW
    assert envelope.payload == TaskSubmitted.model_validate(FIELDS)
    assert key_of(envelope) == b"t-1"
    [span] = exporter.get_finished_spans()
    assert span.name == "submit t-1"
    assert span.kind is SpanKind.PRODUCER
    assert span.attributes is not None and span.attributes["messaging.kafka.message.key"] == "t-1"
    # The header carries this very span: the task's trace starts at the submit.
    assert [name for name, _ in headers] == ["traceparent"]
    from opentelemetry import trace

    carried = trace.get_current_span(extract_context(headers)).get_span_context()
    assert carried.trace_id == span.context.trace_id
    assert carried.span_id == span.context.span_id


async def test_a_trace_header_is_sent_even_without_a_configured_provider() -> None:
    producer = FakeProducer()
    client = GfsClient(bootstrap_servers="fake:9092", producer_factory=lambda: producer)
    async with client:
        await client.submit(TaskSubmitted.model_validate(FIELDS))
    [(_, _, headers)] = producer.sent
    assert dict(headers)["traceparent"].startswith(b"00-")


async def test_an_invalid_submission_is_refused_before_any_io() -> None:
    producer = FakeProducer()
    client, _ = client_with(producer)
    async with client:
        with pytest.raises(ValidationError, match="workers"):
            await client.submit_new(**{**FIELDS, "workers": 0})
        with pytest.raises(ValidationError, match="guarantee_hours"):
            await client.submit_new(**{**FIELDS, "guarantee_hours": 3})
        with pytest.raises(TypeError, match="submit_new"):
            await client.submit(FIELDS)  # type: ignore[arg-type]
    assert producer.sent == []


async def test_cancel_sends_task_cancelled_keyed_by_task_id() -> None:
    producer = FakeProducer()
    client, exporter = client_with(producer)
    async with client:
        await client.cancel("t-1", "org-a", reason="not needed")
    [(topic_name, envelope, headers)] = producer.sent
    assert topic_name == "gfs.tasks.submit"
    assert envelope.payload == TaskCancelled(task_id="t-1", tenant="org-a", reason="not needed")
    assert key_of(envelope) == b"t-1"
    assert "traceparent" in dict(headers)
    assert [s.name for s in exporter.get_finished_spans()] == ["cancel t-1"]


async def test_an_unreachable_broker_is_a_clear_error_at_start() -> None:
    producer = FakeProducer(fail_start=KafkaConnectionError("Unable to bootstrap from [127.0.0.1:1]"))
    client, _ = client_with(producer)
    with pytest.raises(KafkaUnavailableError, match=r"cannot reach Kafka at fake:9092.*make up"):
        async with client:
            pass
    assert producer.stopped  # the half-started producer is closed


async def test_a_send_the_broker_never_acks_times_out_with_a_clear_error() -> None:
    client, _ = client_with(FakeProducer(hang=True), send_timeout_s=0.05)
    async with client:
        with pytest.raises(KafkaUnavailableError, match=r"did not acknowledge TaskSubmitted t-1.*status\(\)"):
            await client.submit_new(**FIELDS)


async def test_a_producer_timeout_is_a_clear_error() -> None:
    client, _ = client_with(FakeProducer(fail_send=KafkaTimeoutError()))
    async with client:
        with pytest.raises(KafkaUnavailableError, match="KafkaTimeoutError"):
            await client.cancel("t-1", "org-a")


async def test_using_the_client_outside_its_context_is_refused() -> None:
    client, _ = client_with(FakeProducer())
    with pytest.raises(ClientNotStartedError, match="async with"):
        await client.submit_new(**FIELDS)


def test_lifecycle_states_and_terminal_events() -> None:
    def envelope(payload: Any) -> Envelope[Any]:
        return wrap(payload, producer="test", occurred_at=NOW)

    accepted = envelope(TaskAccepted(task_id="t", pool="A100", task_class=TaskClass.SPOT))
    finished = envelope(TaskFinished(task_id="t", exit_code=0, finished_at=NOW))
    rejected = envelope(TaskRejected(task_id="t", reason=RejectionReason.UNKNOWN_GPU_MODEL, message="no"))

    def evicted(requeued: bool) -> Envelope[Any]:
        return envelope(TaskEvicted(
            task_id="t", node="n1", command_id=uuid4(), reason=EvictionReason.PREEMPTED_BY_HP,
            evicted_at=NOW, lost_gpu_seconds=0, requeued=requeued,
        ))  # fmt: skip

    period = envelope(GuaranteePeriodClosed(
        task_id="t", pool="A100", period_start=NOW, period_end=NOW, outcome=GuaranteeOutcome.SUCCEEDED,
    ))  # fmt: skip
    assert state_after(accepted) is TaskState.QUEUED
    assert state_after(evicted(True)) is TaskState.QUEUED
    assert state_after(evicted(False)) is TaskState.EVICTED
    assert state_after(period) is None
    withdrawn = envelope(TaskWithdrawn(task_id="t", pool="A100", withdrawn_at=NOW))
    assert state_after(withdrawn) is TaskState.WITHDRAWN
    events = (accepted, finished, rejected, evicted(True), evicted(False), period, withdrawn)
    assert [is_terminal(e) for e in events] == [False, True, True, False, True, False, True]

"""How the node agent speaks: signed acks, each in the trace of the command it answers.

`AckPublisher` owns the agent's voice: the sink its messages go to, the node key it signs them with
and the clock that stamps them. It holds no worker or command state; it turns journal entries into
wire messages (`started`, `exited`) and publishes them. Every collaborator that answers the
scheduler (binds, evictions, the watcher, recovery, clock ticks) is given this one publisher by the
composition root (agent.py). Kafka-free: acks go to an `AckSink` (`EnvelopeProducer` in the
service, a list in unit tests).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace

from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent.journal import CommandEntry, WorkerEntry
from gfs.services.platform.signing import sign
from gfs.services.platform.tracing import extract_context

PRODUCER = "gfs-node-agent"
TRACER = "gfs.node_agent"


def utc_now() -> datetime:
    return datetime.now(UTC)


class AckSink(Protocol):
    """Where acks and telemetry go (`EnvelopeProducer` in the service, a list in unit tests). The
    current OpenTelemetry context travels with each message (the producer injects it)."""

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> object: ...


class AckPublisher:
    """Signs and publishes what the agent says (module doc). `clock` is the agent's time (the sim
    clock's in topic mode): it stamps each envelope's `occurred_at`."""

    def __init__(
        self, *, node: str, sink: AckSink, key: bytes, clock: Callable[[], datetime], tracer: trace.Tracer
    ) -> None:
        self.node = node
        self.sink = sink
        self.key = key
        self.clock = clock
        self.tracer = tracer

    def started(self, worker: WorkerEntry) -> WorkerStarted:
        assert worker.pid is not None and worker.started_at is not None
        return WorkerStarted(
            command_id=worker.command_id,
            node=self.node,
            task_id=worker.task_id,
            worker_index=worker.worker_index,
            pid=worker.pid,
            started_at=worker.started_at,
            attempt=worker.attempt,
        )

    def exited(self, worker: WorkerEntry) -> WorkerExited:
        assert worker.exited_at is not None and worker.exit_code is not None
        return WorkerExited(
            command_id=worker.command_id,
            node=self.node,
            task_id=worker.task_id,
            worker_index=worker.worker_index,
            exit_code=worker.exit_code,
            exited_at=worker.exited_at,
            evicted=worker.evicting_command is not None or worker.fenced,
            detail=worker.exit_detail,
            attempt=worker.attempt,
        )

    @contextlib.contextmanager
    def in_trace_of(self, entry: CommandEntry | None) -> Iterator[None]:
        """Continue the trace the command arrived with (stored in the journal)."""
        if entry is None or not entry.trace_headers:
            yield
            return
        carried = [(name, value.encode("utf-8")) for name, value in entry.trace_headers]
        token = otel_context.attach(extract_context(carried))
        try:
            yield
        finally:
            otel_context.detach(token)

    async def publish(self, topic_name: str, payload: Any, entry: CommandEntry | None) -> None:
        # Inside the command's span when called from `handle` (the current context); otherwise
        # (watcher, recovery) the command's stored trace headers give the parent.
        current = trace.get_current_span().get_span_context()
        parent = contextlib.nullcontext() if current.is_valid else self.in_trace_of(entry)
        with (
            parent,
            self.tracer.start_as_current_span(
                f"agent.publish {type(payload).__name__}", kind=trace.SpanKind.PRODUCER
            ),
        ):
            signed = sign(payload, key=self.key)  # the scheduler applies only its node's word
            await self.sink.send(topic_name, wrap(signed, producer=PRODUCER, occurred_at=self.clock()))

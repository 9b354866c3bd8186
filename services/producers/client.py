"""`GfsClient`: submit and cancel tasks, and follow what happens to them.

```python
async with GfsClient(bootstrap_servers="127.0.0.1:9092") as gfs:
    envelope = await gfs.submit_new(task_id="train-42", tenant="org-a", gpu_model="A100-SXM4-80GB",
                                    gpus_per_worker=8, workers=2, task_class="SPOT",
                                    command=("python", "train.py"))
    async for event in gfs.follow("train-42", timeout_s=600):
        print(event.event_type)          # TaskAccepted, TaskStarted, ..., then a terminal event
    print(await gfs.status("train-42"))  # e.g. FINISHED
    quote = await gfs.quote("train-42", timeout_s=30)  # a spot task's quoted survival, or None
```

What a producer sees:

* **Validation** happens before any I/O: a bad field raises `pydantic.ValidationError` (a
  `ValueError`) naming the field, and nothing is sent.
* **Keys** come from the topic registry (`gfs.schemas.topics.key_of`): the task id, so a task's submit,
  cancel and lifecycle records are each in order on one partition.
* **Trace headers**: `submit` starts a PRODUCER span "submit <task_id>" and sends its W3C context in
  the record headers; every later hop (acceptance, decision, commands, agent, acks) continues that
  trace. Without a process-wide SDK tracer provider the client uses a private, non-exporting one,
  so the trace id is always there to be continued.
* **Durability**: `submit`/`cancel` return only after the broker acknowledged the record (acks=all,
  idempotent producer), so "returned" means "durable".
* **Kafka outage**: starting the client against a broker that does not answer raises
  `KafkaUnavailableError` at once (aiokafka's bootstrap fails fast). A broker that goes away
  later makes a send wait while the producer retries; after `send_timeout_s` (default 30 s; the
  producer's own bound is its request timeout, 40 s) it raises `KafkaUnavailableError`. The
  outcome of that one record is then *unknown*: the producer may still deliver it (exactly once,
  being idempotent) until the client is closed. Check `status(task_id)` before submitting again;
  a second submission of the same id is rejected by the scheduler as DUPLICATE_TASK_ID.

Parts (each importable alone; this module re-exports their public names, the one import a producer
needs): `errors.py`, what the client raises; `task_state.py`, a task's state read off its lifecycle
events; `partitioning.py`, which partition a task id's key lands on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Protocol, Self

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
)
from aiokafka.structs import RecordMetadata
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.trace import SpanKind, TracerProvider
from pydantic import ValidationError

from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.tasks import SurvivalQuote, TaskAccepted, TaskCancelled, TaskSubmitted
from gfs.schemas.topics import TASK_LIFECYCLE_TOPIC, TASK_SUBMIT_TOPIC, decode, key_of, topic
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity, announce
from gfs.services.platform.tracing import inject_headers
from gfs.services.producers.errors import (
    ClientNotStartedError,
    GfsClientError,
    KafkaAccessDeniedError,
    KafkaUnavailableError,
)
from gfs.services.producers.partitioning import partition_for_key
from gfs.services.producers.task_state import (
    TERMINAL_STATES,
    TaskState,
    is_terminal,
    state_after,
    survival_of,
)

# The client's public surface, one import for a producer (docs/services.md): the errors it raises
# (services/producers/errors.py) and the task states it reports (task_state.py) come with it.
__all__ = [
    "TERMINAL_STATES",
    "ClientNotStartedError",
    "GfsClient",
    "GfsClientError",
    "KafkaAccessDeniedError",
    "KafkaUnavailableError",
    "TaskState",
    "is_terminal",
    "state_after",
    "survival_of",
]

log = logging.getLogger(__name__)

SUBMIT_TOPIC = TASK_SUBMIT_TOPIC
LIFECYCLE_TOPIC = TASK_LIFECYCLE_TOPIC
TRACER_NAME = "gfs.producers"

# How far before the submission `follow`/`status` start reading the lifecycle partition: lifecycle
# records carry the scheduler host's clock, which may lag the submitting host's.
CLOCK_SKEW_MARGIN = timedelta(seconds=60)


# A refusal for who the client is, not an outage: raised as KafkaAccessDeniedError.
_DENIED = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    SaslAuthenticationFailed,
    AuthenticationFailedError,
)


class EnvelopeSender(Protocol):
    """What the client needs from a producer (`EnvelopeProducer`; tests pass fakes)."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Any: ...

    async def send(
        self, topic_name: str, envelope: Envelope[Any], *, headers: Any = ()
    ) -> RecordMetadata: ...


def _default_tracer_provider() -> TracerProvider:
    # A configured process (configure_tracing) has an SDK provider installed: use it, so spans are
    # exported. Otherwise the global one is the API's no-op, which would put no traceparent in the
    # headers at all; a private SDK provider without processors makes real ids and exports nothing.
    provider = trace.get_tracer_provider()
    if isinstance(provider, SdkTracerProvider):
        return provider
    return SdkTracerProvider()


class GfsClient:
    """An async producer-side client of the GFS scheduler. Use as `async with GfsClient(...) as c`.

    `producer_factory` exists for tests; by default an `EnvelopeProducer` on `bootstrap_servers`.
    `security` (TLS/SASL; default plaintext) applies to the producer and to the lifecycle readers
    of `follow`/`status`/`quote`; a command line passes `PlatformSettings().kafka_security`, so a
    producer connects as its SCRAM principal (`producer`, which may write submissions and read the
    lifecycle: services/platform/kafka/acls.py).
    """

    def __init__(
        self,
        *,
        bootstrap_servers: list[str] | str,
        producer_name: str = "gfs-client",
        client_id: str = "gfs-client",
        send_timeout_s: float = 30.0,
        tracer_provider: TracerProvider | None = None,
        producer_factory: Callable[[], EnvelopeSender] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._security = security
        self._producer_name = producer_name
        self._client_id = client_id
        self._send_timeout_s = send_timeout_s
        self._tracer = (tracer_provider or _default_tracer_provider()).get_tracer(TRACER_NAME)
        self._factory: Callable[[], EnvelopeSender] = producer_factory or (
            lambda: EnvelopeProducer(
                bootstrap_servers=bootstrap_servers, client_id=client_id, security=security
            )
        )
        self._now = now
        self._producer: EnvelopeSender | None = None
        # When this client submitted each task: where follow/status start reading.
        self._submitted_at: dict[str, datetime] = {}

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        announce(self._security)  # once per process: says when a producer talks plaintext
        producer = self._factory()
        try:
            await producer.__aenter__()
        except KafkaError as exc:
            # aiokafka leaves a half-started producer behind; close it so nothing leaks.
            await producer.__aexit__(type(exc), exc, exc.__traceback__)
            if isinstance(exc, _DENIED):
                raise KafkaAccessDeniedError(
                    f"Kafka at {self._bootstrap} refused {self._who()}: "
                    f"{type(exc).__name__} (check KAFKA_SASL_USERNAME/KAFKA_SASL_PASSWORD)"
                ) from exc
            raise KafkaUnavailableError(
                f"cannot reach Kafka at {self._bootstrap}: {exc} (is the broker running? "
                'start it with `make up`, then `eval "$(infra/stack.sh env)"`)'
            ) from exc
        self._producer = producer
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.__aexit__(exc_type, exc, tb)

    def _who(self) -> str:
        """Who this client is to the broker, for errors: the principal, never the password."""
        security = self._security
        return f"principal {security.username}" if security.username else security.describe()

    # -- submit and cancel -----------------------------------------------------------------------

    async def submit(self, task: TaskSubmitted) -> Envelope[TaskSubmitted]:
        """Publish `task` on gfs.tasks.submit, keyed by its id, inside a PRODUCER span
        "submit <task_id>" whose context travels in the headers. Returns the envelope once the
        broker acknowledged it."""
        if not isinstance(task, TaskSubmitted):
            raise TypeError(f"submit takes a TaskSubmitted (got {type(task).__name__}); see submit_new")
        envelope = wrap(task, producer=self._producer_name, occurred_at=self._now())
        with self._tracer.start_as_current_span(
            f"submit {task.task_id}", kind=SpanKind.PRODUCER, attributes=self._span_attributes(envelope)
        ):
            await self._send(SUBMIT_TOPIC, envelope)
        self._submitted_at[task.task_id] = envelope.occurred_at
        return envelope

    async def submit_new(self, **fields: Any) -> Envelope[TaskSubmitted]:
        """Validate `fields` as a TaskSubmitted (raises `pydantic.ValidationError` before any I/O),
        then `submit` it."""
        return await self.submit(TaskSubmitted.model_validate(fields))

    async def cancel(self, task_id: str, tenant: str, reason: str = "") -> Envelope[TaskCancelled]:
        """Ask the scheduler to withdraw `task_id` (queued: leaves the queue; running: evicted with
        reason CANCELLED and not requeued). Returns the envelope once acknowledged."""
        request = TaskCancelled(task_id=task_id, tenant=tenant, reason=reason)
        envelope = wrap(request, producer=self._producer_name, occurred_at=self._now())
        with self._tracer.start_as_current_span(
            f"cancel {task_id}", kind=SpanKind.PRODUCER, attributes=self._span_attributes(envelope)
        ):
            await self._send(SUBMIT_TOPIC, envelope)
        return envelope

    def _span_attributes(self, envelope: Envelope[Any]) -> dict[str, str]:
        return {
            "messaging.system": "kafka",
            "messaging.destination.name": SUBMIT_TOPIC,
            "messaging.kafka.message.key": key_of(envelope).decode("utf-8"),
            "gfs.event_type": envelope.event_type,
            "gfs.event_id": str(envelope.event_id),
        }

    async def _send(self, topic_name: str, envelope: Envelope[Any]) -> RecordMetadata:
        if self._producer is None:
            raise ClientNotStartedError("use the client as `async with GfsClient(...) as client`")
        try:
            return await asyncio.wait_for(
                self._producer.send(topic_name, envelope, headers=inject_headers()),
                timeout=self._send_timeout_s,
            )
        except _DENIED as exc:
            raise KafkaAccessDeniedError(
                f"Kafka at {self._bootstrap} refused {envelope.event_type} {key_of(envelope).decode()} "
                f"on {topic_name}: {self._who()} may not write it ({type(exc).__name__}); "
                "nothing was written"
            ) from exc
        except (KafkaError, TimeoutError) as exc:
            raise KafkaUnavailableError(
                f"Kafka at {self._bootstrap} did not acknowledge {envelope.event_type} "
                f"{key_of(envelope).decode()} on {topic_name} within {self._send_timeout_s:g} s "
                f"({type(exc).__name__}: {exc or 'timed out'}); the record may still be delivered "
                "while the client stays open: check status() before submitting again"
            ) from exc

    # -- follow and status -----------------------------------------------------------------------

    async def follow(
        self, task_id: str, *, timeout_s: float | None = None, since: datetime | None = None
    ) -> AsyncIterator[Envelope[Any]]:
        """Yield the task's lifecycle envelopes in order until a terminal one (TaskFinished,
        TaskRejected, TaskWithdrawn, or TaskEvicted with requeued=False), yielded last, or until
        `timeout_s` passes (then the iteration just ends; `is_terminal(last)` tells which).

        Only the partition the task id's key maps to is read, from `since` minus a clock-skew
        margin (default: when this client submitted the task; for a task it did not submit, pass
        `since`, otherwise the whole partition is read from its beginning). Use it as
        `async with contextlib.aclosing(client.follow(...)) as events` when breaking out early,
        so the consumer is closed at once.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        async with aclosing(self._lifecycle(task_id, since=since, deadline=deadline, to_end=False)) as events:
            async for envelope in events:
                yield envelope
                if is_terminal(envelope):
                    return

    async def quote(
        self, task_id: str, *, timeout_s: float | None = None, since: datetime | None = None
    ) -> SurvivalQuote | None:
        """The probability of running uninterrupted (for the guarantee and 1/2/4 h) quoted when
        the scheduler accepted `task_id` (a spot task). Waits for the TaskAccepted up to
        `timeout_s`; None if it did not come, the task ended without it (rejected), or it carries
        no quote (HP task, no forecast in the pool, a scheduler before issue 27)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        async with aclosing(self._lifecycle(task_id, since=since, deadline=deadline, to_end=False)) as events:
            async for envelope in events:
                if isinstance(envelope.payload, TaskAccepted):
                    return survival_of(envelope)
                if is_terminal(envelope):
                    break
        return None

    async def status(self, task_id: str, *, since: datetime | None = None) -> TaskState:
        """The latest state of `task_id` on the lifecycle topic (reads its partition up to the
        current end). SUBMITTED when this client submitted it and nothing came back yet;
        UNKNOWN when nothing is known."""
        state = TaskState.SUBMITTED if task_id in self._submitted_at else TaskState.UNKNOWN
        async with aclosing(self._lifecycle(task_id, since=since, deadline=None, to_end=True)) as events:
            async for envelope in events:
                state = state_after(envelope) or state
        return state

    async def _lifecycle(
        self, task_id: str, *, since: datetime | None, deadline: float | None, to_end: bool
    ) -> AsyncGenerator[Envelope[Any], None]:
        key = task_id.encode("utf-8")
        start = since or self._submitted_at.get(task_id)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap,
            client_id=f"{self._client_id}-follow",
            group_id=None,  # no group: manual assignment, nothing committed
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **self._security.client_kwargs(),
        )
        try:
            await consumer.start()
        except KafkaError as exc:
            await consumer.stop()
            raise KafkaUnavailableError(f"cannot reach Kafka at {self._bootstrap}: {exc}") from exc
        try:
            tp = TopicPartition(LIFECYCLE_TOPIC, partition_for_key(key, await self._partitions(consumer)))
            consumer.assign([tp])
            await self._seek(consumer, tp, start)
            end = (await consumer.end_offsets([tp]))[tp] if to_end else None
            while True:
                if end is not None and await consumer.position(tp) >= end:
                    return
                if deadline is None:
                    wait_ms = 500
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    wait_ms = max(1, min(500, int(remaining * 1000)))
                batch = await consumer.getmany(tp, timeout_ms=wait_ms)
                for record in batch.get(tp, ()):
                    if record.key != key or record.value is None:
                        continue
                    try:
                        envelope = decode(LIFECYCLE_TOPIC, record.value)
                    except (ValueError, ValidationError) as exc:
                        # The scheduler's consumers dead-letter such records; a reader skips them.
                        log.warning(
                            "skipping undecodable lifecycle record at offset %d: %s", record.offset, exc
                        )
                        continue
                    if getattr(envelope.payload, "task_id", None) == task_id:
                        yield envelope
        finally:
            await consumer.stop()

    @staticmethod
    async def _partitions(consumer: AIOKafkaConsumer) -> int:
        # A fresh cluster snapshot: `consumer.topics()` fetches the same but returns only names, and
        # `partitions_for_topic` reads a cache a group-less consumer has not filled yet.
        cluster = await consumer._client.fetch_all_metadata()
        partitions = cluster.partitions_for_topic(LIFECYCLE_TOPIC)
        if not partitions:
            # Not created yet (a fresh stack): the registry's count is what topic creation uses.
            return topic(LIFECYCLE_TOPIC).partitions
        return len(partitions)

    @staticmethod
    async def _seek(consumer: AIOKafkaConsumer, tp: TopicPartition, start: datetime | None) -> None:
        if start is None:
            await consumer.seek_to_beginning(tp)
            return
        # The end offset is taken first: a record appended between the two requests is then read
        # either way (found by time, or at/after that end offset).
        end = (await consumer.end_offsets([tp]))[tp]
        ms = int((start - CLOCK_SKEW_MARGIN).timestamp() * 1000)
        found = (await consumer.offsets_for_times({tp: max(ms, 0)}))[tp]
        consumer.seek(tp, end if found is None else found.offset)

"""`gfs stack smoke`: an end-to-end check of the live Kafka stack, readable in a demo.

The flow, against the real broker:

1. A fresh consumer group is pointed at the current end of gfs.tasks.submit, so it reads only
   this run's records (a new group would otherwise start from the earliest offset and re-read,
   and re-dead-letter, every earlier run's records: the topic keeps its history forever).
2. Inside one root span, N realistic `TaskSubmitted` events (HP and SPOT, GPU models and per-node
   sizes from the paper's cluster) are published through `EnvelopeProducer`, which puts the
   trace context in the record headers. Halfway, one malformed record (a TaskSubmitted with
   `payload.workers` removed) goes out through a plain aiokafka producer, keyed like the next
   good event so that event lands after it on the same partition.
3. The platform `consume` loop reads the topic until every good event was handled and the
   malformed record was dead-lettered, within a time bound. Its dead letters go through a
   recording wrapper, so the exact gfs.deadletter partition/offset of ours is known.
4. That dead letter is read back from gfs.deadletter at its offset and checked: our bytes, our
   group, our source offset, a reason naming the missing field. The good event behind the
   malformed one on its partition must have been handled (the consumer went on), and every
   handled event must carry the root span's trace id.

`run_smoke` returns a `SmokeReport`; its `failures()` is empty only when all of that held.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import RecordMetadata
from opentelemetry import trace
from rich.console import Console

from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.topics import DEAD_LETTER_TOPIC, TASK_SUBMIT_TOPIC, decode, encode
from gfs.services.platform.kafka import NO_RETRY, EnvelopeProducer, MessageContext, consume
from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity
from gfs.services.platform.tracing import inject_headers, traceparent_of

SUBMIT_TOPIC = TASK_SUBMIT_TOPIC
PRODUCER_NAME = "gfs-smoke"
MISSING_FIELD = "workers"

# GPU models of the paper's cluster (gfs-v2026 node_info_df.csv) with worker sizes that fit their
# nodes: A10 nodes hold 1 GPU (so fractions share it), GPU-series-1 nodes hold 1, 4 or 8, the
# others 8.
_INVENTORY: tuple[tuple[str, tuple[float, ...]], ...] = (
    ("A10", (0.25, 0.5, 1.0)),
    ("A100-SXM4-80GB", (1.0, 2.0, 4.0, 8.0)),
    ("A800-SXM4-80GB", (2.0, 8.0)),
    ("GPU-series-1", (1.0, 4.0)),
    ("GPU-series-2", (4.0, 8.0)),
    ("H800", (8.0,)),
)
_TENANTS = ("org-vision", "org-language", "org-speech", "org-recsys")
_DURATIONS_S = (900.0, 3_600.0, 4 * 3_600.0, 12 * 3_600.0)


def smoke_tasks(run_id: str, count: int, *, seed: int = 0) -> tuple[TaskSubmitted, ...]:
    """`count` valid submissions: HP and SPOT alternate; model, size and tenant vary by `seed`."""
    rng = random.Random(seed)
    tasks = []
    for index in range(count):
        task_class = TaskClass.HP if index % 2 == 0 else TaskClass.SPOT
        # The first runs cover every model once; later ones draw at random.
        model, sizes = _INVENTORY[index] if index < len(_INVENTORY) else rng.choice(_INVENTORY)
        per_worker = rng.choice(sizes)
        spot = task_class is TaskClass.SPOT
        tasks.append(
            TaskSubmitted(
                task_id=f"smoke-{run_id}-{index:03d}",
                tenant=rng.choice(_TENANTS),
                gpu_model=model,
                gpus_per_worker=per_worker,
                # A fractional worker shares one GPU: a single worker is the realistic request.
                workers=1 if per_worker < 1 else rng.choice((1, 1, 2, 4)),
                task_class=task_class,
                guarantee_hours=rng.choice((1, 2, 4)) if spot else 1,
                expected_duration_s=rng.choice(_DURATIONS_S),
                checkpoint_interval_s=600.0 if spot else None,
                command=("python", "train.py", "--config", f"{model.lower()}.yaml"),
            )
        )
    return tuple(tasks)


def malformed_record(task: TaskSubmitted) -> bytes:
    """A TaskSubmitted envelope as JSON bytes with `payload.workers` removed (a required field)."""
    data = json.loads(encode(wrap(task, producer=PRODUCER_NAME)))
    del data["payload"][MISSING_FIELD]
    return json.dumps(data, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True, slots=True, kw_only=True)
class SmokeReport:
    """What one smoke run observed; `failures()` lists every expectation that did not hold."""

    group: str
    trace_id: str
    sent: int
    handled: int
    handled_with_trace: int
    foreign_handled: int
    malformed: bytes
    malformed_at: tuple[int, int]
    dead_letter: DeadLetter | None
    dead_letter_at: tuple[int, int] | None
    went_on_after_malformed: bool
    timed_out: bool
    elapsed_s: float

    def failures(self) -> tuple[str, ...]:
        found: list[str] = []
        if self.timed_out:
            found.append(f"timed out after {self.elapsed_s:.1f}s before everything was consumed")
        if self.handled != self.sent:
            found.append(f"handled {self.handled} of {self.sent} good events")
        if self.handled_with_trace != self.handled:
            found.append(
                f"only {self.handled_with_trace}/{self.handled} handled events carried trace {self.trace_id}"
            )
        if not self.went_on_after_malformed:
            found.append("no good event after the malformed record on its partition was handled")
        letter = self.dead_letter
        if letter is None:
            found.append(f"no dead letter read back for {SUBMIT_TOPIC}@{self.malformed_at}")
            return tuple(found)
        source = (letter.source_topic, letter.source_partition, letter.source_offset)
        if source != (SUBMIT_TOPIC, *self.malformed_at):
            found.append(f"dead letter points at {source[0]}[{source[1]}]@{source[2]}")
        if base64.b64decode(letter.original) != self.malformed:
            found.append("dead letter does not hold the malformed bytes")
        if letter.consumer_group != self.group:
            found.append(f"dead letter names group {letter.consumer_group!r}, not {self.group!r}")
        if f"payload.{MISSING_FIELD}" not in letter.error:
            found.append(f"dead-letter reason does not name payload.{MISSING_FIELD}: {letter.error}")
        return tuple(found)

    @property
    def ok(self) -> bool:
        return not self.failures()


@dataclass(slots=True)
class _Progress:
    """What the consumer has seen so far; sets `stop` once this run's records are all processed."""

    expected: frozenset[uuid.UUID]
    malformed_at: tuple[int, int]
    trace_id: int
    console: Console
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    handled: set[uuid.UUID] = field(default_factory=set)
    handled_at: set[tuple[int, int]] = field(default_factory=set)
    with_trace: int = 0
    foreign: int = 0
    dead_letter_at: tuple[int, int] | None = None

    def check_done(self) -> None:
        if self.dead_letter_at is not None and self.handled >= self.expected:
            self.stop.set()

    async def handle(self, envelope: Envelope[Any], context: MessageContext) -> None:
        if envelope.event_id not in self.expected:
            self.foreign += 1  # someone else's record published meanwhile: not ours to count
            return
        if envelope.event_id in self.handled:
            return  # at-least-once: a redelivery is not a second success
        self.handled.add(envelope.event_id)
        self.handled_at.add((context.partition, context.offset))
        carried = trace.get_current_span(context.trace_context).get_span_context().trace_id
        self.with_trace += carried == self.trace_id
        self.console.print(
            f"  handled  {envelope.payload.task_id} from p{context.partition}@{context.offset} "
            f"traceparent={traceparent_of(context.headers)}"
        )
        self.check_done()


@dataclass(slots=True)
class _RecordingSink:
    """Passes dead letters to the real producer and remembers where ours landed."""

    producer: EnvelopeProducer
    progress: _Progress

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> RecordMetadata:
        metadata = await self.producer.send(topic_name, envelope)
        letter = envelope.payload
        if (letter.source_partition, letter.source_offset) == self.progress.malformed_at:
            self.progress.dead_letter_at = (metadata.partition, metadata.offset)
            self.progress.console.print(
                f"  [yellow]dead-lettered[/] p{letter.source_partition}@{letter.source_offset} "
                f"-> {DEAD_LETTER_TOPIC} p{metadata.partition}@{metadata.offset}: {letter.error}"
            )
            self.progress.check_done()
        return metadata


async def run_smoke(
    *,
    bootstrap_servers: str | list[str],
    tasks: int,
    tracer: trace.Tracer,
    console: Console,
    timeout_s: float = 30.0,
    seed: int = 0,
    security: KafkaSecurity = PLAINTEXT,
) -> SmokeReport:
    """Run the flow in the module docstring once; raises only for broker errors (KafkaError).
    `security`: TLS/SASL settings (on a secured broker: `admin`, the only principal that may write
    submissions, consume them under a `gfs-smoke-*` group and read the dead letters)."""
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1 (got {tasks})")
    run_id = uuid.uuid4().hex[:8]
    group = f"gfs-smoke-{run_id}"
    goods = smoke_tasks(run_id, tasks, seed=seed)
    half = len(goods) // 2
    malformed = malformed_record(goods[half])
    await _start_group_at_end(bootstrap_servers, group, SUBMIT_TOPIC, security)
    console.print(f"[bold]smoke[/] run {run_id}: group {group} starts at the end of {SUBMIT_TOPIC}")

    envelopes = [wrap(task, producer=PRODUCER_NAME) for task in goods]
    with tracer.start_as_current_span("gfs stack smoke", attributes={"gfs.smoke.run": run_id}) as root:
        trace_id = root.get_span_context().trace_id
        console.print(f"root span trace id [bold cyan]{trace_id:032x}[/]")
        async with EnvelopeProducer(
            bootstrap_servers=bootstrap_servers, client_id=PRODUCER_NAME, security=security
        ) as producer:
            await _send_good(producer, envelopes[:half], console)
            malformed_at = await _send_raw(
                bootstrap_servers, malformed, key=goods[half].task_id, security=security
            )
            console.print(
                f"  sent     [red]malformed[/] record without payload.{MISSING_FIELD} "
                f"-> p{malformed_at[0]}@{malformed_at[1]}"
            )
            await _send_good(producer, envelopes[half:], console)

    progress = _Progress(
        expected=frozenset(e.event_id for e in envelopes), malformed_at=malformed_at,
        trace_id=trace_id, console=console,
    )  # fmt: skip
    console.print(f"consuming {SUBMIT_TOPIC} as {group} (at most {timeout_s:g}s)")
    started = time.monotonic()
    timed_out = False
    async with EnvelopeProducer(
        bootstrap_servers=bootstrap_servers, client_id=f"{group}-dlq", security=security
    ) as dlq:
        try:
            async with asyncio.timeout(timeout_s):
                await consume(
                    SUBMIT_TOPIC, group, progress.handle, bootstrap_servers=bootstrap_servers,
                    stop=progress.stop, retry=NO_RETRY, producer_name=PRODUCER_NAME,
                    dead_letter_producer=_RecordingSink(dlq, progress), security=security,
                )  # fmt: skip
        except TimeoutError:
            timed_out = True
    elapsed = time.monotonic() - started

    letter = None
    if progress.dead_letter_at is not None:
        letter = await _read_dead_letter(bootstrap_servers, progress.dead_letter_at, security)
    partition, offset = malformed_at
    return SmokeReport(
        group=group, trace_id=f"{trace_id:032x}", sent=len(goods), handled=len(progress.handled),
        handled_with_trace=progress.with_trace, foreign_handled=progress.foreign, malformed=malformed,
        malformed_at=malformed_at, dead_letter=letter, dead_letter_at=progress.dead_letter_at,
        went_on_after_malformed=any(p == partition and o > offset for p, o in progress.handled_at),
        timed_out=timed_out, elapsed_s=elapsed,
    )  # fmt: skip


async def _send_good(
    producer: EnvelopeProducer, envelopes: list[Envelope[TaskSubmitted]], console: Console
) -> None:
    for envelope in envelopes:
        sent = await producer.send(SUBMIT_TOPIC, envelope)
        task = envelope.payload
        console.print(
            f"  sent     {task.task_id} {task.task_class.value:<4} {task.tenant:<12} "
            f"{task.workers}x{task.gpus_per_worker:g} {task.gpu_model} -> p{sent.partition}@{sent.offset}"
        )


async def _start_group_at_end(
    bootstrap_servers: str | list[str], group: str, topic_name: str, security: KafkaSecurity
) -> None:
    """Commit the current end offsets of every partition of `topic_name` for `group`."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, **security.client_kwargs())
    await admin.start()
    try:
        described = await admin.describe_topics([topic_name])
    finally:
        await admin.close()
    numbers = sorted(p["partition"] for entry in described for p in entry["partitions"])
    if not numbers:
        raise RuntimeError(f"topic {topic_name} does not exist (run `gfs stack topics`)")
    partitions = [TopicPartition(topic_name, number) for number in numbers]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers, group_id=group, enable_auto_commit=False,
        isolation_level="read_committed", **security.client_kwargs(),
    )  # fmt: skip
    await consumer.start()
    try:
        # A manually assigned consumer commits without joining the group (no rebalance wait).
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        await consumer.commit(ends)
    finally:
        await consumer.stop()


async def _send_raw(
    bootstrap_servers: str | list[str], value: bytes, *, key: str, security: KafkaSecurity
) -> tuple[int, int]:
    """Publish bytes with a plain aiokafka producer (no envelope checks), in the current trace."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers, acks="all", client_id=f"{PRODUCER_NAME}-raw",
        **security.client_kwargs(),
    )  # fmt: skip
    await producer.start()
    try:
        sent = await producer.send_and_wait(
            SUBMIT_TOPIC, value=value, key=key.encode("utf-8"), headers=inject_headers()
        )
    finally:
        await producer.stop()
    return sent.partition, sent.offset


async def _read_dead_letter(
    bootstrap_servers: str | list[str], at: tuple[int, int], security: KafkaSecurity
) -> DeadLetter | None:
    """The dead letter stored at partition/offset `at` of gfs.deadletter, decoded and validated."""
    partition, offset = at
    tp = TopicPartition(DEAD_LETTER_TOPIC, partition)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers, group_id=None, enable_auto_commit=False,
        isolation_level="read_committed", **security.client_kwargs(),
    )  # fmt: skip
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, offset)
        record = await asyncio.wait_for(consumer.getone(tp), timeout=10.0)
    except TimeoutError:
        return None
    finally:
        await consumer.stop()
    payload = decode(DEAD_LETTER_TOPIC, record.value or b"").payload
    return payload if isinstance(payload, DeadLetter) and record.offset == offset else None


def render_report(report: SmokeReport, console: Console) -> None:
    """The closing summary: the checks that passed or failed, and the trace id to look up."""
    console.print(
        f"handled {report.handled}/{report.sent} good events in {report.elapsed_s:.1f}s "
        f"({report.foreign_handled} foreign records ignored); "
        f"{report.handled_with_trace}/{report.handled} carried trace {report.trace_id}"
    )
    if report.dead_letter is not None and report.dead_letter_at is not None:
        partition, offset = report.dead_letter_at
        console.print(
            f"read back {DEAD_LETTER_TOPIC} p{partition}@{offset}: source "
            f"{report.dead_letter.source_topic} p{report.dead_letter.source_partition}"
            f"@{report.dead_letter.source_offset}, group {report.dead_letter.consumer_group}, "
            f"reason: {report.dead_letter.error}"
        )
    if report.went_on_after_malformed:
        console.print("the consumer went on past the malformed record on its partition")
    failures = report.failures()
    for failure in failures:
        console.print(f"[bold red]FAIL[/] {failure}")
    if not failures:
        console.print(f"[bold green]smoke OK[/] trace id {report.trace_id}")

"""The decider's inbox: a batch of one partition's records decoded, authenticated (report_auth.py),
checked against the commands they answer, de-duplicated, decided and committed; bad records are
dead-lettered with the reason, and after a batch failed with an error a record may cause, its
records are decided one per transaction so the one at fault fails alone (poison.py).

Part of the decider (service.py): a class over its transaction (decider_commit.py).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from aiokafka import ConsumerRecord
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from pydantic import BaseModel

from schemas.clock import ClockTick
from schemas.commands import EvictAck
from schemas.tasks import TaskSubmitted
from schemas.telemetry import NodeTelemetry
from schemas.topics import decode
from schemas.workers import WorkerExited, WorkerStarted
from services.platform.clock import TickClock
from services.platform.kafka.dead_letter import DeadLetterPublisher
from services.platform.tracing import extract_context
from services.preemption import liveness, reconcile, store
from services.preemption.controller.types import Effects
from services.preemption.decider_base import (
    PRODUCER,
    UNMATCHED,
    Ack,
    PartitionState,
    Report,
    log,
)
from services.preemption.decider_commit import Transaction
from services.preemption.inputs import apply, entry_for
from services.preemption.journal_entries import Entry, NodeReportEntry, QuotaEntry, ScheduleEntry
from services.preemption.poison import caused_by_record, store_failed
from services.preemption.router import (
    DUPLICATE_HEADER,
    SOURCE_HEADER,
    SOURCE_KEY_HEADER,
)


class Inbox(Transaction):
    __slots__ = ()

    async def handle_inbox(self, partition: int, records: Sequence[ConsumerRecord[bytes, bytes]]) -> None:
        """`handle_batch`, and after a batch failed with an error a record may cause, its records
        one per `handle_batch` up to that batch's end: the one at fault fails alone (its second
        failure) and is dead-lettered; the others are decided as usual. Errors of the
        infrastructure propagate as before (the partition is taken again and re-read)."""
        end = self.suspects.get(partition)
        if end is None:
            try:
                await self.handle_batch(partition, records)
            except Exception as exc:
                if caused_by_record(exc) and records:
                    self.suspects[partition] = records[-1].offset
                raise
            return
        for index, record in enumerate(records):
            if partition not in self.partitions:
                return
            if record.offset > end:
                self.suspects.pop(partition, None)
                await self.handle_batch(partition, records[index:])
                return
            try:
                await self.handle_batch(partition, [record])
            except Exception as exc:
                if not caused_by_record(exc):
                    raise
                await self._poisoned(partition, record, exc)
        if records and records[-1].offset >= end:
            self.suspects.pop(partition, None)

    async def _poisoned(self, partition: int, record: ConsumerRecord[bytes, bytes], exc: Exception) -> None:
        """Dead-letter a record that failed to store twice, rebuild the partition (memory applied
        it) and store the offset past it, so the partition goes on."""
        self.stats.poisoned += 1
        await self._dead_letter(record, store_failed(exc))
        async with self.lock:
            self.partitions.pop(partition, None)
        await self.take(partition)
        async with self.lock:
            state = self.partitions.get(partition)
            if state is None or state.next_offset > record.offset:
                return
            try:
                async with self.pool.acquire() as connection, connection.transaction():
                    await store.check_epoch(connection, state.claim, record.offset + 1)
            except store.FencedError:
                await self._fenced(state)
                return
            state.next_offset = record.offset + 1

    async def handle_batch(self, partition: int, records: Sequence[ConsumerRecord[bytes, bytes]]) -> None:
        async with self.lock:
            state = self.partitions.get(partition)
            if state is None or not records:
                return
            received = time.monotonic()
            now = self.clock.now()
            ticked = isinstance(self.clock, TickClock)
            # (pool, entry, event id, trace); a payload's entry holds the payload as validated
            items: list[tuple[str, Entry, uuid.UUID | None, otel_context.Context]] = []
            acks: dict[int, tuple[ConsumerRecord[bytes, bytes], Ack, str | None]] = {}
            for record in records:
                if record.offset < state.next_offset:
                    continue  # already committed (a re-seek after a rebuild)
                decoded = await self._decode(record)
                if decoded is None:
                    continue
                payload, event_id, duplicate, ctx = decoded
                if isinstance(payload, Report) and not await self._authentic(record, payload):
                    continue  # refused before it counts as a heartbeat, a report or an ack
                source_key = next(
                    (v.decode("utf-8", "replace") for k, v in record.headers or () if k == SOURCE_KEY_HEADER),
                    None,
                )
                pool_name = (record.key or b"").decode()  # the router keyed it by its pool
                controller = self.controller(state, pool_name)
                eid: uuid.UUID | None = event_id
                if isinstance(payload, ClockTick):
                    clock = self.clock
                    if not isinstance(clock, TickClock):
                        continue  # a wall-clock service ignores a replay's ticks
                    clock.advance_to(payload.at.timestamp())
                    now = clock.now()
                    # One tick goes to every pool with one event id: the controller dedupes by
                    # sequence, so the copies must not collide in the journal's event-id index.
                    eid = None
                if record.timestamp > 0:
                    state.newest = max(state.newest, record.timestamp / 1000)
                report: NodeReportEntry | None = None  # the agent's report of its workers, to journal
                if isinstance(payload, NodeTelemetry):
                    fresh = now
                    if not ticked:  # on the controllable clock heartbeats never time out
                        # When the router forwarded it (wall time; not `received`, the batch's
                        # monotonic start that the decision-latency histogram is measured from).
                        forwarded = record.timestamp / 1000 if record.timestamp > 0 else now
                        skew = self.settings.preemption_max_clock_skew_s
                        fresh = liveness.freshness(payload.sampled_at.timestamp(), forwarded, skew)
                    state.last_seen[payload.node] = max(fresh, state.last_seen.get(payload.node, fresh))
                    if not ticked and payload.running is not None:
                        # The agent's report of its workers (reconcile.py): journaled when new.
                        running = reconcile.report_of(
                            payload.sampled_at.timestamp(),
                            ((w.task_id, w.attempt, w.worker_index) for w in payload.running),
                        )
                        last = controller.reports.get(payload.node)
                        every = self.settings.preemption_report_every_s
                        if reconcile.worth_journaling(last, running, every):
                            report = NodeReportEntry(node=payload.node, report=running, at=now)
                    if payload.node in controller.nodes and payload.node not in controller.down:
                        if report is not None:
                            items.append((pool_name, report, None, ctx))
                        continue  # a heartbeat: nothing else durable changes
                carrier: dict[str, str] | None = None
                if isinstance(payload, TaskSubmitted):  # the task's trace, so a rebuilt owner continues it
                    carrier = {}
                    propagate.inject(carrier, context=ctx)
                entry = entry_for(payload, now, duplicate=duplicate, trace=carrier)
                if isinstance(payload, EvictAck | WorkerStarted | WorkerExited):
                    acks[len(items)] = (record, payload, source_key)
                items.append((pool_name, entry, eid, ctx))
                if isinstance(payload, NodeTelemetry) and report is not None:  # after node_seen
                    items.append((pool_name, report, None, ctx))
            last_offset = records[-1].offset
            if not items:
                await self._advance(state, last_offset + 1)
                return
            seen = await self._seen([e for _, _, e, _ in items if e is not None])
            rows: list[tuple[str, Entry, uuid.UUID | None]] = []
            effects: list[tuple[str, Effects, otel_context.Context | None]] = []
            touched: list[str] = []
            for index, (pool_name, entry, eid, ctx) in enumerate(items):
                if eid is not None and eid in seen:
                    self.stats.duplicates += 1
                    continue
                if index in acks:
                    # An ack is checked against the command it answers in the state it meets
                    # (earlier records of the batch applied); one that does not match is
                    # dead-lettered with the reason and never journaled, so replays never see it.
                    record, ack, source_key = acks[index]
                    why = self.controller(state, pool_name).refusal(ack, source_key)
                    if why is not None:
                        await self._refuse(record, ack, why, reason=UNMATCHED)
                        continue
                if eid is not None:
                    seen.add(eid)
                self._remember_context(entry, ctx)
                if isinstance(entry, QuotaEntry) and ctx is not None:
                    quota_span = trace.get_current_span(ctx).get_span_context()
                    if quota_span.is_valid:
                        self.quota_spans[pool_name] = quota_span
                out = apply(self.controller(state, pool_name), entry)  # its payload validated once
                effects.append((pool_name, out, ctx))
                rows.append((pool_name, entry, eid))
                if pool_name not in touched:
                    touched.append(pool_name)
            for pool_name in [] if ticked else touched:  # on the clock, passes run on PASS ticks
                entry = ScheduleEntry(at=now)
                effects.append((pool_name, apply(self.controller(state, pool_name), entry), None))
                rows.append((pool_name, entry, None))
            self.stats.inputs += len(items)
            await self._commit(state, rows, effects, next_offset=last_offset + 1)
            elapsed = time.monotonic() - received
            if self.latency_hist is not None:
                self.latency_hist.record(elapsed)

    async def _decode(
        self, record: ConsumerRecord[bytes, bytes]
    ) -> tuple[BaseModel, uuid.UUID, bool, otel_context.Context] | None:
        headers = list(record.headers or ())
        source = next((v.decode() for k, v in headers if k == SOURCE_HEADER), "")
        duplicate = any(k == DUPLICATE_HEADER for k, _ in headers)
        # Validated once: by this process's router when it forwarded the record (handoff.py),
        # else here, from the bytes (another instance routed it, or it was read again).
        envelope = None if self.handoff is None else self.handoff.take(record.partition, record.offset)
        if envelope is None:
            try:
                envelope = decode(source, record.value or b"")
            except (ValueError, KeyError) as exc:  # the router validated it: a bug or tampering
                await self._dead_letter(record, exc)
                return None
        return envelope.payload, envelope.event_id, duplicate, extract_context(headers)

    async def _dead_letter(self, record: ConsumerRecord[bytes, bytes], exc: Exception) -> None:
        self.stats.dead_lettered += 1
        log.error("preemption: dead-lettered inbox record %d@%d: %r", record.partition, record.offset, exc)
        await self._publish_letter(record, exc)

    async def _publish_letter(self, record: ConsumerRecord[bytes, bytes], exc: Exception) -> None:
        """The letter of an inbox record, by the platform's publisher (none without a producer)."""
        if self.producer is not None:
            letters = DeadLetterPublisher(
                sink=self.producer, consumer_group=self.settings.preemption_group, producer=PRODUCER
            )
            await letters.publish(record, exc)

    async def _authentic(self, record: ConsumerRecord[bytes, bytes], report: Report) -> bool:
        """Whether `report` is its node's word (report_auth.py); a refused one is dead-lettered."""
        if self.auth is None:
            return True
        verdict = self.auth.check(report)
        if verdict.refusal is not None:
            await self._refuse(record, report, verdict.why(report), reason=verdict.refusal.value)
            return False
        if verdict.unsigned:
            self.stats.unsigned_accepted += 1
            if self.unsigned_counter is not None:
                self.unsigned_counter.add(1, {"type": type(report).__name__})
        return True

    def note_refused(self, message: BaseModel, reason: str) -> None:
        """Count a refused ack or sample (also the router's: it refuses unsigned telemetry)."""
        self.stats.refused_acks += 1
        if reason != UNMATCHED:
            self.stats.unauthenticated += 1
        if self.refused_counter is not None:
            self.refused_counter.add(1, {"type": type(message).__name__, "reason": reason})

    async def _refuse(
        self, record: ConsumerRecord[bytes, bytes], ack: BaseModel, why: str, *, reason: str
    ) -> None:
        self.note_refused(ack, reason)
        what = getattr(ack, "command_id", None) or getattr(ack, "node", "")
        log.warning("preemption: refused %s %s (%s): %s", type(ack).__name__, what, reason, why)
        await self._publish_letter(record, ValueError(f"{type(ack).__name__} refused: {why}"))

    async def _seen(self, event_ids: list[uuid.UUID]) -> set[uuid.UUID]:
        if not event_ids:
            return set()
        async with self.pool.acquire() as connection:
            return await store.seen_events(connection, event_ids, topic=self.settings.preemption_inbox_topic)

    async def _advance(self, state: PartitionState, next_offset: int) -> None:
        """Only heartbeats: keep the offset in memory (re-reading a few heartbeats is harmless)."""
        state.next_offset = next_offset

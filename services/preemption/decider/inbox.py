"""The decider's inbox: a batch of one partition's records read (reading.py), de-duplicated against
the journal, each ack checked against the command it answers, decided by the pools' controllers
and committed in one transaction (transaction.py); after a batch failed with an error a record may
cause, its records are decided one per transaction so the one at fault fails alone and is
dead-lettered (poison.py).

`Inbox` owns the suspects (partition -> the last offset of a batch whose commit failed with an
error a record may cause: up to it, records are decided one per transaction); the partition state
it decides for is the registry's, under the decider's lock.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence

import asyncpg
from aiokafka import ConsumerRecord

from gfs.services.platform.clock import Clock, TickClock
from gfs.services.platform.stage_stamps import BatchStamps
from gfs.services.preemption.decider.claims import Claims
from gfs.services.preemption.decider.counters import Instruments, Stats
from gfs.services.preemption.decider.dead_letters import UNMATCHED, DeadLetters
from gfs.services.preemption.decider.partition import OwnedPartitions, PartitionState
from gfs.services.preemption.decider.reading import Reader, Reading
from gfs.services.preemption.decider.traces import TaskTraces
from gfs.services.preemption.decider.transaction import Effected, Rows, Transaction
from gfs.services.preemption.journal import store
from gfs.services.preemption.journal.entries import QuotaEntry, ScheduleEntry
from gfs.services.preemption.journal.inputs import apply
from gfs.services.preemption.router.poison import caused_by_record, store_failed
from gfs.services.preemption.service_settings import PreemptionSettings

Records = Sequence[ConsumerRecord[bytes, bytes]]


class Inbox:
    __slots__ = (
        "claims", "clock", "instruments", "letters", "lock", "partitions", "pool", "reader", "settings",
        "stats", "suspects", "traces", "transaction",
    )  # fmt: skip

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: PreemptionSettings,
        clock: Clock,
        lock: asyncio.Lock,
        partitions: OwnedPartitions,
        reader: Reader,
        letters: DeadLetters,
        traces: TaskTraces,
        transaction: Transaction,
        claims: Claims,
        stats: Stats,
        instruments: Instruments,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.clock = clock
        self.lock = lock  # the decider's
        self.partitions = partitions
        self.reader = reader
        self.letters = letters
        self.traces = traces
        self.transaction = transaction
        self.claims = claims  # to take a partition again after a poisoned record
        self.stats = stats
        self.instruments = instruments
        self.suspects: dict[int, int] = {}

    async def handle_inbox(self, partition: int, records: Records, fetched_at: float | None = None) -> None:
        """`handle_batch`, and after a batch failed with an error a record may cause, its records
        one per `handle_batch` up to that batch's end: the one at fault fails alone (its second
        failure) and is dead-lettered; the others are decided as usual. Errors of the
        infrastructure propagate as before (the partition is taken again and re-read)."""
        end = self.suspects.get(partition)
        if end is None:
            try:
                await self.handle_batch(partition, records, fetched_at)
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
        await self.letters.dead_letter(record, store_failed(exc))
        async with self.lock:
            self.partitions.release(partition)
        await self.claims.take(partition)
        async with self.lock:
            state = self.partitions.get(partition)
            if state is None or state.next_offset > record.offset:
                return
            try:
                async with self.pool.acquire() as connection, connection.transaction():
                    await store.check_epoch(connection, state.claim, record.offset + 1)
            except store.FencedError:
                self.partitions.fenced(state)
                return
            state.next_offset = record.offset + 1

    async def handle_batch(self, partition: int, records: Records, fetched_at: float | None = None) -> None:
        """1. read the records; 2. decide them; 3. commit the batch with the next offset.
        `fetched_at`: when the consumer's fetch returned them (wall clock; the stage stamps)."""
        async with self.lock:
            state = self.partitions.get(partition)
            if state is None or not records:
                return
            received = time.monotonic()
            began_at = time.time()
            reading = await self.reader.read(state, records)
            last_offset = records[-1].offset
            if not reading.items:
                # Only heartbeats: keep the offset in memory (re-reading a few heartbeats is harmless).
                state.next_offset = last_offset + 1
                return
            rows, effects = await self._decide(state, reading)
            stamps = BatchStamps(
                began_at if fetched_at is None else fetched_at, began_at, time.time(), reading.routed
            )
            self.stats.inputs += len(reading.items)
            await self.transaction.commit(state, rows, effects, next_offset=last_offset + 1, stamps=stamps)
            elapsed = time.monotonic() - received
            if self.instruments.latency_hist is not None:
                self.instruments.latency_hist.record(elapsed)

    async def _decide(self, state: PartitionState, reading: Reading) -> tuple[Rows, Effected]:
        """Apply the entries read to their pools, in order (what is journaled, what was decided);
        then, off the controllable clock, a scheduling pass in every pool the batch touched (on the
        clock, passes run on PASS ticks)."""
        seen = await self._seen([e for _, _, e, _ in reading.items if e is not None])
        rows: Rows = []
        effects: Effected = []
        touched: list[str] = []
        for index, (pool_name, entry, eid, ctx) in enumerate(reading.items):
            if eid is not None and eid in seen:
                self.stats.duplicates += 1
                continue
            if index in reading.acks:
                # An ack is checked against the command it answers in the state it meets
                # (earlier records of the batch applied); one that does not match is
                # dead-lettered with the reason and never journaled, so replays never see it.
                record, ack, source_key = reading.acks[index]
                why = state.controller(pool_name, self.settings).refusal(ack, source_key)
                if why is not None:
                    await self.letters.refuse(record, ack, why, reason=UNMATCHED)
                    continue
            if eid is not None:
                seen.add(eid)
            self.traces.remember(entry, ctx)
            if isinstance(entry, QuotaEntry) and ctx is not None:
                self.traces.note_quota(pool_name, ctx)
            out = apply(state.controller(pool_name, self.settings), entry)  # its payload validated once
            effects.append((pool_name, out, ctx))
            rows.append((pool_name, entry, eid))
            if pool_name not in touched:
                touched.append(pool_name)
        for pool_name in [] if isinstance(self.clock, TickClock) else touched:
            entry = ScheduleEntry(at=reading.now)
            effects.append((pool_name, apply(state.controller(pool_name, self.settings), entry), None))
            rows.append((pool_name, entry, None))
        return rows, effects

    async def _seen(self, event_ids: list[uuid.UUID]) -> set[uuid.UUID]:
        if not event_ids:
            return set()
        async with self.pool.acquire() as connection:
            return await store.seen_events(connection, event_ids, topic=self.settings.preemption_inbox_topic)

"""`gfs serve preemption`: task submissions, quotas, telemetry and acks in; commands and lifecycle out.

Shape (docs/services.md, "Preemption service"):
- The router (`router.py`, every instance, one consumer group) re-keys every input by pool onto
  the inbox. The deciders (every instance, another group) own the inbox's partitions, so each
  pool is decided by the one instance its partition is assigned to; a standby (or the surviving
  instance) gets a dead one's partitions at the group's next rebalance.
- Owning a partition: claim it in Postgres (a new epoch fences the previous owner), rebuild its
  pools by replaying their journal through the controllers, then read the inbox from the offset
  stored with the last committed batch. Inbox offsets live in Postgres, not in Kafka.
- A batch of inbox records of one partition: decide (controller), then in ONE transaction check
  the epoch, append the inputs to the journal, record the decisions, enqueue the events and the
  signed commands in the outbox and store the next offset; then wake the relay. A failed
  transaction rebuilds the partition from Postgres, so memory never runs ahead of what is durable.
  After a batch failed with an error a record may cause (`poison.py`), the records up to that
  batch's end are decided one per transaction; the one that fails alone is dead-lettered with the
  error and its offset stored, so one record never stops a partition (issue 22).
- A timer (every `preemption_tick_s`) runs the controllers' periodic work (guarantee periods,
  held binds past their deadline, an expired quota, a scheduling pass) and marks nodes whose
  heartbeat stopped as down (by the rules of liveness.py: silence counts only while the service
  can hear, and a mass silence or the kill switch holds it), journaled the same way; every
  `preemption_status_s` it publishes each owned pool's PoolStatus for the quota service.
- Dry run: everything is decided and recorded, nothing is published; it refuses a Postgres schema
  where a live deployment keeps its state (store.refuse_live_schema). Ownership and the journal are
  keyed by (inbox topic, partition), so deployments with their own inbox topics never fence each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import asyncpg
from aiohttp import web
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from pydantic import BaseModel

from schemas.clock import ClockTick
from schemas.commands import BindCommand, EvictAck, EvictCommand
from schemas.envelope import Envelope, wrap
from schemas.tasks import TaskClass, TaskEvicted
from schemas.telemetry import NodeTelemetry
from schemas.topics import DEAD_LETTER_TOPIC, decode, topic_for_event_type
from schemas.workers import WorkerExited, WorkerStarted
from services.platform.clock import Clock, SystemClock, TickClock
from services.platform.kafka.dead_letter import FailedRecord, build_dead_letter
from services.platform.kafka.producer import EnvelopeProducer
from services.platform.kafka.topic_admin import ensure_topics
from services.platform.metrics import configure_metrics
from services.platform.outbox import OutboxRelay, enqueue, outbox_values
from services.platform.postgres import open_pool
from services.platform.signing import node_key, sign
from services.platform.tracing import extract_context, inject_headers
from services.preemption import controls, liveness, reconcile, snapshots, store
from services.preemption.api import build_api
from services.preemption.controller import Effects, PoolController, id_salt
from services.preemption.inputs import Entry, apply, entry_for
from services.preemption.metrics import register_metrics
from services.preemption.poison import caused_by_record, store_failed
from services.preemption.report_auth import ReportAuth
from services.preemption.router import (
    CLOCK_TOPIC,
    DUPLICATE_HEADER,
    ROUTED_TOPICS,
    SOURCE_HEADER,
    SOURCE_KEY_HEADER,
    Router,
    caught_up_at,
    inbox_spec,
    route,
)
from services.preemption.service_settings import PreemptionSettings
from services.preemption.trace_ids import with_trace_id

log = logging.getLogger(__name__)

Ack = EvictAck | WorkerStarted | WorkerExited
Report = EvictAck | WorkerStarted | WorkerExited | NodeTelemetry  # what agents sign (report_auth.py)
UNMATCHED = "unmatched"  # the refusal reason of an ack that does not match its command

PRODUCER = "gfs-preemption"
TRACER = "gfs.preemption"


@dataclass(slots=True)
class PartitionState:
    claim: store.Claim
    controllers: dict[str, PoolController] = field(default_factory=dict)
    last_seen: dict[str, float] = field(default_factory=dict)  # node -> last heartbeat (memory only)
    next_offset: int = 0
    # The inbox read up to: every record sent before `heard` has been read (None: not known yet);
    # `newest` is the newest inbox record's timestamp read (liveness.py).
    heard: float | None = None
    newest: float = 0.0
    heard_clock: liveness.HeardClock = field(default_factory=liveness.HeardClock)
    holding: dict[str, str] = field(default_factory=dict)  # pool -> why its silent nodes are kept
    # Journal rows since the last snapshot (or the claim), and when that was (monotonic).
    unsnapped: int = 0
    snapped_at: float = field(default_factory=time.monotonic)
    replayed: int = 0  # journal rows the claim replayed (after the snapshot it restored, if any)


@dataclass(slots=True)
class Stats:
    batches: int = 0
    inputs: int = 0
    duplicates: int = 0
    decisions: int = 0
    commands: int = 0
    events: int = 0
    fenced: int = 0
    node_loss_held: int = 0  # episodes of silent nodes not declared lost (liveness.py)
    rebuilt: int = 0
    dead_lettered: int = 0
    poisoned: int = 0  # inbox records dead-lettered because they failed to store twice
    refused_acks: int = 0  # acks (and telemetry) refused: unmatched (controller.refusal) or unsigned
    unauthenticated: int = 0  # of those, refused for their signature (report_auth.py)
    unsigned_accepted: int = 0  # unsigned acks and telemetry applied (require_signed_acks off)
    latencies: list[float] = field(default_factory=list)  # inbox record -> committed, seconds (recent)


@dataclass(slots=True)
class Decider:
    pool: asyncpg.Pool
    settings: PreemptionSettings
    clock: Clock
    instance: str
    secret: bytes
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    stats: Stats = field(default_factory=Stats)
    # partition -> the last offset of a batch whose commit failed with an error a record may cause:
    # up to it, records are decided one per transaction (`handle_inbox`).
    suspects: dict[int, int] = field(default_factory=dict)
    contexts: dict[str, otel_context.Context] = field(default_factory=dict)  # task -> its trace
    # pool -> the span of the quota in force (the quota service's `quota.persist`, carried by the
    # SpotQuota record): a spot bind links to it, so a task's trace shows the quota that admitted
    # it. Memory only: after a rebuild the link returns with the pool's next quota.
    quota_spans: dict[str, trace.SpanContext] = field(default_factory=dict)
    on_committed: Callable[[], None] = lambda: None
    producer: EnvelopeProducer | None = None  # dead letters
    keys: dict[str, bytes] = field(default_factory=dict)
    last_status: float = 0.0
    evictions_by_reason: dict[tuple[str, str], int] = field(default_factory=dict)
    latency_hist: Any = None
    decisions_counter: Any = None
    held_counter: Any = None
    # The router of this instance has read every input sent before this time (None: not yet).
    router_heard: Callable[[], float | None] = lambda: None
    consumer: AIOKafkaConsumer | None = None  # the inbox's (tests pause it to stall the input)
    fatal: Exception | None = None  # a claim that must stop the service (store.ModeConflictError)
    refused_counter: Any = None
    unsigned_counter: Any = None
    auth: ReportAuth | None = None  # set by the composition root; None: every report is applied

    # ----- ownership ------------------------------------------------------------------------------
    def controller(self, state: PartitionState, pool: str) -> PoolController:
        found = state.controllers.get(pool)
        if found is None:
            found = state.controllers[pool] = PoolController(pool, self.settings.controller_settings())
            found.id_salt = id_salt(state.claim.epoch)
        return found

    async def take(self, partition: int) -> int:
        """Claim `partition` (fencing earlier owners), rebuild its pools; the offset to read next."""
        async with self.lock:
            async with self.pool.acquire() as connection:
                topic, dry = self.settings.preemption_inbox_topic, self.settings.preemption_dry_run
                claim = await store.claim(connection, partition, self.instance, topic=topic, dry_run=dry)
                # The newest snapshot this code can read, then only the journal after it.
                snap = await snapshots.load(
                    connection, topic=topic, partition=partition, settings=self.settings.controller_settings()
                )
                after = 0 if snap is None else snap.seq
                entries = await store.journal(connection, partition, topic=topic, after=after)
            state = PartitionState(claim, next_offset=claim.next_offset, replayed=len(entries))
            if snap is not None:
                state.controllers = snap.image.controllers
                for tid, carrier in snap.image.traces.items():
                    self.contexts[tid] = propagate.extract(carrier)
            state.unsnapped = len(entries)
            for pool_name, entry, epoch in entries:
                self._remember_context(entry)
                controller = self.controller(state, pool_name)
                controller.id_salt = id_salt(epoch)  # the ids it derived when it was live
                apply(controller, entry)
            now = self.clock.now()
            for controller in state.controllers.values():
                controller.id_salt = id_salt(claim.epoch)  # new commands: ids never used before
                for node in controller.nodes:
                    state.last_seen[node] = now  # a fresh owner gives every node a full timeout
            self.partitions[partition] = state
            log.info("preemption %s: took partition %d (epoch %d, %s, %d journal entries, offset %d)",
                     self.instance, partition, claim.epoch,
                     "no snapshot" if snap is None else f"snapshot at row {snap.seq}",
                     len(entries), claim.next_offset)  # fmt: skip
            return claim.next_offset

    async def drop(self, partition: int) -> None:
        async with self.lock:
            if self.partitions.pop(partition, None) is not None:
                log.info("preemption %s: released partition %d", self.instance, partition)

    def owned_pools(self) -> dict[str, PoolController]:
        return {name: c for s in self.partitions.values() for name, c in s.controllers.items()}

    # ----- poison records (issue 22, poison.py) ---------------------------------------------------
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

    # ----- inbox batches -------------------------------------------------------------------------
    async def handle_batch(self, partition: int, records: Sequence[ConsumerRecord[bytes, bytes]]) -> None:
        async with self.lock:
            state = self.partitions.get(partition)
            if state is None or not records:
                return
            received = time.monotonic()
            now = self.clock.now()
            ticked = isinstance(self.clock, TickClock)
            # (pool, entry, event id, trace, the validated payload the entry came from, if any)
            items: list[tuple[str, Entry, uuid.UUID | None, otel_context.Context, BaseModel | None]] = []
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
                report: reconcile.NodeReport | None = None
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
                        report = reconcile.report_of(
                            payload.sampled_at.timestamp(),
                            ((w.task_id, w.attempt, w.worker_index) for w in payload.running),
                        )
                        last = controller.reports.get(payload.node)
                        every = self.settings.preemption_report_every_s
                        if not reconcile.worth_journaling(last, report, every):
                            report = None
                    if payload.node in controller.nodes and payload.node not in controller.down:
                        if report is not None:
                            data = {"node": payload.node, **report.as_data()}
                            items.append((pool_name, ("node_report", data, now), None, ctx, None))
                        continue  # a heartbeat: nothing else durable changes
                entry = entry_for(payload, now, duplicate=duplicate)
                if entry is None:
                    continue
                if entry[0] == "submit":  # the task's trace, so a rebuilt owner continues it
                    carrier: dict[str, str] = {}
                    propagate.inject(carrier, context=ctx)
                    entry[1]["trace"] = carrier
                if isinstance(payload, EvictAck | WorkerStarted | WorkerExited):
                    acks[len(items)] = (record, payload, source_key)
                items.append((pool_name, entry, eid, ctx, payload))
                if isinstance(payload, NodeTelemetry) and report is not None:  # after node_seen
                    data = {"node": payload.node, **report.as_data()}
                    items.append((pool_name, ("node_report", data, now), None, ctx, None))
            last_offset = records[-1].offset
            if not items:
                await self._advance(state, last_offset + 1)
                return
            seen = await self._seen([e for _, _, e, _, _ in items if e is not None])
            rows: list[tuple[str, Entry, uuid.UUID | None]] = []
            effects: list[tuple[str, Effects, otel_context.Context | None]] = []
            touched: list[str] = []
            for index, (pool_name, entry, eid, ctx, given) in enumerate(items):
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
                if entry[0] == "quota" and ctx is not None:
                    quota_span = trace.get_current_span(ctx).get_span_context()
                    if quota_span.is_valid:
                        self.quota_spans[pool_name] = quota_span
                out = apply(self.controller(state, pool_name), entry, given)  # validated once
                effects.append((pool_name, out, ctx))
                rows.append((pool_name, entry, eid))
                if pool_name not in touched:
                    touched.append(pool_name)
            for pool_name in [] if ticked else touched:  # on the clock, passes run on PASS ticks
                entry = ("schedule", {}, now)
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
        try:
            envelope = decode(source, record.value or b"")
        except (ValueError, KeyError) as exc:  # the router validated it: this is a bug or tampering
            await self._dead_letter(record, exc)
            return None
        return envelope.payload, envelope.event_id, duplicate, extract_context(headers)

    async def _dead_letter(self, record: ConsumerRecord[bytes, bytes], exc: Exception) -> None:
        self.stats.dead_lettered += 1
        log.error("preemption: dead-lettered inbox record %d@%d: %r", record.partition, record.offset, exc)
        if self.producer is not None:
            failed = FailedRecord(
                topic=record.topic, partition=record.partition, offset=record.offset,
                value=record.value, consumer_group=self.settings.preemption_group,
            )  # fmt: skip
            letter = build_dead_letter(failed, error=exc, failed_at=datetime.now(UTC), producer=PRODUCER)
            await self.producer.send(DEAD_LETTER_TOPIC, letter)

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
        if self.producer is not None:
            failed = FailedRecord(
                topic=record.topic, partition=record.partition, offset=record.offset, value=record.value,
                consumer_group=self.settings.preemption_group,
            )  # fmt: skip
            error = ValueError(f"{type(ack).__name__} refused: {why}")
            letter = build_dead_letter(failed, error=error, failed_at=datetime.now(UTC), producer=PRODUCER)
            await self.producer.send(DEAD_LETTER_TOPIC, letter)

    async def _seen(self, event_ids: list[uuid.UUID]) -> set[uuid.UUID]:
        if not event_ids:
            return set()
        async with self.pool.acquire() as connection:
            return await store.seen_events(connection, event_ids, topic=self.settings.preemption_inbox_topic)

    async def _advance(self, state: PartitionState, next_offset: int) -> None:
        """Only heartbeats: keep the offset in memory (re-reading a few heartbeats is harmless)."""
        state.next_offset = next_offset

    def note_heard(self, partition: int, caught_up_at: float | None) -> None:
        """After a fetch: the inbox partition was read to its end as of `caught_up_at` (None: it
        lags, so it was heard only up to the newest record read)."""
        state = self.partitions.get(partition)
        if state is None:
            return
        heard = caught_up_at if caught_up_at is not None else (state.newest or None)
        if heard is not None:
            state.heard = max(heard, state.heard or heard)

    def _heard(self, state: PartitionState) -> float | None:
        router = self.router_heard()
        if state.heard is None or router is None:
            return None
        return min(state.heard, router)

    def _lost_nodes(self, state: PartitionState, now: float) -> list[tuple[str, str]]:
        """(pool, node) to mark down now, by the liveness rules (liveness.py)."""
        heard = self._heard(state)
        if heard is None:
            return []  # not known yet what was heard: a fresh owner gives every node a full timeout
        deaf = state.heard_clock.advance(heard, now)
        if deaf > 0:
            log.warning("preemption: input resumed after %.0fs deaf: node timeouts restart", deaf)
            liveness.credit(state.last_seen, deaf, heard)
        out: list[tuple[str, str]] = []
        rules = self.settings.liveness_rules()
        for pool_name, controller in state.controllers.items():
            for node in controller.nodes:
                state.last_seen.setdefault(node, now)
            verdict = liveness.judge(
                controller.nodes, controller.down, state.last_seen, heard=heard, now=now, rules=rules,
                kill_switch=controller.controls.kill_switch,
            )  # fmt: skip
            self._note_hold(state, pool_name, verdict, now - heard)
            out += [(pool_name, node) for node in verdict.lost]
        return out

    def _note_hold(
        self, state: PartitionState, pool_name: str, verdict: liveness.Verdict, lag: float
    ) -> None:
        before = state.holding.get(pool_name)
        if verdict.held == before:
            return
        if verdict.held is None:
            state.holding.pop(pool_name, None)
            log.warning("preemption: pool %s: node-loss hold (%s) ended", pool_name, before)
            return
        state.holding[pool_name] = verdict.held
        self.stats.node_loss_held += 1
        if self.held_counter is not None:
            self.held_counter.add(1, {"reason": verdict.held, "pool": pool_name})
        log.warning(
            "preemption: pool %s: %d silent node(s) NOT declared lost (%s; input lag %.1fs): %s",
            pool_name, len(verdict.silent), verdict.held, lag, ", ".join(verdict.silent),
        )  # fmt: skip

    # ----- timers ----------------------------------------------------------------------------------
    async def tick(self) -> None:
        async with self.lock:
            now = self.clock.now()
            wanted = await controls.load(self.pool)  # SRE controls in force (controls.py)
            for state in list(self.partitions.values()):
                rows: list[tuple[str, Entry, uuid.UUID | None]] = []
                effects: list[tuple[str, Effects, otel_context.Context | None]] = []
                for pool_name, control in controls.entries(state.controllers, wanted, now):
                    effects.append((pool_name, apply(state.controllers[pool_name], control), None))
                    rows.append((pool_name, control, None))
                for pool_name, node in self._lost_nodes(state, now):
                    entry: Entry = ("node_down", {"node": node}, now)
                    effects.append((pool_name, apply(state.controllers[pool_name], entry), None))
                    rows.append((pool_name, entry, None))
                    silent = now - state.last_seen[node]
                    log.warning("preemption: node %s silent for %.0fs: marked down", node, silent)
                # Reconciliation acts only while the input is current: a lagging input holds acks
                # and reports not read yet, so a command would look lost when it is not.
                heard = self._heard(state)
                current = heard is not None and now - heard <= self.settings.preemption_node_timeout_s
                for pool_name, controller in state.controllers.items():
                    entry = ("tick", {"reconcile": current} if current else {}, now)
                    out = apply(controller, entry)
                    if out:
                        effects.append((pool_name, out, None))
                        rows.append((pool_name, entry, None))
                if rows:
                    await self._commit(state, rows, effects, next_offset=None)
            if now - self.last_status >= self.settings.preemption_status_s:
                self.last_status = now
                await self._publish_status(now)

    async def _publish_status(self, now: float) -> None:
        for state in list(self.partitions.values()):
            statuses = [c.status(now) for c in state.controllers.values() if c.nodes]
            if not statuses or self.settings.preemption_dry_run:
                continue
            try:
                async with self.pool.acquire() as connection, connection.transaction():
                    await store.check_epoch(connection, state.claim, None)
                    for status in statuses:
                        await enqueue(
                            connection,
                            "gfs.pools.status",
                            wrap(status, producer=PRODUCER, occurred_at=_utc(now)),
                        )
            except store.FencedError:
                await self._fenced(state)
        self.on_committed()

    # ----- the transaction ------------------------------------------------------------------------
    async def _commit(
        self,
        state: PartitionState,
        rows: list[tuple[str, Entry, uuid.UUID | None]],
        effects: list[tuple[str, Effects, otel_context.Context | None]],
        *,
        next_offset: int | None,
    ) -> None:
        tracer = trace.get_tracer(TRACER)
        dry = self.settings.preemption_dry_run
        try:
            decisions = [
                (pool_name, with_trace_id(d, self.contexts))
                for pool_name, out, _ in effects
                for d in out.decisions
            ]
            outgoing: list[tuple[str, Envelope[Any], list[tuple[str, bytes]]]] = []
            for pool_name, out, ctx in effects:
                if not dry:
                    quota = self.quota_spans.get(pool_name)
                    outgoing += [self._outgoing(tracer, m, ctx, quota) for m in [*out.events, *out.commands]]
            # Epoch check, journal, decisions and outbox rows in one statement: one round trip.
            values = outbox_values(outgoing)
            async with self.pool.acquire() as connection:
                await store.commit_batch(
                    connection, state.claim, next_offset, rows, decisions, values, dry_run=dry
                )
        except store.FencedError:
            await self._fenced(state)
            return
        except Exception:
            # Memory ran ahead of what is durable: rebuild the partition from Postgres.
            log.exception("preemption: commit failed on partition %d; rebuilding it", state.claim.partition)
            self.stats.rebuilt += 1
            self.partitions.pop(state.claim.partition, None)
            raise
        if next_offset is not None:
            state.next_offset = next_offset
        state.unsnapped += len(rows)
        await self._maybe_snapshot(state)
        self.stats.batches += 1
        for _, out, _ in effects:
            n = len(out.decisions)
            self.stats.decisions += n
            self.stats.commands += len(out.commands)
            self.stats.events += len(out.events)
            for event in out.events:
                if isinstance(event, TaskEvicted):
                    key = (event.reason.value, _pool_of_task(state, event.task_id))
                    self.evictions_by_reason[key] = self.evictions_by_reason.get(key, 0) + 1
            if self.decisions_counter is not None:
                for d in out.decisions:
                    self.decisions_counter.add(1, {"kind": d.kind})
        self.on_committed()

    def _outgoing(
        self,
        tracer: trace.Tracer,
        message: BaseModel,
        ctx: otel_context.Context | None,
        quota: trace.SpanContext | None = None,
    ) -> tuple[str, Envelope[Any], list[tuple[str, bytes]]]:
        """Sign a command, wrap it, and carry the trace of its task (a span of that trace); a spot
        bind's span links to the span of the quota in force (`quota`), which admitted it."""
        task_id = _task_of(message)
        parent = self.contexts.get(task_id, ctx) if task_id else ctx
        if isinstance(message, BindCommand):  # noqa: SIM114 (`sign` keeps each command's own type)
            message = sign(message, key=self.key(message.node))
        elif isinstance(message, EvictCommand):
            message = sign(message, key=self.key(message.node))
        if isinstance(message, BindCommand | EvictCommand):
            # A span per command (the decision SREs follow); events carry the task's trace as is.
            spot = isinstance(message, BindCommand) and message.task_class is TaskClass.SPOT
            links = [trace.Link(quota, {"gfs.link": "admitted by the spot quota"})] if spot and quota else []
            with tracer.start_as_current_span(
                f"decide {type(message).__name__}", context=parent, links=links,
                attributes={"gfs.task_id": task_id, "gfs.node": message.node},
            ):  # fmt: skip
                headers = inject_headers()
        else:
            headers = inject_headers(context=parent) if parent is not None else []
        # On the controllable clock an event happened at the replay's time, not the host's.
        occurred = _utc(self.clock.now()) if isinstance(self.clock, TickClock) else datetime.now(UTC)
        envelope = wrap(message, producer=PRODUCER, occurred_at=occurred)
        return topic_for_event_type(type(message).__name__).name, envelope, headers

    async def _maybe_snapshot(self, state: PartitionState) -> None:
        """After a committed batch (memory equals the journal): a snapshot when one is due. A
        failed one costs nothing but a longer replay at the next claim, so it is logged only."""
        policy = snapshots.Policy(self.settings.preemption_snapshot_rows, self.settings.preemption_snapshot_s)
        if not policy.due(state.unsnapped, time.monotonic() - state.snapped_at):
            return
        try:
            await self.snapshot(state)
        except Exception:
            log.exception("preemption: snapshot of partition %d failed", state.claim.partition)

    async def snapshot(self, state: PartitionState) -> int | None:
        """Write the partition's snapshot now (the caller holds `lock`); its journal row, None when
        fenced or nothing was journaled."""
        traces: dict[str, dict[str, str]] = {}
        for controller in state.controllers.values():
            for tid in controller.tasks:
                ctx = self.contexts.get(tid)
                if ctx is not None:
                    carrier: dict[str, str] = {}
                    propagate.inject(carrier, context=ctx)
                    traces[tid] = carrier
        image = snapshots.Image(dict(state.controllers), traces)
        async with self.pool.acquire() as connection:
            seq = await snapshots.save(
                connection, topic=state.claim.topic, partition=state.claim.partition,
                epoch=state.claim.epoch, image=image, settings=self.settings.controller_settings(),
            )  # fmt: skip
        state.unsnapped, state.snapped_at = 0, time.monotonic()
        return seq

    def key(self, node: str) -> bytes:
        """`node`'s key (signing.node_key of the master secret), derived once."""
        found = self.keys.get(node)
        if found is None:
            found = self.keys[node] = node_key(self.secret, node)
        return found

    def _remember_context(self, entry: Entry, ctx: otel_context.Context | None = None) -> None:
        kind, data, _ = entry
        if kind != "submit":
            return
        tid = str(data["task"]["task_id"])
        carrier = data.get("trace")
        if ctx is not None:  # live: the record's own context (the carrier was injected from it)
            self.contexts[tid] = ctx
        elif isinstance(carrier, dict) and carrier:  # replay: only the journaled carrier
            self.contexts[tid] = propagate.extract(carrier)

    async def _fenced(self, state: PartitionState) -> None:
        self.stats.fenced += 1
        log.error("preemption %s: partition %d was claimed by another instance; dropping it",
                  self.instance, state.claim.partition)  # fmt: skip
        self.partitions.pop(state.claim.partition, None)


def _task_of(message: BaseModel) -> str:
    if isinstance(message, EvictCommand):
        return message.task_ids[0]
    value = getattr(message, "task_id", "")
    return value if isinstance(value, str) else ""


def _pool_of_task(state: PartitionState, task_id: str) -> str:
    for name, controller in state.controllers.items():
        if task_id in controller.seen:
            return name
    return ""


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def report_auth(settings: PreemptionSettings, key_of: Callable[[str], bytes], instance: str) -> ReportAuth:
    """How this instance checks the agents' signatures (report_auth.py), said in its start-up log."""
    previous = settings.previous_secret()
    previous_keys: dict[str, bytes] = {}

    def previous_key(node: str) -> bytes:
        assert previous is not None
        found = previous_keys.get(node)
        if found is None:
            found = previous_keys[node] = node_key(previous, node)
        return found

    if previous is not None:
        log.warning(
            "preemption %s: GFS_COMMAND_SECRET_PREVIOUS is set: acks and telemetry signed with the "
            "previous secret's node keys are accepted (a rotation) until %s", instance,
            settings.gfs_command_secret_previous_until or "no end (set GFS_COMMAND_SECRET_PREVIOUS_UNTIL)",
        )  # fmt: skip
    if settings.preemption_require_signed_acks:
        log.info("preemption %s: acks and telemetry must be signed with their node's key", instance)
    else:
        log.warning(
            "preemption %s: PREEMPTION_REQUIRE_SIGNED_ACKS is off: UNSIGNED acks and telemetry are "
            "applied (counted in gfs_preemption_acks_unsigned_total); wrongly signed ones are still "
            "refused. Turn it on once every agent signs (docs/operations.md).", instance,
        )  # fmt: skip
    return ReportAuth(
        key_of, require_signed=settings.preemption_require_signed_acks,
        previous_key_of=previous_key if previous is not None else None,
        previous_until=settings.gfs_command_secret_previous_until,
    )  # fmt: skip


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, decider: Decider, consumer: AIOKafkaConsumer, ready: asyncio.Event) -> None:
        self.decider = decider
        self.consumer = consumer
        self.ready = ready

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        for tp in revoked:
            await self.decider.drop(tp.partition)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        for tp in assigned:
            try:
                offset = await self.decider.take(tp.partition)
            except store.ModeConflictError as exc:  # a dry run and a live one on one inbox: stop
                log.error("preemption: %s", exc)
                self.decider.fatal = exc
                return
            self.consumer.seek(tp, offset)
        self.ready.set()


async def _decide(consumer: AIOKafkaConsumer, decider: Decider, stop: asyncio.Event) -> None:
    while not stop.is_set():
        batch = await consumer.getmany(timeout_ms=200, max_records=500)
        if decider.fatal is not None:
            raise decider.fatal
        for tp, records in batch.items():
            try:
                await decider.handle_inbox(tp.partition, records)
            except Exception:
                # The partition was dropped (memory ahead of Postgres): take it again and re-read.
                await asyncio.sleep(0.5)
                if tp in consumer.assignment():
                    consumer.seek(tp, await decider.take(tp.partition))
        for tp in consumer.assignment():  # how far the inbox was heard (liveness.py)
            state = decider.partitions.get(tp.partition)
            if state is not None:
                decider.note_heard(tp.partition, caught_up_at(consumer, tp, state.next_offset))


async def _every(seconds: float, stop: asyncio.Event, action: Callable[[], Any]) -> None:
    while not stop.is_set():
        try:
            await action()
        except Exception:
            log.exception("preemption: timer failed; retrying")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)


async def run_preemption_service(
    settings: PreemptionSettings,
    stop: asyncio.Event,
    *,
    clock: Clock | None = None,
    ready: asyncio.Event | None = None,
    started: Callable[[Decider], None] | None = None,
) -> Stats:
    """Run the router, the decider, the timers, the outbox relay and the SRE API until `stop`."""
    clock = clock or (TickClock() if settings.topic_clock else SystemClock())
    ready = ready or asyncio.Event()
    secret = settings.master_secret()
    instance = settings.preemption_instance or f"{socket.gethostname()}-{os.getpid()}"
    metrics = configure_metrics(settings.otel_service_name or PRODUCER)
    inbox = replace(inbox_spec(settings.preemption_inbox_partitions), name=settings.preemption_inbox_topic)
    runner: web.AppRunner | None = None
    async with (
        # No session reset on release: the service keeps no session state (its advisory locks are
        # transaction-level), and the reset was one more round trip per acquisition (issue 22).
        open_pool(settings.database_url, max_size=6, reset_session=False) as pool,
        EnvelopeProducer(
            bootstrap_servers=settings.bootstrap_servers, client_id=f"gfs-preemption-{instance}"
        ) as producer,
    ):
        if settings.preemption_dry_run:  # before anything is claimed, routed or created
            async with pool.acquire() as connection:
                await store.refuse_live_schema(connection)
        await ensure_topics(settings.bootstrap_servers, [inbox])
        relay = OutboxRelay(pool, producer, poll_interval_s=0.5)
        decider = Decider(pool, settings, clock, instance, secret, on_committed=relay.wake, producer=producer)
        decider.auth = report_auth(settings, decider.key, instance)
        register_metrics(metrics.meter(TRACER), decider)
        router = Router(pool, producer, inbox=inbox.name, pools=settings.pool_allowlist(),
                        clock_name=settings.preemption_clock_name, auth=decider.auth,
                        on_refused=decider.note_refused)  # fmt: skip
        decider.router_heard = lambda: router.heard
        try:
            if settings.preemption_api_port:
                runner = web.AppRunner(build_api(decider, metrics, ready))
                await runner.setup()
                host = settings.bind_host(settings.preemption_api_host)
                await web.TCPSite(runner, host, settings.preemption_api_port).start()
            consumer = AIOKafkaConsumer(
                bootstrap_servers=settings.bootstrap_servers,
                group_id=settings.preemption_group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level="read_committed",
                session_timeout_ms=settings.preemption_session_timeout_ms,
                heartbeat_interval_ms=max(500, settings.preemption_session_timeout_ms // 4),
                client_id=f"gfs-preemption-{instance}",
            )
            consumer.subscribe([inbox.name], listener=_Listener(decider, consumer, ready))
            decider.consumer = consumer
            await consumer.start()
            if started is not None:
                started(decider)
            jobs = [
                asyncio.create_task(_decide(consumer, decider, stop)),
                asyncio.create_task(
                    route(
                        router,
                        bootstrap_servers=settings.bootstrap_servers,
                        group=settings.preemption_router_group,
                        stop=stop,
                        offset_reset=settings.preemption_router_offset_reset,
                        topics=(*ROUTED_TOPICS, CLOCK_TOPIC) if settings.topic_clock else ROUTED_TOPICS,
                    )
                ),
                asyncio.create_task(relay.run(stop)),
            ]
            if not settings.topic_clock:  # on the controllable clock, ticks drive the timers
                jobs.append(asyncio.create_task(_every(settings.preemption_tick_s, stop, decider.tick)))
            try:
                done, _ = await asyncio.wait(
                    [*jobs, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED
                )
                for job in done:
                    if job in jobs and job.exception() is not None:
                        raise job.exception()  # type: ignore[misc]
            finally:
                stop.set()
                ready.clear()
                for job in jobs:
                    job.cancel()
                await asyncio.gather(*jobs, return_exceptions=True)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(relay.drain(), timeout=10.0)
                with contextlib.suppress(Exception):
                    await consumer.stop()
        finally:
            if runner is not None:
                await runner.cleanup()
            metrics.shutdown()
    return decider.stats

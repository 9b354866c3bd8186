"""The decider's state: the partitions of the inbox this instance owns (each one's pools, offsets and
what it heard), its counters, and ownership itself: claiming a partition rebuilds its pools from
the newest snapshot and the journal after it (`take`), losing it drops them.

The base of the decider's parts (service.py's module doc lists them), each a class over this one;
imports go one way, from `service` down to here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from pydantic import BaseModel

from schemas.commands import EvictAck, EvictCommand
from schemas.telemetry import NodeTelemetry
from schemas.workers import WorkerExited, WorkerStarted
from services.platform.clock import Clock
from services.platform.kafka.producer import EnvelopeProducer
from services.platform.signing import node_key
from services.preemption import liveness, snapshots, store
from services.preemption.controller.ids import id_salt
from services.preemption.controller.pool import PoolController
from services.preemption.handoff import Handoff
from services.preemption.inputs import apply
from services.preemption.journal_entries import Entry, SubmitEntry, from_row
from services.preemption.report_auth import ReportAuth
from services.preemption.service_settings import PreemptionSettings
from services.preemption.trace_contexts import TraceContexts, forget_ended

# Every part of the decider logs under the one logger name it always had (service.py's), so a
# deployment's log filters see the same records whichever module emits them.
log = logging.getLogger("services.preemption.service")


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
class DeciderBase:
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
    # task -> its trace, forgotten when the task ends (trace_contexts.py)
    contexts: dict[str, otel_context.Context] = field(default_factory=TraceContexts)
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
    # Records this instance's router validated, taken instead of decoded again (handoff.py).
    handoff: Handoff | None = None

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
            replayed: set[str] = set()
            for pool_name, row, epoch in entries:
                entry = from_row(*row)
                replayed.update(self._remember_context(entry))
                controller = self.controller(state, pool_name)
                controller.id_salt = id_salt(epoch)  # the ids it derived when it was live
                apply(controller, entry)
            forget_ended(self.contexts, replayed, state.controllers.values())  # ended in the replay
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
            state = self.partitions.pop(partition, None)
            if state is not None:
                # Its tasks' contexts go with it (their new owner has them from its claim).
                forget_ended(self.contexts, [t for c in state.controllers.values() for t in c.tasks], ())
                log.info("preemption %s: released partition %d", self.instance, partition)
            if self.handoff is not None:
                self.handoff.drop(partition)

    def owned_pools(self) -> dict[str, PoolController]:
        return {name: c for s in self.partitions.values() for name, c in s.controllers.items()}

    # ----- node keys, trace contexts, fencing --------------------------------------------------
    def key(self, node: str) -> bytes:
        """`node`'s key (signing.node_key of the master secret), derived once."""
        found = self.keys.get(node)
        if found is None:
            found = self.keys[node] = node_key(self.secret, node)
        return found

    def _remember_context(self, entry: Entry, ctx: otel_context.Context | None = None) -> tuple[str, ...]:
        """Remember a submission's trace context; the task id remembered (none for other entries)."""
        if not isinstance(entry, SubmitEntry):
            return ()
        tid = entry.task.task_id
        carrier = entry.trace
        if ctx is not None:  # live: the record's own context (the carrier was injected from it)
            self.contexts[tid] = ctx
        elif carrier:  # replay: only the journaled carrier
            self.contexts[tid] = propagate.extract(carrier)
        else:
            return ()
        return (tid,)

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

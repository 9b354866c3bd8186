"""Reading a batch of one inbox partition: its records turned into the entries to decide, in order.

Per record: skipped if already committed (a re-seek after a rebuild); the validated envelope taken
from this instance's router (handoff.py) or decoded from the bytes (undecodable: dead-lettered);
an ack or telemetry refused unless it is its node's word (report_auth.py); a clock tick moves the
controllable clock; a heartbeat of a known node only refreshes its last-seen time (and journals
the agent's report of its workers when new: reconcile_rules.py); anything else becomes its journal
entry, a submission with its trace carrier so a rebuilt owner continues the task's trace.

`Reader` owns the report check (`auth`; None: every report is applied); it writes the heartbeat
times and the newest record time of the partition state it is handed, and makes a pool's
controller on the pool's first record.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiokafka import ConsumerRecord
from opentelemetry import context as otel_context
from opentelemetry import propagate
from pydantic import BaseModel

from gfs.schemas.clock import ClockTick
from gfs.schemas.commands import EvictAck
from gfs.schemas.tasks import TaskSubmitted
from gfs.schemas.telemetry import NodeTelemetry
from gfs.schemas.topics import decode
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.platform.clock import Clock, TickClock
from gfs.services.platform.stage_stamps import routed_stamps
from gfs.services.platform.tracing import extract_context
from gfs.services.preemption import liveness
from gfs.services.preemption.controller import reconcile_rules
from gfs.services.preemption.decider.counters import Instruments, Stats
from gfs.services.preemption.decider.dead_letters import DeadLetters
from gfs.services.preemption.decider.partition import PartitionState
from gfs.services.preemption.journal.entries import Entry, NodeReportEntry
from gfs.services.preemption.journal.inputs import entry_for
from gfs.services.preemption.router.handoff import Handoff
from gfs.services.preemption.router.report_auth import ReportAuth
from gfs.services.preemption.router.routing import DUPLICATE_HEADER, SOURCE_HEADER, SOURCE_KEY_HEADER
from gfs.services.preemption.service_settings import PreemptionSettings

Ack = EvictAck | WorkerStarted | WorkerExited

Report = EvictAck | WorkerStarted | WorkerExited | NodeTelemetry  # what agents sign (report_auth.py)


@dataclass(slots=True)
class Reading:
    """A batch read: (pool, entry, event id, trace) to decide in order; the acks among them by
    index (record, ack, the source record's key), checked when they are decided; and the time the
    batch is decided at (the controllable clock moves with the ticks read)."""

    items: list[tuple[str, Entry, uuid.UUID | None, otel_context.Context]]
    acks: dict[int, tuple[ConsumerRecord[bytes, bytes], Ack, str | None]]
    now: float
    # task -> the router's stamps of the batch's last record about it (platform/stage_stamps.py)
    routed: dict[str, tuple[float, float]] = field(default_factory=dict)


class Reader:
    __slots__ = ("auth", "clock", "handoff", "instruments", "letters", "settings", "stats")

    def __init__(
        self,
        settings: PreemptionSettings,
        clock: Clock,
        handoff: Handoff,
        auth: ReportAuth | None,
        letters: DeadLetters,
        stats: Stats,
        instruments: Instruments,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.handoff = handoff
        self.auth = auth
        self.letters = letters
        self.stats = stats
        self.instruments = instruments

    async def read(self, state: PartitionState, records: Sequence[ConsumerRecord[bytes, bytes]]) -> Reading:
        now = self.clock.now()
        ticked = isinstance(self.clock, TickClock)
        items: list[tuple[str, Entry, uuid.UUID | None, otel_context.Context]] = []
        acks: dict[int, tuple[ConsumerRecord[bytes, bytes], Ack, str | None]] = {}
        routed: dict[str, tuple[float, float]] = {}
        for record in records:
            if record.offset < state.next_offset:
                continue  # already committed (a re-seek after a rebuild)
            decoded = await self._decode(record)
            if decoded is None:
                continue
            payload, event_id, duplicate, ctx = decoded
            task_id = getattr(payload, "task_id", None)
            if isinstance(task_id, str) and (stamps := routed_stamps(record.headers or ())) is not None:
                routed[task_id] = stamps
            if isinstance(payload, Report) and not await self._authentic(record, payload):
                continue  # refused before it counts as a heartbeat, a report or an ack
            source_key = next(
                (v.decode("utf-8", "replace") for k, v in record.headers or () if k == SOURCE_KEY_HEADER),
                None,
            )
            pool_name = (record.key or b"").decode()  # the router keyed it by its pool
            controller = state.controller(pool_name, self.settings)
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
                    # When the router forwarded it (wall time; not the batch's monotonic start
                    # that the decision-latency histogram is measured from).
                    forwarded = record.timestamp / 1000 if record.timestamp > 0 else now
                    skew = self.settings.preemption_max_clock_skew_s
                    fresh = liveness.freshness(payload.sampled_at.timestamp(), forwarded, skew)
                state.last_seen[payload.node] = max(fresh, state.last_seen.get(payload.node, fresh))
                if not ticked and payload.running is not None:
                    # The agent's report of its workers (reconcile_rules.py): journaled when new.
                    # On the receiver's clock (`fresh`, clamped like liveness): an agent whose
                    # clock ran ahead once would otherwise make every later report look older
                    # than that one and never be journaled again (issue 38).
                    running = reconcile_rules.report_of(
                        fresh,
                        ((w.task_id, w.attempt, w.worker_index) for w in payload.running),
                    )
                    last = controller.reports.get(payload.node)
                    # Unknown work is judged on journaled reports: an unchanged one journaled only
                    # every report_every_s would stop it after the larger of the two delays.
                    every = max(1.0, min(self.settings.preemption_report_every_s,
                                         self.settings.preemption_unknown_work_after_s))  # fmt: skip
                    if reconcile_rules.worth_journaling(last, running, every):
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
        return Reading(items, acks, now, routed)

    async def _decode(
        self, record: ConsumerRecord[bytes, bytes]
    ) -> tuple[BaseModel, uuid.UUID, bool, otel_context.Context] | None:
        headers = list(record.headers or ())
        source = next((v.decode() for k, v in headers if k == SOURCE_HEADER), "")
        duplicate = any(k == DUPLICATE_HEADER for k, _ in headers)
        # Validated once: by this process's router when it forwarded the record (handoff.py),
        # else here, from the bytes (another instance routed it, or it was read again).
        envelope = self.handoff.take(record.partition, record.offset)
        if envelope is None:
            try:
                envelope = decode(source, record.value or b"")
            except (ValueError, KeyError) as exc:  # the router validated it: a bug or tampering
                await self.letters.dead_letter(record, exc)
                return None
        return envelope.payload, envelope.event_id, duplicate, extract_context(headers)

    async def _authentic(self, record: ConsumerRecord[bytes, bytes], report: Report) -> bool:
        """Whether `report` is its node's word (report_auth.py); a refused one is dead-lettered."""
        if self.auth is None:
            return True
        verdict = self.auth.check(report)
        if verdict.refusal is not None:
            await self.letters.refuse(record, report, verdict.why(report), reason=verdict.refusal.value)
            return False
        if verdict.unsigned:
            self.stats.unsigned_accepted += 1
            if self.instruments.unsigned_counter is not None:
                self.instruments.unsigned_counter.add(1, {"type": type(report).__name__})
        return True

"""The decider's transaction: a batch's inputs, decisions, events and signed commands, and the next
inbox offset, in ONE Postgres transaction under the partition's epoch (a fenced owner drops the
partition); then, now and then, a snapshot of the partition's pools (snapshots.py).

`Transaction` owns what it counts per commit (`evictions_by_reason`, and its `Stats` counters);
the partition it commits for is handed to it per call. It reads the traces (to build the messages
and to forget what a batch ended) and drops a partition from the registry when its commit fails,
since memory then ran ahead of what is durable.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg
from opentelemetry import context as otel_context
from opentelemetry import trace

from gfs.schemas.envelope import Envelope
from gfs.schemas.tasks import TaskEvicted
from gfs.services.platform.outbox import outbox_values
from gfs.services.platform.stage_stamps import BatchStamps, CommitTimes
from gfs.services.preemption.controller.types import Effects
from gfs.services.preemption.decider.counters import Instruments, Stats
from gfs.services.preemption.decider.names import LOGGER, TRACER
from gfs.services.preemption.decider.outgoing import Outgoing, task_of
from gfs.services.preemption.decider.partition import OwnedPartitions, PartitionState
from gfs.services.preemption.decider.traces import TaskTraces
from gfs.services.preemption.journal import snapshots, store
from gfs.services.preemption.journal.entries import Entry
from gfs.services.preemption.journal.trace_ids import with_trace_id
from gfs.services.preemption.router import expiry
from gfs.services.preemption.service_settings import PreemptionSettings

log = logging.getLogger(LOGGER)

Rows = list[tuple[str, Entry, uuid.UUID | None]]  # (pool, entry, event id): what is journaled
Effected = list[tuple[str, Effects, otel_context.Context | None]]  # (pool, what it decided, trace)


class Transaction:
    __slots__ = (
        "commit_times", "evictions_by_reason", "instruments", "on_committed", "outgoing", "partitions",
        "pool", "settings", "stats", "traces",
    )  # fmt: skip

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: PreemptionSettings,
        partitions: OwnedPartitions,
        traces: TaskTraces,
        outgoing: Outgoing,
        stats: Stats,
        instruments: Instruments,
        on_committed: Callable[[], None],
        commit_times: CommitTimes | None = None,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.partitions = partitions
        self.traces = traces
        self.outgoing = outgoing
        self.stats = stats
        self.instruments = instruments
        self.on_committed = on_committed  # after every commit: the relay's wake (and the due wake)
        self.commit_times = commit_times  # when each stamped commit returned (stage_stamps.py)
        # (reason, pool) -> tasks evicted since the process started (the metrics read it)
        self.evictions_by_reason: dict[tuple[str, str], int] = {}

    async def commit(
        self,
        state: PartitionState,
        rows: Rows,
        effects: Effected,
        *,
        next_offset: int | None,
        stamps: BatchStamps | None = None,
    ) -> None:
        """Commit a batch of `state`'s partition (the caller holds the decider's lock); the inbox
        offset moves to `next_offset` (None: a tick's, the offset stays). `stamps`: an inbox
        batch's stage stamps, carried by the messages about its stamped tasks."""
        tracer = trace.get_tracer(TRACER)
        dry = self.settings.preemption_dry_run
        try:
            decisions = [
                (pool_name, with_trace_id(d, self.traces.contexts))
                for pool_name, out, _ in effects
                for d in out.decisions
            ]
            outgoing: list[tuple[str, Envelope[Any], list[tuple[str, bytes]]]] = []
            for pool_name, out, ctx in effects:
                if not dry:
                    quota = self.traces.quota_spans.get(pool_name)
                    outgoing += [
                        self.outgoing.envelope(tracer, m, ctx, quota) for m in [*out.events, *out.commands]
                    ]
            token = self._stamp(outgoing, stamps)
            # Epoch check, journal, decisions and outbox rows in one statement: one round trip.
            values = outbox_values(outgoing)
            async with self.pool.acquire() as connection:
                journaled = [(pool_name, entry.to_row(), eid) for pool_name, entry, eid in rows]
                await store.commit_batch(
                    connection, state.claim, next_offset, journaled, decisions, values, dry_run=dry
                )
        except store.FencedError:
            self.partitions.fenced(state)
            return
        except Exception:
            # Memory ran ahead of what is durable: rebuild the partition from Postgres.
            log.exception("preemption: commit failed on partition %d; rebuilding it", state.claim.partition)
            self.stats.rebuilt += 1
            self.partitions.release(state.claim.partition)
            raise
        if token is not None and self.commit_times is not None:
            self.commit_times.committed(token, time.time())
        if next_offset is not None:
            state.next_offset = next_offset
        await self._end_routes(effects)
        self._forget_contexts(state, effects)
        state.unsnapped += len(rows)
        await self._maybe_snapshot(state)
        self._count(state, effects)
        self.on_committed()

    def _stamp(
        self, outgoing: list[tuple[str, Envelope[Any], list[tuple[str, bytes]]]], stamps: BatchStamps | None
    ) -> str | None:
        """Add the decided header to the messages about the batch's stamped tasks; the commit's
        token (None: nothing stamped)."""
        if stamps is None or not stamps.routed or self.commit_times is None:
            return None
        token = self.commit_times.token()
        stamped = False
        for _, envelope, headers in outgoing:
            header = stamps.header(task_of(envelope.payload), token)
            if header is not None:
                headers.append(header)
                stamped = True
        return token if stamped else None

    def _count(self, state: PartitionState, effects: Effected) -> None:
        self.stats.batches += 1
        for _, out, _ in effects:
            n = len(out.decisions)
            self.stats.decisions += n
            self.stats.commands += len(out.commands)
            self.stats.events += len(out.events)
            for event in out.events:
                if isinstance(event, TaskEvicted):
                    key = (event.reason.value, state.pool_of_task(event.task_id))
                    self.evictions_by_reason[key] = self.evictions_by_reason.get(key, 0) + 1
            if self.instruments.decisions_counter is not None:
                for d in out.decisions:
                    self.instruments.decisions_counter.add(1, {"kind": d.kind})

    async def _end_routes(self, effects: Effected) -> None:
        """Mark the router's routes of the tasks this batch ended (expiry.py), after the batch
        is durable; a failure only keeps those routes (logged), it never undoes the batch."""
        ended = [tid for _, out, _ in effects for tid in expiry.ended_tasks(out.events)]
        if not ended:
            return
        try:
            async with self.pool.acquire() as connection:
                await expiry.mark_ended(connection, ended)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("preemption: marking %d ended task routes failed (kept): %r", len(ended), exc)

    def _forget_contexts(self, state: PartitionState, effects: Effected) -> None:
        """Forget the trace contexts of the tasks this batch ended (traces.py): after the batch's
        decisions and messages were built with them, so the last decision is in the trace."""
        decided = [d.task_id for _, out, _ in effects for d in out.decisions]
        decided += [task_of(m) for _, out, _ in effects for m in out.events]
        self.traces.forget_ended(decided, state.controllers.values())

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
        """Write the partition's snapshot now (the caller holds the decider's lock); its journal
        row, None when fenced or nothing was journaled."""
        traces = self.traces.carriers(state.controllers.values())
        image = snapshots.Image(dict(state.controllers), traces)
        async with self.pool.acquire() as connection:
            seq = await snapshots.save(
                connection, topic=state.claim.topic, partition=state.claim.partition,
                epoch=state.claim.epoch, image=image, settings=self.settings.controller_settings(),
            )  # fmt: skip
        state.unsnapped, state.snapped_at = 0, time.monotonic()
        return seq

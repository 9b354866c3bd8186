"""The decider's transaction: a batch's inputs, decisions, events and signed commands, and the next
inbox offset, in ONE Postgres transaction under the partition's epoch (a fenced owner drops the
partition); then, now and then, a snapshot of the partition's pools (snapshots.py).

Part of the decider (service.py): a class over its state (decider_base.py).
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from pydantic import BaseModel

from schemas.commands import BindCommand, EvictCommand, WarnCommand
from schemas.envelope import Envelope, wrap
from schemas.tasks import TaskClass, TaskEvicted
from schemas.topics import topic_for_event_type
from services.platform.clock import TickClock
from services.platform.outbox import outbox_values
from services.platform.signing import sign
from services.platform.tracing import inject_headers
from services.preemption import route_expiry, snapshots, store
from services.preemption.controller.types import Effects
from services.preemption.decider_base import (
    PRODUCER,
    TRACER,
    DeciderBase,
    PartitionState,
    _pool_of_task,
    _task_of,
    _utc,
    log,
)
from services.preemption.journal_entries import Entry
from services.preemption.trace_contexts import forget_ended
from services.preemption.trace_ids import with_trace_id


class Transaction(DeciderBase):
    __slots__ = ()

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
                journaled = [(pool_name, entry.to_row(), eid) for pool_name, entry, eid in rows]
                await store.commit_batch(
                    connection, state.claim, next_offset, journaled, decisions, values, dry_run=dry
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
        await self._end_routes(effects)
        self._forget_contexts(state, effects)
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

    async def _end_routes(self, effects: list[tuple[str, Effects, otel_context.Context | None]]) -> None:
        """Mark the router's routes of the tasks this batch ended (route_expiry.py), after the batch
        is durable; a failure only keeps those routes (logged), it never undoes the batch."""
        ended = [tid for _, out, _ in effects for tid in route_expiry.ended_tasks(out.events)]
        if not ended:
            return
        try:
            async with self.pool.acquire() as connection:
                await route_expiry.mark_ended(connection, ended)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("preemption: marking %d ended task routes failed (kept): %r", len(ended), exc)

    def _forget_contexts(
        self, state: PartitionState, effects: list[tuple[str, Effects, otel_context.Context | None]]
    ) -> None:
        """Forget the trace contexts of the tasks this batch ended (trace_contexts.py): after the
        batch's decisions and messages were built with them, so the last decision is in the trace."""
        decided = [d.task_id for _, out, _ in effects for d in out.decisions]
        decided += [_task_of(m) for _, out, _ in effects for m in out.events]
        forget_ended(self.contexts, decided, state.controllers.values())

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
        elif isinstance(message, EvictCommand):  # noqa: SIM114
            message = sign(message, key=self.key(message.node))
        elif isinstance(message, WarnCommand):
            message = sign(message, key=self.key(message.node))
        if isinstance(message, BindCommand | EvictCommand | WarnCommand):
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

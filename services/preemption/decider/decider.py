"""The decider's composition root: `Decider` builds its collaborators around the registry of the
partitions it holds and hands each one what it needs, and is the one object the service, the SRE
API (through view.DeciderView), the metrics and the tests hold.

It owns what is shared by construction: the lock every write to a partition's state runs under
(a claim, a batch, a tick, a wake: never two at once), the counters (`Stats`, `Instruments`), and
the ports the service wires (`on_committed`, `consumer`, `fatal`). Its methods only hand a call to
the collaborator that owns the work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import asyncpg
from aiokafka import AIOKafkaConsumer, ConsumerRecord
from opentelemetry import context as otel_context

from gfs.services.platform.clock import Clock
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.stage_stamps import CommitTimes
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.decider.claims import Claims
from gfs.services.preemption.decider.counters import Instruments, Stats
from gfs.services.preemption.decider.dead_letters import DeadLetters
from gfs.services.preemption.decider.hearing import Hearing
from gfs.services.preemption.decider.inbox import Inbox
from gfs.services.preemption.decider.node_keys import NodeKeys
from gfs.services.preemption.decider.outgoing import Outgoing
from gfs.services.preemption.decider.partition import OwnedPartitions, PartitionState
from gfs.services.preemption.decider.reading import Reader
from gfs.services.preemption.decider.timers import Timers
from gfs.services.preemption.decider.traces import TaskTraces
from gfs.services.preemption.decider.transaction import Transaction
from gfs.services.preemption.router.handoff import Handoff
from gfs.services.preemption.router.report_auth import ReportAuth
from gfs.services.preemption.service_settings import PreemptionSettings


class Decider:
    """The decider of the inbox partitions this instance owns (the package's doc)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: PreemptionSettings,
        clock: Clock,
        instance: str,
        keys: NodeKeys,
        *,
        producer: EnvelopeProducer | None = None,
        on_committed: Callable[[], None] = lambda: None,
        auth: ReportAuth | None = None,
        router_heard: Callable[[], float | None] = lambda: None,
    ) -> None:
        """`producer`: dead letters (None: logged and counted only); `on_committed`: after every
        commit (the outbox relay's wake; the service puts the due wake in front of it later);
        `auth`: how agents' reports are checked (None: every report is applied); `router_heard`:
        how far this instance's router has read every input (None: not known)."""
        self.pool = pool
        self.settings = settings
        self.clock = clock
        self.instance = instance
        self.keys = keys
        self.on_committed = on_committed
        self.consumer: AIOKafkaConsumer | None = None  # the inbox's (tests pause it to stall the input)
        self.fatal: Exception | None = None  # a claim that must stop the service (store.ModeConflictError)
        self.lock = asyncio.Lock()
        self.stats = Stats()
        self.instruments = Instruments()  # set by metrics.register_metrics
        self.partitions = OwnedPartitions(instance, self.stats)
        # Records this instance's router validated, taken instead of decoded again (the service
        # gives it to the router); only partitions held here are kept.
        self.handoff = Handoff(owned=self.partitions.__contains__)
        self.traces = TaskTraces()
        # When each batch's commit returned, for the outbox relay's stage stamps (stage_stamps.py).
        self.commit_times = CommitTimes(instance)
        committed = self._committed  # reads `on_committed` at each call: the service replaces it
        self.claims = Claims(
            pool, settings, clock, instance, self.lock, self.partitions, self.traces, self.handoff
        )
        self.transaction = Transaction(
            pool, settings, self.partitions, self.traces, Outgoing(keys, self.traces, clock),
            self.stats, self.instruments, committed, self.commit_times,
        )  # fmt: skip
        self.letters = DeadLetters(settings, producer, self.stats, self.instruments)
        reader = Reader(settings, clock, self.handoff, auth, self.letters, self.stats, self.instruments)
        self.inbox = Inbox(
            pool, settings, clock, self.lock, self.partitions, reader, self.letters, self.traces,
            self.transaction, self.claims, self.stats, self.instruments,
        )  # fmt: skip
        self.hearing = Hearing(settings, router_heard, self.stats, self.instruments)
        self.timers = Timers(
            pool, settings, clock, self.lock, self.partitions, self.hearing, self.transaction, committed
        )

    def _committed(self) -> None:
        self.on_committed()

    # ----- what the SRE API, the metrics and the tests read ------------------------------------------
    @property
    def contexts(self) -> dict[str, otel_context.Context]:
        """task -> its trace context (traces.py)."""
        return self.traces.contexts

    @property
    def evictions_by_reason(self) -> dict[tuple[str, str], int]:
        return self.transaction.evictions_by_reason

    def owned_pools(self) -> dict[str, PoolController]:
        return self.partitions.pools()

    # ----- ownership (the consumer's rebalance listener) -------------------------------------------
    async def take(self, partition: int) -> int:
        return await self.claims.take(partition)

    async def drop(self, partition: int) -> None:
        await self.claims.drop(partition)

    async def snapshot(self, state: PartitionState) -> int | None:
        """Write `state`'s snapshot now (the caller holds `lock`)."""
        return await self.transaction.snapshot(state)

    # ----- the inbox (the service's consume loop) ---------------------------------------------------
    async def handle_inbox(
        self, partition: int, records: Sequence[ConsumerRecord[bytes, bytes]], fetched_at: float | None = None
    ) -> None:
        await self.inbox.handle_inbox(partition, records, fetched_at)

    def note_heard(self, partition: int, caught_up_at: float | None) -> None:
        """After a fetch: how far the inbox partition was read (hearing.py)."""
        state = self.partitions.get(partition)
        if state is not None:
            self.hearing.note(state, caught_up_at)

    # ----- the timers (the SRE controls apply theirs at once; the due wake drives `timers`) ----------
    async def tick(self) -> None:
        await self.timers.tick()

"""The decider's timers: the controllers' periodic work (guarantee periods, held binds, an expired
quota, reconciliation, a pass), SRE controls brought in force, nodes whose heartbeat stopped
marked down (hearing.py says which), and each pool's PoolStatus for the quota service; committed
like a batch (transaction.py). `wake` is the same path for only the pools whose work fell due
(due_wake.py's `DueWake` calls it at those times).

`Timers` owns when it last published the statuses (`last_status`); the partitions it works on are
the registry's, under the decider's lock.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime

import asyncpg

from gfs.schemas.envelope import wrap
from gfs.schemas.topics import POOL_STATUS_TOPIC
from gfs.services.platform.clock import Clock
from gfs.services.platform.outbox import enqueue
from gfs.services.preemption.decider.due_wake import due_after
from gfs.services.preemption.decider.hearing import Hearing
from gfs.services.preemption.decider.names import LOGGER, PRODUCER
from gfs.services.preemption.decider.partition import OwnedPartitions
from gfs.services.preemption.decider.transaction import Effected, Rows, Transaction
from gfs.services.preemption.journal import desired_controls, store
from gfs.services.preemption.journal.entries import NodeDownEntry, TickEntry
from gfs.services.preemption.journal.inputs import apply
from gfs.services.preemption.service_settings import PreemptionSettings

log = logging.getLogger(LOGGER)


class Timers:
    __slots__ = (
        "clock", "hearing", "last_status", "lock", "on_committed", "partitions", "pool", "settings",
        "transaction",
    )  # fmt: skip

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: PreemptionSettings,
        clock: Clock,
        lock: asyncio.Lock,
        partitions: OwnedPartitions,
        hearing: Hearing,
        transaction: Transaction,
        on_committed: Callable[[], None],
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.clock = clock
        self.lock = lock  # the decider's
        self.partitions = partitions
        self.hearing = hearing
        self.transaction = transaction
        self.on_committed = on_committed  # after the statuses are enqueued: the relay's wake
        self.last_status = 0.0

    async def tick(self) -> None:
        async with self.lock:
            now = self.clock.now()
            wanted = await desired_controls.load(self.pool)  # the SRE controls in force
            for state in list(self.partitions.values()):
                rows: Rows = []
                effects: Effected = []
                for pool_name, control in desired_controls.entries(state.controllers, wanted, now):
                    effects.append((pool_name, apply(state.controllers[pool_name], control), None))
                    rows.append((pool_name, control, None))
                for pool_name, node in self.hearing.lost_nodes(state, now):
                    down = NodeDownEntry(node=node, at=now)
                    effects.append((pool_name, apply(state.controllers[pool_name], down), None))
                    rows.append((pool_name, down, None))
                    silent = now - state.last_seen[node]
                    log.warning("preemption: node %s silent for %.0fs: marked down", node, silent)
                current = self.hearing.current(state, now)
                for pool_name, controller in state.controllers.items():
                    entry = TickEntry(reconcile=current, at=now)
                    out = apply(controller, entry)
                    if out:
                        effects.append((pool_name, out, None))
                        rows.append((pool_name, entry, None))
                if rows:
                    await self.transaction.commit(state, rows, effects, next_offset=None)
            if now - self.last_status >= self.settings.preemption_status_s:
                self.last_status = now
                await self._publish_status(now)

    def next_due(self, after: float) -> float:
        """The earliest time later than `after` at which an owned pool's timers have work (math.inf:
        none); `due_after` says why not just the driver's `next_due`."""
        due = math.inf
        for state in self.partitions.values():
            for controller in state.controllers.values():
                due = min(due, due_after(controller, after))
        return due

    async def wake(self, after: float) -> float:
        """The tick's path (a TickEntry per pool, journaled and committed like the tick's) for
        the pools whose driver has work due in (`after`, now]; returns that now. No controls, node
        liveness or status: those stay the periodic tick's."""
        async with self.lock:
            now = self.clock.now()
            for state in list(self.partitions.values()):
                rows: Rows = []
                effects: Effected = []
                current = self.hearing.current(state, now)
                for pool_name, controller in state.controllers.items():
                    if due_after(controller, after) > now:
                        continue
                    entry = TickEntry(reconcile=current, at=now)
                    out = apply(controller, entry)
                    if out:
                        effects.append((pool_name, out, None))
                        rows.append((pool_name, entry, None))
                if rows:
                    await self.transaction.commit(state, rows, effects, next_offset=None)
            return now

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
                            POOL_STATUS_TOPIC,
                            wrap(status, producer=PRODUCER, occurred_at=datetime.fromtimestamp(now, UTC)),
                        )
            except store.FencedError:
                self.partitions.fenced(state)
        self.on_committed()

"""Taking an inbox partition and giving it up.

Taking: claim the partition in Postgres (a new epoch fences every earlier owner), rebuild its pools
from the newest snapshot this code can read and the journal after it, and read the inbox from the
offset stored with the last committed batch (`take` returns it). Giving up: forget the partition's
state, its tasks' trace contexts (their new owner has them from its claim) and what the router left
for it (handoff.py).

`Claims` owns no state of its own: it builds a `PartitionState` and puts it in the registry it is
handed, under the decider's lock, and restores or forgets the trace contexts of what it rebuilt.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from gfs.services.platform.clock import Clock
from gfs.services.preemption.controller.ids import id_salt
from gfs.services.preemption.decider.names import LOGGER
from gfs.services.preemption.decider.partition import OwnedPartitions, PartitionState
from gfs.services.preemption.decider.traces import TaskTraces
from gfs.services.preemption.journal import snapshots, store
from gfs.services.preemption.journal.entries import from_row
from gfs.services.preemption.journal.inputs import apply
from gfs.services.preemption.router.handoff import Handoff
from gfs.services.preemption.service_settings import PreemptionSettings

log = logging.getLogger(LOGGER)


class Claims:
    __slots__ = ("clock", "handoff", "instance", "lock", "partitions", "pool", "settings", "traces")

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: PreemptionSettings,
        clock: Clock,
        instance: str,
        lock: asyncio.Lock,
        partitions: OwnedPartitions,
        traces: TaskTraces,
        handoff: Handoff,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.clock = clock
        self.instance = instance
        self.lock = lock  # the decider's: a claim never runs beside a batch or a tick
        self.partitions = partitions
        self.traces = traces
        self.handoff = handoff

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
                self.traces.restore(snap.image.traces)
            state.unsnapped = len(entries)
            replayed: set[str] = set()
            for pool_name, row, epoch in entries:
                entry = from_row(*row)
                replayed.update(self.traces.remember(entry))
                controller = state.controller(pool_name, self.settings)
                controller.id_salt = id_salt(epoch)  # the ids it derived when it was live
                apply(controller, entry)
            self.traces.forget_ended(replayed, state.controllers.values())  # ended in the replay
            now = self.clock.now()
            for controller in state.controllers.values():
                controller.id_salt = id_salt(claim.epoch)  # new commands: ids never used before
                for node in controller.nodes:
                    state.last_seen[node] = now  # a fresh owner gives every node a full timeout
            self.partitions.hold(state)
            log.info("preemption %s: took partition %d (epoch %d, %s, %d journal entries, offset %d)",
                     self.instance, partition, claim.epoch,
                     "no snapshot" if snap is None else f"snapshot at row {snap.seq}",
                     len(entries), claim.next_offset)  # fmt: skip
            return claim.next_offset

    async def drop(self, partition: int) -> None:
        """Give `partition` up (the group moved it to another instance)."""
        async with self.lock:
            state = self.partitions.release(partition)
            if state is not None:
                # Its tasks' contexts go with it (their new owner has them from its claim).
                self.traces.forget_ended([t for c in state.controllers.values() for t in c.tasks], ())
                log.info("preemption %s: released partition %d", self.instance, partition)
            self.handoff.drop(partition)

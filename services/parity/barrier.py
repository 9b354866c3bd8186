"""When has the live pipeline settled after a tick? Every reader caught up with every writer.

The parity driver publishes one phase of one instant, then waits here until nothing is in flight:
- each consumer group of the run (router, quota, forecast) committed up to the end of its topics;
- the deciders read every inbox partition to its end (their offsets live in Postgres, not in
  Kafka; the preemption API's /readyz shows them);
- the transactional outbox has nothing unpublished;
- every bind's workers started and every eviction was acknowledged (the observer);
and the end offsets did not move while all that was checked, twice in a row (a reaction to the
last record, e.g. a quota following a status, would have moved them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import aiohttp
import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from gfs.schemas.topics import topic
from gfs.services.parity.observer import WATCHED, Observer


class NotSettledError(TimeoutError):
    """The pipeline did not settle in time; the message says what was still in flight."""


@dataclass(slots=True)
class Barrier:
    bootstrap_servers: list[str]
    dsn: str
    groups: Mapping[str, Sequence[str]]  # consumer group -> the topics it reads
    inbox: str
    preemption_api: str  # http://host:port of the preemption service's SRE API
    observer: Observer
    internal: Mapping[str, int]  # partition counts of the services' own topics (not in the registry)
    poll_s: float = 0.02
    _admin: AIOKafkaAdminClient | None = None
    _consumer: AIOKafkaConsumer | None = None
    _db: asyncpg.Connection | None = None

    async def start(self) -> None:
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        await self._admin.start()
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers)
        await self._consumer.start()
        self._db = await asyncpg.connect(self.dsn)

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        if self._admin is not None:
            await self._admin.close()
        if self._db is not None:
            await self._db.close()

    def _parts(self, topics: Sequence[str]) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t in topics for p in range(self._partitions(t))]

    def _partitions(self, name: str) -> int:
        return self.internal[name] if name in self.internal else topic(name).partitions

    async def _ends(self) -> dict[TopicPartition, int]:
        assert self._consumer is not None
        topics = {t for ts in self.groups.values() for t in ts} | {self.inbox, *WATCHED}
        parts = self._parts(sorted(topics))
        return dict(await self._consumer.end_offsets(parts)) if parts else {}

    async def _inbox_offsets(self) -> dict[int, int]:
        """How far the deciders read their inbox partitions (their /readyz); a partition nobody
        owns yet reads as 0."""
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http,
                http.get(f"{self.preemption_api}/readyz") as response,
            ):
                body = await response.json()
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return {}
        return {int(p): int(o) for p, o in (body.get("inbox_offsets") or {}).items()}

    async def lagging(self) -> list[str]:
        """What is still in flight now (empty: settled at this instant)."""
        assert self._admin is not None and self._db is not None
        ends = await self._ends()
        behind: list[str] = []
        for group, topics in self.groups.items():
            committed = await self._admin.list_consumer_group_offsets(group) or {}
            for tp in self._parts(topics):
                done = committed.get(tp)
                position = done.offset if done is not None and done.offset >= 0 else 0
                if position < ends.get(tp, 0):
                    behind.append(f"{group} on {tp.topic}[{tp.partition}] ({ends[tp] - position} behind)")
        read = await self._inbox_offsets()
        for tp in self._parts([self.inbox]):
            if read.get(tp.partition, 0) < ends.get(tp, 0):
                behind.append(f"decider on inbox[{tp.partition}]")
        unpublished = await self._db.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NULL")
        if unpublished:
            behind.append(f"outbox ({unpublished} unpublished)")
        if not await self.observer.caught_up(ends):
            behind.append("observer")
        if not self.observer.commands_settled():
            behind.append("commands without their acks")
        return behind

    async def settle(self, timeout_s: float) -> None:
        """Return once everything is caught up and stays so over two checks; NotSettledError on time."""
        deadline = time.monotonic() + timeout_s
        quiet = 0
        last: dict[TopicPartition, int] | None = None
        behind: list[str] = []
        while time.monotonic() < deadline:
            ends = await self._ends()
            behind = await self.lagging()
            if not behind and ends == last:
                quiet += 1
                if quiet >= 2:
                    return
            else:
                quiet = 0
            last = ends
            await asyncio.sleep(self.poll_s)
        raise NotSettledError(
            f"the pipeline did not settle in {timeout_s:g} s: {'; '.join(behind) or 'offsets moving'}"
        )

"""Consumer lag of a group: end offsets minus committed offsets, per topic (for `/metrics`).

A partition the group never committed counts from its beginning offset: everything in it is still
to be read. Polled by the services every few seconds; a failed poll keeps the last values.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LagProbe:
    bootstrap_servers: list[str] | str
    group: str
    topics: Sequence[str]
    lag: dict[str, int] = field(default_factory=dict)  # topic -> events behind
    security: KafkaSecurity = PLAINTEXT

    async def measure(self, admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer) -> dict[str, int]:
        parts = [
            TopicPartition(t, p) for t in self.topics for p in sorted(consumer.partitions_for_topic(t) or ())
        ]
        ends = await consumer.end_offsets(parts)
        starts = await consumer.beginning_offsets(parts)
        committed = await admin.list_consumer_group_offsets(self.group) or {}
        lag: dict[str, int] = dict.fromkeys(self.topics, 0)
        for tp in parts:
            done = committed.get(tp)
            position = done.offset if done is not None and done.offset >= 0 else starts[tp]
            lag[tp.topic] += max(0, ends[tp] - position)
        self.lag = lag
        return lag

    async def run(
        self, stop: asyncio.Event, every_s: float = 10.0, on_error: Callable[[Exception], None] | None = None
    ) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers, **self.security.client_kwargs())
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers, **self.security.client_kwargs())
        await admin.start()
        await consumer.start()
        try:
            while not stop.is_set():
                try:
                    await consumer.topics()  # refresh metadata (partitions)
                    await self.measure(admin, consumer)
                except Exception as exc:  # the broker is away: keep the last values
                    log.warning("lag probe for %s failed: %r", self.group, exc)
                    if on_error is not None:
                        on_error(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=every_s)
        finally:
            await consumer.stop()
            await admin.close()

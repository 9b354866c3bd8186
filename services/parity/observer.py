"""What the parity driver watches on the wire: commands, their acks, clock acks, task ends.

One consumer without a group, assigned to the topics and started at their ends before the run, reads
everything the run's nodes and tasks produce. The driver uses it to know when the pipeline has
settled after a tick: every bind's workers started, every eviction acknowledged, every agent
answered the tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from gfs.schemas.clock import ClockAck
from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand
from gfs.schemas.tasks import TaskEvicted, TaskFinished, TaskRejected, TaskWithdrawn
from gfs.schemas.topics import (
    BIND_TOPIC,
    CLOCK_ACK_TOPIC,
    EVICT_ACK_TOPIC,
    EVICT_TOPIC,
    TASK_LIFECYCLE_TOPIC,
    WORKER_ACK_TOPIC,
    decode,
    topic,
)
from gfs.schemas.workers import WorkerStarted

log = logging.getLogger(__name__)

WATCHED = (
    BIND_TOPIC,
    EVICT_TOPIC,
    WORKER_ACK_TOPIC,
    EVICT_ACK_TOPIC,
    CLOCK_ACK_TOPIC,
    TASK_LIFECYCLE_TOPIC,
)


@dataclass(slots=True)
class Observer:
    bootstrap_servers: list[str]
    nodes: frozenset[str]
    tasks: frozenset[str]
    # The topics are read side by side, so an ack may be seen before its command: both sides are
    # kept and compared.
    binds: dict[uuid.UUID, set[int]] = field(default_factory=dict)  # bind -> its workers
    started: dict[uuid.UUID, set[int]] = field(default_factory=dict)  # bind -> workers started
    evicts: set[uuid.UUID] = field(default_factory=set)
    evict_acks: set[uuid.UUID] = field(default_factory=set)
    clock_acks: dict[int, dict[str, ClockAck]] = field(default_factory=dict)  # sequence -> component -> ack
    done: set[str] = field(default_factory=set)  # tasks that ended (finished, withdrawn, rejected, cancelled)
    errors: list[str] = field(default_factory=list)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    _consumer: AIOKafkaConsumer | None = None
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers, enable_auto_commit=False,
                                    isolation_level="read_committed")  # fmt: skip
        await consumer.start()
        parts = [TopicPartition(t, p) for t in WATCHED for p in range(topic(t).partitions)]
        consumer.assign(parts)
        ends = await consumer.end_offsets(parts)
        for tp in parts:
            consumer.seek(tp, ends[tp])
            self.positions[tp] = ends[tp]
        self._consumer = consumer
        self._task = asyncio.create_task(self._read())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def _read(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=50, max_records=1000)
            for tp, records in batch.items():
                for record in records:
                    try:
                        self._see(decode(tp.topic, record.value or b"").payload)
                    except Exception as exc:  # not ours to judge: the services dead-letter it
                        log.debug("parity observer skipped %s@%d: %r", tp.topic, record.offset, exc)
                    self.positions[tp] = record.offset + 1

    def _see(self, payload: Any) -> None:
        if isinstance(payload, BindCommand) and payload.node in self.nodes:
            self.binds[payload.command_id] = {p.worker_index for p in payload.placements}
        elif isinstance(payload, WorkerStarted) and payload.node in self.nodes:
            self.started.setdefault(payload.command_id, set()).add(payload.worker_index)
        elif isinstance(payload, EvictCommand) and payload.node in self.nodes:
            self.evicts.add(payload.command_id)
        elif isinstance(payload, EvictAck) and payload.node in self.nodes:
            self.evict_acks.add(payload.command_id)
        elif isinstance(payload, ClockAck):
            self.clock_acks.setdefault(payload.sequence, {})[payload.component] = payload
        elif (
            isinstance(payload, TaskFinished | TaskWithdrawn | TaskRejected) and payload.task_id in self.tasks
        ) or (isinstance(payload, TaskEvicted) and payload.task_id in self.tasks and not payload.requeued):
            self.done.add(payload.task_id)

    def commands_settled(self) -> bool:
        """Every bind's workers started and every eviction acknowledged."""
        if self.evicts - self.evict_acks:
            return False
        return all(workers <= self.started.get(cid, set()) for cid, workers in self.binds.items())

    async def caught_up(self, ends: dict[TopicPartition, int]) -> bool:
        return all(self.positions.get(tp, 0) >= end for tp, end in ends.items() if tp.topic in WATCHED)

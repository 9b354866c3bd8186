"""The node agents' part in `gfs livebench accept` (services/livebench/accept/bench.py), played without
real agents: WorkerStarted for every worker of a BindCommand and WorkerExited `run_s` later, an
EvictAck at once for every EvictCommand, each signed with its node's key as agents do."""

from __future__ import annotations

import asyncio
import heapq
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.topics import (
    EVICT_ACK_TOPIC,
    WORKER_ACK_TOPIC,
    encode,
    key_of,
)
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.signing import SIGNED_TYPES, node_key, sign


@dataclass(slots=True)
class FakeAgents:
    """The node agents' part: worker reports, exits after the task's run time, eviction acks."""

    producer: EnvelopeProducer
    run_s: float
    secret: str  # the service's master secret: each message is signed with its node's key, as agents do
    exits: list[tuple[float, int, WorkerExited]] = field(default_factory=list)  # due (monotonic)
    running: dict[tuple[str, str], set[int]] = field(default_factory=dict)  # (task, node) -> workers
    pending: list[asyncio.Future[Any]] = field(default_factory=list)
    sequence: int = 0

    async def send(self, topic_name: str, payload: Any) -> None:
        if isinstance(payload, SIGNED_TYPES):  # the service refuses unsigned acks and telemetry
            payload = sign(payload, key=node_key(self.secret.encode("utf-8"), payload.node))
        envelope: Envelope[Any] = wrap(payload, producer="bench-agent")
        self.pending.append(
            await self.producer.send_raw_later(topic_name, value=encode(envelope), key=key_of(envelope))
        )

    async def bound(self, bind: BindCommand) -> None:
        now = datetime.now(UTC)
        workers = self.running.setdefault((bind.task_id, bind.node), set())
        for p in bind.placements:
            workers.add(p.worker_index)
            started = WorkerStarted(command_id=bind.command_id, node=bind.node, task_id=bind.task_id,
                                    worker_index=p.worker_index, pid=1000 + p.worker_index, started_at=now,
                                    attempt=bind.attempt)  # fmt: skip
            await self.send(WORKER_ACK_TOPIC, started)
            exited = WorkerExited(command_id=bind.command_id, node=bind.node, task_id=bind.task_id,
                                  worker_index=p.worker_index, exit_code=0, exited_at=now,
                                  attempt=bind.attempt)  # fmt: skip
            self.sequence += 1
            heapq.heappush(self.exits, (time.monotonic() + self.run_s, self.sequence, exited))

    async def evicted(self, command: EvictCommand) -> None:
        ran = False
        for tid in command.task_ids:
            ran |= bool(self.running.pop((tid, command.node), None))
        # The evicted workers stop: their normal exits never come.
        self.exits = [e for e in self.exits if (e[2].task_id, e[2].node) not in
                      {(t, command.node) for t in command.task_ids}]  # fmt: skip
        heapq.heapify(self.exits)
        outcome = EvictOutcome.CHECKPOINTED if ran else EvictOutcome.NOT_RUNNING
        ack = EvictAck(command_id=command.command_id, node=command.node, task_ids=command.task_ids,
                       outcome=outcome, acked_at=datetime.now(UTC), attempt=command.attempt)  # fmt: skip
        await self.send(EVICT_ACK_TOPIC, ack)

    async def due(self) -> None:
        """Send the exits whose run time is over."""
        now = time.monotonic()
        while self.exits and self.exits[0][0] <= now:
            _, _, exited = heapq.heappop(self.exits)
            workers = self.running.get((exited.task_id, exited.node))
            if workers is None or exited.worker_index not in workers:
                continue
            workers.discard(exited.worker_index)
            if not workers:
                del self.running[(exited.task_id, exited.node)]
            now_exited = exited.model_copy(update={"exited_at": datetime.now(UTC)})
            await self.send(WORKER_ACK_TOPIC, now_exited)

    async def flush(self) -> None:
        pending, self.pending = self.pending, []
        if pending:
            await asyncio.gather(*pending)

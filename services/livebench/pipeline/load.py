"""What `gfs bench pipeline` offers the preemption service, and its model of the cluster.

`BenchState` is the bench's view of the cluster built from the commands it reads back (which task
runs where, how much is allocated); `Load` offers task events at a rate: a submission while the
allocation is at or under the target, else the finish of a random running task (a WorkerExited for
each of its workers, signed as its node's agent signs it), so the allocation holds near the target.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg

from gfs.schemas.commands import BindCommand
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.topics import WORKER_ACK_TOPIC
from gfs.schemas.workers import WorkerExited
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.signing import SignedCommand, node_key, sign


@dataclass(slots=True)
class Running:
    cls: TaskClass
    gpus: float
    binds: list[BindCommand] = field(default_factory=list)
    workers: int = 1


@dataclass(slots=True)
class BenchState:
    capacity: int = 0
    allocated: float = 0.0
    submitted_at: dict[str, float] = field(default_factory=dict)  # task -> perf_counter at submit
    submitted_wall: dict[str, float] = field(default_factory=dict)  # task -> wall clock at submit
    latency: dict[str, float] = field(default_factory=dict)  # task -> first bind latency
    accepted: dict[str, float] = field(default_factory=dict)  # task -> submit -> TaskAccepted latency
    # task -> its first bind's latency by stage (platform/stage_stamps.py), seconds
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    running: dict[str, Running] = field(default_factory=dict)
    pending: dict[str, Running] = field(default_factory=dict)  # submitted, not bound yet
    backlog: set[str] = field(default_factory=set)  # `--backlog` tasks (meant to wait all run)
    binds: int = 0
    evicts: int = 0
    exits: int = 0


def signed(message: SignedCommand, secret: str) -> SignedCommand:
    """An agent's message signed with its node's key, as an agent signs it (the service refuses
    unsigned acks and telemetry)."""
    return sign(message, key=node_key(secret.encode("utf-8"), message.node))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@dataclass(slots=True)
class Load:
    state: BenchState
    producer: EnvelopeProducer
    secret: str
    rng: random.Random
    fill: float
    new_task: Callable[[], TaskSubmitted]
    submit: Callable[[TaskSubmitted], Awaitable[None]]

    async def offer(self, rate: float, seconds: float) -> tuple[Counter[str], float]:
        """Offer `rate` task events per second for `seconds`, paced on the monotonic clock (a late
        event is sent at once, so a slow producer shows as a lower offered rate, not as drift)."""
        state = self.state
        offered: Counter[str] = Counter()
        start = time.perf_counter()
        k = 0
        while time.perf_counter() - start < seconds:
            due = start + k / rate
            if due > time.perf_counter():
                await asyncio.sleep(due - time.perf_counter())
            k += 1
            if state.allocated > self.fill * state.capacity and state.running:
                await self._finish(self.rng.choice(list(state.running)))
                offered["finish"] += 1
            else:
                await self.submit(self.new_task())
                offered["submit"] += 1
        return offered, time.perf_counter() - start

    async def _finish(self, tid: str) -> None:
        r = self.state.running.pop(tid)
        self.state.allocated -= r.gpus
        for b in r.binds:
            for p in b.placements:
                exited = WorkerExited(
                    command_id=b.command_id,
                    node=b.node,
                    task_id=tid,
                    worker_index=p.worker_index,
                    exit_code=0,
                    exited_at=datetime.now(UTC),
                )
                await self.producer.send(
                    WORKER_ACK_TOPIC, wrap(signed(exited, self.secret), producer="bench")
                )


async def on_arrival_latencies(
    connection: asyncpg.Connection, state: BenchState, since: datetime
) -> tuple[list[float], list[float]]:
    """Submit -> BindCommand latencies (ms) of `on_arrival_tasks`."""
    plain, preempting = await on_arrival_tasks(connection, state, since)
    return [state.latency[t] * 1000 for t in plain], [state.latency[t] * 1000 for t in preempting]


async def on_arrival_tasks(
    connection: asyncpg.Connection, state: BenchState, since: datetime
) -> tuple[list[str], list[str]]:
    """The tasks submitted since `since` and placed in the pass of their own submission (accepted
    and started at the same instant), split into those placed without preemption and those placed
    by preemption (whose latency includes the EvictAck round trip). Tasks that queued first are
    left out: their wait is the queue's, not the pipeline's."""
    rows = await connection.fetch(
        "SELECT task_id, kind, at, detail FROM preemption_decision "
        "WHERE kind IN ('accepted', 'started') AND at >= $1",
        since,
    )
    accepted: dict[str, datetime] = {}
    first_start: dict[str, tuple[datetime, bool]] = {}
    for r in rows:
        if r["kind"] == "accepted":
            accepted[r["task_id"]] = r["at"]
        elif r["task_id"] not in first_start:
            first_start[r["task_id"]] = (r["at"], bool(json.loads(r["detail"]).get("preempted")))
    plain: list[str] = []
    preempting: list[str] = []
    for tid, (at, preempted) in first_start.items():
        if accepted.get(tid) == at and tid in state.latency:
            (preempting if preempted else plain).append(tid)
    return plain, preempting

"""`gfs bench pipeline --ramp` and `--backlog`: the pipeline's ceiling, with a production-sized queue.

The ramp offers rising rates (`start`, `start * factor`, ...) for `step_s` each, and after each step
reads back two things: the p99 of submit -> BindCommand for tasks placed on arrival without
preemption, and the consumer lag of the service's two groups (the router's on the input topics,
the decider's on its inbox). A step passes when its p99 is under the limit and the lag it left is
under one second's worth of the offered rate (the service kept up); the ramp stops at the first
step that fails, and the sustainable rate is the last passing step's *achieved* offered rate (the
bench shares the cores; when it cannot offer the target, the shortfall is printed, not hidden).

The backlog: spot tasks asking for a 4-h guarantee, for which the bench publishes no quota, so
they are accepted and then wait for the whole run in their own buckets (spec 5.3: a quota miss
blocks only its bucket). Their number is what "10k and 50k queued" means in issue #23.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from gfs.schemas.tasks import TaskSubmitted
from gfs.schemas.topics import topic
from gfs.services.livebench.pipeline.load import BenchState, Load, on_arrival_latencies, percentile
from gfs.services.platform.settings import PlatformSettings


@dataclass(frozen=True, slots=True)
class RampOptions:
    start: float = 50.0
    factor: float = 1.5
    step_s: float = 60.0
    p99_limit_ms: float = 100.0
    max_steps: int = 12


@dataclass(frozen=True, slots=True)
class Step:
    target: float
    achieved: float
    placed: int
    p50_ms: float
    p99_ms: float
    lag: int
    queued: int
    cpu_ms_per_event: float = 0.0

    def passes(self, limit_ms: float) -> bool:
        return self.placed > 0 and self.p99_ms < limit_ms and self.lag <= max(50.0, self.achieved)


class Lag:
    """What the service has not processed yet, both stages together: the router group's lag on the
    input topics (end minus committed offsets in Kafka) plus the decider's on its inbox (end
    offsets minus the `next_offset` it stores in Postgres with its journal: the decider commits no
    offsets to Kafka, so a Kafka-side probe of its group would read nothing)."""

    def __init__(self, settings: PlatformSettings, run: str, dsn: str) -> None:
        from gfs.services.preemption.router.routing import ROUTED_TOPICS

        servers = settings.bootstrap_servers
        self._group = f"bench-router-{run}"
        self._inbox = f"bench-inbox-{run}"
        self._routed = [TopicPartition(t, p) for t in ROUTED_TOPICS for p in range(topic(t).partitions)]
        self._dsn = dsn
        self._admin = AIOKafkaAdminClient(bootstrap_servers=servers)
        self._consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
        self._db: asyncpg.Connection | None = None

    async def __aenter__(self) -> Lag:
        await self._admin.start()
        await self._consumer.start()
        self._db = await asyncpg.connect(self._dsn)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._db is not None:
            await self._db.close()
        await self._consumer.stop()
        await self._admin.close()

    async def total(self) -> int:
        assert self._db is not None
        claimed = await self._db.fetch(
            "SELECT partition, next_offset FROM preemption_partition WHERE inbox_topic = $1", self._inbox
        )
        inbox = {TopicPartition(self._inbox, r["partition"]): int(r["next_offset"]) for r in claimed}
        parts = self._routed + list(inbox)
        self._consumer.assign(parts)  # the consumer learns these topics' metadata (the inbox is new)
        ends = await self._consumer.end_offsets(parts)
        starts = await self._consumer.beginning_offsets(self._routed)
        committed = await self._admin.list_consumer_group_offsets(self._group) or {}
        behind = 0
        for tp in self._routed:
            done = committed.get(tp)
            position = done.offset if done is not None and done.offset >= 0 else starts[tp]
            behind += max(0, int(ends[tp]) - int(position))
        return behind + sum(max(0, int(ends[tp]) - offset) for tp, offset in inbox.items())

    async def drained(self, below: int = 50, timeout_s: float = 1800.0) -> int:
        deadline = time.monotonic() + timeout_s
        while (behind := await self.total()) >= below and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
        return behind


async def submit_backlog(
    state: BenchState,
    n: int,
    new_task: Callable[[], TaskSubmitted],
    submit: Callable[[TaskSubmitted], Awaitable[None]],
    settings: PlatformSettings,
    run: str,
    dsn: str,
) -> None:
    began = time.perf_counter()
    for _ in range(n):
        task = new_task()
        state.backlog.add(task.task_id)
        await submit(task)
    sent = time.perf_counter() - began
    async with Lag(settings, run, dsn) as lag:
        behind = await lag.drained()
    print(f"backlog: {n} spot tasks (4-h guarantee, no quota) sent in {sent:.1f} s, taken in by "
          f"{time.perf_counter() - began:.1f} s ({behind} records still behind)")  # fmt: skip


async def run_ramp(
    load: Load, options: RampOptions, dsn: str, settings: PlatformSettings, run: str,
    service_cpu_s: Callable[[], float] = lambda: 0.0,
) -> dict[str, float]:  # fmt: skip
    steps: list[Step] = []
    print(f"\nramp: from {options.start:g} events/s, x{options.factor:g} per {options.step_s:g}-s step, "
          f"until p99 >= {options.p99_limit_ms:g} ms or the lag grows")  # fmt: skip
    heads = ("target/s", "offered/s", "placed", "p50 ms", "p99 ms", "lag", "queued", "cpu ms/ev")
    print(" ".join(f"{h:>9}" for h in heads))
    connection = await asyncpg.connect(dsn)
    try:
        async with Lag(settings, run, dsn) as lag:
            rate = options.start
            for _ in range(options.max_steps):
                load.state.latency.clear()
                since = datetime.now(UTC)
                cpu0 = service_cpu_s()
                offered, measured_s = await load.offer(rate, options.step_s)
                behind = await lag.total()  # at the step's end, before the tail drains
                await lag.drained(below=max(50, int(rate)), timeout_s=30.0)
                # The instances' CPU over the step and its drain, per event offered in the step.
                cpu_ms = 1000 * (service_cpu_s() - cpu0) / max(1, sum(offered.values()))
                plain, _ = await on_arrival_latencies(connection, load.state, since)
                step = Step(
                    target=rate,
                    achieved=sum(offered.values()) / measured_s,
                    placed=len(plain),
                    p50_ms=percentile(plain, 0.5),
                    p99_ms=percentile(plain, 0.99),
                    lag=behind,
                    queued=len(load.state.pending),
                    cpu_ms_per_event=cpu_ms,
                )
                steps.append(step)
                print(f"{step.target:9.0f} {step.achieved:9.1f} {step.placed:9d} {step.p50_ms:9.1f} "
                      f"{step.p99_ms:9.1f} {step.lag:9d} {step.queued:9d} {step.cpu_ms_per_event:9.2f}"
                      + ("" if step.passes(options.p99_limit_ms) else "  <- over"))  # fmt: skip
                if not step.passes(options.p99_limit_ms):
                    break
                await lag.drained(timeout_s=120.0)  # the next step starts from an empty pipe
                rate *= options.factor
    finally:
        await connection.close()
    passing = [s for s in steps if s.passes(options.p99_limit_ms)]
    best = max((s.achieved for s in passing), default=0.0)
    if passing:
        last = steps[-1]
        print(f"sustainable: {best:.1f} task events/s with p99 < {options.p99_limit_ms:g} ms "
              f"(last step: {last.achieved:.1f}/s, p99 {last.p99_ms:.1f} ms, lag {last.lag})")  # fmt: skip
    else:
        print(f"sustainable: none of the steps held p99 < {options.p99_limit_ms:g} ms")
    waiting = sum(1 for t in load.state.backlog if t in load.state.pending)
    return {"sustainable": best, "steps": float(len(steps)), "backlog_waiting": float(waiting),
            "placed": float(sum(s.placed for s in steps)),
            "p99_ms": steps[-1].p99_ms if steps else float("nan")}  # fmt: skip

"""What `gfs bench pipeline` (services/livebench/preemption_bench.py) reads back: the bind and evict
commands, as they come, into its model of the cluster (acking each eviction at once, the agents'
part), and at the end the service's decisions from Postgres: latencies on arrival, with and
without preemption, and decisions per second."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import TaskAccepted
from gfs.schemas.topics import (
    BIND_TOPIC,
    EVICT_ACK_TOPIC,
    EVICT_TOPIC,
    TASK_LIFECYCLE_TOPIC,
    decode,
    topic,
)
from gfs.services.livebench.pipeline.load import (
    BenchState,
    on_arrival_tasks,
    percentile,
    signed,
)
from gfs.services.livebench.pipeline.stage_report import stage_budget
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.settings import PlatformSettings
from gfs.services.platform.stage_stamps import breakdown


async def _read(
    settings: PlatformSettings, state: BenchState, producer: EnvelopeProducer, run: str, secret: str
) -> None:
    """Read bind and evict commands back; ack evictions at once (the agents' part)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [
            TopicPartition(t, p)
            for t in (BIND_TOPIC, EVICT_TOPIC, TASK_LIFECYCLE_TOPIC)
            for p in range(topic(t).partitions)
        ]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        prefix = f"{run}-"
        while True:
            batch = await consumer.getmany(timeout_ms=50)
            received = time.perf_counter()
            received_wall = time.time()
            for records in batch.values():
                for r in records:
                    if not (r.key or b"").decode().startswith(prefix):
                        continue
                    payload = decode(r.topic, r.value or b"").payload
                    if isinstance(payload, TaskAccepted):
                        tid = payload.task_id
                        if tid not in state.accepted and tid in state.submitted_at:
                            state.accepted[tid] = received - state.submitted_at[tid]
                    elif isinstance(payload, BindCommand):
                        state.binds += 1
                        tid = payload.task_id
                        if tid not in state.latency and tid in state.submitted_at:
                            state.latency[tid] = received - state.submitted_at[tid]
                            staged = breakdown(state.submitted_wall.get(tid), r.headers or (), received_wall)
                            if staged is not None:
                                state.stages[tid] = staged
                        r_ = state.pending.pop(tid, None) or state.running.get(tid)
                        if r_ is None:
                            continue
                        if tid not in state.running:
                            state.running[tid] = r_
                            state.allocated += r_.gpus
                        r_.binds.append(payload)
                    elif isinstance(payload, EvictCommand):
                        state.evicts += 1
                        for tid in payload.task_ids:
                            gone = state.running.pop(tid, None)
                            if gone is not None:
                                state.allocated -= gone.gpus
                                gone.binds.clear()
                                state.pending[tid] = gone
                        ack = EvictAck(
                            command_id=payload.command_id,
                            node=payload.node,
                            task_ids=payload.task_ids,
                            outcome=EvictOutcome.CHECKPOINTED,
                            acked_at=datetime.now(UTC),
                        )
                        reply = wrap(signed(ack, secret), producer="bench")
                        await producer.send(EVICT_ACK_TOPIC, reply)
    finally:
        await consumer.stop()


async def _report(
    dsn: str,
    state: BenchState,
    since: datetime,
    measured_s: float,
    offered: Counter[str],
    rate: float,
    start: float = float("-inf"),
) -> dict[str, float]:
    """The report of the measured phase, which began at `since` (wall) and `start` (perf_counter)."""
    connection = await asyncpg.connect(dsn)
    try:
        plain_ids, preempting_ids = await on_arrival_tasks(connection, state, since)
        plain = [state.latency[t] * 1000 for t in plain_ids]
        preempting = [state.latency[t] * 1000 for t in preempting_ids]
        decided = await connection.fetchval(
            "SELECT count(*) FROM preemption_decision WHERE at >= $1 "
            "AND kind IN ('started', 'evicted', 'rejected', 'finished', 'accepted')",
            since,
        )
        placements = await connection.fetchval(
            "SELECT count(*) FROM preemption_decision WHERE at >= $1 AND kind IN ('started', 'evicted')",
            since,
        )
        window = await connection.fetchrow(
            "SELECT min(at) AS a, max(at) AS b FROM preemption_decision WHERE at >= $1", since
        )
    finally:
        await connection.close()
    span = (window["b"] - window["a"]).total_seconds() if window["a"] is not None else measured_s
    print(f"\nmeasured phase: {measured_s:.1f} s, offered {sum(offered.values()) / measured_s:.1f} events/s "
          f"(target {rate:g}): {offered['submit']} submissions, {offered['finish']} finishes")  # fmt: skip
    print(f"commands read back: {state.binds} binds, {state.evicts} evictions; allocation at the end "
          f"{state.allocated / state.capacity:.1%}, {len(state.pending)} tasks waiting")  # fmt: skip
    print(f"decision records (accepted/started/evicted/rejected/finished): {decided} in {span:.1f} s "
          f"= {decided / max(span, 1e-9):.1f}/s; placements and evictions alone: {placements} "
          f"= {placements / max(span, 1e-9):.1f}/s")  # fmt: skip
    for name, values in (
        ("placed on arrival, no preemption", plain),
        ("placed on arrival by preemption (incl. ack round trip)", preempting),
    ):
        if not values:
            print(f"{name}: none")
            continue
        print(
            f"{name}: n={len(values)} submit->BindCommand ms p50 {percentile(values, 0.5):.1f} "
            f"p99 {percentile(values, 0.99):.1f} p99.9 {percentile(values, 0.999):.1f} "
            f"max {max(values):.1f}"
        )
    accepted = [v * 1000 for t, v in state.accepted.items() if state.submitted_at.get(t, -1.0) >= start]
    if accepted:
        print(f"submit -> TaskAccepted (every submission of the measured phase): n={len(accepted)} ms "
              f"p50 {percentile(accepted, 0.5):.1f} p99 {percentile(accepted, 0.99):.1f} "
              f"max {max(accepted):.1f}")  # fmt: skip
    edges = [5, 10, 20, 50, 100, 200, 500, 1000, 5000]
    counts = Counter(next((e for e in edges if v <= e), float("inf")) for v in plain)
    print(
        "histogram (no preemption), ms: "
        + ", ".join(f"<={e}: {counts.get(e, 0)}" for e in edges)
        + f", more: {counts.get(float('inf'), 0)}"
    )
    budget = stage_budget(state, plain_ids)
    return {"decisions": float(decided), "placements": float(placements), "binds": float(state.binds),
            "submissions": float(offered["submit"]), "on_arrival": float(len(plain) + len(preempting)),
            "p99_ms": percentile(plain, 0.99) if plain else float("nan"),
            "staged": float(budget.staged), "staged_within_5pct": float(budget.within),
            "staged_in_order": float(budget.ordered),
            "accept_p99_ms": percentile(accepted, 0.99) if accepted else float("nan")}  # fmt: skip

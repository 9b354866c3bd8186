"""What `gfs livebench accept` (services/livebench/accept/bench.py) reads back after the load: every
record of the run on the task and command topics, by task, with the broker's timestamps; the
decisions' stage timings from the service's Postgres; and the latency summaries it prints."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from gfs.schemas.commands import BindCommand, EvictCommand
from gfs.schemas.tasks import TaskAccepted, TaskRejected, TaskSubmitted
from gfs.schemas.topics import (
    TASK_LIFECYCLE_TOPIC,
    decode,
)
from gfs.services.livebench.accept.agents import FakeAgents
from gfs.services.platform.settings import PlatformSettings

INBOX_PARTITIONS = 6  # the run's inbox topic (the service creates it with this many)


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def summarise(values: Sequence[float]) -> dict[str, float]:
    """Count, p50/p90/p99 (nearest rank, as the other live benchmarks) and max of `values` (ms)."""
    return {
        "n": float(len(values)),
        "p50": _percentile(values, 0.50),
        "p90": _percentile(values, 0.90),
        "p99": _percentile(values, 0.99),
        "max": max(values) if values else float("nan"),
    }


def _line(label: str, s: dict[str, float]) -> str:
    if not s["n"]:
        return f"{label}: none"
    return (
        f"{label}: n={int(s['n'])} p50 {s['p50']:.1f} ms, p90 {s['p90']:.1f} ms, "
        f"p99 {s['p99']:.1f} ms, max {s['max']:.1f} ms"
    )


@dataclass(slots=True)
class Seen:
    """What was read back, by task: the records' timestamps (ms since the epoch)."""

    submitted: dict[str, int] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # task -> reason
    first_bind: dict[str, int] = field(default_factory=dict)
    timestamp_types: set[int] = field(default_factory=set)  # 0 CreateTime, 1 LogAppendTime
    binds: int = 0
    evicts: int = 0


async def _read(consumer: AIOKafkaConsumer, prefix: str, seen: Seen, agents: FakeAgents) -> None:
    """Read the run's records back (keys start with the run id: task ids and node names)."""
    wanted = prefix.encode()
    while True:
        batch = await consumer.getmany(timeout_ms=50)
        for records in batch.values():
            for r in records:
                if not (r.key or b"").startswith(wanted):
                    continue
                seen.timestamp_types.add(r.timestamp_type)
                payload = decode(r.topic, r.value or b"").payload
                if isinstance(payload, TaskSubmitted):
                    seen.submitted.setdefault(payload.task_id, r.timestamp)
                elif isinstance(payload, TaskAccepted):
                    seen.accepted.setdefault(payload.task_id, r.timestamp)
                elif isinstance(payload, TaskRejected):
                    seen.rejected.setdefault(payload.task_id, payload.reason.value)
                elif isinstance(payload, BindCommand):
                    seen.binds += 1
                    seen.first_bind.setdefault(payload.task_id, r.timestamp)
                    await agents.bound(payload)
                elif isinstance(payload, EvictCommand):
                    seen.evicts += 1
                    await agents.evicted(payload)
        await agents.flush()


async def _placed_on_arrival(dsn: str) -> list[str]:
    """Tasks whose first run started in the pass of their own submission, without preemption."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT task_id, kind, at, detail FROM preemption_decision "
            "WHERE kind IN ('accepted', 'started') ORDER BY id"
        )
    finally:
        await connection.close()
    accepted: dict[str, Any] = {}
    out: list[str] = []
    for r in rows:
        if r["kind"] == "accepted":
            accepted[r["task_id"]] = r["at"]
            continue
        detail = json.loads(r["detail"]) if isinstance(r["detail"], str) else r["detail"]
        on_arrival = accepted.get(r["task_id"]) == r["at"]  # placed in its submission's own pass
        if on_arrival and detail.get("attempt") == 1 and not detail.get("preempted"):
            out.append(r["task_id"])
    return out


STAGES = (
    ("router: submit -> inbox record", "router"),
    ("decider: inbox record -> batch decided", "decider"),
    ("decide + transaction start: -> outbox row", "commit"),
    ("commit + relay: outbox row -> TaskAccepted record", "relay"),
)


async def _stages(settings: PlatformSettings, dsn: str, inbox: str, seen: Seen) -> dict[str, list[float]]:
    """Where the accept time goes, per accepted task (ms): the submission's inbox record (the
    router forwarded it), the batch's decision time (the `at` of the accepted decision: when the
    decider started on the batch), the outbox row's `created_at` (its transaction's start, after
    the decision and the pass), and the TaskAccepted record. One host clock throughout."""
    inbox_ts: dict[str, int] = {}
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(inbox, p) for p in range(INBOX_PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for r in records:
                    body = json.loads(r.value or b"{}")
                    if body.get("event_type") == "TaskSubmitted":
                        inbox_ts.setdefault(body["payload"]["task_id"], r.timestamp)
    finally:
        await consumer.stop()
    connection = await asyncpg.connect(dsn)
    try:
        decided = {
            r["task_id"]: r["at"].timestamp() * 1000
            for r in await connection.fetch(
                "SELECT task_id, at FROM preemption_decision WHERE kind = 'accepted'"
            )
        }
        rows = await connection.fetch(
            "SELECT key, payload, created_at FROM outbox WHERE topic = $1 ORDER BY id", TASK_LIFECYCLE_TOPIC
        )
    finally:
        await connection.close()
    outbox: dict[str, float] = {}
    for r in rows:
        if json.loads(bytes(r["payload"])).get("event_type") == "TaskAccepted":
            outbox.setdefault(bytes(r["key"]).decode(), r["created_at"].timestamp() * 1000)
    out: dict[str, list[float]] = {name: [] for _, name in STAGES}
    for tid, accepted in seen.accepted.items():
        marks = [seen.submitted.get(tid), inbox_ts.get(tid), decided.get(tid), outbox.get(tid), accepted]
        if any(m is None for m in marks):
            continue
        for (_, name), a, b in zip(STAGES, marks, marks[1:], strict=False):
            out[name].append(float(b) - float(a))  # type: ignore[arg-type]
    return {label: out[name] for label, name in STAGES}

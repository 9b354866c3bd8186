"""The promises a fault run checks once the system has settled (services/faults/harness.py's module
doc): read back from the topics (from the offsets before the run), Postgres and the agents'
journals: no accepted task lost, no eviction twice, no task on two nodes, the quota ledger equal to
the guarantee outcomes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from gfs.schemas.commands import BindCommand, EvictCommand
from gfs.schemas.tasks import GuaranteePeriodClosed, TaskAccepted, TaskFinished
from gfs.schemas.topics import (
    BIND_TOPIC,
    EVICT_TOPIC,
    TASK_LIFECYCLE_TOPIC,
    decode,
    topic,
)
from gfs.services.faults.plan import Report
from gfs.services.faults.processes import _alive, _until_ready
from gfs.services.platform.settings import PlatformSettings
from gfs.services.toolkit.probes import get_json

CHECKED_TOPICS = (TASK_LIFECYCLE_TOPIC, BIND_TOPIC, EVICT_TOPIC)


async def _end_offsets(settings: PlatformSettings) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in CHECKED_TOPICS for p in range(topic(t).partitions)]
        return dict(await consumer.end_offsets(tps))
    finally:
        await consumer.stop()


async def _read_all(settings: PlatformSettings, start: dict[TopicPartition, int]) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    out: list[Any] = []
    try:
        tps = list(start)
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, start[tp])
        remaining = {tp for tp in tps if ends[tp] > start[tp]}
        while remaining:
            batch = await consumer.getmany(timeout_ms=1000)
            for tp, records in batch.items():
                for r in records:
                    with contextlib.suppress(ValueError):
                        out.append(decode(r.topic, r.value or b""))
                if records and records[-1].offset + 1 >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    return out


async def _check(
    settings: PlatformSettings, report: Report, dsn: str, pool: str, run: str, ports: dict[str, int],
    nodes: list[str], workdir: Path, start: dict[TopicPartition, int],
) -> None:  # fmt: skip
    await _until_ready(ports, nodes, pool, timeout=120)
    envelopes = await _read_all(settings, start)
    prefix = f"flt-{run}-"
    mine = [
        e
        for e in envelopes
        if str(
            getattr(e.payload, "task_id", "") or (getattr(e.payload, "task_ids", None) or ("",))[0]
        ).startswith(prefix)
    ]
    accepted = {e.payload.task_id for e in mine if isinstance(e.payload, TaskAccepted)}
    finished = {e.payload.task_id for e in mine if isinstance(e.payload, TaskFinished)}
    report.accepted, report.finished = len(accepted), len(finished & accepted)
    # Lost: accepted, not finished, and not held (running or queued) by the preemption service.
    for tid in sorted(accepted - finished):
        _, body = await get_json(f"http://127.0.0.1:{ports['preemption']}/explain/{tid}")
        state = ((body or {}).get("live") or {}).get("state")
        if state not in ("running", "queued"):
            report.lost.append(tid)
    # Bind attempts per task (the binds of one attempt share issued_at).
    binds: dict[str, list[BindCommand]] = defaultdict(list)
    for e in mine:
        if isinstance(e.payload, BindCommand):
            binds[e.payload.task_id].append(e.payload)
    evict_ids = {e.payload.command_id for e in mine if isinstance(e.payload, EvictCommand)}
    report.binds = len({b.command_id for bs in binds.values() for b in bs})
    report.evictions = len(evict_ids)
    by_id = {e.payload.command_id: e.payload for e in mine if isinstance(e.payload, EvictCommand)}
    report.evictions_by_reason = Counter(c.reason.name for c in by_id.values())
    # From the agents' journals: a worker targeted by two eviction commands was evicted twice; the
    # live workers of a task must all come from its latest attempt.
    latest: dict[str, set[str]] = {}
    for tid, bs in binds.items():
        last = max(b.issued_at for b in bs)
        latest[tid] = {str(b.command_id) for b in bs if b.issued_at >= last - timedelta(seconds=1)}
    targeted: Counter[str] = Counter()
    live_by_task: dict[str, set[str]] = defaultdict(set)
    for node in nodes:
        path = workdir / node / "journal.json"
        if not path.exists():
            continue
        journal = json.loads(path.read_text())
        for command in journal.get("commands", {}).values():
            if command.get("kind") == "evict" and command.get("command_id") in {str(i) for i in evict_ids}:
                for key in command.get("targets", []):
                    targeted[key] += 1
        for worker in journal.get("workers", {}).values():
            if worker.get("exited_at") is None and worker.get("pid") and _alive(int(worker["pid"])):
                live_by_task[worker["task_id"]].add(str(worker["command_id"]))
    report.evicted_twice = sorted(k for k, n in targeted.items() if n > 1)
    report.on_two_nodes = sorted(
        t for t, cmds in live_by_task.items() if t.startswith(prefix) and not cmds <= latest.get(t, set())
    )
    # The quota ledger against the outcomes published for the pool.
    published = {(e.payload.task_id, e.payload.period_start) for e in mine
                 if isinstance(e.payload, GuaranteePeriodClosed) and e.payload.pool == pool}  # fmt: skip
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT task_id, period_start FROM guarantee_period_outcome WHERE pool = $1", pool
        )
    finally:
        await connection.close()
    recorded = {(r["task_id"], r["period_start"]) for r in rows}
    report.ledger_missing = len(published - recorded)
    report.ledger_extra = len(recorded - published)
    # Every service back.
    for name, url in (("preemption", f"http://127.0.0.1:{ports['preemption']}/readyz"),
                      ("quota", f"http://127.0.0.1:{ports['quota']}/readyz"),
                      ("forecast", f"http://127.0.0.1:{ports['forecast']}/metrics")):  # fmt: skip
        deadline = time.monotonic() + 60
        while (await get_json(url))[0] != 200 and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
        if (await get_json(url))[0] != 200:
            report.not_ready.append(name)
    _, body = await get_json(f"http://127.0.0.1:{ports['preemption']}/pools")
    down = (body or {}).get("pools", {}).get(pool, {}).get("down", ["?"])
    report.not_ready += [f"node {n} down" for n in down]

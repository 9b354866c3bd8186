"""`gfs bench failover` (issue 25): how long a new owner takes to claim a partition after a
journal of N rows, with and without snapshots (services/preemption/journal/snapshots.py), on the real
Postgres (a scratch schema of its own, dropped afterwards).

The journal is written with COPY, as a pool's history would read: four nodes, no spot quota, then
per task a spot submission, a pass, its cancel and a pass (4 rows per task; 50 tasks stay queued),
so a replay validates and plays every submission and the pool's memory of task ids grows as in a
live pool. The claim timed is `Decider.take`: claim the epoch, load the newest snapshot, read and
replay the rows after it.

For each N:
- `full`: the claim with no snapshot: the whole journal replayed (as before issue 25);
- `snapshot, worst`: a snapshot `interval` rows before the end, so the claim restores it and
  replays a whole interval (the most a claim replays when the live owner snapshots every
  `interval` rows);
- `snapshot, best`: a snapshot at the end (nothing to replay).
The full replay of the largest N is skipped with `--no-full-at-max` (it grows linearly).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Annotated, Any

import asyncpg
import typer
from pydantic import SecretStr

from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.services.platform.clock import SystemClock
from gfs.services.platform.migrations import discover, migrate
from gfs.services.platform.postgres import open_pool
from gfs.services.platform.settings import PlatformSettings
from gfs.services.preemption.decider import Decider, NodeKeys
from gfs.services.preemption.service_settings import PreemptionSettings

POOL = "A100"
T0 = 1_800_000_000.0
STANDING = 50  # tasks never cancelled: the pool keeps a queue
SECRET = "bench-failover-secret-0123456789"
REPEATS = 5  # claims timed per case but the full replay of a large journal (median printed)


def _rows(topic: str, first: int, count: int) -> Iterator[tuple[Any, ...]]:
    """Journal rows `first`..`first+count` of the synthetic history (COPY records)."""
    template = TaskSubmitted(
        task_id="TASKID", tenant="org-a", gpu_model=POOL, gpus_per_worker=1, workers=1,
        task_class=TaskClass.SPOT, command=("gfs", "fake-task"),
    ).model_dump(mode="json")  # fmt: skip
    submit = json.dumps({"task": template, "duplicate": False})
    for n in range(first, first + count):
        if n < 4:
            yield (topic, 0, 1, POOL, "node_seen", T0, json.dumps({"node": f"n{n}", "gpus": 8}))
            continue
        task, step = divmod(n - 4, 4)
        at = T0 + task
        tid = f"t{task:09d}"
        if step == 0:
            yield (topic, 0, 1, POOL, "submit", at, submit.replace("TASKID", tid))
        elif step == 2 and task >= STANDING:
            data = {"task_id": tid, "tenant": "org-a", "reason": "bench"}
            yield (topic, 0, 1, POOL, "cancel", at, json.dumps(data))
        else:
            yield (topic, 0, 1, POOL, "schedule", at, "{}")


async def _append(connection: asyncpg.Connection, topic: str, first: int, count: int) -> None:
    chunk = 200_000
    for start in range(first, first + count, chunk):
        records = list(_rows(topic, start, min(chunk, first + count - start)))
        await connection.copy_records_to_table(
            "preemption_journal", records=records,
            columns=["inbox_topic", "partition", "epoch", "pool", "kind", "at_s", "data"],
        )  # fmt: skip


async def _claim(
    pool: asyncpg.Pool, settings: PreemptionSettings, name: str, repeats: int = 1
) -> tuple[float, Decider]:
    """The median time of `repeats` claims by new instances (each a new epoch), and the last one.
    The median, since the host is shared: one claim slowed by a neighbour is not the claim's cost."""
    times: list[float] = []
    for n in range(repeats):
        decider = Decider(pool, settings, SystemClock(), f"{name}-{n}", NodeKeys(SECRET.encode()))
        started = time.perf_counter()
        await decider.take(0)
        times.append(time.perf_counter() - started)
    return statistics.median(times), decider


async def _measure(dsn: str, rows: int, interval: int, full: bool) -> dict[str, Any]:
    topic = f"bench-failover-{uuid.uuid4().hex[:8]}"
    settings = PreemptionSettings(
        database_url=dsn, preemption_inbox_topic=topic, gfs_command_secret=SecretStr(SECRET),
        preemption_snapshot_rows=0, preemption_snapshot_s=0.0,
    )  # fmt: skip
    out: dict[str, Any] = {"rows": rows}
    async with open_pool(dsn, max_size=2, command_timeout_s=3600.0) as pool:
        async with pool.acquire() as connection:
            await connection.execute(
                "INSERT INTO preemption_partition (inbox_topic, partition, epoch) VALUES ($1, 0, 1)", topic
            )
            head = max(0, rows - interval) if rows > interval else rows
            started = time.perf_counter()
            await _append(connection, topic, 0, head)
            out["write_s"] = time.perf_counter() - started
        if rows <= interval:  # no snapshot can exist yet: the claim replays everything
            out["full_s"], _ = await _claim(pool, settings, "full", REPEATS)
            out["worst_s"] = out["best_s"] = out["full_s"]
            out["replayed"] = rows
            return out
        # The live owner's snapshot `interval` rows before the end (taken by a claim's replay here).
        _, owner = await _claim(pool, settings, "owner")
        async with owner.lock:
            started = time.perf_counter()
            await owner.snapshot(owner.partitions[0])
            out["snapshot_write_s"] = time.perf_counter() - started
        async with pool.acquire() as connection:
            await _append(connection, topic, head, rows - head)
            out["snapshot_bytes"] = await connection.fetchval(
                "SELECT octet_length(state) FROM preemption_snapshot WHERE inbox_topic = $1", topic
            )
        out["worst_s"], worst = await _claim(pool, settings, "worst", REPEATS)
        out["replayed"] = worst.partitions[0].replayed
        async with worst.lock:
            await worst.snapshot(worst.partitions[0])
        out["best_s"], _ = await _claim(pool, settings, "best", REPEATS)
        if full:
            async with pool.acquire() as connection:
                await connection.execute("DELETE FROM preemption_snapshot WHERE inbox_topic = $1", topic)
            out["full_s"], _ = await _claim(pool, settings, "full")
    return out


async def _bench(sizes: list[int], interval: int, full_at_max: bool) -> list[dict[str, Any]]:
    base = PlatformSettings().database_url
    schema = f"bench_failover_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(base)
    try:
        await admin.execute(f'CREATE SCHEMA "{schema}"')
        sep = "&" if "?" in base else "?"
        dsn = f"{base}{sep}search_path={schema}"
        connection = await asyncpg.connect(dsn)
        try:
            await migrate(connection, discover())
        finally:
            await connection.close()
        results = []
        for rows in sizes:
            result = await _measure(dsn, rows, interval, full_at_max or rows != max(sizes))
            typer.echo(_line(result))
            results.append(result)
        return results
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()


def _line(r: dict[str, Any]) -> str:
    full = f"{r['full_s']:8.3f}s" if "full_s" in r else "  (skipped)"
    extra = ""
    if "snapshot_bytes" in r:
        extra = f"  snapshot {r['snapshot_bytes'] / 1e6:.1f} MB written in {r['snapshot_write_s']:.3f}s"
    return (
        f"{r['rows']:>11,} journal rows: claim full replay {full} | with snapshots: worst "
        f"{r['worst_s']:.3f}s ({r['replayed']:,} rows replayed), best {r['best_s']:.3f}s{extra}"
    )


def failover(
    rows: Annotated[str, typer.Option(help="journal sizes, comma-separated")] = "1000,1000000",
    interval: Annotated[int, typer.Option(help="rows between snapshots (preemption_snapshot_rows)")] = 1000,
    full_at_max: Annotated[bool, typer.Option(help="also time the full replay of the largest size")] = True,
) -> None:
    """Claim time of a partition after N journal rows, with and without snapshots (issue 25)."""
    sizes = [int(s.replace("_", "")) for s in rows.split(",") if s.strip()]
    results = asyncio.run(_bench(sizes, interval, full_at_max))
    first, last = results[0], results[-1]
    ratio = last["worst_s"] / first["worst_s"] if first["worst_s"] else float("inf")
    typer.echo(
        f"claim after {last['rows']:,} rows is {ratio:.2f}x the claim after {first['rows']:,} "
        f"(worst case, snapshot every {interval:,} rows; target: within 2x)"
    )

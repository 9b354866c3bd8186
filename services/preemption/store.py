"""Postgres access of the preemption service (tables in services/platform/sql/0004_preemption.sql).

Every write of a partition's pools goes through `save_batch`, which checks the partition's epoch
(the fence) in the same transaction as the journal rows, the decisions, the outbox rows and the
new inbox offset: all of it commits, or none of it does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from services.preemption.controller import Decision
from services.preemption.inputs import Entry


class FencedError(RuntimeError):
    """Another instance claimed the partition: this one must drop it and write nothing more."""


@dataclass(frozen=True, slots=True)
class Claim:
    partition: int
    epoch: int
    next_offset: int


async def claim(connection: asyncpg.Connection, partition: int, owner: str) -> Claim:
    """Take the partition over: a new epoch fences every earlier owner's writes."""
    row = await connection.fetchrow(
        """
        INSERT INTO preemption_partition (partition, epoch, owner, claimed_at) VALUES ($1, 1, $2, now())
        ON CONFLICT (partition) DO UPDATE
            SET epoch = preemption_partition.epoch + 1, owner = $2, claimed_at = now()
        RETURNING epoch, next_offset
        """,
        partition,
        owner,
    )
    return Claim(partition, int(row["epoch"]), int(row["next_offset"]))


async def journal(connection: asyncpg.Connection, partition: int) -> list[tuple[str, Entry]]:
    """The partition's journal in order: (pool, entry)."""
    rows = await connection.fetch(
        "SELECT pool, kind, data, at_s FROM preemption_journal WHERE partition = $1 ORDER BY seq", partition
    )
    return [(str(r["pool"]), (str(r["kind"]), json.loads(r["data"]), float(r["at_s"]))) for r in rows]


async def seen_events(connection: asyncpg.Connection, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    rows = await connection.fetch(
        "SELECT event_id FROM preemption_journal WHERE event_id = ANY($1::uuid[])", event_ids
    )
    return {r["event_id"] for r in rows}


async def check_epoch(connection: asyncpg.Connection, claim_: Claim, next_offset: int | None) -> None:
    """Lock the partition row and check the epoch; move the offset when given. Raises FencedError."""
    if next_offset is None:
        found = await connection.fetchval(
            "SELECT 1 FROM preemption_partition WHERE partition = $1 AND epoch = $2 FOR UPDATE",
            claim_.partition, claim_.epoch,
        )  # fmt: skip
    else:
        found = await connection.fetchval(
            "UPDATE preemption_partition SET next_offset = $3 WHERE partition = $1 AND epoch = $2 RETURNING 1",
            claim_.partition, claim_.epoch, next_offset,
        )  # fmt: skip
    if found is None:
        raise FencedError(f"partition {claim_.partition}: epoch {claim_.epoch} is no longer current")


async def append_journal(
    connection: asyncpg.Connection, partition: int, rows: Iterable[tuple[str, Entry, uuid.UUID | None]]
) -> None:
    await connection.executemany(
        "INSERT INTO preemption_journal (partition, pool, kind, at_s, data, event_id) VALUES ($1, $2, $3, $4, $5::jsonb, $6)",
        [
            (partition, pool, kind, at, json.dumps(data), event_id)
            for pool, (kind, data, at), event_id in rows
        ],
    )


async def record_decisions(
    connection: asyncpg.Connection, decisions: Sequence[tuple[str, Decision]], *, dry_run: bool
) -> None:
    """(pool, decision) pairs, in one round trip."""
    if not decisions:
        return
    await connection.executemany(
        "INSERT INTO preemption_decision (pool, task_id, kind, at, dry_run, detail) VALUES ($1, $2, $3, $4, $5, $6::jsonb)",
        [
            (
                pool,
                d.task_id,
                d.kind,
                datetime.fromtimestamp(d.at_s, UTC),
                dry_run,
                json.dumps(d.detail, default=str),
            )
            for pool, d in decisions
        ],
    )


async def decisions_of(
    connection: asyncpg.Connection, task_id: str, limit: int = 200
) -> list[dict[str, Any]]:
    rows = await connection.fetch(
        """SELECT pool, task_id, kind, at, dry_run, detail FROM preemption_decision
           WHERE task_id = $1 ORDER BY id DESC LIMIT $2""",
        task_id, limit,
    )  # fmt: skip
    return [_decision(r) for r in reversed(rows)]


async def recent_decisions(connection: asyncpg.Connection, limit: int = 50) -> list[dict[str, Any]]:
    rows = await connection.fetch(
        "SELECT pool, task_id, kind, at, dry_run, detail FROM preemption_decision ORDER BY id DESC LIMIT $1",
        limit,
    )
    return [_decision(r) for r in rows]


def _decision(r: asyncpg.Record) -> dict[str, Any]:
    return {"pool": r["pool"], "task_id": r["task_id"], "kind": r["kind"], "at": r["at"].isoformat(),
            "dry_run": r["dry_run"], "detail": json.loads(r["detail"])}  # fmt: skip


# ----- the router's routes ------------------------------------------------------------------------
async def route_task(
    connection: asyncpg.Connection, task_id: str, pool: str, event_id: uuid.UUID
) -> tuple[str, bool]:
    """Record the task's pool at its first submission; (pool to route to, duplicate?)."""
    row = await connection.fetchrow(
        """
        WITH ins AS (
            INSERT INTO preemption_task_route (task_id, pool, event_id) VALUES ($1, $2, $3)
            ON CONFLICT (task_id) DO NOTHING RETURNING pool, event_id
        )
        SELECT pool, event_id FROM ins
        UNION ALL SELECT pool, event_id FROM preemption_task_route WHERE task_id = $1
        LIMIT 1
        """,
        task_id, pool, event_id,
    )  # fmt: skip
    return str(row["pool"]), row["event_id"] != event_id


async def task_pool(connection: asyncpg.Connection, task_id: str) -> str | None:
    found = await connection.fetchval("SELECT pool FROM preemption_task_route WHERE task_id = $1", task_id)
    return None if found is None else str(found)


async def route_node(connection: asyncpg.Connection, node: str, pool: str) -> None:
    await connection.execute(
        """INSERT INTO preemption_node_route (node, pool) VALUES ($1, $2)
           ON CONFLICT (node) DO UPDATE SET pool = $2 WHERE preemption_node_route.pool <> $2""",
        node, pool,
    )  # fmt: skip


async def node_pool(connection: asyncpg.Connection, node: str) -> str | None:
    found = await connection.fetchval("SELECT pool FROM preemption_node_route WHERE node = $1", node)
    return None if found is None else str(found)


async def known_pools(connection: asyncpg.Connection) -> list[str]:
    """Every pool some node reported (telemetry), sorted."""
    rows = await connection.fetch("SELECT DISTINCT pool FROM preemption_node_route ORDER BY pool")
    return [str(r["pool"]) for r in rows]

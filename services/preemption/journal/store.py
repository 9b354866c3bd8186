"""Postgres access of the preemption service (tables in services/platform/sql/0004_preemption.sql,
keyed by deployment since 0006_preemption_deployment.sql).

A partition is a partition of one inbox topic: ownership, the journal and event-id de-duplication
are keyed by (inbox topic, partition), so deployments with different inbox topics (a second
scheduler, a shadow) never fence each other nor replay each other's pools on one database.

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

from gfs.services.platform.outbox import OutboxValues
from gfs.services.preemption.controller.types import Decision
from gfs.services.preemption.journal.entries import Row

INBOX_TOPIC = "gfs-preemption-inbox"  # the default inbox (router.INBOX_TOPIC; rows before 0006)


class FencedError(RuntimeError):
    """Another instance claimed the partition: this one must drop it and write nothing more."""


class ModeConflictError(RuntimeError):
    """A --dry-run shadow and a live deployment would share state (a schema, an inbox topic's
    partitions): refused, so the shadow never fences the live owner nor the live one adopts a
    shadow's unpublished decisions."""


@dataclass(frozen=True, slots=True)
class Claim:
    partition: int
    epoch: int
    next_offset: int
    topic: str = INBOX_TOPIC  # the inbox topic the partition belongs to


async def claim(
    connection: asyncpg.Connection,
    partition: int,
    owner: str,
    *,
    topic: str = INBOX_TOPIC,
    dry_run: bool = False,
) -> Claim:
    """Take the partition of `topic` over: a new epoch fences every earlier owner's writes. A row
    claimed in the other mode (dry run against live) is refused: ModeConflictError."""
    row = await connection.fetchrow(
        """
        INSERT INTO preemption_partition (inbox_topic, partition, epoch, owner, claimed_at, dry_run)
        VALUES ($1, $2, 1, $3, now(), $4)
        ON CONFLICT (inbox_topic, partition) DO UPDATE
            SET epoch = preemption_partition.epoch + 1, owner = $3, claimed_at = now()
            WHERE preemption_partition.dry_run = $4
        RETURNING epoch, next_offset
        """,
        topic, partition, owner, dry_run,
    )  # fmt: skip
    if row is None:
        mode = "a live deployment" if dry_run else "a --dry-run shadow"
        raise ModeConflictError(
            f"partition {partition} of inbox {topic!r} belongs to {mode}: a shadow and a live "
            "deployment must not share an inbox topic's state (give the shadow its own schema)"
        )
    return Claim(partition, int(row["epoch"]), int(row["next_offset"]), topic)


async def refuse_live_schema(connection: asyncpg.Connection) -> None:
    """For a --dry-run service: refuse a schema where a live deployment keeps its state (its
    partitions, journal and routes); a shadow runs against a schema of its own."""
    row = await connection.fetchrow(
        """SELECT inbox_topic, owner FROM preemption_partition
           WHERE NOT dry_run ORDER BY claimed_at DESC LIMIT 1"""
    )
    if row is not None:
        schema = await connection.fetchval("SELECT current_schema()")
        raise ModeConflictError(
            f"--dry-run refuses schema {schema!r}: a live deployment keeps its state there (inbox "
            f"{row['inbox_topic']!r}, last owner {row['owner']!r}). Point the shadow at a schema of "
            "its own (DATABASE_URL with ?search_path=<schema>, then `gfs db migrate`)"
        )


async def journal(
    connection: asyncpg.Connection, partition: int, *, topic: str = INBOX_TOPIC, after: int = 0
) -> list[tuple[str, Row, int | None]]:
    """The partition's journal in order: (pool, entry, the epoch it was written under); only the
    rows after journal row `after` (a snapshot's, snapshots.py) when given."""
    rows = await connection.fetch(
        """SELECT pool, kind, data, at_s, epoch FROM preemption_journal
           WHERE inbox_topic = $1 AND partition = $2 AND seq > $3 ORDER BY seq""",
        topic, partition, after,
    )  # fmt: skip
    return [
        (
            str(r["pool"]),
            (str(r["kind"]), json.loads(r["data"]), float(r["at_s"])),
            None if r["epoch"] is None else int(r["epoch"]),
        )
        for r in rows
    ]


async def seen_events(
    connection: asyncpg.Connection, event_ids: Sequence[uuid.UUID], *, topic: str = INBOX_TOPIC
) -> set[uuid.UUID]:
    rows = await connection.fetch(
        "SELECT event_id FROM preemption_journal WHERE inbox_topic = $1 AND event_id = ANY($2::uuid[])",
        topic, event_ids,
    )  # fmt: skip
    return {r["event_id"] for r in rows}


async def check_epoch(connection: asyncpg.Connection, claim_: Claim, next_offset: int | None) -> None:
    """Lock the partition row and check the epoch; move the offset when given. Raises FencedError."""
    if next_offset is None:
        found = await connection.fetchval(
            """SELECT 1 FROM preemption_partition
               WHERE inbox_topic = $1 AND partition = $2 AND epoch = $3 FOR UPDATE""",
            claim_.topic, claim_.partition, claim_.epoch,
        )  # fmt: skip
    else:
        found = await connection.fetchval(
            """UPDATE preemption_partition SET next_offset = $4
               WHERE inbox_topic = $1 AND partition = $2 AND epoch = $3 RETURNING 1""",
            claim_.topic, claim_.partition, claim_.epoch, next_offset,
        )  # fmt: skip
    if found is None:
        raise FencedError(f"partition {claim_.partition}: epoch {claim_.epoch} is no longer current")


_COMMIT_BATCH = """
WITH claim AS (
    UPDATE preemption_partition SET next_offset = COALESCE($4::bigint, next_offset)
    WHERE inbox_topic = $1 AND partition = $2 AND epoch = $3 RETURNING 1
), journal AS (
    INSERT INTO preemption_journal (inbox_topic, partition, epoch, pool, kind, at_s, data, event_id)
    SELECT $1, $2, $3, j.pool, j.kind, j.at_s, j.data::jsonb, j.event_id
    FROM unnest($5::text[], $6::text[], $7::float8[], $8::text[], $9::uuid[])
         WITH ORDINALITY AS j(pool, kind, at_s, data, event_id, n)
    WHERE EXISTS (SELECT 1 FROM claim) ORDER BY j.n
    RETURNING 1
), decision AS (
    INSERT INTO preemption_decision (pool, task_id, kind, at, dry_run, detail)
    SELECT d.pool, d.task_id, d.kind, d.at, $10, d.detail::jsonb
    FROM unnest($11::text[], $12::text[], $13::text[], $14::timestamptz[], $15::text[])
         WITH ORDINALITY AS d(pool, task_id, kind, at, detail, n)
    WHERE EXISTS (SELECT 1 FROM claim) ORDER BY d.n
    RETURNING 1
), outgoing AS (
    INSERT INTO outbox (topic, key, payload, headers)
    SELECT o.topic, o.key, o.payload, o.headers::jsonb
    FROM unnest($16::text[], $17::bytea[], $18::bytea[], $19::text[])
         WITH ORDINALITY AS o(topic, key, payload, headers, n)
    WHERE EXISTS (SELECT 1 FROM claim) ORDER BY o.n
    RETURNING 1
)
SELECT (SELECT count(*) FROM claim) AS claimed, (SELECT count(*) FROM journal) AS journaled,
       (SELECT count(*) FROM decision) AS decided, (SELECT count(*) FROM outgoing) AS queued
"""


async def commit_batch(
    connection: asyncpg.Connection,
    claim_: Claim,
    next_offset: int | None,
    rows: Sequence[tuple[str, Row, uuid.UUID | None]],
    decisions: Sequence[tuple[str, Decision]],
    outgoing: Sequence[OutboxValues],
    *,
    dry_run: bool,
) -> None:
    """`check_epoch`, `append_journal`, `record_decisions` and the outbox rows in ONE statement,
    so one round trip (issue 22: the transaction's seven round trips were most of the decider's
    time on a busy machine, each one a chance to wait behind other work). A statement is atomic
    like the transaction it replaces; every insert runs only if the epoch is still ours, in the
    given order (ids and journal sequence follow it). Raises FencedError when it is not."""
    at = [datetime.fromtimestamp(d.at_s, UTC) for _, d in decisions]
    found = await connection.fetchrow(
        _COMMIT_BATCH,
        claim_.topic, claim_.partition, claim_.epoch, next_offset,
        [pool for pool, _, _ in rows], [kind for _, (kind, _, _), _ in rows],
        [float(a) for _, (_, _, a), _ in rows], [json.dumps(data) for _, (_, data, _), _ in rows],
        [event_id for _, _, event_id in rows],
        dry_run,
        [pool for pool, _ in decisions], [d.task_id for _, d in decisions], [d.kind for _, d in decisions],
        at, [json.dumps(d.detail, default=str) for _, d in decisions],
        *([o[i] for o in outgoing] for i in range(4)),
    )  # fmt: skip
    if found is None or not found["claimed"]:
        raise FencedError(f"partition {claim_.partition}: epoch {claim_.epoch} is no longer current")


async def append_journal(
    connection: asyncpg.Connection, claim_: Claim, rows: Iterable[tuple[str, Row, uuid.UUID | None]]
) -> None:
    """Append rows under `claim_` (its topic, partition and epoch: the id salt of a replay)."""
    await connection.executemany(
        """INSERT INTO preemption_journal (inbox_topic, partition, epoch, pool, kind, at_s, data, event_id)
           VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8)""",
        [
            (claim_.topic, claim_.partition, claim_.epoch, pool, kind, at, json.dumps(data), event_id)
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
        "INSERT INTO preemption_decision (pool, task_id, kind, at, dry_run, detail) "
        "VALUES ($1, $2, $3, $4, $5, $6::jsonb)",
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


async def route_tasks(
    connection: asyncpg.Connection, rows: Sequence[tuple[str, str, uuid.UUID]]
) -> dict[str, tuple[str, uuid.UUID]]:
    """`route_task` for a batch's submissions (task id, pool, event id; distinct task ids) in one
    round trip: task -> the (pool, event id) of its first submission, stored now or before. A
    task missing from the answer was routed by a concurrent router after this statement's
    snapshot: ask `route_task` again."""
    if not rows:
        return {}
    # The SELECT half sees the table as it was before the INSERT half (one snapshot), so a task
    # appears once: from `ins` when routed now, from the table when routed before.
    found = await connection.fetch(
        """
        WITH input AS (
            SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[]) AS t(task_id, pool, event_id)
        ), ins AS (
            INSERT INTO preemption_task_route (task_id, pool, event_id)
            SELECT task_id, pool, event_id FROM input
            ON CONFLICT (task_id) DO NOTHING RETURNING task_id, pool, event_id
        )
        SELECT task_id, pool, event_id FROM ins
        UNION ALL
        SELECT r.task_id, r.pool, r.event_id FROM preemption_task_route r JOIN input USING (task_id)
        """,
        [t for t, _, _ in rows], [p for _, p, _ in rows], [e for _, _, e in rows],
    )  # fmt: skip
    return {str(r["task_id"]): (str(r["pool"]), r["event_id"]) for r in found}


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

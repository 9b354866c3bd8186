"""The quota service's Postgres state: books to resume from, outcomes, and quota versions written
together with their SpotQuota in the outbox (one transaction).

Write fence: `quota_pool.version` is bumped on every saved quota with `WHERE version = expected`;
a writer whose expected version is stale (another instance wrote since it loaded) gets
`FenceLostError` and must stop writing (the service steps down and reloads), so two instances never
both publish a quota for one pool, even across a reset of the advisory-lock connection.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from gfs.schemas.envelope import Envelope
from gfs.schemas.quota import SpotQuota
from gfs.schemas.topics import QUOTAS_TOPIC
from gfs.services.platform.outbox import enqueue
from gfs.services.quota.book import QuotaComputation

QUOTA_TOPIC = QUOTAS_TOPIC


class FenceLostError(RuntimeError):
    """Another instance wrote this pool's quota since we loaded it: stop writing."""


@dataclass(frozen=True, slots=True)
class StoredPool:
    eta: float
    version: int
    updated_at: datetime  # the computed_at of the last quota saved (its valid_from)


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


async def load_pools(connection: asyncpg.Connection) -> dict[str, StoredPool]:
    rows = await connection.fetch("SELECT pool, eta, version, updated_at FROM quota_pool")
    return {r["pool"]: StoredPool(float(r["eta"]), int(r["version"]), r["updated_at"]) for r in rows}


async def load_outcomes(connection: asyncpg.Connection, since: datetime) -> list[asyncpg.Record]:
    query = """
        SELECT pool, task_id, period_start, period_end, succeeded FROM guarantee_period_outcome
        WHERE period_end > $1 ORDER BY period_end
    """
    return list(await connection.fetch(query, since))


async def load_latest_inputs(connection: asyncpg.Connection) -> list[asyncpg.Record]:
    return list(await connection.fetch("SELECT pool, kind, payload FROM quota_input_latest"))


async def record_outcome(
    connection: asyncpg.Connection,
    *,
    pool: str,
    task_id: str,
    period_start: datetime,
    period_end: datetime,
    succeeded: bool,
    event_id: Any,
) -> bool:
    """Idempotent by (task, period start): True if new."""
    status = await connection.execute(
        """
        INSERT INTO guarantee_period_outcome
            (pool, task_id, period_start, period_end, succeeded, source_event_id)
        VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (task_id, period_start) DO NOTHING
        """,
        pool, task_id, period_start, period_end, succeeded, event_id,
    )  # fmt: skip
    return bool(status.endswith(" 1"))


async def remember_input(
    connection: asyncpg.Connection, *, pool: str, kind: str, as_of: datetime, payload: Mapping[str, Any]
) -> None:
    """Keep the newest status / forecast per pool (an older redelivery does not replace it)."""
    await connection.execute(
        """
        INSERT INTO quota_input_latest (pool, kind, as_of, payload) VALUES ($1, $2, $3, $4::jsonb)
        ON CONFLICT (pool, kind) DO UPDATE SET as_of = EXCLUDED.as_of, payload = EXCLUDED.payload,
            received_at = now()
        WHERE quota_input_latest.as_of <= EXCLUDED.as_of
        """,
        pool, kind, as_of, json.dumps(payload),
    )  # fmt: skip


def _inputs_json(c: QuotaComputation) -> dict[str, Any]:
    i = c.inputs
    return {
        "capacity": i.capacity,
        "idle_gpus": i.idle_gpus,
        "spot_in_use": i.spot_in_use,
        "hp_observed": i.hp_observed,
        "failed_recent": i.failed_recent,
        "succeeded_recent": i.succeeded_recent,
        "head_wait_s": i.head_wait_s,
        "quota_held_wait_s": i.quota_held_wait_s,
        "eta_before": i.eta,
        "hp_quantile": None if i.hp_quantile is None else [float(x) for x in i.hp_quantile],
    }


def _forecast_json(c: QuotaComputation) -> dict[str, Any] | None:
    f = c.forecast
    if f is None:
        return None
    return {"version": f.version, "origin": utc(f.origin_s).isoformat(), "fallback": f.fallback}


async def save_quota(
    connection: asyncpg.Connection,
    computed: QuotaComputation,
    *,
    expected_version: int,
    envelope: Envelope[SpotQuota],
) -> int:
    """Persist one computed quota and enqueue its SpotQuota, in the caller's transaction.
    Returns the new version; raises `FenceLostError` when `expected_version` is stale."""
    at = utc(computed.computed_s)
    version = await connection.fetchval(
        """
        INSERT INTO quota_pool AS q (pool, capacity_gpus, eta, version, updated_at)
        VALUES ($1, $2, $3, 1, $4)
        ON CONFLICT (pool) DO UPDATE SET capacity_gpus = EXCLUDED.capacity_gpus, eta = EXCLUDED.eta,
            version = q.version + 1, updated_at = EXCLUDED.updated_at
        WHERE q.version = $5
        RETURNING version
        """,
        computed.pool, computed.capacity, computed.eta, at, expected_version,
    )  # fmt: skip
    if version is None:
        raise FenceLostError(
            f"pool {computed.pool}: quota version moved past {expected_version} (another instance wrote it)"
        )
    rate = computed.eviction_rate
    for hours, quota in sorted(computed.quota.items()):
        min_free = round(computed.min_free.get(hours, 0))
        await connection.execute(
            """
            INSERT INTO spot_quota (pool, guarantee_hours, quota_gpus, min_free_gpus, eta, forecast_id,
                pool_version, computed_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
            ON CONFLICT (pool, guarantee_hours) DO UPDATE SET quota_gpus = EXCLUDED.quota_gpus,
                min_free_gpus = EXCLUDED.min_free_gpus, eta = EXCLUDED.eta,
                forecast_id = EXCLUDED.forecast_id, pool_version = EXCLUDED.pool_version,
                computed_at = EXCLUDED.computed_at
            """,
            computed.pool, hours, quota, min_free, computed.eta, computed.forecast_version, version, at,
        )  # fmt: skip
        await connection.execute(
            """
            INSERT INTO quota_eta_history (pool, computed_at, guarantee_hours, min_free_gpus, eta,
                eviction_rate, pool_version)
            VALUES ($1, $2, $3, $4, $5, $6, $7)
            """,
            computed.pool, at, hours, min_free, computed.eta, rate, version,
        )  # fmt: skip
    await connection.execute(
        """
        INSERT INTO quota_version (pool, version, computed_at, valid_until, eta, quotas, inputs, forecast,
            event_id)
        VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, $8::jsonb, $9)
        """,
        computed.pool, version, at, utc(computed.valid_until_s), computed.eta,
        json.dumps({str(h): q for h, q in sorted(computed.quota.items())}),
        json.dumps(_inputs_json(computed)), json.dumps(_forecast_json(computed)), envelope.event_id,
    )  # fmt: skip
    await enqueue(connection, QUOTA_TOPIC, envelope)
    return int(version)

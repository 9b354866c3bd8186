"""History tables are pruned (services/platform/retention.py), on the real Postgres: rows older than
the window go, younger ones stay, the newest quota version and eta history of each pool stay
whatever their age, unpublished outbox rows stay whatever their age, and a round deletes at most
`batch * max_batches` rows (the next round goes on). The quota service refuses a history window
shorter than its feedback window (it reads that window's outcomes at start).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
import pytest_asyncio
from quota_harness import _dsn, _migrated

from gfs.services.platform.postgres import open_pool
from gfs.services.platform.retention import OUTBOX_RULE, PREEMPTION_RULES, QUOTA_RULES, Retention, prune
from gfs.services.quota.service import run_quota_service
from gfs.services.quota.settings import QuotaServiceSettings

pytestmark = pytest.mark.integration

DAY = 86_400.0
NOW = datetime(2026, 6, 1, tzinfo=UTC)  # the service clock's "now" in these tests
HOUR = timedelta(hours=1)


@pytest_asyncio.fixture(loop_scope="session")
async def pg(database_url: str, scratch_schema: str) -> AsyncIterator[asyncpg.Pool]:
    dsn = await _migrated(database_url, scratch_schema)
    async with open_pool(dsn) as pool:
        yield pool


async def _quota_rows(c: asyncpg.Connection, pool: str, ages_h: list[float]) -> None:
    await c.execute("INSERT INTO quota_pool (pool, capacity_gpus) VALUES ($1, 8)", pool)
    for version, age in enumerate(ages_h, start=1):
        at = NOW - age * HOUR
        await c.execute(
            """INSERT INTO quota_version (pool, version, computed_at, valid_until, eta, quotas, inputs,
               event_id) VALUES ($1, $2, $3, $4, 1.0, '{}'::jsonb, '{}'::jsonb, $5)""",
            pool, version, at, at + HOUR, uuid.uuid4(),
        )  # fmt: skip
        for hours in (1, 2):
            await c.execute(
                """INSERT INTO quota_eta_history (pool, computed_at, guarantee_hours, min_free_gpus,
                   eta, pool_version) VALUES ($1, $2, $3, 4, 1.0, $4)""",
                pool, at, hours, version,
            )  # fmt: skip


async def _ages_h(c: asyncpg.Connection, table: str, column: str, pool: str) -> list[float]:
    rows = await c.fetch(f"SELECT {column} AS t FROM {table} WHERE pool = $1 ORDER BY 1", pool)
    return sorted(round((NOW - r["t"]).total_seconds() / 3600, 3) for r in rows)


@pytest.mark.asyncio(loop_scope="session")
async def test_old_history_goes_young_and_newest_stay(pg: asyncpg.Pool) -> None:
    keep = Retention(history_keep_s=10 * 3600.0, outbox_keep_s=DAY, every_s=600.0)
    async with pg.acquire() as c:
        # Pool a: versions 50 h, 11 h, 9 h and 1 h old; pool b: only old versions (30 h and 20 h).
        await _quota_rows(c, "a", [50, 11, 9, 1])
        await _quota_rows(c, "b", [30, 20])
        for task, end_h, ok in (("t1", 40, True), ("t2", 10.5, False), ("t3", 9.5, True), ("t4", 0.5, True)):
            end = NOW - end_h * HOUR
            await c.execute(
                """INSERT INTO guarantee_period_outcome (pool, task_id, period_start, period_end,
                   succeeded) VALUES ('a', $1, $2, $3, $4)""",
                task, end - HOUR, end, ok,
            )  # fmt: skip
        for task, age_h in (("d1", 72), ("d2", 10.01), ("d3", 9.99), ("d4", 0)):
            await c.execute(
                """INSERT INTO preemption_decision (pool, task_id, kind, at, detail)
                   VALUES ('a', $1, 'x', $2, $3)""",
                task, NOW - age_h * HOUR, json.dumps({}),
            )  # fmt: skip

    deleted = await prune(pg, (*QUOTA_RULES, *PREEMPTION_RULES), keep, NOW.timestamp)

    async with pg.acquire() as c:
        # a: 50 h and 11 h are past 10 h; 9 h and 1 h stay. b: 30 h goes, 20 h is b's newest: stays.
        assert await _ages_h(c, "quota_version", "computed_at", "a") == [1.0, 9.0]
        assert await _ages_h(c, "quota_version", "computed_at", "b") == [20.0]
        assert await _ages_h(c, "quota_eta_history", "computed_at", "a") == [1.0, 1.0, 9.0, 9.0]
        assert await _ages_h(c, "quota_eta_history", "computed_at", "b") == [20.0, 20.0]
        outcomes = await c.fetch("SELECT task_id FROM guarantee_period_outcome ORDER BY task_id")
        assert [r["task_id"] for r in outcomes] == ["t3", "t4"]
        decisions = await c.fetch("SELECT task_id FROM preemption_decision ORDER BY task_id")
        assert [r["task_id"] for r in decisions] == ["d3", "d4"]
    assert deleted == {
        "quota_version": 3,
        "quota_eta_history": 6,
        "guarantee_period_outcome": 2,
        "preemption_decision": 2,
    }


@pytest.mark.asyncio(loop_scope="session")
async def test_outbox_keeps_what_is_not_published_and_rounds_are_bounded(pg: asyncpg.Pool) -> None:
    keep = Retention(history_keep_s=DAY, outbox_keep_s=3600.0, every_s=600.0, batch=2, max_batches=2)
    async with pg.acquire() as c:
        db_now = await c.fetchval("SELECT now()")
        rows = [("old-sent", 5, True)] * 5 + [("new-sent", 0.5, True), ("old-unsent", 5, False)]
        for payload, age_h, sent in rows:
            created = db_now - age_h * HOUR
            await c.execute(
                "INSERT INTO outbox (topic, payload, created_at, published_at) VALUES ('t', $1, $2, $3)",
                payload.encode(), created, created if sent else None,
            )  # fmt: skip

    async def left() -> list[str]:
        async with pg.acquire() as c:
            return sorted(bytes(r["payload"]).decode() for r in await c.fetch("SELECT payload FROM outbox"))

    # The service clock is irrelevant to the outbox (its rows carry the database's time).
    first = await prune(pg, (OUTBOX_RULE,), keep, lambda: 0.0)
    assert first == {"outbox": 4}  # two batches of two: the round stops there
    assert await left() == ["new-sent", "old-sent", "old-unsent"]
    second = await prune(pg, (OUTBOX_RULE,), keep, lambda: 0.0)
    assert second == {"outbox": 1}
    assert await left() == ["new-sent", "old-unsent"]


@pytest.mark.asyncio(loop_scope="session")
async def test_quota_service_refuses_a_history_window_shorter_than_its_feedback(
    database_url: str, scratch_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = await _migrated(database_url, scratch_schema)
    monkeypatch.setenv("DATABASE_URL", dsn)
    monkeypatch.setenv("GFS_HISTORY_KEEP_S", "3600")  # the feedback window is 4 h
    monkeypatch.setenv("QUOTA_API_PORT", "0")
    refused = "GFS_HISTORY_KEEP_S=3600 is shorter than the quota's feedback window"
    with pytest.raises(ValueError, match=refused):
        await asyncio.wait_for(run_quota_service(QuotaServiceSettings(), asyncio.Event()), timeout=60)


@pytest.mark.asyncio(loop_scope="session")
async def test_gfs_db_prune_deletes_now_and_says_how_many(pg: asyncpg.Pool, database_url: str) -> None:
    from typer.testing import CliRunner

    from gfs.services.platform.db_cli import app

    async with pg.acquire() as c:
        dsn_schema = await c.fetchval("SELECT current_schema()")
        for age_h in (30, 2):
            await c.execute(
                "INSERT INTO outbox (topic, payload, published_at) VALUES ('t', 'x', now() - $1::interval)",
                timedelta(hours=age_h),
            )
    runner = CliRunner()
    args = ["prune", "--database-url", _dsn(database_url, dsn_schema), "--outbox-keep-s", str(DAY)]
    result = await asyncio.to_thread(runner.invoke, app, args)
    assert result.exit_code == 0, result.output
    assert "outbox: 1 deleted" in result.output
    async with pg.acquire() as c:
        assert await c.fetchval("SELECT count(*) FROM outbox") == 1
    refused = await asyncio.to_thread(runner.invoke, app, ["prune", "--history-keep-s", "0"])
    assert refused.exit_code == 2
    assert "keep windows must be > 0" in refused.output

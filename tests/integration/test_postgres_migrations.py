"""Migrations against the real Postgres: applied once, a second run applies nothing, the tables
are usable, and an edited applied file is refused. Each test works in a scratch schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlencode, urlsplit, urlunsplit

import asyncpg
import pytest

from gfs.services.platform.migrations import (
    ChecksumMismatchError,
    default_migrations,
    discover,
    migrate,
)

pytestmark = pytest.mark.integration

EXPECTED_TABLES = {
    "schema_migrations",
    "quota_pool",
    "spot_quota",
    "quota_eta_history",
    "guarantee_period_outcome",
    "outbox",
    "quota_version",
    "quota_input_latest",
    "preemption_partition",
    "preemption_journal",
    "preemption_snapshot",  # 0008 (issue 25: snapshots of a partition's pools)
    "preemption_decision",
    "preemption_task_route",
    "preemption_node_route",
    "preemption_control",
    "preemption_control_audit",
}


async def _connect(database_url: str, schema: str) -> asyncpg.Connection:
    return await asyncpg.connect(database_url, server_settings={"search_path": schema})


async def _tables(connection: asyncpg.Connection, schema: str) -> set[str]:
    rows = await connection.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
    )
    return {row["table_name"] for row in rows}


async def test_second_run_applies_nothing_and_tables_exist(database_url: str, scratch_schema: str) -> None:
    files = discover()
    connection = await _connect(database_url, scratch_schema)
    try:
        first = await migrate(connection, files)
        second = await migrate(connection, files)
        assert [m.label for m in first] == [m.label for m in files]
        assert second == ()
        assert await _tables(connection, scratch_schema) == EXPECTED_TABLES
        recorded = await connection.fetch("SELECT version, checksum FROM schema_migrations ORDER BY version")
        assert [(r["version"], r["checksum"]) for r in recorded] == [(m.version, m.checksum) for m in files]
    finally:
        await connection.close()


async def test_quota_state_and_outbox_tables_accept_their_rows(
    database_url: str, scratch_schema: str
) -> None:
    connection = await _connect(database_url, scratch_schema)
    try:
        await migrate(connection, discover())
        async with connection.transaction():
            await connection.execute("INSERT INTO quota_pool (pool, capacity_gpus) VALUES ('A100', 64)")
            await connection.execute(
                "INSERT INTO spot_quota (pool, guarantee_hours, quota_gpus, min_free_gpus, eta,"
                " pool_version, computed_at) VALUES ('A100', 1, 11.5, 12, 0.96, 1, now())"
            )
            await connection.execute(
                "INSERT INTO outbox (topic, key, payload) VALUES ('gfs.quotas', 'A100'::bytea, '{}'::bytea)"
            )
        row = await connection.fetchrow("SELECT eta, version FROM quota_pool WHERE pool = 'A100'")
        assert (row["eta"], row["version"]) == (1.0, 0)  # defaults: eta starts at 1 (spec 4.1 step 6)
        unpublished = await connection.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NULL")
        assert unpublished == 1
        with pytest.raises(asyncpg.CheckViolationError):
            await connection.execute("UPDATE quota_pool SET eta = 0 WHERE pool = 'A100'")
    finally:
        await connection.close()


async def test_an_edited_applied_migration_is_refused(
    database_url: str, scratch_schema: str, tmp_path: Path
) -> None:
    for entry in default_migrations().iterdir():
        if entry.name.endswith(".sql"):
            (tmp_path / entry.name).write_bytes(entry.read_bytes())
    connection = await _connect(database_url, scratch_schema)
    try:
        await migrate(connection, discover(tmp_path))
        edited = tmp_path / "0001_quota_state.sql"
        edited.write_text(edited.read_text() + "\n-- an innocent-looking edit\n")
        with pytest.raises(ChecksumMismatchError, match="0001_quota_state"):
            await migrate(connection, discover(tmp_path))
    finally:
        await connection.close()


def _with_search_path(database_url: str, schema: str) -> str:
    # asyncpg passes unknown DSN query parameters to the server as settings.
    parts = urlsplit(database_url)
    query = "&".join(filter(None, [parts.query, urlencode({"search_path": schema})]))
    return urlunsplit(parts._replace(query=query))


def test_gfs_db_migrate_is_safe_to_run_twice(database_url: str, scratch_schema: str) -> None:
    # The installed console script next to this interpreter (the venv's `gfs`).
    command = [str(Path(sys.executable).with_name("gfs")), "db", "migrate"]
    dsn = _with_search_path(database_url, scratch_schema)
    run_args = {"check": True, "capture_output": True, "text": True, "timeout": 60}
    first = subprocess.run([*command, "--database-url", dsn], **run_args)
    second = subprocess.run([*command, "--database-url", dsn], **run_args)
    assert first.stdout.splitlines() == [f"applied {m.label}" for m in discover()]
    assert second.stdout.strip() == "database is up to date; nothing applied"

"""The services' own Postgres roles on the real database (issue 25 item 2): the quota role cannot
write the preemption journal and the preemption role cannot write a quota, each does its own work
through the services' own store functions, neither can change the schema.

Roles are cluster-wide, so the test creates none: it uses the stack's `gfs_quota` and
`gfs_preemption` (infra/postgres/start.sh creates them; their URLs come from `infra/stack.sh
db-url`) and grants them privileges only on the tables of a schema of its own, dropped afterwards
(the grants go with it), so the stack's `public` tables and other tests are left alone.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio

from gfs.services.platform.db_roles import grant_service_roles, unassigned
from gfs.services.platform.migrations import migrated_schema, with_search_path
from gfs.services.preemption.journal import store as preemption_store
from gfs.services.quota import store as quota_store

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ROLES = {"quota": "gfs_quota", "preemption": "gfs_preemption"}
OUTBOX_INSERT = (
    "INSERT INTO outbox (topic, key, payload, headers) VALUES ('t', NULL, 'x', '[]'::jsonb) RETURNING id"
)
AT = datetime(2026, 1, 1, tzinfo=UTC)


def _role_url(service: str, database_url: str) -> str:
    """The stack's URL of `service`'s role, at the host, port and database of DATABASE_URL."""
    done = subprocess.run(
        ["bash", str(REPO / "infra" / "stack.sh"), "db-url", service],
        capture_output=True,
        text=True,
        check=True,
    )
    role = urlsplit(done.stdout.strip())
    target = urlsplit(database_url)
    return urlunsplit(
        target._replace(netloc=f"{role.username}:{role.password}@{target.hostname}:{target.port}")
    )


@dataclass(frozen=True)
class Schema:
    name: str
    owner: str  # DSN of the owner role, scoped to the schema
    quota: str  # DSN of the quota service's role, scoped to the schema
    preemption: str


@pytest_asyncio.fixture(loop_scope="session")
async def schema(database_url: str) -> AsyncIterator[Schema]:
    name = f"it_roles_{uuid.uuid4().hex[:12]}"
    owner = await migrated_schema(database_url, name)
    try:
        quota, preemption = (
            with_search_path(_role_url(s, database_url), name) for s in ("quota", "preemption")
        )
        for service, dsn in (("quota", quota), ("preemption", preemption)):
            try:
                await (await asyncpg.connect(dsn)).close()
            except (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError) as exc:
                pytest.fail(
                    f"{ROLES[service]} cannot log in ({exc}): `make up` creates the roles", pytrace=False
                )
        connection = await asyncpg.connect(owner)
        try:
            await grant_service_roles(connection, ROLES)  # the connection's schema: ours
        finally:
            await connection.close()
        yield Schema(name, owner, quota, preemption)
    finally:
        admin = await asyncpg.connect(database_url)
        try:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await admin.close()


async def _privileges(dsn: str, schema: str) -> set[tuple[str, str, str]]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT grantee, table_name, privilege_type FROM information_schema.role_table_grants "
            "WHERE table_schema = $1 AND grantee = ANY($2::text[])",
            schema,
            list(ROLES.values()),
        )
    finally:
        await connection.close()
    return {(r["grantee"], r["table_name"], r["privilege_type"]) for r in rows}


async def test_every_migrated_table_is_assigned_to_a_service_or_the_owner(schema: Schema) -> None:
    connection = await asyncpg.connect(schema.owner)
    try:
        tables = [
            r["tablename"]
            for r in await connection.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema.name
            )
        ]
    finally:
        await connection.close()
    assert "preemption_journal" in tables and "spot_quota" in tables
    assert unassigned(tables) == []


async def test_the_quota_role_does_its_work_and_cannot_touch_the_preemption_tables(schema: Schema) -> None:
    connection = await asyncpg.connect(schema.quota)
    try:
        async with connection.transaction():
            assert await quota_store.record_outcome(
                connection, pool="p1", task_id="t1", period_start=AT, period_end=AT, succeeded=True,
                event_id=uuid.uuid4(),
            )  # fmt: skip
            await quota_store.remember_input(connection, pool="p1", kind="status", as_of=AT, payload={"a": 1})
            assert await connection.fetchval(OUTBOX_INSERT) >= 1  # the outbox and its id sequence
        assert [r["pool"] for r in await quota_store.load_latest_inputs(connection)] == ["p1"]
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="preemption_journal"):
            await preemption_store.append_journal(
                connection, preemption_store.Claim(0, 1, 0), [("p1", ("submit", {}, 0.0), uuid.uuid4())]
            )
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="preemption_partition"):
            await preemption_store.claim(connection, 0, "quota-impostor")
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="preemption_journal"):
            await connection.fetch("SELECT * FROM preemption_journal")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):  # no DDL: only the owner migrates
            await connection.execute("DROP TABLE spot_quota")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await connection.execute("CREATE TABLE sneaky (x int)")
    finally:
        await connection.close()


async def test_the_preemption_role_does_its_work_and_cannot_write_a_quota(schema: Schema) -> None:
    connection = await asyncpg.connect(schema.preemption)
    try:
        async with connection.transaction():
            claim = await preemption_store.claim(connection, 0, "pre-1")
            await preemption_store.append_journal(
                connection, claim, [("p1", ("submit", {"t": 1}, 1.0), uuid.uuid4())]
            )
            await preemption_store.route_node(connection, "n1", "p1")
            assert await connection.fetchval(OUTBOX_INSERT) >= 1
        assert (claim.epoch, await preemption_store.node_pool(connection, "n1")) == (1, "p1")
        assert await connection.fetchval("SELECT count(*) FROM preemption_journal") == 1
        # The dashboard reads the quota service's latest forecast and quotas: read-only.
        assert await connection.fetchval("SELECT count(*) FROM spot_quota") == 0
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="quota_input_latest"):
            await quota_store.remember_input(connection, pool="p1", kind="status", as_of=AT, payload={})
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="guarantee_period_outcome"):
            await quota_store.record_outcome(
                connection, pool="p1", task_id="t1", period_start=AT, period_end=AT, succeeded=False,
                event_id=uuid.uuid4(),
            )  # fmt: skip
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="quota_pool"):
            await quota_store.load_pools(connection)
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await connection.execute("DROP TABLE preemption_journal")
    finally:
        await connection.close()


async def test_granting_again_gives_exactly_the_rules_back(schema: Schema) -> None:
    granted = await _privileges(schema.owner, schema.name)
    assert ("gfs_quota", "preemption_journal", "INSERT") not in granted
    assert ("gfs_preemption", "preemption_journal", "INSERT") in granted
    assert ("gfs_preemption", "spot_quota", "SELECT") in granted
    assert ("gfs_preemption", "spot_quota", "UPDATE") not in granted
    connection = await asyncpg.connect(schema.owner)
    try:
        # A stray privilege (granted by hand, or a rule since removed) is revoked by the next run.
        await connection.execute(f'GRANT INSERT ON "{schema.name}".preemption_journal TO gfs_quota')
        await grant_service_roles(connection, ROLES)
    finally:
        await connection.close()
    assert await _privileges(schema.owner, schema.name) == granted

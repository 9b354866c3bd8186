"""Postgres privileges of each service's login role: which tables the quota and the preemption
service may read and write (issue 25 item 2).

The migrations run as the owner role (the stack's `gfs`, a cluster's migrations role), which owns
every table. Each service logs in with a role of its own that owns nothing and holds only DML
privileges on its own tables, so a compromised or buggy quota service cannot rewrite the
preemption journal (the input every pool is rebuilt from), and the preemption service cannot
change a quota. Neither can create, alter or drop a table.

Tables are assigned by name, so a migration that adds a `preemption_*` or `quota_*` table is
covered without a change here; `unassigned()` lists the tables no rule covers (the integration
test fails on one, so a new table is assigned on purpose).

`grant_service_roles` is idempotent: it first revokes everything a service role holds on the
schema's tables, then grants exactly the rules below (`gfs db grant`, run after `gfs db migrate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import asyncpg

SERVICES = ("quota", "preemption")

# DML only: no TRUNCATE, REFERENCES or TRIGGER, no DDL (the owner role migrates).
WRITE = "SELECT, INSERT, UPDATE, DELETE"


@dataclass(frozen=True, slots=True)
class Access:
    """What one service may do: `writes` (DML) and `reads` (SELECT), as table-name rules: a name
    ending in `_` is a prefix, any other an exact table name."""

    writes: tuple[str, ...]
    reads: tuple[str, ...] = ()


ACCESS: Mapping[str, Access] = {
    # The quota state (0001, 0003) and the transactional outbox its SpotQuota goes through.
    "quota": Access(writes=("quota_", "spot_quota", "guarantee_period_outcome", "outbox")),
    # Ownership, journal, decisions, routes, controls and snapshots (0004-0008), the outbox its
    # signed commands go through; the dashboard reads the quota service's latest forecast and
    # quotas (services/preemption/sre/dashboard.py), read-only.
    "preemption": Access(writes=("preemption_", "outbox"), reads=("quota_input_latest", "spot_quota")),
}

# Tables that belong to the owner role only (the migration bookkeeping).
OWNER_ONLY = ("schema_migrations",)


class UnknownServiceError(ValueError):
    """A role was given for a service that has no access rules."""


def _matches(rule: str, table: str) -> bool:
    return table.startswith(rule) if rule.endswith("_") else table == rule


def privileges_of(service: str, table: str) -> str | None:
    """The privileges `service`'s role gets on `table`: WRITE, "SELECT", or None (no access)."""
    access = ACCESS[service]
    if any(_matches(rule, table) for rule in access.writes):
        return WRITE
    if any(_matches(rule, table) for rule in access.reads):
        return "SELECT"
    return None


def unassigned(tables: Sequence[str]) -> list[str]:
    """Tables that neither a service rule nor OWNER_ONLY covers (nobody but the owner can use them)."""
    return sorted(
        t
        for t in tables
        if t not in OWNER_ONLY and all(privileges_of(service, t) is None for service in SERVICES)
    )


def quote_ident(name: str) -> str:
    """A Postgres identifier, quoted (role and schema names come from the command line)."""
    return '"' + name.replace('"', '""') + '"'


async def _tables(connection: asyncpg.Connection, schema: str) -> list[str]:
    rows = await connection.fetch(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname",
        schema,
    )
    return [str(r["relname"]) for r in rows]


async def _sequences_of(connection: asyncpg.Connection, schema: str, tables: Sequence[str]) -> list[str]:
    """The sequences owned by `tables`' columns (serial / identity): an INSERT needs USAGE on them."""
    rows = await connection.fetch(
        """
        SELECT DISTINCT s.relname FROM pg_class s
        JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = s.oid
            AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
        JOIN pg_class t ON t.oid = d.refobjid
        JOIN pg_namespace n ON n.oid = s.relnamespace
        WHERE s.relkind = 'S' AND n.nspname = $1 AND t.relname = ANY($2::text[])
        ORDER BY s.relname
        """,
        schema,
        list(tables),
    )
    return [str(r["relname"]) for r in rows]


async def grant_service_roles(
    connection: asyncpg.Connection, roles: Mapping[str, str], *, schema: str | None = None
) -> list[str]:
    """Give each service's role (`roles`: service -> role name) exactly its privileges on the
    tables of `schema` (default: the connection's current schema), in one transaction. The
    connection must be the tables' owner. Returns the statements run, for the CLI to print."""
    for service in roles:
        if service not in ACCESS:
            raise UnknownServiceError(
                f"no access rules for service {service!r} (known: {', '.join(SERVICES)})"
            )
    if schema is None:
        schema = str(await connection.fetchval("SELECT current_schema()"))
    tables = await _tables(connection, schema)
    q_schema = quote_ident(schema)
    statements: list[str] = []
    for service, role in roles.items():
        q_role = quote_ident(role)
        statements.append(f"GRANT USAGE ON SCHEMA {q_schema} TO {q_role}")
        if tables:
            every = ", ".join(f"{q_schema}.{quote_ident(t)}" for t in tables)
            statements.append(f"REVOKE ALL ON TABLE {every} FROM {q_role}")
        granted: list[str] = []
        for table in tables:
            privileges = privileges_of(service, table)
            if privileges is not None:
                statements.append(f"GRANT {privileges} ON TABLE {q_schema}.{quote_ident(table)} TO {q_role}")
                if privileges == WRITE:
                    granted.append(table)
        sequences = await _sequences_of(connection, schema, granted)
        if sequences:
            names = ", ".join(f"{q_schema}.{quote_ident(s)}" for s in sequences)
            statements.append(f"GRANT USAGE, SELECT ON SEQUENCE {names} TO {q_role}")
    async with connection.transaction():
        for statement in statements:
            await connection.execute(statement)
    return statements

"""`gfs db ...`: Postgres schema migrations."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Operate the Postgres database (migrations, roles, retention).")


@app.command("migrate")
def migrate(
    database_url: Annotated[
        str | None, typer.Option("--database-url", help="Overrides DATABASE_URL.")
    ] = None,
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Migrations folder (default: the ones shipped in services/platform/sql)."),
    ] = None,
) -> None:
    """Apply pending numbered migrations in order; re-running applies nothing."""
    import asyncpg

    from gfs.services.platform.migrations import MigrationError, migrate_database
    from gfs.services.platform.settings import DatabaseUrlMissingError, PlatformSettings

    try:
        dsn = database_url or PlatformSettings().database_url
        applied = asyncio.run(migrate_database(dsn, directory))
    except (MigrationError, DatabaseUrlMissingError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    except (OSError, asyncpg.PostgresError) as exc:
        # Connection refused, bad credentials, or a migration's SQL failing (rolled back).
        typer.echo(f"error: {type(exc).__name__}: {exc} (is the stack up? `make up`)", err=True)
        raise typer.Exit(code=1) from exc
    if not applied:
        typer.echo("database is up to date; nothing applied")
    for migration in applied:
        typer.echo(f"applied {migration.label}")


@app.command("grant")
def grant(
    quota_role: Annotated[
        str | None, typer.Option("--quota-role", help="The quota service's login role.")
    ] = None,
    preemption_role: Annotated[
        str | None, typer.Option("--preemption-role", help="The preemption service's login role.")
    ] = None,
    schema: Annotated[
        str | None, typer.Option("--schema", help="Schema of the tables (default: the connection's).")
    ] = None,
    database_url: Annotated[
        str | None, typer.Option("--database-url", help="Overrides DATABASE_URL (the tables' owner).")
    ] = None,
) -> None:
    """Give each service's role exactly its privileges on its tables (after `gfs db migrate`,
    as the owner role; idempotent). The roles must exist (docs/operations.md, "Postgres roles")."""
    import asyncpg

    from gfs.services.platform.db_roles import grant_service_roles
    from gfs.services.platform.settings import DatabaseUrlMissingError, PlatformSettings

    roles = {s: r for s, r in (("quota", quota_role), ("preemption", preemption_role)) if r}
    if not roles:
        typer.echo("error: name at least one role (--quota-role, --preemption-role)", err=True)
        raise typer.Exit(code=2)

    async def run(dsn: str) -> list[str]:
        connection = await asyncpg.connect(dsn)
        try:
            return await grant_service_roles(connection, roles, schema=schema)
        finally:
            await connection.close()

    try:
        statements = asyncio.run(run(database_url or PlatformSettings().database_url))
    except DatabaseUrlMissingError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    except (OSError, asyncpg.PostgresError) as exc:
        typer.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    for statement in statements:
        typer.echo(statement)


@app.command("prune")
def prune_history(
    database_url: Annotated[
        str | None, typer.Option("--database-url", help="Overrides DATABASE_URL.")
    ] = None,
    history_keep_s: Annotated[
        float | None, typer.Option("--history-keep-s", help="Overrides GFS_HISTORY_KEEP_S (30 d).")
    ] = None,
    outbox_keep_s: Annotated[
        float | None, typer.Option("--outbox-keep-s", help="Overrides GFS_OUTBOX_KEEP_S (1 d).")
    ] = None,
) -> None:
    """Delete history older than the windows now, on the wall clock (the services do it every
    GFS_RETENTION_EVERY_S on their own clock; docs/operations.md, "Retention"). Prints the rows
    deleted per table; run again until it prints nothing (a run deletes at most 20,000 per table)."""
    import asyncpg

    from gfs.services.platform.postgres import open_pool
    from gfs.services.platform.retention import OUTBOX_RULE, PREEMPTION_RULES, QUOTA_RULES, Retention, prune
    from gfs.services.platform.settings import DatabaseUrlMissingError, PlatformSettings

    settings = PlatformSettings()
    try:
        retention = Retention(
            history_keep_s=settings.gfs_history_keep_s if history_keep_s is None else history_keep_s,
            outbox_keep_s=settings.gfs_outbox_keep_s if outbox_keep_s is None else outbox_keep_s,
            every_s=0.0,
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc

    async def run(dsn: str) -> dict[str, int]:
        import time

        async with open_pool(dsn, max_size=1) as pool:
            return await prune(pool, (*QUOTA_RULES, *PREEMPTION_RULES, OUTBOX_RULE), retention, time.time)

    try:
        deleted = asyncio.run(run(database_url or settings.database_url))
    except DatabaseUrlMissingError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    except (OSError, asyncpg.PostgresError) as exc:
        typer.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    for table, n in deleted.items():
        typer.echo(f"{table}: {n} deleted")

"""`gfs db ...`: Postgres schema migrations."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Operate the Postgres database (migrations).")


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

    from services.platform.migrations import MigrationError, migrate_database
    from services.platform.settings import DatabaseUrlMissingError, PlatformSettings

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

    from services.platform.db_roles import grant_service_roles
    from services.platform.settings import DatabaseUrlMissingError, PlatformSettings

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

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
    from services.platform.settings import PlatformSettings

    dsn = database_url or PlatformSettings().database_url
    try:
        applied = asyncio.run(migrate_database(dsn, directory))
    except MigrationError as exc:
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

"""Numbered SQL migrations: discover, check, apply once, in order.

Files are `services/platform/sql/NNNN_name.sql` (four digits, lower-case snake name), package data
found through `importlib.resources`, so a wheel or a non-editable install carries them. Each is
applied in its own transaction together with its row in `schema_migrations` (version, name,
SHA-256 of the file bytes), so a failing file leaves neither half-applied DDL nor a record.
Re-running applies nothing. An applied file whose bytes changed, or an applied version whose
file disappeared, is an error: the database no longer matches the code, and silently going on
would hide it. Fix forward with a new file instead.

Discovery and planning are pure (unit-tested without Postgres); `migrate` does the I/O.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import asyncpg

MIGRATIONS_PACKAGE = "gfs.services.platform.sql"


def default_migrations() -> Traversable:
    """The migrations shipped with this installation (package data, not a repo path)."""
    return resources.files(MIGRATIONS_PACKAGE)


_FILE_NAME = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9]+(?:_[a-z0-9]+)*)\.sql$")

# Arbitrary constant key for pg_advisory_lock: serialises concurrent `gfs db migrate` runs
# (e.g. two services starting at once) so each file is applied exactly once.
_ADVISORY_LOCK_KEY = 0x6F5F_6D69_6772  # "gfs migr"-ish, any fixed bigint works

_CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


class MigrationError(RuntimeError):
    """Base class: the migration files and the database disagree, or a file is malformed."""


class MigrationFileError(MigrationError):
    """A badly named file or two files with the same version number."""


class ChecksumMismatchError(MigrationError):
    """An already-applied migration file was edited."""


class UnknownAppliedMigrationError(MigrationError):
    """The database records a migration that no file provides (wrong checkout or deleted file)."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str
    checksum: str

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


def checksum_of(content: bytes) -> str:
    """SHA-256 hex of the raw bytes (a whitespace edit is a change: the DB ran the old bytes)."""
    return hashlib.sha256(content).hexdigest()


def parse_migration(file_name: str, content: bytes) -> Migration:
    match = _FILE_NAME.match(file_name)
    if match is None:
        raise MigrationFileError(
            f"migration file {file_name!r} is not named NNNN_lower_snake_name.sql (e.g. 0001_quota_state.sql)"
        )
    version = int(match["version"])
    if version == 0:
        raise MigrationFileError(f"migration file {file_name!r}: versions start at 0001")
    return Migration(
        version=version, name=match["name"], sql=content.decode("utf-8"), checksum=checksum_of(content)
    )


def discover(directory: Path | Traversable | None = None) -> tuple[Migration, ...]:
    """All `*.sql` migrations in `directory` (default: the shipped ones), ordered by version.
    Other files (READMEs, `__init__.py`) are ignored; a `.sql` file with a bad name is an error
    rather than silently skipped."""
    folder = default_migrations() if directory is None else directory
    if not folder.is_dir():
        raise MigrationFileError(f"migrations directory {folder} does not exist")
    files = [entry for entry in folder.iterdir() if entry.name.endswith(".sql") and entry.is_file()]
    return order(parse_migration(entry.name, entry.read_bytes()) for entry in files)


def order(migrations: Iterable[Migration]) -> tuple[Migration, ...]:
    """Sort by version; duplicate versions are an error (two branches picked the same number)."""
    ordered = sorted(migrations, key=lambda m: m.version)
    for earlier, later in itertools.pairwise(ordered):
        if earlier.version == later.version:
            raise MigrationFileError(
                f"two migrations share version {earlier.version:04d}: {earlier.label}, {later.label}"
            )
    return tuple(ordered)


def pending(available: Iterable[Migration], applied: Mapping[int, str]) -> tuple[Migration, ...]:
    """The migrations still to apply, in order, given `applied` = {version: checksum}.

    Raises `ChecksumMismatchError` for an edited applied file and `UnknownAppliedMigrationError`
    for an applied version that has no file.
    """
    ordered = order(available)
    by_version = {m.version: m for m in ordered}
    for version in sorted(applied):
        migration = by_version.get(version)
        if migration is None:
            raise UnknownAppliedMigrationError(
                f"the database has migration {version:04d} applied but no file provides it"
            )
        if migration.checksum != applied[version]:
            raise ChecksumMismatchError(
                f"migration {migration.label} was changed after it was applied "
                f"(database sha256 {applied[version][:12]}…, file {migration.checksum[:12]}…); "
                "add a new migration instead of editing an applied one"
            )
    return tuple(m for m in ordered if m.version not in applied)


async def migrate(connection: asyncpg.Connection, migrations: Iterable[Migration]) -> tuple[Migration, ...]:
    """Apply the pending `migrations` on `connection`; return those applied (empty on a re-run)."""
    await connection.execute("SELECT pg_advisory_lock($1)", _ADVISORY_LOCK_KEY)
    try:
        await connection.execute(_CREATE_LEDGER)
        rows = await connection.fetch("SELECT version, checksum FROM schema_migrations")
        todo = pending(migrations, {row["version"]: row["checksum"] for row in rows})
        for migration in todo:
            async with connection.transaction():
                await connection.execute(migration.sql)
                await connection.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
        return todo
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", _ADVISORY_LOCK_KEY)


async def migrate_database(dsn: str, directory: Path | None = None) -> tuple[Migration, ...]:
    """Connect to `dsn`, apply the pending files from `directory` (default: the shipped ones),
    disconnect."""
    migrations = discover(directory)
    connection = await asyncpg.connect(dsn)
    try:
        return await migrate(connection, migrations)
    finally:
        await connection.close()


def with_search_path(dsn: str, schema: str) -> str:
    """`dsn` with `search_path=schema` as a connection option (every connection of a pool opened
    on it reads and writes that schema)."""
    from urllib.parse import urlencode, urlsplit, urlunsplit

    parts = urlsplit(dsn)
    query = "&".join(filter(None, [parts.query, urlencode({"search_path": schema})]))
    return urlunsplit(parts._replace(query=query))


async def migrated_schema(dsn: str, schema: str) -> str:
    """Create `schema`, apply every migration in it, and return the DSN that uses it: a run of a
    tool (benchmark, fault harness, demo) gets tables of its own beside the stack's."""
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'CREATE SCHEMA "{schema}"')
    finally:
        await admin.close()
    scoped = with_search_path(dsn, schema)
    connection = await asyncpg.connect(scoped)
    try:
        await migrate(connection, discover())
    finally:
        await connection.close()
    return scoped

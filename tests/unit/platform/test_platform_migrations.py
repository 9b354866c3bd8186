"""Migration discovery, ordering and checksum checks (pure; the Postgres run is integration)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gfs.services.platform.migrations import (
    ChecksumMismatchError,
    Migration,
    MigrationFileError,
    UnknownAppliedMigrationError,
    checksum_of,
    discover,
    order,
    parse_migration,
    pending,
)


def a_migration(version: int, name: str = "step", sql: str = "SELECT 1;") -> Migration:
    return parse_migration(f"{version:04d}_{name}.sql", sql.encode())


@pytest.mark.parametrize(
    ("file_name", "version", "name"),
    [
        ("0001_quota_state.sql", 1, "quota_state"),
        ("0042_outbox.sql", 42, "outbox"),
        ("9999_a1_b2.sql", 9999, "a1_b2"),
    ],
    ids=["first", "plain", "digits-in-name"],
)
def test_good_names_parse(file_name: str, version: int, name: str) -> None:
    migration = parse_migration(file_name, b"SELECT 1;")
    assert (migration.version, migration.name, migration.sql) == (version, name, "SELECT 1;")


@pytest.mark.parametrize(
    "file_name",
    [
        "1_short.sql",
        "00001_long.sql",
        "0001-dash.sql",
        "0001_Upper.sql",
        "0001_.sql",
        "0001_x.SQL",
        "0000_zero.sql",
    ],
    ids=["3-digits-short", "5-digits", "dash", "upper-case", "no-name", "upper-ext", "version-zero"],
)
def test_bad_names_are_rejected(file_name: str) -> None:
    with pytest.raises(MigrationFileError):
        parse_migration(file_name, b"")


def test_checksum_is_sha256_of_the_exact_bytes() -> None:
    # sha256("") is the well-known e3b0c442...b855; one extra space changes it.
    assert checksum_of(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert a_migration(1, sql="SELECT 1; ").checksum != a_migration(1, sql="SELECT 1;").checksum
    assert a_migration(1).checksum == hashlib.sha256(b"SELECT 1;").hexdigest()


def test_order_sorts_numerically_and_rejects_duplicates() -> None:
    assert [m.version for m in order([a_migration(10), a_migration(2), a_migration(1)])] == [1, 2, 10]
    with pytest.raises(MigrationFileError, match="0002"):
        order([a_migration(2, "a"), a_migration(2, "b")])


def test_pending_returns_only_unapplied_in_order() -> None:
    files = [a_migration(3), a_migration(1), a_migration(2)]
    applied = {1: files[1].checksum}
    assert [m.version for m in pending(files, applied)] == [2, 3]
    assert pending(files, {m.version: m.checksum for m in files}) == ()


def test_edited_applied_file_is_an_error() -> None:
    with pytest.raises(ChecksumMismatchError, match="0001_step"):
        pending([a_migration(1, sql="SELECT 2;")], {1: a_migration(1).checksum})


def test_applied_version_without_file_is_an_error() -> None:
    with pytest.raises(UnknownAppliedMigrationError, match="0007"):
        pending([a_migration(1)], {1: a_migration(1).checksum, 7: "abc"})


def test_discover_reads_sql_files_and_ignores_others(tmp_path: Path) -> None:
    (tmp_path / "0002_b.sql").write_text("SELECT 2;")
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "README.md").write_text("notes")
    assert [(m.version, m.name) for m in discover(tmp_path)] == [(1, "a"), (2, "b")]
    (tmp_path / "3_bad.sql").write_text("")
    with pytest.raises(MigrationFileError, match=r"3_bad\.sql"):
        discover(tmp_path)


def test_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(MigrationFileError, match="does not exist"):
        discover(tmp_path / "nope")


def test_the_project_migrations_are_numbered_from_one_without_gaps() -> None:
    versions = [m.version for m in discover()]
    assert versions == list(range(1, len(versions) + 1))
    assert len(versions) >= 2

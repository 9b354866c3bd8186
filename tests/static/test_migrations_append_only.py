"""A migration, once it has landed, is never edited.

Every database that ran a migration records its sha256, and `gfs`'s migrator refuses to start when a
file no longer matches what was applied (services/platform/migrations.py). An edit, even to a
comment, therefore stops every deployed service at its next start: a module move once rewrote the
path in four migrations' header comments and the stack refused to come up. This test reads each
migration as the commit that added it left it and fails on any difference; a change of schema is a
new, higher-numbered file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SQL = REPO / "services" / "platform" / "sql"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def _as_added(path: Path) -> bytes | None:
    """The file's bytes in the main-line commit that added it here; None while it is not committed."""
    relative = str(path.relative_to(REPO))
    added = _git("log", "-m", "--first-parent", "--diff-filter=A", "--format=%H", "--", relative).split()
    if not added:
        return None
    landed = f"{added[-1]}:{relative}"
    return subprocess.run(["git", "show", landed], cwd=REPO, check=True, capture_output=True).stdout


@pytest.mark.parametrize("path", sorted(SQL.glob("*.sql")), ids=lambda p: p.name)
def test_a_landed_migration_is_byte_for_byte_what_was_first_committed(path: Path) -> None:
    if not (REPO / ".git").exists():
        pytest.fail("the migration check reads git history; run the tests from a clone")
    first = _as_added(path)
    if first is None:
        return  # a new migration, not landed yet: nothing has applied it
    assert path.read_bytes() == first, (
        f"{path.name} differs from the version that landed; databases that applied it refuse to start. "
        "Restore it and put the change in a new migration."
    )

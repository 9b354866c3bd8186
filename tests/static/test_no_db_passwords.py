"""No committed file outside the tests ships a Postgres password (issue 25 item 2).

The dev stack generates its passwords per checkout (infra/postgres/common.sh), compose reads them
from the environment or a git-ignored .env, Kubernetes from Secrets. A literal in a shipped file
would be the password of every installation that forgets to change it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Stand-ins that document a URL's shape without being a password.
PLACEHOLDERS = frozenset({"password", "<password>", "***", "..."})

# `scheme://user:PASSWORD@` of a Postgres URL; the password stops at whitespace or a quote, so an
# interpolation with spaces in it (compose's `${VAR:?message}`) never matches.
URL = re.compile(r"postgres(?:ql)?(?:\+\w+)?://[^\s:/@'\"]+:([^\s@'\"]+)@", re.IGNORECASE)
# A password variable given a value: POSTGRES_PASSWORD: x, PG_APP_PASSWORD=x, PGPASSWORD=x, ...
# (not the name inside a `${NAME:?message}` interpolation).
ASSIGNED = re.compile(
    r"(?<![{\w])\w*(?:PG|POSTGRES|DB|DATABASE)\w*PASSWORD\b\s*[:=]\s*[\"']?([^\s\"']+)", re.IGNORECASE
)
# SQL: CREATE/ALTER ROLE ... PASSWORD 'x'.
SQL = re.compile(r"\bPASSWORD\s+'([^']*)'", re.IGNORECASE)


def literal_passwords(text: str) -> list[str]:
    """The Postgres password literals in `text` (values taken from a variable are not literals)."""
    found = []
    for pattern in (URL, ASSIGNED, SQL):
        for match in pattern.finditer(text):
            value = match.group(1)
            if value.startswith("$") or value.startswith(":") or value.lower() in PLACEHOLDERS:
                continue  # ${VAR}, $(command), $VAR, a psql :'variable', a placeholder
            found.append(match.group(0))
    return found


def _shipped_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.split("\0")
    return [REPO / name for name in listed if name and not name.startswith("tests/")]


# The detector's own check (hand-picked lines): literals found, variables and placeholders not.
LITERALS = (
    "DATABASE_URL: postgresql://gfs:gfs@postgres:5432/gfs",
    'DEFAULT = "postgres://app:s3cret@db/x"',
    "      POSTGRES_PASSWORD: gfs",
    "PG_APP_PASSWORD=gfs",
    "CREATE ROLE gfs LOGIN PASSWORD 'gfs'",
)
NOT_LITERALS = (
    "DATABASE_URL: postgresql://gfs:${GFS_POSTGRES_PASSWORD:?run x}@postgres:5432/gfs",
    'echo "postgresql://$1:$(pg_password "$1")@$PG_HOST"',
    "POSTGRES_PASSWORD: ${GFS_POSTGRES_PASSWORD:?set it}",
    "# DATABASE_URL=postgresql://gfs_quota:PASSWORD@postgres.example.internal:5432/gfs",
    "CREATE ROLE :\"role\" LOGIN PASSWORD :'pw';",
)


def test_no_committed_file_outside_the_tests_has_a_postgres_password() -> None:
    assert all(len(literal_passwords(line)) == 1 for line in LITERALS)
    assert not any(literal_passwords(line) for line in NOT_LITERALS)
    files = _shipped_files()
    # The files that carried one before must be among those checked (no vacuous pass).
    names = {path.relative_to(REPO).as_posix() for path in files}
    assert {"docker-compose.yml", "services/platform/settings.py", "infra/postgres/common.sh"} <= names
    offenders = {}
    for path in files:
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files; a file deleted but not yet committed
        found = literal_passwords(text)
        if found:
            offenders[path.relative_to(REPO).as_posix()] = found
    assert offenders == {}

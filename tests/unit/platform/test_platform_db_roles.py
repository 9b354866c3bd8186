"""The services' table privileges (services/platform/db_roles.py) and the database commands'
errors without DATABASE_URL; the privileges on the real Postgres: tests/integration/test_db_roles.py."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gfs.services.platform.db_roles import WRITE, privileges_of, quote_ident, unassigned

# Hand-listed from the migrations 0001-0008 and the services' SQL (store.py, outbox.py, dashboard.py).
QUOTA_TABLES = ("quota_pool", "spot_quota", "quota_eta_history", "guarantee_period_outcome")
QUOTA_TABLES_2 = ("quota_version", "quota_input_latest")
PREEMPTION_TABLES = (
    "preemption_partition",
    "preemption_journal",
    "preemption_decision",
    "preemption_task_route",
    "preemption_node_route",
    "preemption_control",
    "preemption_control_audit",
    "preemption_snapshot",
)


@pytest.mark.parametrize("table", (*QUOTA_TABLES, *QUOTA_TABLES_2, "outbox"))
def test_the_quota_service_writes_its_tables_and_the_outbox(table: str) -> None:
    assert privileges_of("quota", table) == WRITE


@pytest.mark.parametrize("table", (*PREEMPTION_TABLES, "outbox"))
def test_the_preemption_service_writes_its_tables_and_the_outbox(table: str) -> None:
    assert privileges_of("preemption", table) == WRITE


def test_neither_service_writes_the_others_tables() -> None:
    assert {privileges_of("quota", t) for t in PREEMPTION_TABLES} == {None}
    # The dashboard reads the latest forecast and the quotas; nothing else of the quota service's.
    assert {t: privileges_of("preemption", t) for t in QUOTA_TABLES + QUOTA_TABLES_2} == {
        "quota_pool": None,
        "spot_quota": "SELECT",
        "quota_eta_history": None,
        "guarantee_period_outcome": None,
        "quota_version": None,
        "quota_input_latest": "SELECT",
    }
    assert privileges_of("quota", "schema_migrations") is None
    assert privileges_of("preemption", "schema_migrations") is None


def test_unassigned_lists_the_tables_no_rule_covers() -> None:
    # A prefix rule covers a new table of the service; another name is nobody's until assigned.
    assert unassigned(
        ["preemption_new_thing", "quota_new_thing", "schema_migrations", "tasks", "outbox"]
    ) == ["tasks"]


def test_identifiers_are_quoted() -> None:
    assert quote_ident('we"ird') == '"we""ird"'


@pytest.mark.parametrize("command", [["db", "migrate"], ["db", "grant", "--quota-role", "gfs_quota"]])
def test_the_database_commands_say_how_to_set_database_url(
    monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    from gfs.services.platform.db_cli import app

    monkeypatch.delenv("DATABASE_URL", raising=False)
    result = CliRunner().invoke(app, command[1:])
    assert result.exit_code == 1, result.output
    assert 'DATABASE_URL is not set: run `eval "$(infra/stack.sh env)"`' in result.output

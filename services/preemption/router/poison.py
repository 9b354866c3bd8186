"""Poison records: which storage failures a record itself causes, so the partition can go on.

The schemas refuse what Postgres cannot store (control characters, issue 22), but a record that
still fails to store would otherwise stop its partition for ever: the router's loop stops on it
(then every instance that takes the partition over), the decider rebuilds and retries it every
0.5 s. The rule (docs/services.md, "Poison records"): a record whose storage failed twice, the
second time alone, with an error that the record's data causes, is dead-lettered with that error
and its offset passed. An error of the infrastructure (the connection, the server going down,
a deadlock, a full disk) or of the deployment (a missing table, a permission) is never blamed on
a record: the partition retries as before, since dead-lettering every record of an outage would
lose them all.
"""

from __future__ import annotations

import asyncpg

STORE_ATTEMPTS = 2
"""A record is dead-lettered when storing it failed this many times (the last one alone)."""

# SQLSTATE classes a record's data causes: 22 data exception (a NUL, a bad encoding, a number out
# of range), 23 integrity constraint violation, 54 program limit exceeded (a row too large).
_DATA_CLASSES = frozenset({"22", "23", "54"})


class StoreFailedError(RuntimeError):
    """The dead letter's error: the record could not be stored (the cause is in the message)."""

    reason_code = "store_failed"


def caused_by_record(exc: BaseException) -> bool:
    """Whether `exc`, raised while deciding or storing one record, is the record's fault."""
    if isinstance(exc, asyncpg.PostgresError):
        return str(getattr(exc, "sqlstate", "") or "")[:2] in _DATA_CLASSES
    if isinstance(exc, OSError | TimeoutError | asyncpg.InterfaceError | ConnectionError):
        return False  # the connection or the server, not the record
    # Anything else (a value the code cannot encode, a controller error on this input) repeats
    # for this record on every retry.
    return isinstance(exc, Exception)


def store_failed(exc: BaseException, attempts: int = STORE_ATTEMPTS) -> StoreFailedError:
    return StoreFailedError(
        f"could not be stored ({attempts} attempts, the last one alone): {type(exc).__name__}: {exc}"
    )

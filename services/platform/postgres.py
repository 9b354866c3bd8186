"""asyncpg pool lifecycle and the transaction helper.

The pool is opened by a composition root (`async with open_pool(settings.database_url) as pool`)
and passed down; there is no module-level pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg


@asynccontextmanager
async def open_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 5,
    command_timeout_s: float = 30.0,
    server_settings: dict[str, str] | None = None,
    reset_session: bool = True,
) -> AsyncIterator[asyncpg.Pool]:
    """A connection pool closed on exit, even when the body raises.

    Small defaults: each GFS service does a handful of short transactions per message.
    `server_settings` (e.g. {"search_path": "..."}) apply to every connection of the pool.
    `reset_session=False` skips asyncpg's session reset when a connection goes back to the pool
    (`RESET ALL`, `UNLISTEN *`, session advisory locks released: one more round trip per
    acquisition); an open transaction is still rolled back. Only for a service whose code never
    leaves session state behind: no session-level advisory lock, LISTEN, SET or open cursor.
    """
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        command_timeout=command_timeout_s,
        server_settings=server_settings,
        reset=None if reset_session else _keep_session,
    )
    try:
        yield pool
    finally:
        await pool.close()


async def _keep_session(connection: asyncpg.Connection) -> None:
    """The pool's reset hook when the session is kept: asyncpg has rolled back any open
    transaction before it calls this; nothing else to undo."""


@asynccontextmanager
async def transaction(
    pool: asyncpg.Pool, *, isolation: str = "read_committed"
) -> AsyncIterator[asyncpg.Connection]:
    """One connection from `pool` inside one transaction: committed when the body returns,
    rolled back when it raises. Use for "state write + outbox row" pairs that must agree."""
    async with pool.acquire() as connection, connection.transaction(isolation=isolation):
        yield connection

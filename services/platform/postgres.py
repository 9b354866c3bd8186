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
) -> AsyncIterator[asyncpg.Pool]:
    """A connection pool closed on exit, even when the body raises.

    Small defaults: each GFS service does a handful of short transactions per message.
    `server_settings` (e.g. {"search_path": "..."}) apply to every connection of the pool.
    """
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        command_timeout=command_timeout_s,
        server_settings=server_settings,
    )
    try:
        yield pool
    finally:
        await pool.close()


@asynccontextmanager
async def transaction(
    pool: asyncpg.Pool, *, isolation: str = "read_committed"
) -> AsyncIterator[asyncpg.Connection]:
    """One connection from `pool` inside one transaction: committed when the body returns,
    rolled back when it raises. Use for "state write + outbox row" pairs that must agree."""
    async with pool.acquire() as connection, connection.transaction(isolation=isolation):
        yield connection

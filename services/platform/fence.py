"""One active instance at a time: a Postgres advisory lock held on a dedicated connection.

The active instance holds `pg_advisory_lock(key)` on a connection of its own; a standby polls
`pg_try_advisory_lock` and becomes active within one poll interval of the holder's connection
closing (process killed: Postgres drops the session and its locks). The lock alone does not
survive a connection reset (the holder may not notice at once), so writers also fence their rows
(e.g. `quota_pool.version`): a stale writer's update matches nothing and it steps down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import asyncpg

log = logging.getLogger(__name__)


@dataclass(slots=True)
class AdvisoryFence:
    dsn: str
    key: int
    poll_s: float = 1.0
    connect_timeout_s: float = 5.0
    _connection: asyncpg.Connection | None = field(default=None, init=False, repr=False)

    @property
    def held(self) -> bool:
        return self._connection is not None and not self._connection.is_closed()

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until the lock is ours (True) or `stop` is set (False). Errors reaching Postgres
        are retried: a standby keeps waiting through a database restart."""
        while not stop.is_set():
            try:
                connection = await asyncpg.connect(self.dsn, timeout=self.connect_timeout_s)
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                log.warning("fence %x: cannot reach Postgres (%r); retrying", self.key, exc)
                await _pause(stop, self.poll_s)
                continue
            try:
                while not stop.is_set():
                    if await connection.fetchval("SELECT pg_try_advisory_lock($1)", self.key):
                        self._connection, connection = connection, None
                        log.info("fence %x: acquired", self.key)
                        return True
                    await _pause(stop, self.poll_s)
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("fence %x: lost the connection while waiting (%r)", self.key, exc)
            finally:
                if connection is not None:
                    await _close(connection)
        return False

    async def check(self) -> bool:
        """Still ours? A dead connection means the lock is gone (another instance may hold it)."""
        connection = self._connection
        if connection is None or connection.is_closed():
            return False
        try:
            await asyncio.wait_for(connection.fetchval("SELECT 1"), timeout=self.connect_timeout_s)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            await self.release()
            return False
        return True

    async def release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await _close(connection)  # closing the session drops its advisory locks


async def _close(connection: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(connection.close(), timeout=2.0)


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)

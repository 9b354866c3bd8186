"""One active instance at a time: a Postgres advisory lock held on a dedicated connection.

The active instance holds `pg_advisory_lock(key)` on a connection of its own; a standby polls
`pg_try_advisory_lock` and becomes active within one poll interval of the holder's connection
closing (process killed: Postgres drops the session and its locks). The lock alone does not
survive a connection reset (the holder may not notice at once), so writers also fence their rows
(e.g. `quota_pool.version`): a stale writer's update matches nothing and it steps down.

The lock is a lease of `lease_s` (default 30 s): the holder's session has TCP keepalives (idle
lease/3, then every lease/6, 3 probes) so Postgres drops the session of a dead host or a cut
network within about lease_s, instead of the kernel's default of about two hours; and
`idle_session_timeout` = lease_s, so a holder that stopped checking (a hung process) loses the
session too. The holder checks every `poll_s`, which must be well under the lease.
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
    lease_s: float = 30.0
    _connection: asyncpg.Connection | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.lease_s < 3 * self.poll_s:
            raise ValueError(
                f"fence lease ({self.lease_s} s) must be at least 3 x the poll interval ({self.poll_s} s): "
                "the holder renews it by checking"
            )

    async def _connect(self) -> asyncpg.Connection:
        """A session Postgres ends within about `lease_s` once the holder is gone or stops checking."""
        idle, interval = max(1, int(self.lease_s / 3)), max(1, int(self.lease_s / 6))
        connection = await asyncpg.connect(
            self.dsn,
            timeout=self.connect_timeout_s,
            server_settings={
                "tcp_keepalives_idle": str(idle),
                "tcp_keepalives_interval": str(interval),
                "tcp_keepalives_count": "3",
                "application_name": f"gfs-fence-{self.key:x}",
            },
        )
        try:
            await connection.execute(f"SET idle_session_timeout = {int(self.lease_s * 1000)}")
        except asyncpg.PostgresError as exc:  # before Postgres 14: keepalives only
            log.warning("fence %x: no idle_session_timeout (%r): a hung holder keeps the lock", self.key, exc)
        return connection

    @property
    def held(self) -> bool:
        return self._connection is not None and not self._connection.is_closed()

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until the lock is ours (True) or `stop` is set (False). Errors reaching Postgres
        are retried: a standby keeps waiting through a database restart."""
        while not stop.is_set():
            try:
                connection = await self._connect()
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

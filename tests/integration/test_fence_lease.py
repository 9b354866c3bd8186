"""The advisory-lock fence is a lease (issue 22, item 9), on the real Postgres: the holder's session
carries TCP keepalives bounded by the lease (a dead host is dropped in about the lease, not the
kernel's ~2 h), and a holder that stops renewing (a hung process) loses the lock to a standby
within the lease, while one that keeps checking keeps it."""

from __future__ import annotations

import asyncio
import random

import pytest

from gfs.services.platform.fence import AdvisoryFence

pytestmark = pytest.mark.integration


@pytest.mark.asyncio(loop_scope="session")
async def test_a_holder_that_stops_renewing_loses_the_fence_within_the_lease(database_url: str) -> None:
    key = random.getrandbits(48)  # nobody else's fence
    stop = asyncio.Event()
    holder = AdvisoryFence(database_url, key, poll_s=0.2, lease_s=3.0)
    standby = AdvisoryFence(database_url, key, poll_s=0.2, lease_s=3.0)
    try:
        assert await asyncio.wait_for(holder.acquire(stop), timeout=10)
        connection = holder._connection
        assert connection is not None
        # Keepalives: idle 3/3 = 1 s, interval max(1, 3/6) = 1 s, 3 probes; idle session 3 s.
        settings = {
            r["name"]: r["setting"]
            for r in await connection.fetch(
                """SELECT name, setting FROM pg_settings WHERE name IN
                   ('tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_keepalives_count',
                    'idle_session_timeout')"""
            )
        }
        assert settings == {
            "tcp_keepalives_idle": "1",
            "tcp_keepalives_interval": "1",
            "tcp_keepalives_count": "3",
            "idle_session_timeout": "3000",
        }

        # While the holder renews (checks every poll), the standby waits.
        waiting = asyncio.create_task(standby.acquire(stop))
        for _ in range(25):  # 5 s, longer than the lease
            assert await holder.check()
            await asyncio.sleep(0.2)
        assert not waiting.done()

        # The holder hangs (no check): within the lease (+ a poll) the standby holds the fence.
        loop = asyncio.get_running_loop()
        hung_at = loop.time()
        assert await asyncio.wait_for(waiting, timeout=10)
        assert loop.time() - hung_at < 3.0 + 1.5
        assert not await holder.check()  # and the hung holder finds out when it wakes
    finally:
        stop.set()
        await holder.release()
        await standby.release()


def test_a_lease_shorter_than_three_polls_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 3 x the poll interval"):
        AdvisoryFence("postgresql://unused", 1, poll_s=1.0, lease_s=2.0)

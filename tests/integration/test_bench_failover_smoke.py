"""`gfs bench failover` (issue 25), CI-sized on the real Postgres: after 3,000 journal rows with a
snapshot every 1,000 the claim replays one interval, not the whole journal; after 200 rows (less
than an interval) there is no snapshot and the claim replays everything."""

from __future__ import annotations

import pytest

from gfs.services.livebench.failover_bench import _bench

pytestmark = pytest.mark.integration


@pytest.mark.asyncio(loop_scope="session")
async def test_the_failover_bench_replays_one_interval_after_a_snapshot(database_url: str) -> None:
    small, large = await _bench([200, 3000], interval=1000, full_at_max=True)
    assert (small["rows"], small["replayed"]) == (200, 200)
    assert "snapshot_bytes" not in small
    # 3,000 rows: the snapshot is taken after row 2,000, the claim replays rows 2,001..3,000.
    assert (large["rows"], large["replayed"]) == (3000, 1000)
    assert large["snapshot_bytes"] > 0

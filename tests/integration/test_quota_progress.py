"""Issue 35 item 6, the live quota does not stall: the quota service on the real broker and Postgres
(topic clock), the held-out protocol probe's situation worked by hand.

A 32-GPU pool whose spot was evicted: 4 of the 20 guarantee periods in the last 4 hours failed (ER
0.2 >= 1.5 x 0.1), so eta shrinks once, to 1 x 0.1 / 0.2 = 0.5, and stays there while no new
failure comes (before issue 35 it shrank again at every status, to its 0.1 floor within minutes).
Then eta is pushed to its 0.1 floor by a burst of new failures. The pool runs nothing (32 idle
GPUs, no spot in use), the forecast's q90 is 5 HP GPUs, the smallest queued spot task asks 4 GPUs:
the next status's quota is 4 (the progress floor), not 0.1 x 27 = 2.7, so the preemption service
can start it at its next pass (the simulator's test_sim_spot_stall.py shows the pass and the start
on the same rule)."""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from kafka_harness import _end_offsets
from quota_harness import READY_S, _hour, _migrated, _read_from, _settings, _start_at_the_end

from gfs.schemas.envelope import wrap
from gfs.schemas.forecast import PoolDemandForecast
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.tasks import GuaranteeOutcome, GuaranteePeriodClosed
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.quota.service import TOPICS, run_quota_service

pytestmark = pytest.mark.integration


async def test_an_idle_pool_with_queued_spot_gets_a_quota_that_starts_it(
    registry_topics: TopicsReport, kafka_bootstrap: str, database_url: str, scratch_schema: str
) -> None:
    import asyncpg

    dsn = await _migrated(database_url, scratch_schema)
    pool = f"PG-{uuid.uuid4().hex[:8]}"
    t = datetime(2020, 5, 4, 10, 15, tzinfo=UTC)
    settings = _settings(dsn, kafka_bootstrap, random.getrandbits(48), quota_refresh_s=300.0,
                         quota_clock="topic", quota_pools=pool)  # fmt: skip
    await _start_at_the_end(kafka_bootstrap, settings.quota_group, TOPICS)
    stop, ready = asyncio.Event(), asyncio.Event()
    service = asyncio.create_task(run_quota_service(settings, stop, ready=ready))
    connection = await asyncpg.connect(dsn)

    async def outcomes(n: int, failed: int, before: datetime, prefix: str) -> None:
        for i in range(n):
            end = before - timedelta(minutes=i + 1)
            closed = GuaranteePeriodClosed(
                task_id=f"{pool}-{prefix}{i}", pool=pool, period_start=end - timedelta(hours=1),
                period_end=end, outcome=GuaranteeOutcome.FAILED if i < failed else GuaranteeOutcome.SUCCEEDED,
            )  # fmt: skip
            await producer.send("gfs.tasks.lifecycle", wrap(closed, producer="it"))
        count = 0
        for _ in range(300):
            count = await connection.fetchval(
                "SELECT count(*) FROM guarantee_period_outcome WHERE pool = $1", pool
            )
            if count >= total[0] + n:
                break
            await asyncio.sleep(0.1)
        total[0] = count

    def status(at: datetime, *, spot_in_use: float, idle: int, smallest: float | None) -> PoolStatus:
        return PoolStatus(
            pool=pool, observed_at=at, capacity_gpus=32, idle_gpus=idle, spot_in_use_gpus=spot_in_use,
            hp_running_gpus=0.0, hp_queued_gpus=0.0, hp_placeable_gpus=0.0, spot_smallest_gpus=smallest,
        )  # fmt: skip

    total = [0]

    async def quotas_after(n: int) -> list[object]:
        got = await _read_from(
            kafka_bootstrap, "gfs.quotas", quotas_from, pool.encode(), done=lambda found: len(found) >= n,
            mine=connection,
        )  # fmt: skip
        return [env.payload for env in got[:n]]

    def q1(quota: object) -> float:
        return next(q.quota_gpus for q in quota.quotas if q.guarantee_hours == 1)  # type: ignore[attr-defined]

    try:
        await asyncio.wait_for(ready.wait(), READY_S)
        quotas_from = await _end_offsets(kafka_bootstrap, "gfs.quotas")
        async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
            zero = PoolDemandForecast(
                pool=pool, origin_time=t.replace(minute=0), tenants=1, model_name="persistence",
                model_version="it", horizon=tuple(_hour(h, 5.0) for h in (1, 2, 3, 4)),
            )  # fmt: skip
            await producer.send("gfs.forecasts", wrap(zero, producer="it"))
            for _ in range(300):
                kind = "SELECT count(*) FROM quota_input_latest WHERE pool = $1 AND kind = 'forecast'"
                if await connection.fetchval(kind, pool):
                    break
                await asyncio.sleep(0.1)
            await outcomes(20, 4, t, "a")

            async def send(at: datetime, *, spot_in_use: float, idle: int) -> None:
                payload = status(at, spot_in_use=spot_in_use, idle=idle, smallest=4.0)
                await producer.send("gfs.pools.status", wrap(payload, producer="it"))

            # Spot runs (8 GPUs): eta shrinks once on the 4 failures, to 0.5; the forecast's q90 is
            # 5 HP GPUs (the floor, 0, is below it): spare 27, Q = 0.5 x 27 = 13.5.
            await send(t, spot_in_use=8.0, idle=24)
            # Five minutes on, no new failure: eta stays 0.5.
            await send(t + timedelta(minutes=5), spot_in_use=8.0, idle=24)
            first, second = await quotas_after(2)
            # 30 new failures after that quota: 34 of 50 failed, eta 0.5 x 0.1 / 0.68: the 0.1 floor.
            await outcomes(30, 30, t + timedelta(minutes=9), "b")
            await send(t + timedelta(minutes=10), spot_in_use=8.0, idle=24)
            # Everything ended: nothing runs, 32 idle, a 4-GPU spot task waits.
            await send(t + timedelta(minutes=15), spot_in_use=0.0, idle=32)
            third, fourth = (await quotas_after(4))[2:]
        spare = 32 - 5  # the forecast's q90 (5 GPUs), the floor 0
        assert first.eta == pytest.approx(0.5) and q1(first) == pytest.approx(0.5 * spare)  # type: ignore[attr-defined]
        assert second.eta == pytest.approx(0.5) and q1(second) == pytest.approx(0.5 * spare)  # type: ignore[attr-defined]
        assert third.eta == pytest.approx(0.1) and q1(third) == pytest.approx(0.1 * spare)  # type: ignore[attr-defined]
        # The stall the probe saw is gone: eta 0.1 gives 2.7 < 4; the pool admits the task.
        assert fourth.eta == pytest.approx(0.1) and q1(fourth) == pytest.approx(4.0)  # type: ignore[attr-defined]
    finally:
        stop.set()
        await asyncio.wait_for(service, READY_S)
        await connection.close()

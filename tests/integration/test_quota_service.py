"""The quota service on the real broker and Postgres: pool status, a pool forecast and guarantee
outcomes in; a SpotQuota out equal to the core's quota function on those inputs (worked by hand
on one pool), persisted with the inputs and forecast behind it; a standby waits while the active
instance holds the fence and takes over when it stops."""

from __future__ import annotations

import asyncio
import random
import socket
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp
import asyncpg
import pytest
from kafka_harness import consume_until

from schemas.envelope import wrap
from schemas.forecast import HourlyDemand, PoolDemandForecast
from schemas.pool_status import PoolStatus
from schemas.quota import SpotQuota
from schemas.tasks import GuaranteeOutcome, GuaranteePeriodClosed
from services.platform.kafka.producer import EnvelopeProducer
from services.platform.kafka.topic_admin import TopicsReport
from services.platform.migrations import discover, migrate
from services.quota.service import QuotaService, QuotaServiceSettings, run_quota_service

pytestmark = pytest.mark.integration

READY_S = 30.0


def _dsn(database_url: str, schema: str) -> str:
    parts = urlsplit(database_url)
    query = "&".join(filter(None, [parts.query, urlencode({"search_path": schema})]))
    return urlunsplit(parts._replace(query=query))


async def _migrated(database_url: str, schema: str) -> str:
    dsn = _dsn(database_url, schema)
    connection = await asyncpg.connect(dsn)
    try:
        await migrate(connection, discover())
    finally:
        await connection.close()
    return dsn


def _settings(dsn: str, kafka: str, key: int, **kw: Any) -> QuotaServiceSettings:
    values: dict[str, Any] = {
        "database_url": dsn,
        "kafka_bootstrap_servers": kafka,
        "quota_refresh_s": 0.3,
        "quota_group": f"it-quota-{uuid.uuid4().hex[:8]}",
        "quota_api_port": 0,
        "quota_fence_poll_s": 0.2,
        "quota_fence_key": key,
    }
    return QuotaServiceSettings(**(values | kw))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _hour(h: int, q90: float) -> HourlyDemand:
    return HourlyDemand(hour_ahead=h, mean=q90 - 5.0, std=4.0, quantiles={"0.5": q90 - 5.0, "0.9": q90})


async def test_inputs_in_quota_out_hand_checked(
    registry_topics: TopicsReport, kafka_bootstrap: str, database_url: str, scratch_schema: str
) -> None:
    dsn = await _migrated(database_url, scratch_schema)
    pool = f"P-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC)
    origin = now.replace(minute=0, second=0, microsecond=0)
    stop, ready = asyncio.Event(), asyncio.Event()
    settings = _settings(dsn, kafka_bootstrap, random.getrandbits(48), quota_api_port=_free_port())
    service_task = asyncio.create_task(run_quota_service(settings, stop, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), READY_S)
        async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
            status = PoolStatus(
                pool=pool, observed_at=now, capacity_gpus=100, idle_gpus=30, spot_in_use_gpus=10.0,
                hp_running_gpus=50.0, hp_queued_gpus=5.0,
            )  # fmt: skip
            forecast = PoolDemandForecast(
                pool=pool, origin_time=origin, tenants=2, model_name="lstm", model_version=f"it-{pool}",
                horizon=tuple(_hour(h, q) for h, q in ((1, 40.5), (2, 60.0), (3, 10.0), (4, 10.0))),
            )  # fmt: skip
            await producer.send("gfs.pools.status", wrap(status, producer="it"))
            await producer.send("gfs.forecasts", wrap(forecast, producer="it"))
            # 2 outcomes only: fewer than min_periods (20), so eta stays 1.
            for i, outcome in enumerate((GuaranteeOutcome.SUCCEEDED, GuaranteeOutcome.FAILED)):
                closed = GuaranteePeriodClosed(
                    task_id=f"{pool}-t{i}", pool=pool, period_start=now - timedelta(hours=1, minutes=i),
                    period_end=now - timedelta(minutes=i), outcome=outcome,
                )  # fmt: skip
                await producer.send("gfs.tasks.lifecycle", wrap(closed, producer="it"))

        def with_forecast(env: Any) -> bool:
            p = env.payload
            return isinstance(p, SpotQuota) and p.pool == pool and f"it-{pool}" in p.forecast_version

        received, _ = await consume_until(
            "gfs.quotas",
            f"it-read-{uuid.uuid4().hex[:8]}",
            bootstrap_servers=kafka_bootstrap,
            done=lambda got: any(with_forecast(env) for env, _ in got.items),
        )
        quota = next(env.payload for env, _ in received.items if with_forecast(env))
        # Floor 50 + 5 = 55 over q90 [40.5, 60, 10, 10]: usage [55, 60, 55, 55], spare
        # [45, 40, 45, 45], eta 1: Q(1) = 45, Q(2) = 40, Q(4) = 40.
        assert {q.guarantee_hours: q.quota_gpus for q in quota.quotas} == {1: 45.0, 2: 40.0, 4: 40.0}
        assert (quota.eta, quota.capacity_gpus) == (1.0, 100)
        # The SRE API says the same, and /metrics exposes it in Prometheus format.
        base = f"http://127.0.0.1:{settings.quota_api_port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/quotas") as response:
                shown = (await response.json())[pool]
            for _ in range(100):  # the lag probe measures once at start, then every 10 s
                async with http.get(f"{base}/metrics") as response:
                    metrics = await response.text()
                if "gfs_consumer_lag{" in metrics:
                    break
                await asyncio.sleep(0.1)
            async with http.get(f"{base}/readyz") as response:
                assert response.status == 200
        assert shown["quota_gpus"] == {"1": 45.0, "2": 40.0, "4": 40.0}
        assert shown["forecast"]["p_quantile"] == [40.5, 60.0, 10.0, 10.0]
        assert 'gfs_quota_gpus{guarantee_hours="1",' in metrics and f'pool="{pool}"' in metrics
        # The outcomes sit behind everything earlier tests left on gfs.tasks.lifecycle (a new
        # group reads it from the beginning): wait until both are recorded.
        connection = await asyncpg.connect(dsn)
        try:
            for _ in range(1200):
                if await connection.fetchval("SELECT count(*) FROM guarantee_period_outcome WHERE pool = $1", pool) >= 2:
                    break
                await asyncio.sleep(0.1)
        finally:
            await connection.close()
    finally:
        stop.set()
        await asyncio.wait_for(service_task, READY_S)
    connection = await asyncpg.connect(dsn)
    try:
        row = await connection.fetchrow(
            "SELECT quotas, inputs, forecast FROM quota_version WHERE pool = $1 AND forecast IS NOT NULL "
            "ORDER BY version DESC LIMIT 1",
            pool,
        )
        count = "SELECT count(*) FROM guarantee_period_outcome WHERE pool = $1"
        outcomes = await connection.fetchval(count, pool)
        pending = await connection.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NULL")
    finally:
        await connection.close()
    assert row is not None and '"1": 45.0' in row["quotas"]
    assert '"hp_observed": 55.0' in row["inputs"] and f"it-{pool}" in row["forecast"]
    assert outcomes == 2
    assert pending == 0


async def test_a_standby_waits_for_the_fence_and_takes_over(
    registry_topics: TopicsReport, kafka_bootstrap: str, database_url: str, scratch_schema: str
) -> None:
    dsn = await _migrated(database_url, scratch_schema)
    key = random.getrandbits(48)
    first_stop, first_ready = asyncio.Event(), asyncio.Event()
    second_stop, second_ready = asyncio.Event(), asyncio.Event()
    loaded: list[QuotaService] = []
    first = asyncio.create_task(
        run_quota_service(_settings(dsn, kafka_bootstrap, key), first_stop, ready=first_ready)
    )
    await asyncio.wait_for(first_ready.wait(), READY_S)
    second = asyncio.create_task(
        run_quota_service(
            _settings(dsn, kafka_bootstrap, key), second_stop, ready=second_ready, started=loaded.append
        )
    )
    try:
        await asyncio.sleep(1.5)  # several fence polls
        assert not second_ready.is_set() and loaded == []
        first_stop.set()
        await asyncio.wait_for(first, READY_S)
        t0 = asyncio.get_running_loop().time()
        await asyncio.wait_for(second_ready.wait(), READY_S)
        took = asyncio.get_running_loop().time() - t0
        assert len(loaded) == 1
        assert took < 5.0, f"standby took {took:.1f}s to take over"
    finally:
        first_stop.set()
        second_stop.set()
        await asyncio.gather(first, second, return_exceptions=True)

"""The forecast stream's default series (issue 35): the servable HP demand the preemption service
publishes on gfs.pools.demand, forecast on the real broker by a real Faust worker (worked by hand),
with a malformed record on that topic dead-lettered with its reason while good ones flow."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from forecast_worker import _committed_to_the_end, _forecasts_of, _letter_of, _stream, _wait_for_log
from kafka_harness import _end_offsets

from gfs.schemas.envelope import wrap
from gfs.schemas.forecast import DemandForecast, PoolDemandForecast
from gfs.schemas.pool_demand import PoolDemandLevel
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport

pytestmark = pytest.mark.integration

LEVELS = "gfs.pools.demand"
BAD = b'{"event_type":"PoolDemandLevel","payload":{"pool":"x"}}'


@pytest.fixture
def stream(kafka_bootstrap: str, tmp_path: Path, registry_topics: TopicsReport) -> Iterator[tuple[str, Path]]:
    servable = {"FORECAST_DEMAND_SOURCE": "servable"}
    with _stream(kafka_bootstrap, tmp_path, "it-servable", **servable) as (app_id, log, _):
        yield app_id, log


async def test_published_levels_become_forecasts_of_servable_demand(
    stream: tuple[str, Path], kafka_bootstrap: str
) -> None:
    app_id, log = stream
    run = uuid.uuid4().hex[:8]
    pool = f"SV-{run}"
    t0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    at = lambda minutes: t0 + timedelta(minutes=minutes)  # noqa: E731
    forecasts_from = await _end_offsets(kafka_bootstrap, "gfs.forecasts")
    letters_from = await _end_offsets(kafka_bootstrap, "gfs.deadletter")
    barrier = (LEVELS, f"{app_id}-demand-by-pool")
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        # A malformed record first: once the worker dead-letters it, it reads the topic in order.
        where = await producer.send_raw(LEVELS, value=BAD, key=pool.encode())
        await _wait_for_log(log, f"dead-lettered {LEVELS}[{where.partition}]@{where.offset}:")
        await _committed_to_the_end(kafka_bootstrap, app_id, barrier, timeout_s=300.0)
        # Hour 0: x servable 8 from minute 10. Hour 1: y's queued gang becomes servable (4) from
        # minute 70 to 100 (pool 12). Hour 2: x 8 alone. The levels at minute 180 close hours 1
        # and 2 by event time (wall-clock ticks are hourly and backdated events come first).
        steps = [(10, {"x": 8.0}), (70, {"x": 8.0, "y": 4.0}), (100, {"x": 8.0}), (180, {"x": 10.0})]
        for minute, levels in steps:
            level = PoolDemandLevel(pool=pool, at=at(minute), levels=levels)
            await producer.send(LEVELS, wrap(level, producer="it", occurred_at=at(minute)))
            await _committed_to_the_end(kafka_bootstrap, app_id, barrier)

    origin = t0 + timedelta(hours=3)
    _, found = await _forecasts_of(kafka_bootstrap, forecasts_from, pool, origin, count=3)
    mine = [payload for payload, _ in found]
    pool_fc = next(p for p in mine if isinstance(p, PoolDemandForecast))
    tenants = {p.tenant: p for p in mine if isinstance(p, DemandForecast)}
    # Three hours of history: the LSTM's documented fallback (persistence of the last completed
    # hour, hour 2, flagged): x 8, y 0, pool 8. Hour 1's peak (12) shows in the history, not here.
    assert pool_fc.fallback and pool_fc.tenants == 2
    assert tenants["x"].horizon[0].quantiles["0.5"] == 8.0
    assert tenants["y"].horizon[0].quantiles["0.5"] == 0.0
    assert pool_fc.horizon[0].quantiles["0.5"] == 8.0

    letter = await _letter_of(
        kafka_bootstrap, letters_from, app_id, lambda p: base64.b64decode(p.original) == BAD
    )
    assert letter.source_topic == LEVELS and "payload" in letter.error

"""What `gfs demo live` (services/demo/live.py) prepares on the Kafka topics for a run: the quota
service's consumer group committed at the topics' end (so it quotes from the first seconds), and,
on the wall clock, a flat bootstrap forecast per pool (no forecast hour closes in a few minutes)."""

from __future__ import annotations

import asyncio
import contextlib

from schemas.topics import FORECASTS_TOPIC
from services.platform.settings import PlatformSettings


async def _start_at_end(bootstrap: list[str] | str, group: str, topics: tuple[str, ...]) -> None:
    """Commit, for the consumer group `group` (not yet started), the current end of `topics`: it
    starts there instead of at the earliest offset."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from schemas.topics import topic

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(t, i) for t in topics for i in range(topic(t).partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        await consumer.commit({tp: await consumer.position(tp) for tp in partitions})
    finally:
        await consumer.stop()


async def _bootstrap_forecasts(
    settings: PlatformSettings, rows: list[dict[str, str]], stop: asyncio.Event
) -> None:
    """The forecast stream forecasts at hour boundaries from the hours it has seen; a demo of a few
    minutes has none yet. Until it has, the demo publishes, as the stream's persistence fallback
    would (flagged `fallback`), each pool's HP demand of the sample's first instant: 60% of the
    pool, so the quota admits spot tasks and HP arrivals have to preempt some."""
    from datetime import UTC, datetime

    from schemas.envelope import wrap
    from schemas.forecast import HourlyDemand, PoolDemandForecast
    from services.platform.kafka.producer import EnvelopeProducer

    capacity: dict[str, int] = {}
    for r in rows:
        capacity[r["gpu_model"]] = capacity.get(r["gpu_model"], 0) + int(r["gpu_capacity_num"])
    async with EnvelopeProducer(
        bootstrap_servers=settings.bootstrap_servers, client_id="gfs-demo"
    ) as producer:
        while not stop.is_set():
            now = datetime.now(UTC)
            for pool, gpus in capacity.items():
                hp = 0.6 * gpus
                horizon = tuple(
                    HourlyDemand(
                        hour_ahead=h, mean=hp, std=0.05 * gpus, quantiles={"0.5": hp, "0.9": hp + 0.06 * gpus}
                    )
                    for h in range(1, 5)
                )
                forecast = PoolDemandForecast(
                    pool=pool,
                    origin_time=now.replace(minute=0, second=0, microsecond=0),
                    tenants=1,
                    model_name="demo-bootstrap",
                    model_version=str(int(now.timestamp())),
                    horizon=horizon,
                    fallback=True,
                )
                await producer.send(FORECASTS_TOPIC, wrap(forecast, producer="gfs-demo"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=60.0)

"""What `gfs demo live` (services/demo/live.py) publishes on the Kafka topics for a run on the wall
clock: a flat bootstrap forecast per pool (no forecast hour closes in a few minutes). The run's
consumer groups start at the topics' end with the tools' `gfs.services.toolkit.consumer_groups`."""

from __future__ import annotations

import asyncio
import contextlib

from gfs.schemas.topics import FORECASTS_TOPIC
from gfs.services.platform.settings import PlatformSettings
from gfs.services.toolkit.forecasts import flat_forecast


async def _bootstrap_forecasts(
    settings: PlatformSettings, rows: list[dict[str, str]], stop: asyncio.Event
) -> None:
    """The forecast stream forecasts at hour boundaries from the hours it has seen; a demo of a few
    minutes has none yet. Until it has, the demo publishes, as the stream's persistence fallback
    would (flagged `fallback`), each pool's HP demand of the sample's first instant: 60% of the
    pool, so the quota admits spot tasks and HP arrivals have to preempt some."""
    from datetime import UTC, datetime

    from gfs.schemas.envelope import wrap
    from gfs.services.platform.kafka.producer import EnvelopeProducer

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
                forecast = flat_forecast(
                    pool,
                    hp,
                    std=0.05 * gpus,
                    p90=hp + 0.06 * gpus,
                    model_name="demo-bootstrap",
                    now=now,
                    fallback=True,
                )
                await producer.send(FORECASTS_TOPIC, wrap(forecast, producer="gfs-demo"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=60.0)

"""Running the forecast stream: the worker process around the app (app.py has the topology)."""

from __future__ import annotations

import asyncio
import contextlib

import faust

from gfs.services.forecast.app import make_app
from gfs.services.forecast.settings import ForecastServiceSettings


async def declare_internal_topic(settings: ForecastServiceSettings) -> None:
    """Create the internal demand-by-pool topic before the worker's consumer subscribes. Faust
    declares it while its consumer starts; on a fresh broker the consumer may subscribe first, see
    "not found in cluster metadata", and not be assigned the topic until its next metadata refresh
    (minutes), so the demand agent sits idle (seen in CI as forecasts that never come)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    admin = AIOKafkaAdminClient(
        bootstrap_servers=list(settings.bootstrap_servers), **settings.kafka_security.client_kwargs()
    )
    await admin.start()
    try:
        name = f"{settings.forecast_app_id}-demand-by-pool"
        if name not in set(await admin.list_topics()):
            topic = NewTopic(name, num_partitions=settings.forecast_partitions, replication_factor=1)
            with contextlib.suppress(TopicAlreadyExistsError):  # another worker made it first
                await admin.create_topics([topic])
    finally:
        await admin.close()


def run_forecast_worker(settings: ForecastServiceSettings) -> None:
    """Run the app in a Faust worker until SIGINT/SIGTERM."""
    if settings.forecast_artifact is not None:
        import torch  # the model runs here; cap its threads on a shared machine

        torch.set_num_threads(settings.forecast_torch_threads)
    settings.forecast_datadir.mkdir(parents=True, exist_ok=True)
    asyncio.run(declare_internal_topic(settings))
    app = make_app(settings)
    if settings.gfs_log_format == "json":
        # Our handler (JSON lines with trace ids) only: Faust's worker must not reconfigure logging.
        from gfs.services.platform.logs import configure_logging

        configure_logging(service="forecast", log_format="json", level=settings.gfs_log_level)
        worker = faust.Worker(app, loglevel=settings.gfs_log_level, override_logging=False)
    else:
        worker = faust.Worker(app, loglevel=settings.gfs_log_level)
    worker.execute_from_commandline()

"""Running the forecast stream: the worker process around the app (app.py has the topology)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import faust

from gfs.services.forecast.app import TABLES, make_app
from gfs.services.forecast.settings import ForecastServiceSettings


async def declare_internal_topics(settings: ForecastServiceSettings, timeout_s: float = 60.0) -> None:
    """Create the internal topics before the worker starts, and wait until the broker's metadata
    shows their partitions: the demand-by-pool topic and each table's changelog (compacted, as
    Faust would make it).
    - demand-by-pool: Faust declares it while its consumer starts; on a fresh broker the consumer
      may subscribe first, see "not found in cluster metadata", and not be assigned the topic until
      its next metadata refresh (minutes), so the demand agent sits idle (seen in CI as forecasts
      that never come).
    - the changelogs: Faust creates them as a table starts and then checks their partitions against
      the table's; read while the broker's metadata still had none, it raised `PartitionsMismatch`
      ("has 0 partitions") and the table's agent crashed on every restart (seen in CI under load:
      the hours never closed). A topic that exists is left as it is (another worker made it)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    app_id, partitions = settings.forecast_app_id, settings.forecast_partitions
    wanted: dict[str, dict[str, str]] = {f"{app_id}-demand-by-pool": {}}
    wanted |= {f"{app_id}-{table}-changelog": {"cleanup.policy": "compact"} for table in TABLES}
    admin = AIOKafkaAdminClient(
        bootstrap_servers=list(settings.bootstrap_servers), **settings.kafka_security.client_kwargs()
    )
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        for name, config in wanted.items():
            if name not in existing:
                topic = NewTopic(name, num_partitions=partitions, replication_factor=1, topic_configs=config)
                with contextlib.suppress(TopicAlreadyExistsError):  # another worker made it first
                    await admin.create_topics([topic])
        deadline = time.monotonic() + timeout_s
        while not await _all_have_partitions(admin, list(wanted)) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def _all_have_partitions(admin: Any, names: list[str]) -> bool:
    described = await admin.describe_topics(names)
    return len(described) == len(names) and all(
        t.get("error_code", 0) == 0 and t.get("partitions") for t in described
    )


def run_forecast_worker(settings: ForecastServiceSettings) -> None:
    """Run the app in a Faust worker until SIGINT/SIGTERM."""
    if settings.forecast_artifact is not None:
        import torch  # the model runs here; cap its threads on a shared machine

        torch.set_num_threads(settings.forecast_torch_threads)
    settings.forecast_datadir.mkdir(parents=True, exist_ok=True)
    asyncio.run(declare_internal_topics(settings))
    app = make_app(settings)
    if settings.gfs_log_format == "json":
        # Our handler (JSON lines with trace ids) only: Faust's worker must not reconfigure logging.
        from gfs.services.platform.logs import configure_logging

        configure_logging(service="forecast", log_format="json", level=settings.gfs_log_level)
        worker = faust.Worker(app, loglevel=settings.gfs_log_level, override_logging=False)
    else:
        worker = faust.Worker(app, loglevel=settings.gfs_log_level)
    worker.execute_from_commandline()

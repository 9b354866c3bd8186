"""`gfs serve forecast`: the Faust stream from task events to demand forecasts.

Topology (docs/live-pipeline.md; every state change goes through a changelogged table):

    gfs.tasks.submit + gfs.tasks.lifecycle   (raw bytes, co-partitioned by task id, 6 partitions)
      -> agent `tasks`: decode with the registry (bad records to gfs.deadletter with the reason),
         table `tasks` (by task id): size, tenant, whether its GPUs are counted
      -> internal topic `<app id>-demand-by-pool` (re-keyed by pool, 6 partitions, as the sources)
      -> agent `demand`: table `pool-demand` (by pool): running + queued HP per tenant, sampled at
         minute boundaries; table `pool-history` (by pool): completed hourly peaks
      -> on every completed hour: DemandForecast per tenant and PoolDemandForecast per pool on
         gfs.forecasts, from the shipped LSTM (persistence when it fails, flagged)
    timer every `forecast_tick_s`: a tick per known pool on the re-keyed topic, so minutes and hours
    close on the wall clock when no task event arrives.

Tables are re-keyed before being updated (a table is partitioned like the stream that updates it),
so a pool's counts never split across partitions. Times are the events' `occurred_at` (a late event
is applied when it arrives) and the wall clock for ticks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import faust
from opentelemetry import trace
from opentelemetry.metrics import Observation

from schemas.envelope import wrap
from schemas.topics import DEAD_LETTER_TOPIC, decode, encode, key_of
from services.forecast.forecasting import PoolHistory, StreamForecaster
from services.forecast.pipeline import Delta, PoolDemand, TaskRecord, apply_task_event
from services.platform.kafka.dead_letter import FailedRecord, build_dead_letter, describe_error
from services.platform.metrics import configure_metrics
from services.platform.settings import PlatformSettings
from services.platform.tracing import extract_context, inject_headers

log = logging.getLogger(__name__)

SOURCES = ("gfs.tasks.submit", "gfs.tasks.lifecycle")
FORECASTS = "gfs.forecasts"
PRODUCER = "gfs-forecast"
TRACER = "gfs.forecast"
SHIPPED_ARTIFACT = Path(__file__).resolve().parent / "model" / "lstm-observed"


class ForecastServiceSettings(PlatformSettings):
    forecast_app_id: str = "gfs-forecast"
    forecast_artifact: Path | None = SHIPPED_ARTIFACT  # None: persistence only (flagged)
    forecast_store: str = "rocksdb://"  # durable tables; "memory://" keeps them in the changelog only
    forecast_datadir: Path = Path(".stack/forecast")
    forecast_tick_s: float = 60.0
    forecast_history_hours: int = 14 * 24
    forecast_torch_threads: int = 1
    forecast_refit_hour: int = 3  # UTC hour of the daily warm-start refit
    forecast_partitions: int = 6  # the source topics' partition count
    # at_least_once: a redelivered task event is a no-op (the task record says whether it counts).
    # exactly_once would commit changelogs, re-keyed records, forecasts and offsets in one Kafka
    # transaction, but a worker killed mid-transaction then blocks every read_committed consumer
    # of gfs.forecasts (the quota service) until the broker times the transaction out.
    forecast_processing_guarantee: str = "at_least_once"
    forecast_web_port: int = 6066  # /metrics on loopback (Faust's web server); 0: none
    forecast_web_host: str = "127.0.0.1"


def make_app(settings: ForecastServiceSettings, forecaster: StreamForecaster | None = None) -> faust.App:
    """Build the app and its agents (nothing connects until a worker starts it)."""
    forecaster = forecaster or StreamForecaster(settings.forecast_artifact)
    app = faust.App(
        settings.forecast_app_id,
        broker=[f"kafka://{server}" for server in settings.bootstrap_servers],
        store=settings.forecast_store,
        datadir=str(settings.forecast_datadir),
        topic_partitions=settings.forecast_partitions,
        topic_replication_factor=1,
        web_enabled=settings.forecast_web_port > 0,
        web_port=settings.forecast_web_port or 6066,
        web_bind=settings.forecast_web_host,
        web_host=settings.forecast_web_host,
        producer_acks=-1,
        processing_guarantee=settings.forecast_processing_guarantee,
        # A new stream reads the retained task topics from the start: that is its state.
        consumer_auto_offset_reset="earliest",
    )
    raw = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
    sources = app.topic(*SOURCES, **raw)
    by_pool = app.topic(
        f"{settings.forecast_app_id}-demand-by-pool",
        key_type=bytes,
        key_serializer="raw",
        value_serializer="json",
        partitions=settings.forecast_partitions,
        internal=True,
    )
    forecasts = app.topic(FORECASTS, **raw)
    dead = app.topic(DEAD_LETTER_TOPIC, **raw)
    tasks = app.Table("tasks", partitions=settings.forecast_partitions, key_type=str)
    demand = app.Table("pool-demand", partitions=settings.forecast_partitions, key_type=str)
    history = app.Table("pool-history", partitions=settings.forecast_partitions, key_type=str)
    known_pools: set[str] = set()
    last_context: dict[str, Any] = {}
    tracer = trace.get_tracer(TRACER)
    counters = {"dead_lettered": 0, "skipped": 0, "forecasts": 0}  # read by /metrics

    async def dead_letter(topic_name: str, event: Any, exc: Exception) -> None:
        message = event.message
        failed = FailedRecord(topic=topic_name, partition=message.partition, offset=message.offset,
                              value=event.value, consumer_group=settings.forecast_app_id)  # fmt: skip
        letter = build_dead_letter(failed, error=exc, failed_at=datetime.now(UTC), producer=PRODUCER)
        await dead.send(key=key_of(letter), value=encode(letter))
        counters["dead_lettered"] += 1
        log.warning(
            "dead-lettered %s[%d]@%d: %s", topic_name, message.partition, message.offset, describe_error(exc)
        )

    @app.agent(sources)
    async def on_task_events(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            topic_name = event.message.topic
            try:
                envelope = decode(topic_name, event.value or b"")
            except ValueError as exc:
                await dead_letter(topic_name, event, exc)
                continue
            payload = envelope.payload
            task_id = getattr(payload, "task_id", None)
            if not isinstance(task_id, str):
                counters["skipped"] += 1
                continue
            parent = extract_context(list(event.message.headers or ()))
            with tracer.start_as_current_span(
                "forecast.ingest", context=parent, attributes={"gfs.task_id": task_id}
            ):
                try:
                    stored = tasks.get(task_id)
                    record = None if stored is None else TaskRecord.from_json(stored)
                    updated, delta = apply_task_event(record, payload, envelope.occurred_at.timestamp())
                except Exception as exc:  # decodable but meaningless: log and skip, never crash
                    log.warning("skipped %s event of task %s: %r", envelope.event_type, task_id, exc)
                    counters["skipped"] += 1
                    continue
                if updated is not None and updated != record:
                    tasks[task_id] = updated.to_json()
                if delta is not None:
                    value = {"tenant": delta.tenant, "gpus": delta.gpus, "at": delta.at_s}
                    await by_pool.send(key=delta.pool.encode(), value=value, headers=inject_headers(()))

    @app.agent(by_pool)
    async def on_pool_demand(stream: faust.StreamT[Any]) -> None:
        async for event in stream.events():
            pool = (event.key or b"").decode()
            value = event.value
            known_pools.add(pool)
            parent = extract_context(list(event.message.headers or ()))
            stored = demand.get(pool)
            state = PoolDemand() if stored is None else PoolDemand.from_json(stored)
            if value.get("tick"):
                closed = state.advance(float(value["at"]))
            else:
                last_context[pool] = parent
                closed = state.apply(Delta(pool, value["tenant"], float(value["gpus"]), float(value["at"])))
            demand[pool] = state.to_json()
            if not closed:
                continue
            log.info("pool %s: hours %s closed", pool, [h.hour for h in closed])
            stored_history = history.get(pool)
            hist = (
                PoolHistory(max_hours=settings.forecast_history_hours)
                if stored_history is None
                else PoolHistory.from_json(stored_history)
            )
            added = [hour for hour in closed if hist.add(hour)]
            history[pool] = hist.to_json()
            if not added:
                continue
            with tracer.start_as_current_span("forecast.predict", context=last_context.get(pool, parent),
                                              attributes={"gfs.pool": pool}):  # fmt: skip
                if any(h.hour % 24 == settings.forecast_refit_hour for h in added):
                    loop = asyncio.get_running_loop()
                    await loop.run_in_executor(None, forecaster.refit, pool, hist)
                out = forecaster.forecast(pool, hist)
                if out is None:
                    continue
                tenant_forecasts, pool_forecast = out
                headers = inject_headers(())
                for payload in (*tenant_forecasts, pool_forecast):
                    envelope = wrap(payload, producer=PRODUCER)
                    await forecasts.send(key=key_of(envelope), value=encode(envelope), headers=headers)
                counters["forecasts"] += 1

    metrics = configure_metrics(PRODUCER)
    meter = metrics.meter(TRACER)
    for key, help_text in (
        ("dead_lettered", "records sent to the dead-letter topic"),
        ("skipped", "decodable events the stream could not use"),
        ("forecasts", "hourly forecast rounds published (per pool)"),
    ):
        meter.create_observable_counter(
            f"gfs_forecast_{key}",
            callbacks=[lambda _, k=key: [Observation(counters[k])]],
            description=help_text,
        )
    meter.create_observable_counter(
        "gfs_forecast_fallbacks",
        callbacks=[lambda _: [Observation(forecaster.fallbacks)]],
        description="forecasts answered by persistence because the model failed",
    )

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        # aiohttp refuses a charset inside content_type: the format version only.
        return web.bytes(metrics.render(), content_type="text/plain; version=0.0.4")

    @app.timer(settings.forecast_tick_s)
    async def tick() -> None:
        now = time.time()
        for pool in sorted(known_pools | {str(k) for k in demand}):
            await by_pool.send(key=pool.encode(), value={"tick": True, "at": now})

    return app


def run_forecast_worker(settings: ForecastServiceSettings) -> None:
    """Run the app in a Faust worker until SIGINT/SIGTERM."""
    if settings.forecast_artifact is not None:
        import torch  # the model runs here; cap its threads on a shared machine

        torch.set_num_threads(settings.forecast_torch_threads)
    settings.forecast_datadir.mkdir(parents=True, exist_ok=True)
    app = make_app(settings)
    worker = faust.Worker(app, loglevel="INFO")
    worker.execute_from_commandline()

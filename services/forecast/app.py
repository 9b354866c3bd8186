"""`gfs serve forecast`: the Faust stream from task events to demand forecasts.

Topology (docs/live-pipeline.md; every state change goes through a changelogged table):

    gfs.pools.demand (the default series, "servable", issue 35)
      -> agent `levels`: decode (bad records to gfs.deadletter with the reason), the pool's
         servable levels per tenant as the preemption service published them
      -> internal topic `<app id>-demand-by-pool` (keyed by pool)
    gfs.tasks.submit + gfs.tasks.lifecycle   (raw bytes, co-partitioned by task id, 6 partitions;
                                              the "observed" series only)
      -> agent `tasks`: decode with the registry (bad records to gfs.deadletter with the reason),
         table `tasks` (by task id): size, tenant, whether its GPUs are counted
      -> internal topic `<app id>-demand-by-pool` (re-keyed by pool, 6 partitions, as the sources)
    internal topic `<app id>-demand-by-pool`
      -> agent `demand`: table `pool-demand` (by pool): HP levels per tenant, sampled at
         minute boundaries; table `pool-history` (by pool): completed hourly peaks
      -> on every completed hour: DemandForecast per tenant and PoolDemandForecast per pool on
         gfs.forecasts, from the shipped LSTM (persistence when it fails, flagged); on a pool's
         first demand change, before any hour of it completed: the empty-history persistence
         forecast (zeros, flagged), as the simulator forecasts a pool's first hour
    clock (`forecast_clock`):
      wall  (default) timer every `forecast_tick_s`: a tick per known pool on the re-keyed topic, so
            minutes and hours close on the wall clock when no task event arrives;
      topic agent `clock` on gfs.control.clock (schemas/clock.py): each ADVANCE tick sends a tick
            at its `at` per known pool instead, so the hours before `at` close and their forecasts
            go out; offsets are committed every `forecast_commit_interval_s` (0.1 s by default),
            so a driver waiting for committed == end offsets sees the stream settle.

Tables are re-keyed before being updated (a table is partitioned like the stream that updates it),
so a pool's counts never split across partitions. Times are the events' `occurred_at` (a late event
is applied when it arrives) and the wall clock (or the clock topic's `at`) for ticks.

Faust commits an offset only after flushing the producer, so whatever an event caused (re-keyed
records, ticks, forecasts) is on the broker before the event counts as consumed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import faust
from opentelemetry import context as otel_context
from opentelemetry import trace

from gfs.schemas.clock import ClockPhase, ClockTick
from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.forecast import DemandForecast, PoolDemandForecast
from gfs.schemas.topics import (
    CLOCK_TOPIC,
    DEAD_LETTER_TOPIC,
    FORECASTS_TOPIC,
    POOL_DEMAND_TOPIC,
    TASK_LIFECYCLE_TOPIC,
    TASK_SUBMIT_TOPIC,
    decode,
    encode,
    key_of,
)
from gfs.services.forecast import pipeline
from gfs.services.forecast.api_spec import API
from gfs.services.forecast.forecasting import HOUR, PoolHistory, StreamForecaster
from gfs.services.forecast.kafka_auth import broker_credentials
from gfs.services.forecast.metrics import register_metrics
from gfs.services.forecast.pipeline import Delta, PoolDemand, TaskRecord, apply_task_event
from gfs.services.forecast.settings import ForecastServiceSettings
from gfs.services.forecast.task_expiry import EndedTasks, delete_due
from gfs.services.platform import deployment as deployment_ids
from gfs.services.platform.kafka.dead_letter import DeadLetterPublisher
from gfs.services.platform.kafka_security import announce
from gfs.services.platform.metrics import configure_metrics
from gfs.services.platform.openapi import render
from gfs.services.platform.tracing import extract_context, inject_headers

log = logging.getLogger(__name__)

SOURCES = (TASK_SUBMIT_TOPIC, TASK_LIFECYCLE_TOPIC)
LEVELS = POOL_DEMAND_TOPIC
FORECASTS = FORECASTS_TOPIC
HOUR_S = HOUR.total_seconds()
PRODUCER = "gfs-forecast"
# The tables (each changelogged to "<app id>-<name>-changelog"; worker.py creates those first).
TASKS_TABLE, DEMAND_TABLE, HISTORY_TABLE = "tasks", "pool-demand", "pool-history"
TABLES = (TASKS_TABLE, DEMAND_TABLE, HISTORY_TABLE)
TRACER = "gfs.forecast"


def make_app(settings: ForecastServiceSettings, forecaster: StreamForecaster | None = None) -> faust.App:
    """Build the app and its agents (nothing connects until a worker starts it)."""
    forecaster = forecaster or StreamForecaster(settings.forecast_artifact)
    security = settings.kafka_security  # the `forecast` principal on a secured broker
    app = faust.App(
        settings.forecast_app_id,
        broker=[f"kafka://{server}" for server in settings.bootstrap_servers],
        # Faust's every client (consumers, producer, changelog topic creation) takes these.
        broker_credentials=broker_credentials(security),
        store=settings.forecast_store,
        datadir=str(settings.forecast_datadir),
        topic_partitions=settings.forecast_partitions,
        topic_replication_factor=1,
        web_enabled=settings.forecast_web_port > 0,
        web_port=settings.forecast_web_port or 6066,
        web_bind=settings.bind_host(settings.forecast_web_host),
        web_host=settings.bind_host(settings.forecast_web_host),
        producer_acks=-1,
        processing_guarantee=settings.forecast_processing_guarantee,
        broker_commit_interval=settings.commit_interval_s,
        # A new stream reads the retained task topics from the start: that is its state.
        consumer_auto_offset_reset="earliest",
    )

    def raw(*names: str) -> faust.TopicT:
        return app.topic(
            *names, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )

    sources = raw(*SOURCES)
    by_pool = app.topic(
        f"{settings.forecast_app_id}-demand-by-pool",
        key_type=bytes,
        key_serializer="raw",
        value_serializer="json",
        partitions=settings.forecast_partitions,
        internal=True,
    )
    forecasts = raw(FORECASTS)
    dead = raw(DEAD_LETTER_TOPIC)
    tasks = app.Table(TASKS_TABLE, partitions=settings.forecast_partitions, key_type=str)
    servable = settings.forecast_demand_source == "servable"
    demand = app.Table(DEMAND_TABLE, partitions=settings.forecast_partitions, key_type=str)
    history = app.Table(HISTORY_TABLE, partitions=settings.forecast_partitions, key_type=str)
    known_pools: set[str] = set()
    # Pools whose first forecast is settled (sent, or hours completed): skips a table read per event.
    first_forecast_done: set[str] = set()
    last_context: dict[str, Any] = {}
    tracer = trace.get_tracer(TRACER)
    counters = {
        "dead_lettered": 0,
        "skipped": 0,
        "forecasts": 0,
        "tasks_forgotten": 0,
        "foreign": 0,
    }  # /metrics
    ended_tasks = EndedTasks(settings.forecast_task_keep_s)  # forgotten an hour on (task_expiry.py)

    @app.on_partitions_assigned.connect  # type: ignore[misc]  # faust's signals are untyped
    async def _reseed(_app: Any, assigned: Any = None, **_: Any) -> None:
        ended_tasks.reset()  # partitions moved: learn the ended records from the table again

    origin = settings.forecast_history_origin
    origin_hour = None if origin is None else int(origin.timestamp() // HOUR_S)

    def load_history(pool: str) -> PoolHistory:
        stored = history.get(pool)
        if stored is None:
            return PoolHistory(max_hours=settings.forecast_history_hours, first_hour=origin_hour)
        return PoolHistory.from_json(stored)

    async def publish(out: tuple[list[DemandForecast], PoolDemandForecast], at_s: float) -> None:
        # On the topic clock the forecast happened at the clock's time (the tick or event that
        # closed the hour), so a replay's envelopes do not depend on how fast it ran.
        occurred_at = datetime.fromtimestamp(at_s, UTC) if settings.topic_clock else None
        tenant_forecasts, pool_forecast = out
        headers = deployment_ids.stamped(inject_headers(()), settings.gfs_deployment)
        for payload in (*tenant_forecasts, pool_forecast):
            envelope = wrap(payload, producer=PRODUCER, occurred_at=occurred_at)
            await forecasts.send(key=key_of(envelope), value=encode(envelope), headers=headers)
        counters["forecasts"] += 1

    async def first_forecast(
        pool: str, tenants: list[str], at_s: float, context: otel_context.Context
    ) -> None:
        """Before a pool's first hour completes, its quota would have no forecast and fall back to
        the idle GPUs, where the simulator's persistence forecasts zeros from the empty history
        (so its quota counts the HP running and queued from the first hour): send those zeros once,
        from the hour of the pool's first demand change."""
        hist = load_history(pool)
        if not hist.pool and not hist.empty_forecast_sent:
            with tracer.start_as_current_span(
                "forecast.predict", context=context, attributes={"gfs.pool": pool, "gfs.first_hour": True}
            ):
                await publish(forecaster.first_hour_forecast(pool, tenants, int(at_s // HOUR_S)), at_s)
            # Marked after the send: a crash in between sends it again (same origin; harmless).
            hist.empty_forecast_sent = True
            history[pool] = hist.to_json()
        first_forecast_done.add(pool)

    class FaustDeadLetters:
        """The platform's dead-letter sink over Faust's raw dead-letter topic."""

        async def send(self, topic_name: str, envelope: Envelope[Any]) -> object:
            headers = deployment_ids.stamped((), settings.gfs_deployment)
            return await dead.send(key=key_of(envelope), value=encode(envelope), headers=headers)

    letters = DeadLetterPublisher(
        sink=FaustDeadLetters(), consumer_group=settings.forecast_app_id, producer=PRODUCER
    )

    async def dead_letter(topic_name: str, event: Any, exc: Exception) -> None:
        message = event.message
        consumed = SimpleNamespace(
            topic=topic_name, partition=message.partition, offset=message.offset, value=event.value
        )
        letter = await letters.publish(consumed, exc)
        counters["dead_lettered"] += 1
        log.warning(
            "dead-lettered %s[%d]@%d: %s", topic_name, message.partition, message.offset, letter.payload.error
        )

    @app.agent(sources)
    async def on_task_events(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            topic_name = event.message.topic
            if deployment_ids.foreign(event.message.headers, settings.gfs_deployment):
                counters["foreign"] += 1  # another deployment's task (services/platform/deployment.py)
                continue
            try:
                envelope = decode(topic_name, event.value or b"")
                if not settings.topic_clock:
                    occurred_s = envelope.occurred_at.timestamp()
                    pipeline.check_not_ahead(occurred_s, time.time(), settings.forecast_max_ahead_s)
            except ValueError as exc:  # a FutureEventError is one too
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
                partition = event.message.partition
                now_s = ended_tasks.now(envelope.occurred_at.timestamp(), topic_clock=settings.topic_clock)
                if updated is not None and updated != record:
                    tasks[task_id] = updated.to_json()
                    if updated.ended and not (record is not None and record.ended):
                        ended_tasks.add(partition, now_s, task_id)
                counters["tasks_forgotten"] += delete_due(
                    tasks, ended_tasks, partition, now_s, settings.forecast_partitions
                )
                if delta is not None and not servable:
                    value = {"tenant": delta.tenant, "gpus": delta.gpus, "at": delta.at_s}
                    await by_pool.send(key=delta.pool.encode(), value=value, headers=inject_headers(()))

    @app.agent(raw(LEVELS))
    async def on_levels(stream: faust.StreamT[bytes]) -> None:
        """The servable series (issue 35): forwarded to the pool's demand agent as published."""
        async for event in stream.events():
            if deployment_ids.foreign(event.message.headers, settings.gfs_deployment):
                counters["foreign"] += 1
                continue
            try:
                envelope = decode(LEVELS, event.value or b"")
                if not settings.topic_clock:
                    pipeline.check_not_ahead(envelope.payload.at.timestamp(), time.time(),
                                             settings.forecast_max_ahead_s)  # fmt: skip
            except ValueError as exc:  # a FutureEventError is one too
                await dead_letter(LEVELS, event, exc)
                continue
            if not servable:
                counters["skipped"] += 1  # the observed series is counted from task events
                continue
            level = envelope.payload
            value = {"levels": dict(level.levels), "at": level.at.timestamp()}
            headers = list(event.message.headers or ())
            await by_pool.send(key=level.pool.encode(), value=value, headers=headers)

    @app.agent(by_pool)
    async def on_pool_demand(stream: faust.StreamT[Any]) -> None:
        async for event in stream.events():
            pool = (event.key or b"").decode()
            value = event.value
            known_pools.add(pool)
            parent = extract_context(list(event.message.headers or ()))
            stored = demand.get(pool)
            state = PoolDemand() if stored is None else PoolDemand.from_json(stored)
            at_s = float(value["at"])
            if value.get("tick"):
                closed = state.advance(at_s)
                tenants: list[str] = []
            elif "levels" in value:
                last_context[pool] = parent
                tenants = sorted(value["levels"])
                closed = state.set_levels({t: float(v) for t, v in value["levels"].items()}, at_s)
            else:
                last_context[pool] = parent
                tenants = [value["tenant"]]
                closed = state.apply(Delta(pool, value["tenant"], float(value["gpus"]), at_s))
            demand[pool] = state.to_json()
            if not closed:
                if not value.get("tick") and pool not in first_forecast_done:
                    await first_forecast(pool, tenants, at_s, parent)
                continue
            log.info("pool %s: hours %s closed", pool, [h.hour for h in closed])
            hist = load_history(pool)
            added = [hour for hour in closed if hist.add(hour)]
            history[pool] = hist.to_json()
            first_forecast_done.add(pool)  # hours completed: the regular forecasts take over
            if not added:
                continue
            with tracer.start_as_current_span("forecast.predict", context=last_context.get(pool, parent),
                                              attributes={"gfs.pool": pool}):  # fmt: skip
                if any(h.hour % 24 == settings.forecast_refit_hour for h in added):
                    loop = asyncio.get_running_loop()
                    await loop.run_in_executor(None, forecaster.refit, pool, hist)
                out = forecaster.forecast(pool, hist)
                # The forecast stepped the model's online recalibration state, kept in the
                # history so a restarted worker resumes it (services/forecast/forecasting.py).
                history[pool] = hist.to_json()
                if out is None:
                    continue
                await publish(out, at_s)

    metrics = configure_metrics(PRODUCER)
    register_metrics(metrics.meter(TRACER), counters, forecaster)

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        # aiohttp refuses a charset inside content_type: the format version only.
        return web.bytes(metrics.render(), content_type="text/plain; version=0.0.4")

    # Probes for Kubernetes (infra/k8s): /healthz answers while the worker's event loop runs;
    # /readyz is 200 once the first assignment's tables are recovered from their changelogs and no
    # rebalance or recovery is in progress (503 then: the worker is not processing events).
    @app.page("/healthz")
    async def healthz_page(web: Any, request: Any) -> Any:
        return web.json({"status": "alive"})

    document = json.loads(render(API))  # api_spec.py: the contract of these pages

    @app.page("/openapi.json")
    async def openapi_page(web: Any, request: Any) -> Any:
        return web.json(document)

    @app.page("/readyz")
    async def readyz_page(web: Any, request: Any) -> Any:
        ready = app.tables.recovery.completed.is_set() and not app.rebalancing and not app.in_recovery
        return web.json({"ready": ready}, status=200 if ready else 503)

    async def tick_pools(at_s: float) -> None:
        for pool in sorted(known_pools | {str(k) for k in demand}):
            await by_pool.send(key=pool.encode(), value={"tick": True, "at": at_s})

    if settings.topic_clock:
        clock = raw(CLOCK_TOPIC)

        @app.agent(clock)
        async def on_clock(stream: faust.StreamT[bytes]) -> None:
            # Ticks are idempotent (a pool advanced to a time it reached closes nothing), so only
            # a repeat of the last tick (a redelivery) is skipped; a sequence lower than one seen
            # is not, because a new run's driver numbers its ticks from 0 again.
            last: tuple[int, float] | None = None
            async for event in stream.events():
                try:
                    envelope = decode(CLOCK_TOPIC, event.value or b"")
                except ValueError as exc:
                    await dead_letter(CLOCK_TOPIC, event, exc)
                    continue
                tick = envelope.payload
                # STATUS and PASS are the preemption service's phases: nothing to do here.
                if not isinstance(tick, ClockTick) or tick.phase is not ClockPhase.ADVANCE:
                    continue
                if tick.clock != settings.forecast_clock_name:
                    continue  # another run's clock
                at_s = tick.at.timestamp()
                if last == (tick.sequence, at_s):
                    continue
                last = (tick.sequence, at_s)
                await tick_pools(at_s)
    else:

        async def tick() -> None:
            await tick_pools(time.time())

        app.timer(settings.forecast_tick_s)(tick)  # called, not applied: faust's decorator is untyped

    async def announce_transport() -> None:
        # Once the worker has set up logging (a line logged before that may be lost).
        announce(security)

    app.task(announce_transport)
    return app

"""`gfs serve quota`: forecasts, pool status and guarantee outcomes in; spot quotas out.

Shape (docs/live-pipeline.md): consume gfs.forecasts, gfs.pools.status and gfs.tasks.lifecycle
(only `GuaranteePeriodClosed` matters here) with the platform's loop (dead letters,
commit-after-effects); every refresh interval compute each pool's quota with the core's function
(`PoolBook`), and write the quota version, eta, inputs, the forecast behind it and the SpotQuota
envelope in one Postgres transaction (the outbox); the relay publishes it.

Clock (`quota_clock`): `wall` (default) refreshes every pool every `quota_refresh_s` on the host's
clock, and a new pool forecast recomputes that pool's quota at once. `topic` (sim/live parity: the
preemption service publishes each pool's status at the STATUS phase of a controllable clock's
instant, schemas/clock.py) has no timer: each new PoolStatus is its pool's refresh, computed at
`now = observed_at` with eta's feedback, persisted and published (SpotQuota valid from
`observed_at` for two refresh intervals) before the status's offset is committed; a forecast only
updates the book, as in the simulator, which computes quotas only at its refresh instants. Anything
else that asks for the time (the outcomes loaded at start, forecast health) gets the newest status's
`observed_at` (`StatusClock`).

Effects in order: an input is persisted (outcome row, latest status/forecast row) before its
offset is committed; a quota is persisted with its outbox row before it is published; the relay
marks a row only after the broker's ack. One instance is active (the advisory fence); a standby
waits, not ready, and takes over within a poll interval of the active one's death. The active
instance's writes are also fenced by `quota_pool.version`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
from aiohttp import web
from opentelemetry import context as otel_context
from opentelemetry import trace
from pydantic import BaseModel

from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.forecast import DemandForecast, PoolDemandForecast
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.tasks import GuaranteeOutcome, GuaranteePeriodClosed
from gfs.schemas.topics import FORECASTS_TOPIC, POOL_STATUS_TOPIC, TASK_LIFECYCLE_TOPIC
from gfs.services.core.quota import QuotaSettings
from gfs.services.platform.clock import Clock, SystemClock
from gfs.services.platform.fence import AdvisoryFence
from gfs.services.platform.kafka.consumer import consume
from gfs.services.platform.kafka.lag import LagProbe
from gfs.services.platform.kafka.processing import ConsumeStats, MessageContext
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.metrics import configure_metrics
from gfs.services.platform.outbox import OutboxRelay
from gfs.services.platform.postgres import open_pool, transaction
from gfs.services.platform.retention import OUTBOX_RULE, QUOTA_RULES, pruning
from gfs.services.platform.timer import every, failure_counter
from gfs.services.quota import store
from gfs.services.quota.book import PoolBook, QuotaComputation
from gfs.services.quota.mapping import forecast_view, spot_quota, status_view
from gfs.services.quota.metrics import register_metrics
from gfs.services.quota.quota_api import build_api
from gfs.services.quota.settings import QuotaServiceSettings

log = logging.getLogger(__name__)

TOPICS = (FORECASTS_TOPIC, POOL_STATUS_TOPIC, TASK_LIFECYCLE_TOPIC)
PRODUCER = "gfs-quota"
TRACER = "gfs.quota"


@dataclass(slots=True)
class StatusClock:
    """The topic clock's time in the quota service: the newest PoolStatus's `observed_at` (the
    preemption service stamps statuses with the controllable clock's instant). 0, the epoch,
    before any status; it never moves back (an older status is a redelivery)."""

    latest: float = 0.0

    def now(self) -> float:
        return self.latest

    def observe(self, observed_s: float) -> None:
        self.latest = max(self.latest, observed_s)


@dataclass(slots=True)
class QuotaService:
    """The active instance's state and handlers (I/O through the pool it is given)."""

    pool: asyncpg.Pool
    settings: QuotaServiceSettings
    clock: Clock
    quota_settings: QuotaSettings = field(default_factory=QuotaSettings)
    books: dict[str, PoolBook] = field(default_factory=dict)
    latest: dict[str, QuotaComputation] = field(default_factory=dict)
    # The trace context of the input that last changed a pool (the quota's span continues it).
    contexts: dict[str, otel_context.Context] = field(default_factory=dict)
    stats: ConsumeStats = field(default_factory=ConsumeStats)
    lag_probe: LagProbe | None = None
    tenant_forecasts: int = 0
    fallback_forecasts: int = 0
    ignored: int = 0
    on_saved: Callable[[], None] = lambda: None
    # Topic clock: awaited after a status's quota is saved (the relay's drain), so the SpotQuota is
    # on the broker before the status's offset is committed and a driver waiting for the consumer
    # to catch up sees the quota too. None: `on_saved` only.
    publish: Callable[[], Awaitable[object]] | None = None
    # pool -> the computed_at of its last saved quota (a redelivered status is not quoted twice:
    # eta's feedback would run twice for one instant).
    quoted_at: dict[str, float] = field(default_factory=dict)
    # None: the global provider (configure_tracing); tests pass one with an in-memory exporter.
    tracer_provider: trace.TracerProvider | None = None
    # One quota computation and save at a time: the refresh timer and the consumer (a new forecast)
    # both refresh pools; two saves of one pool from the same expected version would make the
    # second look like another instance's write (FenceLostError) and step this one down.
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)

    def book(self, pool: str) -> PoolBook:
        found = self.books.get(pool)
        if found is None:
            found = self.books[pool] = PoolBook(pool, settings=self.quota_settings)
        return found

    @property
    def topic_clock(self) -> bool:
        return self.settings.topic_clock

    async def load(self) -> None:
        """Resume from Postgres: eta and version per pool, latest inputs, recent outcomes (the
        inputs first: on the topic clock the latest status says what "recent" means)."""
        async with self.pool.acquire() as connection:
            # Rows of pools outside QUOTA_POOLS (the list was narrowed since) are left alone.
            for name, stored in (await store.load_pools(connection)).items():
                if not self.settings.owns(name):
                    continue
                book = self.book(name)
                book.eta, book.version = stored.eta, stored.version
                self.quoted_at[name] = stored.updated_at.timestamp()
            for row in await store.load_latest_inputs(connection):
                if not self.settings.owns(row["pool"]):
                    continue
                payload = row["payload"]
                if row["kind"] == "status":
                    view = status_view(PoolStatus.model_validate_json(payload))
                    self.book(row["pool"]).update_status(view)
                    self._observe_time(view.observed_s)
                else:
                    self.book(row["pool"]).update_forecast(
                        forecast_view(PoolDemandForecast.model_validate_json(payload))
                    )
            since = store.utc(self.clock.now() - self.quota_settings.feedback_window_s)
            for row in await store.load_outcomes(connection, since):
                if not self.settings.owns(row["pool"]):
                    continue
                start, end = row["period_start"].timestamp(), row["period_end"].timestamp()
                self.book(row["pool"]).record_outcome(row["task_id"], start, end, row["succeeded"])

    def _observe_time(self, observed_s: float) -> None:
        if isinstance(self.clock, StatusClock):
            self.clock.observe(observed_s)

    async def handle(self, envelope: Envelope[Any], context: MessageContext) -> None:
        payload = envelope.payload
        if isinstance(
            payload, PoolStatus | PoolDemandForecast | GuaranteePeriodClosed
        ) and not self.settings.owns(payload.pool):
            # Another deployment's pool (the topics are shared): not persisted, not quoted, and its
            # status does not move the topic clock (a neighbour's instants are not ours).
            self.ignored += 1
            return
        if isinstance(payload, PoolStatus):
            await self._remember(payload.pool, "status", payload.observed_at, payload)
            view = status_view(payload)
            self.book(payload.pool).update_status(view)
            self.contexts.setdefault(payload.pool, context.trace_context)
            if self.topic_clock:
                await self._quote_status(payload.pool, view.observed_s)
        elif isinstance(payload, PoolDemandForecast):
            await self._remember(payload.pool, "forecast", payload.origin_time, payload)
            self.fallback_forecasts += payload.fallback
            if self.book(payload.pool).update_forecast(forecast_view(payload)):
                self.contexts[payload.pool] = context.trace_context
                # A new forecast changes the quota now, not at the next refresh. Eta's feedback
                # runs only on the refresh timer (as in the simulator), so this keeps eta. On the
                # topic clock the next status is the next refresh: the simulator puts a new
                # forecast in force only at its refresh instants, and a quota computed now would
                # be at the previous status's time, before this forecast's origin (so without it).
                if (
                    not self.topic_clock
                    and await self._refresh_pool(payload.pool, feedback=False) is not None
                ):
                    self.on_saved()
        elif isinstance(payload, GuaranteePeriodClosed):
            await self._outcome(payload, envelope)
        elif isinstance(payload, DemandForecast):
            self.tenant_forecasts += 1  # per-tenant forecasts are for SREs; the quota reads the pool's
        else:
            self.ignored += 1  # other lifecycle events: not the quota's business

    async def _remember(self, pool: str, kind: str, as_of: datetime, payload: BaseModel) -> None:
        """Persist the newest input of its kind, so a restarted instance resumes with it."""
        async with self.pool.acquire() as connection:
            await store.remember_input(
                connection, pool=pool, kind=kind, as_of=as_of, payload=payload.model_dump(mode="json")
            )

    async def _outcome(self, payload: GuaranteePeriodClosed, envelope: Envelope[Any]) -> None:
        succeeded = payload.outcome is GuaranteeOutcome.SUCCEEDED
        async with self.pool.acquire() as connection:
            await store.record_outcome(
                connection, pool=payload.pool, task_id=payload.task_id, period_start=payload.period_start,
                period_end=payload.period_end, succeeded=succeeded, event_id=envelope.event_id,
            )  # fmt: skip
        self.book(payload.pool).record_outcome(
            payload.task_id, payload.period_start.timestamp(), payload.period_end.timestamp(), succeeded
        )

    async def _quote_status(self, pool: str, observed_s: float) -> None:
        """Topic clock: a status is its pool's refresh instant. Compute (with eta's feedback),
        persist and publish the quota at `observed_s`, before the status counts as consumed."""
        self._observe_time(observed_s)
        status = self.books[pool].status
        if status is None or status.observed_s != observed_s:
            return  # older than the status in force (a redelivery): that one was quoted
        last = self.quoted_at.get(pool)
        if last is None or abs(last - observed_s) > 1e-6:  # a redelivery after the save: publish only
            await self._refresh_pool(pool, feedback=True, now=observed_s)
        if self.publish is not None:
            await self.publish()
        else:
            self.on_saved()

    async def refresh(self) -> list[QuotaComputation]:
        """Every refresh interval: compute (with the eta feedback), persist with the outbox row
        and keep every pool's quota; returns them."""
        saved = [c for name in sorted(self.books) if (c := await self._refresh_pool(name, feedback=True))]
        if saved:
            self.on_saved()
        return saved

    async def _refresh_pool(
        self, name: str, *, feedback: bool, now: float | None = None
    ) -> QuotaComputation | None:
        async with self.writing:
            return await self._refresh_pool_locked(name, feedback=feedback, now=now)

    async def _refresh_pool_locked(
        self, name: str, *, feedback: bool, now: float | None
    ) -> QuotaComputation | None:
        now = self.clock.now() if now is None else now
        tracer = trace.get_tracer(TRACER, tracer_provider=self.tracer_provider)
        book = self.books[name]
        with tracer.start_as_current_span(
            "quota.compute", context=self.contexts.get(name), attributes={"gfs.pool": name}
        ):
            computed = book.compute(now, self.settings.quota_refresh_s, feedback=feedback)
            if computed is None:
                return None
            envelope = wrap(spot_quota(computed), producer=PRODUCER, occurred_at=store.utc(now))
            with tracer.start_as_current_span("quota.persist", attributes={"gfs.pool": name}):
                async with transaction(self.pool) as connection:
                    version = await store.save_quota(
                        connection, computed, expected_version=book.version, envelope=envelope
                    )
            book.commit(computed)
            book.version = version
            self.latest[name] = computed
            self.quoted_at[name] = now
            return computed


async def run_quota_service(
    settings: QuotaServiceSettings,
    stop: asyncio.Event,
    *,
    clock: Clock | None = None,
    ready: asyncio.Event | None = None,
    started: Callable[[QuotaService], None] | None = None,
) -> ConsumeStats:
    """Run until `stop`: wait for the fence (standby), resume from Postgres, then consume,
    refresh and relay. Losing the fence stops the active work (the caller may start again).
    `clock`: the time source (default: the wall clock, or a `StatusClock` on the topic clock)."""
    clock = clock or (StatusClock() if settings.topic_clock else SystemClock())
    ready = ready or asyncio.Event()
    metrics = configure_metrics(settings.otel_service_name or "gfs-quota")
    # One KafkaSecurity for every client below (the `quota` principal on a secured broker); a bad
    # setting (SASL without a password) raises here, before anything connects.
    security = settings.kafka_security
    stats = ConsumeStats()
    runner: web.AppRunner | None = None
    fence = AdvisoryFence(
        settings.database_url, settings.quota_fence_key, poll_s=settings.quota_fence_poll_s,
        lease_s=settings.quota_fence_lease_s,
    )  # fmt: skip
    producing = EnvelopeProducer(bootstrap_servers=settings.bootstrap_servers, client_id="gfs-quota",
                                 security=security, deployment=settings.gfs_deployment)  # fmt: skip
    try:
        async with open_pool(settings.database_url) as pool, producing as producer:
            relay = OutboxRelay(pool, producer)
            probe = LagProbe(settings.bootstrap_servers, settings.quota_group, TOPICS, security=security)
            service = QuotaService(
                pool, settings, clock, on_saved=relay.wake, stats=stats, lag_probe=probe,
                publish=relay.drain if settings.topic_clock else None,
            )  # fmt: skip
            register_metrics(metrics.meter(TRACER), service)
            timer_failures = failure_counter(metrics.meter(TRACER))
            settings.check_history_window(service.quota_settings.feedback_window_s)
            if settings.quota_api_port:
                runner = web.AppRunner(build_api(service, metrics, ready))
                await runner.setup()
                await web.TCPSite(
                    runner, settings.bind_host(settings.quota_api_host), settings.quota_api_port
                ).start()
            if not await fence.acquire(stop):
                return stats
            await service.load()
            if started is not None:
                started(service)
            inner = asyncio.Event()

            async def watch_fence() -> None:
                while not inner.is_set():
                    if not await fence.check():
                        log.error("quota: lost the fence; stepping down")
                        inner.set()
                        return
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(inner.wait(), timeout=settings.quota_fence_poll_s)

            async def until_stop() -> None:
                await stop.wait()
                inner.set()

            ready.set()
            consuming = consume(
                list(TOPICS),
                settings.quota_group,
                service.handle,
                bootstrap_servers=settings.bootstrap_servers,
                stop=inner,
                dead_letter_producer=producer,
                producer_name=PRODUCER,
                stats=stats,
                security=security,
                deployment=settings.gfs_deployment,  # another deployment's forecasts are not ours
            )
            jobs = [
                asyncio.create_task(consuming),
                asyncio.create_task(relay.run(inner)),
                asyncio.create_task(probe.run(inner)),
                asyncio.create_task(watch_fence()),
                asyncio.create_task(until_stop()),
            ]
            if not settings.topic_clock:  # on the topic clock, statuses are the refreshes
                # A failed refresh is logged, counted and retried at the next tick (the platform
                # timer's policy); a lost fence ends the timer and steps the instance down below.
                refresh = every(
                    settings.quota_refresh_s, inner, service.refresh, name="quota.refresh",
                    failures=timer_failures, fatal=(store.FenceLostError,),
                )  # fmt: skip
                jobs.append(asyncio.create_task(refresh))
            # History older than the window goes (services/platform/retention.py).
            pruned = pruning(pool, (*QUOTA_RULES, OUTBOX_RULE), settings, clock.now, inner,
                             name="quota.retention", failures=timer_failures)  # fmt: skip
            jobs += [asyncio.create_task(pruned)] if pruned else []
            try:
                # Any job ending ends the active period: stop asked, fence lost, or a failure.
                done, _ = await asyncio.wait(jobs, return_when=asyncio.FIRST_COMPLETED)
                for job in done:
                    error = job.exception()
                    # On the topic clock quotas are written by the status handler, so a lost
                    # fence arrives wrapped in the consumer's HandlerFailedError.
                    if isinstance(error, store.FenceLostError) or isinstance(
                        getattr(error, "__cause__", None), store.FenceLostError
                    ):
                        # Another instance wrote this pool's quota: step down (the caller waits
                        # for the fence again and resumes from Postgres).
                        log.error("quota: %s; stepping down", error)
                    elif error is not None:
                        raise error
            finally:
                inner.set()
                ready.clear()
                for job in jobs:
                    job.cancel()
                await asyncio.gather(*jobs, return_exceptions=True)
                # Publish what the last refreshes wrote (best effort: a failure leaves the rows
                # for the next instance's relay, nothing is lost).
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(relay.drain(), timeout=10.0)
    finally:
        await fence.release()
        if runner is not None:
            await runner.cleanup()
        metrics.shutdown()
    return stats

"""The quota service on the topic clock: each PoolStatus is its pool's refresh at `observed_at`
(eta's feedback included), persisted and published before the handler returns (so before the
status's offset is committed); forecasts only update the book; a redelivered status is not quoted
twice. Postgres is a recording fake here (the integration test runs the real one)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace

from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.forecast import HourlyDemand, PoolDemandForecast
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.quota import SpotQuota
from gfs.schemas.tasks import GuaranteeOutcome, GuaranteePeriodClosed
from gfs.schemas.topics import decode
from gfs.services.platform.clock import ManualClock
from gfs.services.platform.kafka.processing import MessageContext
from gfs.services.quota.service import QuotaService, QuotaServiceSettings, StatusClock

T = datetime(2026, 3, 2, 10, 15, tzinfo=UTC)  # a quota instant, 15 minutes into its hour
ORIGIN = T.replace(minute=0)
POOL = "A100"


class _Connection:
    """Answers the quota store's statements; records the outbox rows and quota versions."""

    def __init__(self, db: _Database) -> None:
        self.db = db

    async def execute(self, query: str, *args: Any) -> str:
        self.db.statements.append(query)
        return "INSERT 0 1"

    async def fetchval(self, query: str, *args: Any) -> Any:
        if "INSERT INTO quota_pool" in query:
            pool, expected = args[0], args[4]
            assert self.db.versions.get(pool, 0) == expected, "the version fence"
            self.db.versions[pool] = expected + 1
            return expected + 1
        if "INSERT INTO outbox" in query:
            self.db.outbox.append(decode(args[0], args[2]))
            return len(self.db.outbox)
        raise AssertionError(f"unexpected query {query}")

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        return []

    @contextlib.asynccontextmanager
    async def transaction(self, **_: Any) -> AsyncIterator[None]:
        yield


class _Database:
    def __init__(self) -> None:
        self.statements: list[str] = []
        self.versions: dict[str, int] = {}
        self.outbox: list[Envelope[Any]] = []

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[_Connection]:
        yield _Connection(self)


def _context(topic: str) -> MessageContext:
    return MessageContext(
        topic=topic, partition=0, offset=0, key=None, headers=(), consumer_group="unit",
        trace_context=otel_context.get_current(), span=trace.INVALID_SPAN,
    )  # fmt: skip


def _service(clock_mode: str = "topic", **kw: Any) -> tuple[QuotaService, _Database, list[int]]:
    db = _Database()
    published: list[int] = []

    async def publish() -> int:
        # What the relay would publish now: everything already in the outbox.
        published.append(len(db.outbox))
        return len(db.outbox)

    settings = QuotaServiceSettings(quota_clock=clock_mode, quota_refresh_s=300.0, **kw)  # type: ignore[arg-type]
    clock = StatusClock() if clock_mode == "topic" else ManualClock(T.timestamp())
    service = QuotaService(db, settings, clock, publish=publish)  # type: ignore[arg-type]
    return service, db, published


def _status(at: datetime, **kw: Any) -> PoolStatus:
    values: dict[str, Any] = {
        "pool": POOL, "observed_at": at, "capacity_gpus": 100, "idle_gpus": 30, "spot_in_use_gpus": 10.0,
        "hp_running_gpus": 50.0, "hp_queued_gpus": 5.0,
    }  # fmt: skip
    return PoolStatus(**(values | kw))


def _forecast(origin: datetime, q90: list[float]) -> PoolDemandForecast:
    return PoolDemandForecast(
        pool=POOL, origin_time=origin, tenants=2, model_name="persistence", model_version="1",
        horizon=tuple(
            HourlyDemand(hour_ahead=h + 1, mean=q - 5.0, std=4.0, quantiles={"0.5": q - 5.0, "0.9": q})
            for h, q in enumerate(q90)
        ),
    )  # fmt: skip


async def _send(service: QuotaService, payload: Any, topic: str) -> None:
    await service.handle(wrap(payload, producer="unit"), _context(topic))


async def _outcomes(service: QuotaService, failed: int, succeeded: int) -> None:
    for i in range(failed + succeeded):
        end = T - timedelta(minutes=10 * i + 1)
        closed = GuaranteePeriodClosed(
            task_id=f"t{i}", pool=POOL, period_start=end - timedelta(hours=1), period_end=end,
            outcome=GuaranteeOutcome.FAILED if i < failed else GuaranteeOutcome.SUCCEEDED,
        )  # fmt: skip
        await _send(service, closed, "gfs.tasks.lifecycle")


def _quotas(envelope: Envelope[Any]) -> dict[int, float]:
    return {q.guarantee_hours: q.quota_gpus for q in envelope.payload.quotas}


async def test_a_status_is_the_pools_refresh_at_its_observed_time() -> None:
    service, db, published = _service()
    await _outcomes(service, failed=6, succeeded=14)
    await _send(service, _forecast(ORIGIN, [40.5, 60.0, 10.0, 10.0]), "gfs.forecasts")
    assert db.outbox == [] and published == []  # a forecast alone computes nothing on the topic clock
    await _send(service, _status(T), "gfs.pools.status")
    # Persisted and published before the handler returned (so before the offset is committed).
    assert len(db.outbox) == 1 and published == [1]
    quota = db.outbox[0].payload
    assert isinstance(quota, SpotQuota) and db.outbox[0].occurred_at == T
    assert (quota.valid_from, quota.valid_until) == (T, T + timedelta(seconds=600))
    # Floor 50 + 5 = 55 over q90 [40.5, 60, 10, 10]: spare [45, 40, 45, 45]. The feedback ran: 6
    # failed of 20 ended in the last 4 h, ER 0.3 >= 1.5 x 0.1, eta 1 x 0.1 / 0.3 = 1/3:
    # Q(1) = 45 / 3 = 15, Q(2) = Q(4) = 40 / 3.
    assert quota.eta == pytest.approx(1 / 3)
    assert {q.guarantee_hours: q.quota_gpus for q in quota.quotas} == pytest.approx(
        {1: 15.0, 2: 40 / 3, 4: 40 / 3}
    )
    assert service.books[POOL].eta == pytest.approx(1 / 3) and db.versions[POOL] == 1
    assert service.clock.now() == T.timestamp()


async def test_a_redelivered_or_older_status_is_not_quoted_again() -> None:
    service, db, published = _service()
    await _outcomes(service, failed=6, succeeded=14)
    await _send(service, _status(T), "gfs.pools.status")
    await _send(service, _status(T), "gfs.pools.status")  # redelivered: eta's feedback must not run twice
    assert len(db.outbox) == 1 and published == [1, 1]  # published again (its first publish may have failed)
    assert service.books[POOL].eta == pytest.approx(1 / 3) and db.versions[POOL] == 1
    await _send(service, _status(T - timedelta(minutes=5), capacity_gpus=70), "gfs.pools.status")
    assert len(db.outbox) == 1 and published == [1, 1]
    # The next instant is quoted with the eta in force: the same 20 outcomes and no failure since
    # the last quota, so eta stays 1/3 (issue 35: it shrinks only on new failures; the paper's rule
    # took it to 1/9 here, and to its floor within minutes on a live pool).
    await _send(service, _status(T + timedelta(minutes=5)), "gfs.pools.status")
    assert len(db.outbox) == 2 and published == [1, 1, 2] and db.versions[POOL] == 2
    later = db.outbox[1].payload
    assert later.valid_from == T + timedelta(minutes=5) and later.eta == pytest.approx(1 / 3)
    # A failure after that quota is new evidence: 7 failed of 21, ER 1/3, eta 1/3 x 0.1 / (1/3) = 0.1.
    fresh = GuaranteePeriodClosed(
        task_id="new", pool=POOL, period_start=T - timedelta(minutes=50),
        period_end=T + timedelta(minutes=7), outcome=GuaranteeOutcome.FAILED,
    )  # fmt: skip
    await _send(service, fresh, "gfs.tasks.lifecycle")
    await _send(service, _status(T + timedelta(minutes=10)), "gfs.pools.status")
    assert db.outbox[-1].payload.eta == pytest.approx(0.1)
    # No forecast: the idle-capacity fallback, 10 + 30 = 40 GPUs (eta does not scale it).
    assert _quotas(db.outbox[1]) == {1: 40.0, 2: 40.0, 4: 40.0}


async def test_the_first_hour_zero_forecast_counts_queued_hp_from_the_first_status() -> None:
    service, db, _ = _service()
    zeros = _forecast(ORIGIN, [0.0] * 4)
    await _send(service, zeros, "gfs.forecasts")
    await _send(service, _status(T, hp_running_gpus=20.0, hp_queued_gpus=12.5), "gfs.pools.status")
    # 100 - floor(32.5) = 68 every hour, eta 1 (the simulator's quota with hp_quantile = zeros).
    assert _quotas(db.outbox[0]) == {1: 68.0, 2: 68.0, 4: 68.0}


async def test_the_wall_clock_keeps_quoting_on_forecasts_not_on_statuses() -> None:
    service, db, published = _service("wall")
    await _send(service, _status(T), "gfs.pools.status")
    assert db.outbox == []  # the refresh timer quotes it
    await _send(service, _forecast(ORIGIN, [40.5, 60.0, 10.0, 10.0]), "gfs.forecasts")
    assert len(db.outbox) == 1 and published == []  # the relay publishes it later (woken)
    assert db.outbox[0].payload.eta == 1.0  # no feedback on a forecast
    saved = await service.refresh()
    assert [c.computed_s for c in saved] == [T.timestamp()]


async def test_a_deployment_limited_to_its_pools_leaves_other_pools_inputs_alone() -> None:
    # The topics are shared: a neighbour deployment's status, forecast and outcomes for its own
    # pool H100 reach this one too. Quoting them published a second quote for the neighbour's
    # pool on gfs.quotas (the integration test's flaky "second quote at t" was such a neighbour's).
    service, db, published = _service(quota_pools=f" {POOL} ,")
    neighbour = "H100"
    await _send(service, _forecast(ORIGIN, [40.5, 60.0, 10.0, 10.0]).model_copy(update={"pool": neighbour}),
                "gfs.forecasts")  # fmt: skip
    closed = GuaranteePeriodClosed(
        task_id="n0", pool=neighbour, period_start=T - timedelta(hours=1), period_end=T,
        outcome=GuaranteeOutcome.FAILED,
    )  # fmt: skip
    await _send(service, closed, "gfs.tasks.lifecycle")
    await _send(service, _status(T + timedelta(hours=1), pool=neighbour), "gfs.pools.status")
    # Nothing stored, quoted or published, and the neighbour's later instant is not our time.
    assert (db.statements, db.outbox, published, service.books) == ([], [], [], {})
    assert service.clock.now() == 0.0 and service.ignored == 3
    # Our own pool is quoted as before, at its own status's time.
    await _send(service, _status(T), "gfs.pools.status")
    assert [e.payload.pool for e in db.outbox] == [POOL] and published == [1]
    assert db.outbox[0].payload.valid_from == T and service.clock.now() == T.timestamp()


def test_the_status_clock_never_goes_back() -> None:
    clock = StatusClock()
    assert clock.now() == 0.0
    clock.observe(100.0)
    clock.observe(50.0)
    assert clock.now() == 100.0

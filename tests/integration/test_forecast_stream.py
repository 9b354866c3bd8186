"""The forecast stream (`gfs serve forecast`, a real Faust worker) on the real broker: task events
in, per-tenant and per-pool forecasts of observed HP demand out (worked by hand), the trace of the
task event that last changed the pool carried to its forecast, and a malformed record dead-lettered
with its reason while good events flow. On the topic clock, hours close on ClockTick ADVANCEs of
its own clock only, and the consumed offsets are committed promptly. The worker and the ordering
barrier the tests feed it through are forecast_worker.py."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from forecast_worker import (
    BAD,
    INPUTS,
    SOURCES,
    Read,
    _caught_up,
    _committed_to_the_end,
    _consuming,
    _forecasts_of,
    _letter_of,
    _read_after,
    _send_in_order,
    _stream,
    _submit,
    _worker,
)
from kafka_harness import _end_offsets
from opentelemetry.sdk.trace import TracerProvider

from gfs.schemas.clock import ClockPhase, ClockTick
from gfs.schemas.envelope import wrap
from gfs.schemas.forecast import DemandForecast, PoolDemandForecast
from gfs.schemas.tasks import TaskAccepted, TaskCancelled, TaskClass, TaskFinished
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.tracing import traceparent_of
from gfs.services.toolkit.consumer_groups import start_group_at_end

pytestmark = pytest.mark.integration


@pytest.fixture
def stream(kafka_bootstrap: str, tmp_path: Path, registry_topics: TopicsReport) -> Iterator[tuple[str, Path]]:
    """A forecast worker of its own, stopped after the test."""
    with _stream(kafka_bootstrap, tmp_path, "it-forecast") as (app_id, log_path, port):
        (tmp_path / "port").write_text(str(port))
        yield app_id, log_path


async def test_task_events_become_forecasts_of_observed_demand(
    stream: tuple[str, Path], kafka_bootstrap: str
) -> None:
    app_id, log = stream
    run = uuid.uuid4().hex[:8]
    pool = f"FC-{run}"
    t0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    at = lambda minutes: t0 + timedelta(minutes=minutes)  # noqa: E731
    tracer = TracerProvider().get_tracer("it-forecast")
    forecasts_from = await _end_offsets(kafka_bootstrap, "gfs.forecasts")
    letters_from = await _end_offsets(kafka_bootstrap, "gfs.deadletter")
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        # First a malformed record, and wait until the worker dead-letters it: the worker is then
        # consuming (after the rebalance that follows its start), so what comes next is read in order.
        await _consuming(producer, log, run)
        await _caught_up(kafka_bootstrap, app_id)
        # Hour 0: x holds 8 from minute 10. Hour 1: y adds 4 from minute 70 to 100 (pool 12).
        # Hour 2: x 8 alone. Task c (x, 2 GPUs) accepted at minute 180 closes hours 1 and 2 by
        # event time (the wall-clock tick is off in this test: backdated events and wall-clock
        # ticks would interleave arbitrarily).
        a, b, c = f"{run}-a", f"{run}-b", f"{run}-c"
        accept = lambda task: TaskAccepted(task_id=task, pool=pool, task_class=TaskClass.HP)  # noqa: E731
        steps: list[tuple[Any, int]] = [
            (_submit(a, "x", pool, 8), 10),
            (accept(a), 10),
            (_submit(b, "y", pool, 4), 70),
            (accept(b), 70),
            (TaskFinished(task_id=b, exit_code=0, finished_at=at(100)), 100),
            (_submit(c, "x", pool, 2), 180),
        ]
        timed = [(payload, at(minute)) for payload, minute in steps]
        await _send_in_order(producer, timed, kafka_bootstrap=kafka_bootstrap, app_id=app_id)
        with tracer.start_as_current_span("accept c") as span:
            await producer.send("gfs.tasks.lifecycle", wrap(accept(c), producer="it", occurred_at=at(180)))
            trace_id = f"{span.get_span_context().trace_id:032x}"

    origin = t0 + timedelta(hours=3)
    # 2 tenants + the pool
    received, mine = await _forecasts_of(kafka_bootstrap, forecasts_from, pool, origin, count=3)
    # Before any hour completed, the pool's first demand change read sent the empty-history
    # forecast (zeros, flagged) from its hour: x's at t0, or y's at t0 + 1 h when a's partition
    # was still catching up behind older tests' records (a late change counts when it is read).
    # Other streams on the shared topics may forecast this pool too: this one's is among them.
    assert any(
        isinstance(p := env.payload, PoolDemandForecast)
        and p.pool == pool
        and p.origin_time in (t0, t0 + timedelta(hours=1))
        and (p.model_name, p.fallback, p.tenants) == ("lstm", True, 1)
        and [h.quantiles["0.9"] for h in p.horizon] == [0.0] * 4
        for env, _ in received
    )
    pool_fc = next(p for p, _ in mine if isinstance(p, PoolDemandForecast))
    tenants = {p.tenant: p for p, _ in mine if isinstance(p, DemandForecast)}
    # Three hours of history: less than the LSTM's lookback, so the model's own documented
    # fallback (persistence of the last hour, flagged) answers: x 8, y 0, pool 8 + 0.
    assert pool_fc.model_name == "lstm" and pool_fc.fallback and pool_fc.tenants == 2
    assert tenants["x"].horizon[0].quantiles["0.5"] == 8.0
    assert tenants["y"].horizon[0].quantiles["0.5"] == 0.0
    assert pool_fc.horizon[0].quantiles["0.5"] == 8.0
    # The forecast continues the trace of the task event that last changed the pool (c's acceptance).
    for _, headers in mine:
        parent = traceparent_of(headers)
        assert parent is not None and parent.split("-")[1] == trace_id

    letter = await _letter_of(
        kafka_bootstrap, letters_from, app_id, lambda p: base64.b64decode(p.original) == BAD
    )
    assert letter.source_topic == "gfs.tasks.submit" and "malformed JSON" in letter.error
    # The worker's counters on /metrics (Prometheus format).
    port = (log.parent / "port").read_text()
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
        metrics = await response.text()
    assert "gfs_forecast_dead_lettered_total" in metrics and "gfs_forecast_fallbacks_total" in metrics


async def test_the_worker_answers_the_kubernetes_probes(stream: tuple[str, Path]) -> None:
    # infra/k8s probes the worker on Faust's web port: /healthz (alive) and /readyz (its tables
    # recovered, no rebalance in progress: a started worker settles there within seconds).
    _, log = stream
    base = f"http://127.0.0.1:{(log.parent / 'port').read_text()}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/healthz") as response:
            assert response.status == 200 and (await response.json()) == {"status": "alive"}
        deadline = time.monotonic() + 60
        while True:
            async with http.get(f"{base}/readyz") as response:
                body = await response.json()
                if response.status == 200:
                    assert body == {"ready": True}
                    break
                assert response.status == 503 and body == {"ready": False}
            assert time.monotonic() < deadline, "the worker did not become ready in 60 s"
            await asyncio.sleep(0.5)


async def test_the_worker_serves_its_openapi_document(stream: tuple[str, Path]) -> None:
    # Issue 26: the worker's pages are described at /openapi.json, the checked-in copy, and its
    # answers validate against it.
    from jsonschema import Draft202012Validator

    from gfs.services.api_docs import DOCS_DIR

    _, log = stream
    base = f"http://127.0.0.1:{(log.parent / 'port').read_text()}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/openapi.json") as response:
            assert response.status == 200
            doc = await response.json()
        assert doc == json.loads((DOCS_DIR / "forecast.openapi.json").read_text())
        for path in ("/healthz", "/readyz"):
            async with http.get(base + path) as response:
                body = await response.json()
            answer = doc["paths"][path]["get"]["responses"][str(response.status)]
            schema = answer["content"]["application/json"]["schema"]
            Draft202012Validator({**schema, "components": doc["components"]}).validate(body)


async def test_a_cancel_stamped_far_in_the_future_is_dead_lettered_and_the_pool_still_forecasts(
    stream: tuple[str, Path], kafka_bootstrap: str
) -> None:
    """Issue 22: minutes are sampled up to each event's time, so one cancel stamped a year ahead
    moved the pool's sampling there and no hour of it closed again. The rule: on the wall clock,
    an event more than FORECAST_MAX_AHEAD_S (300 s) ahead of the host's clock is dead-lettered."""
    app_id, log = stream
    run = uuid.uuid4().hex[:8]
    pool = f"FF-{run}"
    t0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    at = lambda minutes: t0 + timedelta(minutes=minutes)  # noqa: E731
    forecasts_from = await _end_offsets(kafka_bootstrap, "gfs.forecasts")
    letters_from = await _end_offsets(kafka_bootstrap, "gfs.deadletter")
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        await _consuming(producer, log, run)
        await _caught_up(kafka_bootstrap, app_id)
        a, c = f"{run}-a", f"{run}-c"
        accept = lambda task: TaskAccepted(task_id=task, pool=pool, task_class=TaskClass.HP)  # noqa: E731
        # x holds 8 GPUs from minute 10; a cancel of it claims to happen a year from now; task c
        # accepted at minute 180 closes hours 0..2 by event time. Each event is handled (the app's
        # group committed the sources and its re-keyed topic to their ends) before the next is sent.
        barrier = (*SOURCES, f"{app_id}-demand-by-pool")
        future = datetime.now(UTC) + timedelta(days=365)
        steps: list[tuple[Any, datetime]] = [
            (_submit(a, "x", pool, 8), at(10)),
            (accept(a), at(10)),
            (TaskCancelled(task_id=a, tenant="x"), future),
            (_submit(c, "x", pool, 2), at(180)),
            (accept(c), at(180)),
        ]
        sent = []
        for payload, when in steps:
            topic = "gfs.tasks.lifecycle" if isinstance(payload, TaskAccepted) else "gfs.tasks.submit"
            sent.append(await producer.send(topic, wrap(payload, producer="it", occurred_at=when)))
            await _committed_to_the_end(kafka_bootstrap, app_id, barrier)
        cancel = sent[2]

    origin = t0 + timedelta(hours=3)

    def ours(env: Any) -> bool:
        p = env.payload
        return isinstance(p, PoolDemandForecast) and p.pool == pool and p.origin_time == origin

    received = await _read_after(
        kafka_bootstrap, "gfs.forecasts", forecasts_from, done=lambda got: any(ours(env) for env, _ in got)
    )
    pool_fc = next(env.payload for env, _ in received if ours(env))
    # The cancel was not applied: x's 8 GPUs held through hour 2 (persistence of the last hour).
    assert pool_fc.horizon[0].quantiles["0.5"] == 8.0

    letter = await _letter_of(
        kafka_bootstrap,
        letters_from,
        app_id,
        lambda p: (
            (p.source_topic, p.source_partition, p.source_offset)
            == (cancel.topic, cancel.partition, cancel.offset)
        ),
    )
    assert "FutureEventError: occurred_at is" in letter.error
    assert "ahead of the stream's clock; at most 300 s is accepted" in letter.error


async def test_a_restarted_stream_rebuilds_its_tables_from_the_changelogs(
    kafka_bootstrap: str, tmp_path: Path, registry_topics: TopicsReport
) -> None:
    # Worker 1 sees x's task a (8 GPUs) accepted at minute 10 and stops. Worker 2, same app id,
    # tables in memory only, so it has only the changelogs: a finishes at minute 70, y's task c
    # (4) is accepted at 130 (closing hours 0 and 1), y's task d (1) at 180 (closing hour 2).
    # Hour 1 has x at 8 until minute 70: only the rebuilt pool-demand table knows x held 8.
    # Hour 2 has x at 0: only the rebuilt tasks table knows a was counted, so its finish counts.
    run = uuid.uuid4().hex[:8]
    pool, app_id = f"FR-{run}", f"it-forecast-{run}"
    t0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    at = lambda minutes: t0 + timedelta(minutes=minutes)  # noqa: E731
    a, c, d = f"{run}-a", f"{run}-c", f"{run}-d"
    accept = lambda task: TaskAccepted(task_id=task, pool=pool, task_class=TaskClass.HP)  # noqa: E731
    forecasts_from = await _end_offsets(kafka_bootstrap, "gfs.forecasts")
    await start_group_at_end(kafka_bootstrap, app_id, INPUTS)  # only this test's events
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        with _worker(kafka_bootstrap, app_id, tmp_path / "first.log") as log:
            await _consuming(producer, log, f"{run}-1")
            await _caught_up(kafka_bootstrap, app_id)
            first = [(_submit(a, "x", pool, 8), at(10)), (accept(a), at(10))]
            await _send_in_order(producer, first, kafka_bootstrap=kafka_bootstrap, app_id=app_id)
            await asyncio.sleep(3.0)  # past a commit interval; the stop also flushes and commits
        with _worker(kafka_bootstrap, app_id, tmp_path / "second.log") as log:
            await _consuming(producer, log, f"{run}-2")
            await _caught_up(kafka_bootstrap, app_id)
            await _send_in_order(
                producer,
                [
                    (TaskFinished(task_id=a, exit_code=0, finished_at=at(70)), at(70)),
                    (_submit(c, "y", pool, 4), at(130)),
                    (accept(c), at(130)),
                    (_submit(d, "y", pool, 1), at(180)),
                    (accept(d), at(180)),
                ],
                kafka_bootstrap=kafka_bootstrap,
                app_id=app_id,
            )

            def ours(env: Any) -> bool:
                p = env.payload
                return isinstance(p, DemandForecast) and p.pool == pool and p.origin_time >= at(120)

            received = await _read_after(
                kafka_bootstrap,
                "gfs.forecasts",
                forecasts_from,
                # x at +2 h (y has no history yet then), x and y at +3 h
                done=lambda got: sum(ours(env) for env, _ in got) >= 3,
            )
    payloads = [env.payload for env, _ in received]
    by = {(p.origin_time, p.tenant): p for p in payloads if isinstance(p, DemandForecast) and p.pool == pool}
    assert by[(at(120), "x")].horizon[0].quantiles["0.5"] == 8.0  # hour 1's peak: x still held 8
    assert by[(at(180), "x")].horizon[0].quantiles["0.5"] == 0.0  # hour 2: a's finish counted
    assert by[(at(180), "y")].horizon[0].quantiles["0.5"] == 4.0


async def test_on_the_topic_clock_advance_ticks_close_the_hours(
    kafka_bootstrap: str, tmp_path: Path, registry_topics: TopicsReport
) -> None:
    run = uuid.uuid4().hex[:8]
    pool, app_id, clock = f"FT-{run}", f"it-forecast-{run}", f"it-clock-{run}"
    # Times long past, on a clock of our own: other runs' ticks (other clock names, later times)
    # are ignored by this worker, and ours can never move another topic-clock reader forward.
    t0 = datetime(2020, 3, 2, 8, tzinfo=UTC)
    at = lambda minutes: t0 + timedelta(minutes=minutes)  # noqa: E731
    accept = TaskAccepted(task_id=f"{run}-a", pool=pool, task_class=TaskClass.HP)
    sequence = iter(range(1, 100))

    def tick(minutes: int, phase: ClockPhase = ClockPhase.ADVANCE, name: str = clock) -> Any:
        return wrap(ClockTick(clock=name, at=at(minutes), sequence=next(sequence), phase=phase),
                    producer="it", occurred_at=at(minutes))  # fmt: skip

    # FORECAST_TICK_S short: a wall-clock timer, were one running, would close hours of 2026 at once.
    # The history starts 5 hours before the pool's first demand (as the simulator's series start at
    # the trace's t = 0): those hours are zeros, and persistence's residuals see them.
    env = {"GFS_FORECAST_CLOCK": "topic", "GFS_FORECAST_CLOCK_NAME": clock, "FORECAST_ARTIFACT": "",
           "FORECAST_TICK_S": "0.2", "FORECAST_HISTORY_ORIGIN": at(-300).isoformat()}  # fmt: skip
    forecasts_from = await _end_offsets(kafka_bootstrap, "gfs.forecasts")
    await start_group_at_end(kafka_bootstrap, app_id, INPUTS)  # only this test's events
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        with _worker(kafka_bootstrap, app_id, tmp_path / "worker.log", **env) as log:
            await _consuming(producer, log, run)
            await _caught_up(kafka_bootstrap, app_id)
            # x's task (8 GPUs) accepted at minute 10 of hour 0: its first demand change, so the
            # empty-history forecast goes out from hour 0 (zeros).
            await producer.send("gfs.control.clock", tick(0))
            first = [(_submit(f"{run}-a", "x", pool, 8), at(10)), (accept, at(10))]
            await _send_in_order(producer, first, kafka_bootstrap=kafka_bootstrap, app_id=app_id)

            def ours(env: Any) -> bool:
                return isinstance(env.payload, PoolDemandForecast) and env.payload.pool == pool

            def origin(minutes: int) -> Callable[[Read], bool]:
                return lambda got: any(ours(e) and e.payload.origin_time == at(minutes) for e, _ in got)

            # The pool is known to the stream once its first forecast is out (the task topics may
            # still be catching up behind older tests' records when the first ticks are read).
            await _read_after(kafka_bootstrap, "gfs.forecasts", forecasts_from, done=origin(0))
            # Ignored: another clock's ADVANCE and our clock's STATUS, both hours later (either
            # would close hours 0 to 4 and send a forecast from hour 5 instead of the ones below).
            await producer.send("gfs.control.clock", tick(300, name=f"other-{run}"))
            await producer.send("gfs.control.clock", tick(300, phase=ClockPhase.STATUS))
            for minutes in (30, 60, 120):  # closes hour 0 at 60, hour 1 at 120
                await producer.send("gfs.control.clock", tick(minutes))
                await producer.send("gfs.control.clock", tick(minutes))  # a redelivery: a no-op
            received = await _read_after(kafka_bootstrap, "gfs.forecasts", forecasts_from, done=origin(120))
            # Every effect is committed promptly (0.1 s commit interval on the topic clock): the
            # clock topic, the re-keyed topic and the sources all read to their ends.
            await _committed_to_the_end(
                kafka_bootstrap, app_id, ("gfs.control.clock", f"{app_id}-demand-by-pool", *SOURCES)
            )
    # Other streams reading the shared topics may forecast this pool too (another run's clock
    # jumps it to that run's time; a wall-clock stream stamps its own forecasts): look at the
    # hours this test plays, and at this stream's stamps.
    played = [e for e, _ in received if ours(e) and e.payload.origin_time <= at(360)]
    assert {e.payload.origin_time for e in played} == {at(0), at(60), at(120)}  # hour 5 never closed
    # The first forecast: the simulator's persistence from an empty history, stamped at the event.
    zeros = [0.0] * 4
    assert any(
        (e.payload.origin_time, e.occurred_at, e.payload.fallback, e.payload.model_name)
        == (at(0), at(10), True, "persistence")
        and [h.quantiles["0.9"] for h in e.payload.horizon] == zeros
        for e in played
    )
    # Hour 0's peak is 8 (x from minute 10), after 5 zero hours: history [0, 0, 0, 0, 0, 8].
    # Persistence: 8 plus the 0.9-quantile of the h-step changes over the 2 origins every step
    # 1..4 has: [0, 8] each, 7.2, so 15.2. After hour 1 (8 again): [0, 0, 0, 0, 0, 8, 8], 3
    # origins: step 1 [0, 8, 0] -> 6.4 (14.4), steps 2..4 [0, 8, 8] -> 8 (16). Each forecast is
    # stamped with the tick that closed the hour.
    for minutes, q90 in ((60, [15.2] * 4), (120, [14.4, 16.0, 16.0, 16.0])):
        [closing] = [e for e in played if e.payload.origin_time == at(minutes)]
        assert [h.quantiles["0.9"] for h in closing.payload.horizon] == pytest.approx(q90)
        assert closing.occurred_at == at(minutes)

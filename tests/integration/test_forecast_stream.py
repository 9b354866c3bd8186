"""The forecast stream (`gfs serve forecast`, a real Faust worker) on the real broker: task events
in, per-tenant and per-pool forecasts of observed HP demand out (worked by hand), the trace of the
task event that last changed the pool carried to its forecast, and a malformed record dead-lettered
with its reason while good events flow."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kafka_harness import consume_until
from opentelemetry.sdk.trace import TracerProvider

from schemas.dead_letter import DeadLetter
from schemas.envelope import wrap
from schemas.forecast import DemandForecast, PoolDemandForecast
from schemas.tasks import TaskAccepted, TaskClass, TaskFinished, TaskSubmitted
from services.platform.kafka.producer import EnvelopeProducer
from services.platform.kafka.topic_admin import TopicsReport
from services.platform.tracing import traceparent_of

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BAD = b"{not json"


@contextlib.contextmanager
def _worker(kafka_bootstrap: str, app_id: str, log_path: Path, web_port: int = 0) -> Iterator[Path]:
    """A forecast worker (its own app id), ready to consume; stopped gracefully on exit."""
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "FORECAST_APP_ID": app_id,
        "FORECAST_DATADIR": str(log_path.parent / f"faust-{log_path.stem}"),
        "FORECAST_STORE": "memory://",  # tables live in their changelogs only: a restart rebuilds them
        "FORECAST_TICK_S": "3600",
        "FORECAST_WEB_PORT": str(web_port),
    }
    log = log_path.open("w")
    gfs = str(Path(sys.executable).parent / "gfs")
    worker = subprocess.Popen(
        [gfs, "serve", "forecast"], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while "[^Worker]: Ready" not in log_path.read_text():
            assert worker.poll() is None, log_path.read_text()[-2000:]
            assert time.monotonic() < deadline, "the forecast worker did not get ready in 60 s"
            time.sleep(0.2)
        yield log_path
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()


@pytest.fixture
def stream(kafka_bootstrap: str, tmp_path: Path, registry_topics: TopicsReport) -> Iterator[tuple[str, Path]]:
    """A forecast worker of its own, stopped after the test."""
    app_id = f"it-forecast-{uuid.uuid4().hex[:8]}"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    with _worker(kafka_bootstrap, app_id, tmp_path / "worker.log", web_port=port) as log_path:
        (tmp_path / "port").write_text(str(port))
        yield app_id, log_path


def _submit(task_id: str, tenant: str, pool: str, gpus: int) -> TaskSubmitted:
    return TaskSubmitted(task_id=task_id, tenant=tenant, gpu_model=pool, gpus_per_worker=gpus, workers=1,
                         task_class=TaskClass.HP, command="serve")  # fmt: skip


async def _consuming(producer: EnvelopeProducer, log: Path, run: str) -> None:
    """Send a malformed record and wait until the worker dead-letters it: it is then consuming
    (after the rebalance that follows its start), so what comes next is read in order."""
    where = await producer.send_raw("gfs.tasks.submit", value=BAD, key=f"{run}-bad".encode())
    await _wait_for_log(log, f"dead-lettered gfs.tasks.submit[{where.partition}]@{where.offset}:")


async def _send_in_order(producer: EnvelopeProducer, steps: list[tuple[Any, datetime]]) -> None:
    for payload, when in steps:
        topic = "gfs.tasks.submit" if isinstance(payload, TaskSubmitted) else "gfs.tasks.lifecycle"
        await producer.send(topic, wrap(payload, producer="it", occurred_at=when))
        await asyncio.sleep(0.5)  # consumed before the next one (two topics, no common order)


async def _wait_for_log(path: Path, text: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in path.read_text():
        assert time.monotonic() < deadline, f"the worker never logged {text!r}"
        await asyncio.sleep(0.2)


async def test_task_events_become_forecasts_of_observed_demand(
    stream: tuple[str, Path], kafka_bootstrap: str
) -> None:
    app_id, log = stream
    run = uuid.uuid4().hex[:8]
    pool = f"FC-{run}"
    t0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    at = lambda minutes: t0 + timedelta(minutes=minutes)  # noqa: E731
    tracer = TracerProvider().get_tracer("it-forecast")
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        # First a malformed record, and wait until the worker dead-letters it: the worker is then
        # consuming (after the rebalance that follows its start), so what comes next is read in order.
        await _consuming(producer, log, run)
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
        await _send_in_order(producer, [(payload, at(minute)) for payload, minute in steps])
        with tracer.start_as_current_span("accept c") as span:
            await producer.send("gfs.tasks.lifecycle", wrap(accept(c), producer="it", occurred_at=at(180)))
            trace_id = f"{span.get_span_context().trace_id:032x}"

    origin = t0 + timedelta(hours=3)

    def ours(env: Any) -> bool:
        p = env.payload
        return (
            isinstance(p, DemandForecast | PoolDemandForecast) and p.pool == pool and p.origin_time == origin
        )

    received, _ = await consume_until(
        "gfs.forecasts",
        f"it-read-{run}",
        bootstrap_servers=kafka_bootstrap,
        done=lambda got: sum(ours(env) for env, _ in got.items) >= 3,  # 2 tenants + the pool
    )
    mine = [(env.payload, ctx) for env, ctx in received.items if ours(env)]
    pool_fc = next(p for p, _ in mine if isinstance(p, PoolDemandForecast))
    tenants = {p.tenant: p for p, _ in mine if isinstance(p, DemandForecast)}
    # Three hours of history: less than the LSTM's lookback, so the model's own documented
    # fallback (persistence of the last hour, flagged) answers: x 8, y 0, pool 8 + 0.
    assert pool_fc.model_name == "lstm" and pool_fc.fallback and pool_fc.tenants == 2
    assert tenants["x"].horizon[0].quantiles["0.5"] == 8.0
    assert tenants["y"].horizon[0].quantiles["0.5"] == 0.0
    assert pool_fc.horizon[0].quantiles["0.5"] == 8.0
    # The forecast continues the trace of the task event that last changed the pool (c's acceptance).
    for _, ctx in mine:
        parent = traceparent_of(ctx.headers)
        assert parent is not None and parent.split("-")[1] == trace_id

    def our_letter(env: Any) -> bool:
        p = env.payload
        mine = isinstance(p, DeadLetter) and p.consumer_group == app_id
        return mine and base64.b64decode(p.original) == BAD

    letters, _ = await consume_until(
        "gfs.deadletter",
        f"it-dlq-{run}",
        bootstrap_servers=kafka_bootstrap,
        done=lambda got: any(our_letter(env) for env, _ in got.items),
    )
    letter = next(env.payload for env, _ in letters.items if our_letter(env))
    assert letter.source_topic == "gfs.tasks.submit" and "malformed JSON" in letter.error
    # The worker's counters on /metrics (Prometheus format).
    port = (log.parent / "port").read_text()
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
        metrics = await response.text()
    assert "gfs_forecast_dead_lettered_total" in metrics and "gfs_forecast_fallbacks_total" in metrics


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
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        with _worker(kafka_bootstrap, app_id, tmp_path / "first.log") as log:
            await _consuming(producer, log, f"{run}-1")
            await _send_in_order(producer, [(_submit(a, "x", pool, 8), at(10)), (accept(a), at(10))])
            await asyncio.sleep(3.0)  # past a commit interval; the stop also flushes and commits
        with _worker(kafka_bootstrap, app_id, tmp_path / "second.log") as log:
            await _consuming(producer, log, f"{run}-2")
            await _send_in_order(
                producer,
                [
                    (TaskFinished(task_id=a, exit_code=0, finished_at=at(70)), at(70)),
                    (_submit(c, "y", pool, 4), at(130)),
                    (accept(c), at(130)),
                    (_submit(d, "y", pool, 1), at(180)),
                    (accept(d), at(180)),
                ],
            )

            def ours(env: Any) -> bool:
                p = env.payload
                return isinstance(p, DemandForecast) and p.pool == pool and p.origin_time >= at(120)

            received, _ = await consume_until(
                "gfs.forecasts",
                f"it-read-{run}",
                bootstrap_servers=kafka_bootstrap,
                # x at +2 h (y has no history yet then), x and y at +3 h
                done=lambda got: sum(ours(env) for env, _ in got.items) >= 3,
            )
    payloads = [env.payload for env, _ in received.items]
    by = {(p.origin_time, p.tenant): p for p in payloads if isinstance(p, DemandForecast) and p.pool == pool}
    assert by[(at(120), "x")].horizon[0].quantiles["0.5"] == 8.0  # hour 1's peak: x still held 8
    assert by[(at(180), "x")].horizon[0].quantiles["0.5"] == 0.0  # hour 2: a's finish counted
    assert by[(at(180), "y")].horizon[0].quantiles["0.5"] == 4.0

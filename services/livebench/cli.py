"""`gfs livebench`: the live services' speed targets (issue 11), measured on the real stack.

- `forecast-cpu`: CPU time of one hourly forecast of N (pool, tenant) series (target: 200 series
  under 50 ms), with the shipped LSTM and with persistence;
- `quota-latency`: a pool forecast published -> its SpotQuota published, through a running quota
  service (target: p99 under 50 ms);
- `stream`: task events at a fixed rate through a running forecast worker, its consumer lag over
  time (target: 2,000 events/s with bounded lag for 10 minutes);
- `agent-sigterm` (issue 12): eviction command -> SIGTERM sent by a node agent with fake GPUs
  (target: p99 under 50 ms);
- `races` (issue 22): real agents with randomly delayed acks and short tasks racing evictions;
  counts GPUs bound twice, false evictions and lost tasks (target: 0 of each over 10,000 tasks).
- `accept` (issue 22): submit -> TaskAccepted through a running preemption service, from broker
  timestamps, at a steady rate on a small pool (target: p99 under 50 ms at 200/s).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Benchmarks of the live services (print numbers).", no_args_is_help=True)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@app.command("forecast-cpu")
def forecast_cpu(
    series: Annotated[int, typer.Option(help="(pool, tenant) series")] = 200,
    pools: Annotated[int, typer.Option(help="pools they are spread over")] = 6,
    hours: Annotated[int, typer.Option(help="history per series")] = 14 * 24,
    repeats: Annotated[int, typer.Option()] = 20,
) -> None:
    """CPU per hourly forecast of all series (one call per pool, as the stream does)."""
    import torch

    from gfs.services.forecast.forecasting import PoolHistory, StreamForecaster
    from gfs.services.forecast.pipeline import CompletedHour
    from gfs.services.forecast.settings import SHIPPED_ARTIFACT

    torch.set_num_threads(1)
    rng = random.Random(0)
    levels: dict[str, dict[str, float]] = {}
    histories: dict[str, PoolHistory] = {}
    for p in range(pools):
        name = f"P{p}"
        levels[name] = {f"t{i}": rng.uniform(0, 64) for i in range(p, series, pools)}
        histories[name] = PoolHistory(max_hours=hours)

    def next_hour(h: int) -> None:
        for name, level in levels.items():
            for t in level:
                level[t] = max(0.0, level[t] + rng.gauss(0, 3))
            histories[name].add(CompletedHour(480_000 + h, dict(level), sum(level.values())))

    for h in range(hours):
        next_hour(h)
    for label, artifact in (("lstm", SHIPPED_ARTIFACT), ("persistence", None)):
        forecaster = StreamForecaster(artifact)
        for name, history in histories.items():  # the first hour: load the artifact, backtests
            forecaster.forecast(name, history)
        # Then the steady state: every hour one more completed hour per pool, one forecast each.
        cpu: list[float] = []
        for k in range(repeats):
            next_hour(hours + k)
            t0 = time.process_time()
            for name, history in histories.items():
                forecaster.forecast(name, history)
            cpu.append(1000 * (time.process_time() - t0))
        typer.echo(
            f"{label:>11}: {series} series in {pools} pools, {hours} h history: CPU per hourly forecast "
            f"median {statistics.median(cpu):.1f} ms, max {max(cpu):.1f} ms ({repeats} successive hours; "
            f"fallbacks {forecaster.fallbacks})"
        )


@app.command("quota-latency")
def quota_latency(
    forecasts: Annotated[int, typer.Option(help="pool forecasts to publish")] = 500,
    rate: Annotated[float, typer.Option(help="forecasts per second")] = 20.0,
) -> None:
    """Forecast published -> SpotQuota published, through an in-process quota service."""
    asyncio.run(_quota_latency(forecasts, rate))


async def _quota_latency(n: int, rate: float) -> None:
    from aiokafka import AIOKafkaConsumer

    from gfs.schemas.envelope import wrap
    from gfs.schemas.forecast import HourlyDemand, PoolDemandForecast
    from gfs.schemas.pool_status import PoolStatus
    from gfs.schemas.topics import FORECASTS_TOPIC, POOL_STATUS_TOPIC, QUOTAS_TOPIC, decode
    from gfs.services.platform.kafka.producer import EnvelopeProducer
    from gfs.services.quota.service import QuotaServiceSettings, run_quota_service

    settings = QuotaServiceSettings(
        quota_refresh_s=3600.0, quota_api_port=0, quota_group=f"bench-quota-{uuid.uuid4().hex[:8]}"
    )
    pool = f"BENCH-{uuid.uuid4().hex[:6]}"
    stop, ready = asyncio.Event(), asyncio.Event()
    service = asyncio.create_task(run_quota_service(settings, stop, ready=ready))
    await asyncio.wait_for(ready.wait(), 60)
    consumer = AIOKafkaConsumer(
        QUOTAS_TOPIC,
        bootstrap_servers=settings.bootstrap_servers,
        auto_offset_reset="latest",
        isolation_level="read_committed",
    )
    await consumer.start()
    while not consumer.assignment():
        await asyncio.sleep(0.05)
    await consumer.seek_to_end()
    sent: dict[str, float] = {}
    latencies: list[float] = []

    async def read() -> None:
        while len(latencies) < n:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    now = time.perf_counter()
                    quota = decode(QUOTAS_TOPIC, record.value or b"").payload
                    tag = quota.forecast_version.split("@")[0].split(":")[-1]
                    if quota.pool == pool and tag in sent:
                        latencies.append(1000 * (now - sent.pop(tag)))

    reader = asyncio.create_task(read())
    now = datetime.now(UTC)
    async with EnvelopeProducer(bootstrap_servers=settings.bootstrap_servers) as producer:
        status = PoolStatus(
            pool=pool,
            observed_at=now,
            capacity_gpus=512,
            idle_gpus=100,
            spot_in_use_gpus=50.0,
            hp_running_gpus=300.0,
            hp_queued_gpus=20.0,
        )
        await producer.send(POOL_STATUS_TOPIC, wrap(status, producer="bench"))
        await asyncio.sleep(1.0)
        origin0 = now - timedelta(hours=1)
        hours = lambda k: tuple(  # noqa: E731
            HourlyDemand(
                hour_ahead=h,
                mean=300.0 + k % 7,
                std=10.0,
                quantiles={"0.5": 300.0 + k % 7, "0.9": 313.0 + k % 7},
            )
            for h in range(1, 5)
        )
        for k in range(n):
            tag = f"b{k}"
            fc = PoolDemandForecast(
                pool=pool,
                origin_time=origin0 + timedelta(milliseconds=k + 1),
                horizon=hours(k),
                tenants=10,
                model_name="bench",
                model_version=tag,
            )
            sent[tag] = time.perf_counter()
            await producer.send(FORECASTS_TOPIC, wrap(fc, producer="bench"))
            await asyncio.sleep(1.0 / rate)
    try:
        await asyncio.wait_for(reader, 60)
    finally:
        stop.set()
        await consumer.stop()
        await asyncio.gather(service, return_exceptions=True)
    typer.echo(
        f"forecast published -> SpotQuota published, {len(latencies)} forecasts at {rate:g}/s: "
        f"p50 {_percentile(latencies, 0.5):.1f} ms, p99 {_percentile(latencies, 0.99):.1f} ms, "
        f"max {max(latencies):.1f} ms"
    )


def _register_stream() -> None:
    # The forecast stream's benchmark: its own module, registered here in its place among the commands.
    from gfs.services.livebench.stream_bench import stream

    app.command("stream")(stream)


_register_stream()


def _register_preemption() -> None:
    # The preemption benchmark lives in its own module (it is larger than the others here).
    from gfs.services.livebench.preemption_bench import preemption

    app.command("preemption")(preemption)
    from gfs.services.livebench.accept.bench import accept

    app.command("accept")(accept)
    from gfs.services.livebench.scale_bench import scale  # issue 23 item 5: N instances sharing the pools

    app.command("scale")(scale)


_register_preemption()


def _register_races() -> None:
    # Issue 22's race run: its own module (runner) and the pure check beside it.
    from gfs.services.livebench.races.bench import races

    app.command("races")(races)


_register_races()


@app.command("agent-sigterm")
def agent_sigterm(
    tasks: Annotated[int, typer.Option(help="spot fake tasks bound, then evicted one command each")] = 200,
    rate: Annotated[float, typer.Option(help="eviction commands per second (0: all at once)")] = 100.0,
    grace: Annotated[float, typer.Option(help="grace period of each eviction, s")] = 5.0,
) -> None:
    """Eviction command -> SIGTERM sent, through a `gfs serve node-agent` with fake GPUs (target:
    p99 under 50 ms). Measured from each command's `issued_at` to the SIGTERM time the agent
    journals (the same instant its gfs_agent_sigterm_* histograms record)."""
    asyncio.run(_agent_sigterm(tasks, rate, grace))


async def _agent_sigterm(n: int, rate: float, grace: float) -> None:
    import json

    from aiokafka import AIOKafkaConsumer, TopicPartition

    from gfs.schemas.commands import BindCommand, EvictCommand
    from gfs.schemas.envelope import wrap
    from gfs.schemas.tasks import EvictionReason, Placement, TaskClass
    from gfs.schemas.topics import BIND_TOPIC, EVICT_ACK_TOPIC, EVICT_TOPIC, WORKER_ACK_TOPIC, decode
    from gfs.services.platform.kafka.producer import EnvelopeProducer
    from gfs.services.platform.settings import PlatformSettings
    from gfs.services.platform.signing import node_key, sign

    servers = PlatformSettings().bootstrap_servers
    node = f"bench-agent-{uuid.uuid4().hex[:8]}"
    secret = uuid.uuid4().hex * 2
    key = node_key(secret.encode(), node)
    workdir = Path(f"/tmp/{node}")
    state = workdir / "state"
    workdir.mkdir(parents=True)
    gfs = str(Path(sys.executable).parent / "gfs")
    env = {**os.environ, "GFS_COMMAND_SECRET": secret}
    log = (workdir / "agent.log").open("wb")
    agent = subprocess.Popen(
        [gfs, "serve", "node-agent", "--node", node, "--fake-gpus", "--gpus", str(n), "--gpu-model", "BENCH",
         "--telemetry-s", "5", "--state-dir", str(state)],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    acks = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    await acks.start()
    parts = [TopicPartition(t, p) for t in (WORKER_ACK_TOPIC, EVICT_ACK_TOPIC) for p in range(6)]
    acks.assign(parts)
    await acks.seek_to_end(*parts)
    counts = {"WorkerStarted": 0, "EvictAck": 0}

    async def read_acks() -> None:
        while True:
            for records in (await acks.getmany(timeout_ms=100)).values():
                for record in records:
                    if record.key == node.encode():
                        kind = decode(record.topic, record.value or b"").event_type
                        counts[kind] = counts.get(kind, 0) + 1

    async def until(what: str, done: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if agent.poll() is not None:
                raise RuntimeError(f"the agent exited; see {workdir / 'agent.log'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            await asyncio.sleep(0.1)

    def workers_ready() -> int:
        logs = list((state / "logs").glob("*.log")) if (state / "logs").exists() else []
        return sum(1 for p in logs if b"started" in p.read_bytes())

    reader = asyncio.create_task(read_acks())
    argv = (sys.executable, "-m", "gfs.services.node_agent.fake_task")
    try:
        async with EnvelopeProducer(bootstrap_servers=servers) as producer:
            t0 = time.monotonic()
            for i in range(n):
                bind = BindCommand(
                    command_id=uuid.uuid4(), node=node, task_id=f"{node}-t{i}", task_class=TaskClass.SPOT,
                    placements=(Placement(worker_index=0, node=node, gpu_indices=(i,)),), command=argv,
                    issued_at=datetime.now(UTC),
                )  # fmt: skip
                await producer.send(BIND_TOPIC, wrap(sign(bind, key=key), producer="bench"))
            await until("the workers' WorkerStarted", lambda: counts["WorkerStarted"] >= n, 300)
            await until("the workers to run", lambda: workers_ready() >= n, 300)
            typer.echo(f"{n} fake tasks bound and running in {time.monotonic() - t0:.1f} s")

            async def evict(i: int) -> None:
                command = EvictCommand(
                    command_id=uuid.uuid4(), node=node, task_ids=(f"{node}-t{i}",),
                    reason=EvictionReason.PREEMPTED_BY_HP, grace_seconds=grace, issued_at=datetime.now(UTC),
                )  # fmt: skip
                await producer.send(EVICT_TOPIC, wrap(sign(command, key=key), producer="bench"))

            t0 = time.monotonic()
            if rate <= 0:
                await asyncio.gather(*(evict(i) for i in range(n)))
            else:
                for i in range(n):
                    await evict(i)
                    await asyncio.sleep(max(0.0, t0 + (i + 1) / rate - time.monotonic()))
            await until("the EvictAcks", lambda: counts["EvictAck"] >= n, 120)
            evicting_s = time.monotonic() - t0
            stat = Path(f"/proc/{agent.pid}/stat").read_text().rsplit(")", 1)[1].split()
            agent_cpu_s = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await acks.stop()
        agent.terminate()
        agent.wait(timeout=30)
        log.close()
    journal = json.loads((state / "journal.json").read_text())
    issued, received = [], []
    for entry in journal["commands"].values():
        if entry["kind"] == "evict" and entry["sigterm_at"]:
            sigterm = datetime.fromisoformat(entry["sigterm_at"])
            issued.append(1000 * (sigterm - datetime.fromisoformat(entry["issued_at"])).total_seconds())
            received.append(1000 * (sigterm - datetime.fromisoformat(entry["received_at"])).total_seconds())
    outcomes: dict[str, int] = {}
    for entry in journal["commands"].values():
        if entry["kind"] == "evict" and entry["ack"]:
            outcomes[entry["ack"]["outcome"]] = outcomes.get(entry["ack"]["outcome"], 0) + 1
    offered = "all at once" if rate <= 0 else f"{rate:g}/s"
    typer.echo(f"{len(issued)} evictions ({offered}, one task each), outcomes {outcomes}")
    for label, values in (("issued_at -> SIGTERM sent", issued), ("received -> SIGTERM sent", received)):
        typer.echo(
            f"  {label}: p50 {_percentile(values, 0.5):.1f} ms, p99 {_percentile(values, 0.99):.1f} ms, "
            f"max {max(values):.1f} ms"
        )
    typer.echo(
        f"  evictions done in {evicting_s:.1f} s; the agent's CPU over the whole run {agent_cpu_s:.1f} s "
        f"(machine: {os.cpu_count()} cores, shared with the broker, this client and the tasks)"
    )
    typer.echo(f"  (agent log and journal: {workdir})")

"""`gfs livebench stream` (services/livebench/cli.py registers it): task events at a fixed rate
through a `gfs serve forecast` worker, its consumer lag over time (target: 2,000 events/s with
bounded lag for 10 minutes)."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer


def stream(
    rate: Annotated[float, typer.Option(help="task events per second")] = 2000.0,
    seconds: Annotated[float, typer.Option(help="how long to publish")] = 600.0,
    pools: Annotated[int, typer.Option()] = 6,
    tenants: Annotated[int, typer.Option(help="tenants per pool")] = 30,
) -> None:
    """Task events at a fixed rate through a `gfs serve forecast` worker; its lag over time."""
    asyncio.run(_stream(rate, seconds, pools, tenants))


async def _stream(rate: float, seconds: float, pools: int, tenants: int) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    from gfs.schemas.envelope import wrap
    from gfs.schemas.tasks import TaskAccepted, TaskClass, TaskFinished, TaskSubmitted
    from gfs.schemas.topics import TASK_LIFECYCLE_TOPIC, TASK_SUBMIT_TOPIC, encode, key_of
    from gfs.services.platform.settings import PlatformSettings

    servers = PlatformSettings().bootstrap_servers
    run = uuid.uuid4().hex[:6]
    app_id = f"bench-forecast-{run}"
    workdir = Path(f"/tmp/{app_id}")
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "FORECAST_APP_ID": app_id,
        "FORECAST_DATADIR": str(workdir),
        "FORECAST_STORE": "rocksdb://",
    }
    log = (workdir / "worker.log").open("w")
    gfs = str(Path(sys.executable).parent / "gfs")
    worker = subprocess.Popen([gfs, "serve", "forecast"], env=env, stdout=log, stderr=subprocess.STDOUT)
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=servers, acks="all", linger_ms=5)
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    probe = AIOKafkaConsumer(bootstrap_servers=servers)
    await producer.start()
    await admin.start()
    await probe.start()
    topics = (TASK_SUBMIT_TOPIC, TASK_LIFECYCLE_TOPIC)
    parts = [TopicPartition(t, p) for t in topics for p in range(6)]
    start_offsets = await probe.end_offsets(parts)
    try:
        while "[^Worker]: Ready" not in (workdir / "worker.log").read_text():
            if worker.poll() is not None:
                raise RuntimeError("the forecast worker exited")
            await asyncio.sleep(0.2)
        rng = random.Random(1)
        live: list[tuple[str, str]] = []
        sent = 0
        lags: list[tuple[float, int]] = []
        t_start = time.monotonic()

        async def lag() -> int:
            ends = await probe.end_offsets(parts)
            committed = (await admin.list_consumer_group_offsets(app_id)) or {}
            total = 0
            for tp in parts:
                done = committed.get(tp)
                base = done.offset if done is not None and done.offset >= 0 else start_offsets[tp]
                total += max(0, ends[tp] - base)
            return total

        next_probe = t_start + 5
        while (elapsed := time.monotonic() - t_start) < seconds:
            due = int(elapsed * rate) - sent
            for _ in range(max(0, min(due, 2000))):
                now = datetime.now(UTC)
                if live and rng.random() < 0.5:
                    tid, pool = live.pop(rng.randrange(len(live)))
                    env_ = wrap(TaskFinished(task_id=tid, exit_code=0, finished_at=now), producer="bench")
                    topic = TASK_LIFECYCLE_TOPIC
                elif rng.random() < 0.5 or not live:
                    tid = f"{run}-{sent}"
                    pool = f"BP{rng.randrange(pools)}"
                    env_ = wrap(
                        TaskSubmitted(
                            task_id=tid,
                            tenant=f"t{rng.randrange(tenants)}",
                            gpu_model=pool,
                            gpus_per_worker=rng.choice([1, 2, 8]),
                            workers=1,
                            task_class=TaskClass.HP,
                            command="x",
                        ),
                        producer="bench",
                    )
                    topic = TASK_SUBMIT_TOPIC
                    live.append((tid, pool))
                else:
                    tid, pool = live[-1]
                    env_ = wrap(
                        TaskAccepted(task_id=tid, pool=pool, task_class=TaskClass.HP), producer="bench"
                    )
                    topic = TASK_LIFECYCLE_TOPIC
                await producer.send(topic, value=encode(env_), key=key_of(env_))
                sent += 1
            if time.monotonic() >= next_probe:
                lags.append((time.monotonic() - t_start, await lag()))
                typer.echo(f"  t={lags[-1][0]:6.0f}s sent {sent:,} lag {lags[-1][1]:,}")
                next_probe += 5
            await asyncio.sleep(0.01)
        await producer.flush()
        drain_start = time.monotonic()
        while (remaining := await lag()) > 0 and time.monotonic() - drain_start < 120:
            await asyncio.sleep(1)
        drained = f"in {time.monotonic() - drain_start:.1f} s" if remaining == 0 else "NOT within 120 s"
        typer.echo(
            f"stream: {sent:,} task events in {seconds:.0f} s ({sent / seconds:,.0f}/s offered); "
            f"consumer lag max {max((v for _, v in lags), default=0):,} events, drained {drained}"
        )
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        log.close()
        await producer.stop()
        await admin.close()
        await probe.stop()

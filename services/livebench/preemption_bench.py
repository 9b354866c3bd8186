"""`gfs bench pipeline`: submit -> BindCommand latency and decisions/s with full-scale state.

What it does, on the running stack (`make up`):
1. starts `gfs serve preemption` as a child process on a fresh Postgres schema, with an inbox
   topic, consumer groups and pool names of its own (pools are "<GPU model>.<run id>"), so runs
   never see each other;
2. registers every node of the inventory (default: the GFS cluster, 4,278 nodes, 10,412 GPUs)
   with one NodeTelemetry each, and a SpotQuota per pool (60% of the pool for 1 and 2 h, none
   for 4 h);
3. fills the cluster to the target allocation (default 80%) with HP and spot tasks, and adds
   gangs that cannot fit, so queues are not empty; with `--backlog N`, also N spot tasks asking
   for a 4-h guarantee (mixed shapes, 1-4 workers), which wait for quota for the whole run: a
   production-sized queue the passes must not slow down on (services/livebench/pipeline/ramp.py);
4. for `--seconds`, offers task events at `--rate` per second: submissions and finishes
   (WorkerExited for every worker of a running task), chosen to hold the allocation near the
   target; it plays the node agents' part for evictions (an EvictAck at once), so held binds go
   out after one round trip;
5. prints the configuration, the latency of tasks placed on arrival (submit sent -> BindCommand
   read back), split into "no preemption" and "with preemption" (which includes the ack round
   trip), a latency histogram, and the decisions committed per second. With `--ramp` it instead
   offers rising rates in steps of `--step-s` and prints each step's p50/p99 and lag, and the
   highest rate whose p99 stayed under `--p99-limit-ms` without the lag growing (pipeline/ramp.py).

Heartbeats are not sent during the run (the node timeout is set out of reach): 4,278 agents
every 5 s would be another 856 records/s through the router; they change nothing durable.

Parts: this module runs the benchmark; pipeline/load.py offers the load and models the cluster,
pipeline/readback.py reads the commands back and reports, pipeline/ramp.py runs `--ramp`.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import os
import random
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import asyncpg
import typer
from aiokafka import AIOKafkaConsumer

from gfs.schemas.envelope import wrap
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.schemas.topics import (
    QUOTAS_TOPIC,
    TASK_SUBMIT_TOPIC,
    TELEMETRY_TOPIC,
)
from gfs.services.livebench.pipeline.load import (
    BenchState,
    Load,
    Running,
    signed,
)
from gfs.services.livebench.pipeline.ramp import RampOptions, run_ramp, submit_backlog
from gfs.services.livebench.pipeline.readback import _read, _report
from gfs.services.livebench.pipeline.under_test import UnderTest, distinct_partitions
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.migrations import discover, migrate, with_search_path
from gfs.services.platform.settings import PlatformSettings
from gfs.services.preemption.router.routing import ROUTED_TOPICS
from gfs.services.preemption.service_settings import PreemptionSettings
from gfs.services.toolkit.consumer_groups import start_group_at_end
from gfs.services.toolkit.processes import free_port

SHAPES = ((1, 0.40), (2, 0.20), (4, 0.20), (8, 0.20))  # GPUs per worker, share of tasks


def _inventory(path: Path) -> list[tuple[str, str, int]]:
    with path.open(newline="") as handle:
        return [
            (row["node_name"], row["gpu_model"], int(row["gpu_capacity_num"]))
            for row in csv.DictReader(handle)
        ]


def preemption(
    rate: Annotated[float, typer.Option(help="task events per second in the measured phase")] = 200.0,
    seconds: Annotated[float, typer.Option(help="length of the measured phase")] = 600.0,
    fill: Annotated[float, typer.Option(help="target share of GPUs allocated")] = 0.8,
    hp_share: Annotated[float, typer.Option(help="share of HP submissions")] = 0.5,
    nodes: Annotated[Path | None, typer.Option(help="node_info_df.csv (default: the GFS inventory)")] = None,
    seed: Annotated[int, typer.Option()] = 7,
    keep_schema: Annotated[bool, typer.Option(help="keep the run's Postgres schema")] = False,
    profile: Annotated[
        Path | None, typer.Option(help="run the service under cProfile, stats to this file")
    ] = None,
    backlog: Annotated[
        int, typer.Option(help="spot tasks kept queued (4-h guarantee, quota 0) before measuring")
    ] = 0,
    ramp: Annotated[
        bool, typer.Option(help="raise the rate step by step until p99 or lag breaks; print the ceiling")
    ] = False,
    ramp_start: Annotated[float, typer.Option(help="--ramp: the first step's rate")] = 50.0,
    ramp_factor: Annotated[float, typer.Option(help="--ramp: each step's rate over the last's")] = 1.5,
    step_s: Annotated[float, typer.Option(help="--ramp: length of each step")] = 60.0,
    p99_limit_ms: Annotated[float, typer.Option(help="--ramp: the p99 that ends the ramp")] = 100.0,
    instances: Annotated[
        int, typer.Option(min=1, help="preemption instances sharing the pools (one consumer group)")
    ] = 1,
) -> None:
    """Submit -> BindCommand latency (p50/p99/p99.9) and decisions/s through a running preemption
    service with full-scale cluster state (prints numbers; needs `make up`)."""
    settings = PlatformSettings()
    inventory = nodes or settings.gfs_shared_dir / "data" / "gfs-v2026" / "node_info_df.csv"
    steps = RampOptions(ramp_start, ramp_factor, step_s, p99_limit_ms) if ramp else None
    asyncio.run(
        _bench(settings, _inventory(inventory), rate, seconds, fill, hp_share, seed, keep_schema, profile,
               backlog=backlog, ramp=steps, instances=instances)
    )  # fmt: skip


async def _bench(
    settings: PlatformSettings, inventory: list[tuple[str, str, int]], rate: float, seconds: float,
    fill: float, hp_share: float, seed: int, keep_schema: bool, profile: Path | None = None,
    *, backlog: int = 0, ramp: RampOptions | None = None, instances: int = 1,
) -> dict[str, float]:  # fmt: skip
    rng = random.Random(seed)
    models = sorted({model for _, model, _ in inventory})
    default = PreemptionSettings.model_fields["preemption_inbox_partitions"].default
    partitions = max(default, len(models))
    run = uuid.uuid4().hex[:6]
    while not distinct_partitions([f"{m}.{run}" for m in models], partitions):
        run = uuid.uuid4().hex[:6]  # pipeline/under_test.py: no two pools on one inbox partition
    schema = f"bench_{run}"
    secret = os.environ.get("GFS_COMMAND_SECRET") or uuid.uuid4().hex * 2
    admin = await asyncpg.connect(settings.database_url)
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    dsn = with_search_path(settings.database_url, schema)
    connection = await asyncpg.connect(dsn)
    await migrate(connection, discover())
    pools: dict[str, int] = Counter()
    for _, model, gpus in inventory:
        pools[f"{model}.{run}"] += gpus
    largest = {p: 0 for p in pools}
    for _, model, gpus in inventory:
        largest[f"{model}.{run}"] = max(largest[f"{model}.{run}"], gpus)
    state = BenchState(capacity=sum(pools.values()))
    # Ports used to be drawn from `rng` here: the same draws keep a seed's load as it was.
    for _ in range(instances):
        rng.randrange(1000)
    ports = [free_port() for _ in range(instances)]
    env = os.environ | {
        "DATABASE_URL": dsn, "GFS_COMMAND_SECRET": secret,
        "PREEMPTION_GROUP": f"bench-pre-{run}", "PREEMPTION_ROUTER_GROUP": f"bench-router-{run}",
        "PREEMPTION_INBOX_TOPIC": f"bench-inbox-{run}", "PREEMPTION_INBOX_PARTITIONS": str(partitions),
        "PREEMPTION_POOLS": ",".join(pools),
        "PREEMPTION_NODE_TIMEOUT_S": "1e9", "PREEMPTION_GRACE_S": "5", "PREEMPTION_ACK_MARGIN_S": "5",
    }  # fmt: skip
    under = UnderTest(run, env, ports, partitions, profile)
    print(f"run {run}: {instances} instance(s), schema {schema}")
    print(f"cluster: {len(inventory)} nodes, {state.capacity} GPUs, {len(pools)} pools; fill {fill:.0%}, "
          f"rate {rate:g} events/s for {seconds:g} s, HP share {hp_share:.0%}, seed {seed}")  # fmt: skip
    try:
        # The router group starts where the topics end now (earlier runs' records are not this
        # run's), committed before it starts, so its lag counts only this run's records.
        await start_group_at_end(settings.bootstrap_servers, f"bench-router-{run}", ROUTED_TOPICS)
        await under.start(settings.bootstrap_servers)
        await under.ready(settings.bootstrap_servers)
        async with EnvelopeProducer(
            bootstrap_servers=settings.bootstrap_servers, client_id=f"bench-{run}"
        ) as producer:
            reader = asyncio.create_task(_read(settings, state, producer, run, secret))
            await asyncio.sleep(2.0)
            t0 = time.perf_counter()
            now = datetime.now(UTC)
            for name, model, gpus in inventory:
                samples = tuple(
                    GpuSample(index=i, utilisation_pct=0, memory_used_mib=0, memory_total_mib=80_000)
                    for i in range(gpus)
                )
                await producer.send(
                    TELEMETRY_TOPIC,
                    wrap(
                        signed(
                            NodeTelemetry(
                                node=f"{run}-{name}", gpu_model=f"{model}.{run}", sampled_at=now, gpus=samples
                            ),
                            secret,
                        ),
                        producer="bench",
                    ),
                )
            for pool, cap in pools.items():
                q = SpotQuota(
                    pool=pool,
                    # 4 h gets no quota: the backlog's spot tasks ask for 4 h, so they stay queued.
                    quotas=tuple(
                        GuaranteeQuota(guarantee_hours=h, quota_gpus=0.6 * cap if h < 4 else 0.0)
                        for h in (1, 2, 4)
                    ),
                    eta=1.0,
                    capacity_gpus=cap,
                    valid_from=now,
                    valid_until=now + timedelta(days=1),
                    forecast_version="bench",
                )
                await producer.send(QUOTAS_TOPIC, wrap(q, producer="bench"))
            owner = await under.until_registered(len(inventory))
            print(f"registered {len(inventory)} nodes in {time.perf_counter() - t0:.1f} s")
            if instances > 1:
                share = [sum(c for p, c in pools.items() if owner.get(p) == i) / state.capacity
                         for i in range(instances)]  # fmt: skip
                print("share of the GPUs per instance: " + " / ".join(f"{x:.0%}" for x in share))
            behind = await _router_caught_up(settings, f"bench-router-{run}")
            print(f"router caught up ({behind} records behind at the end)")

            pool_names = list(pools)
            weights = [pools[p] for p in pool_names]

            def new_task(cls: TaskClass | None = None, *, gang: bool = False) -> TaskSubmitted:
                pool = rng.choices(pool_names, weights)[0]
                shapes = [g for g, _ in SHAPES if g <= largest[pool]]
                g = rng.choices(shapes, [w for s, w in SHAPES if s in shapes])[0]
                workers = 8 if gang else 1
                cls = cls or (TaskClass.HP if rng.random() < hp_share else TaskClass.SPOT)
                tid = f"{run}-{uuid.uuid4().hex[:10]}"
                return TaskSubmitted(
                    task_id=tid,
                    tenant=f"org-{rng.randrange(20)}",
                    gpu_model=pool,
                    gpus_per_worker=g,
                    workers=workers,
                    task_class=cls,
                    command=("gfs", "fake-task"),
                )

            def new_backlog_task() -> TaskSubmitted:
                task = new_task(TaskClass.SPOT)
                workers = rng.choice((1, 1, 2, 4))
                return task.model_copy(update={"guarantee_hours": 4, "workers": workers})

            async def submit(task: TaskSubmitted) -> None:
                state.pending[task.task_id] = Running(
                    task.task_class, task.gpus_per_worker * task.workers, workers=task.workers
                )
                state.submitted_wall[task.task_id] = time.time()  # the stage stamps' clock
                state.submitted_at[task.task_id] = time.perf_counter()
                await producer.send(TASK_SUBMIT_TOPIC, wrap(task, producer="bench"))

            # Fill to the target, then queue gangs that cannot fit now.
            t1 = time.perf_counter()
            while state.allocated < fill * state.capacity:
                # A bounded backlog of recent submissions (ones that queue for long, e.g. spot over
                # its quota, stop counting after 3 s): the fill is not the measurement.
                recent = time.perf_counter() - 3.0
                if sum(1 for t in state.pending if state.submitted_at[t] > recent) < 300:
                    for _ in range(50):
                        await submit(new_task())
                await asyncio.sleep(0.05)
                if time.perf_counter() - t1 > 900:
                    break
            for _ in range(20):
                await submit(new_task(TaskClass.HP, gang=True))
            await asyncio.sleep(3.0)
            print(
                f"filled to {state.allocated / state.capacity:.1%} allocated ({len(state.running)} running, "
                f"{len(state.pending)} queued) in {time.perf_counter() - t1:.1f} s"
            )
            if backlog:
                await submit_backlog(state, backlog, new_backlog_task, submit, settings, run, dsn)
            load = Load(state, producer, secret, rng, fill, new_task, submit)
            if ramp is not None:
                summary = await run_ramp(load, ramp, dsn, settings, run, lambda: sum(under.cpu_s()))
            else:
                state.latency.clear()
                measured_from = datetime.now(UTC)
                cpu0 = under.cpu_s()
                start = time.perf_counter()
                offered, measured_s = await load.offer(rate, seconds)
                await asyncio.sleep(3.0)
                each = [c - c0 for c, c0 in zip(under.cpu_s(), cpu0, strict=True)]
                service_cpu = sum(each)
                summary = await _report(dsn, state, measured_from, measured_s, offered, rate, start)
                events = sum(offered.values())
                per_event = 1000 * service_cpu / max(events, 1)
                split = f" (per instance: {' / '.join(f'{c:.1f}' for c in each)} s)" if instances > 1 else ""
                print(f"service CPU in the measured phase (and the 3 s after): {service_cpu:.1f} s for "
                      f"{events} task events = {per_event:.2f} ms per event{split}")  # fmt: skip
                summary["cpu_ms_per_event"] = per_event
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
    finally:
        under.stop()
        await connection.close()
        if not keep_schema:
            await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await admin.close()
    return summary


async def _router_caught_up(settings: PlatformSettings, group: str, timeout: float = 900.0) -> int:
    from aiokafka.admin import AIOKafkaAdminClient

    from gfs.services.platform.kafka.lag import LagProbe

    probe = LagProbe(settings.bootstrap_servers, group, ROUTED_TOPICS)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    consumer = AIOKafkaConsumer(*ROUTED_TOPICS, bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            behind = sum((await probe.measure(admin, consumer)).values())
            if behind < 50 or time.monotonic() > deadline:
                return behind
            await asyncio.sleep(1.0)
    finally:
        await consumer.stop()
        await admin.close()

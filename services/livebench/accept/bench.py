"""`gfs livebench accept`: submit -> TaskAccepted latency, measured from broker timestamps.

Issue 22 item 5: accepting a task (validation, a journal write, the TaskAccepted event) should
take milliseconds. What it does, on the running stack:
1. starts `gfs serve preemption` as a child process on a fresh Postgres schema, with an inbox
   topic, consumer groups and a pool name of its own ("ACCEPT.<run id>"), so runs never see each
   other; its router group starts at the topics' end (`PREEMPTION_ROUTER_OFFSET_RESET=latest`),
   so it does not first read the shared topics' history;
2. plays the node agents of a small pool (default 4 nodes x 8 GPUs, no real agent): telemetry
   until the service registered every node (and then every 5 s), a SpotQuota (60% of the pool),
   WorkerStarted for every worker of a BindCommand and WorkerExited `--run-s` later, and an
   EvictAck at once for every EvictCommand (CHECKPOINTED, or NOT_RUNNING when the task already
   exited);
3. submits tasks at a steady `--rate` for `--seconds` (shapes 1/2/4/8 GPUs, `--hp-share` HP);
4. reads back every record of the run on gfs.tasks.submit, gfs.tasks.lifecycle and
   gfs.commands.bind and prints, from the records' own timestamps (the ones the broker stored):
   submit -> TaskAccepted (every accepted task) and submit -> first BindCommand (tasks placed on
   arrival without preemption, from the service's decision records), p50/p90/p99/max and count,
   with the machine's load average before and after.

The default offered load (200 tasks/s, 2 s each, on 32 GPUs) is far above the pool's capacity, as
in the measurement of issue 22: the queue grows through the run, which is the point (accepting
must not wait for the backlog).

Parts: this module runs the benchmark; accept/agents.py plays the node agents, accept/readback.py
reads the run back and summarises the latencies.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import asyncpg
import typer
from aiokafka import AIOKafkaConsumer, TopicPartition

from gfs.schemas.envelope import wrap
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.schemas.topics import (
    BIND_TOPIC,
    EVICT_TOPIC,
    QUOTAS_TOPIC,
    TASK_LIFECYCLE_TOPIC,
    TASK_SUBMIT_TOPIC,
    TELEMETRY_TOPIC,
    encode,
    key_of,
    topic,
)
from gfs.services.livebench.accept.agents import FakeAgents
from gfs.services.livebench.accept.readback import (
    INBOX_PARTITIONS,
    Seen,
    _line,
    _placed_on_arrival,
    _read,
    _stages,
    summarise,
)
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.migrations import discover, migrate, with_search_path
from gfs.services.platform.settings import PlatformSettings
from gfs.services.platform.signing import node_key, sign
from gfs.services.toolkit.processes import free_port

REPO = Path(__file__).resolve().parents[3]
SHAPES = ((1, 0.40), (2, 0.20), (4, 0.20), (8, 0.20))  # GPUs per worker, share of tasks
READ_TOPICS = (TASK_SUBMIT_TOPIC, TASK_LIFECYCLE_TOPIC, BIND_TOPIC, EVICT_TOPIC)


# The service under cProfile with the process's CPU time as its clock (the wall clock of a shared
# 2-core machine counts the time other processes ran as ours); stats written when it stops.
CPU_PROFILER = """
import cProfile, runpy, sys, time
out = sys.argv[1]
sys.argv = ["services", "serve", "preemption"]
profiler = cProfile.Profile(time.process_time)
profiler.enable()
try:
    runpy.run_module("services", run_name="__main__")
except SystemExit:
    pass
finally:
    profiler.disable()
    profiler.dump_stats(out)
"""


def accept(
    rate: Annotated[float, typer.Option(help="task submissions per second")] = 200.0,
    seconds: Annotated[float, typer.Option(help="how long to submit")] = 60.0,
    nodes: Annotated[int, typer.Option(help="nodes in the pool")] = 4,
    gpus: Annotated[int, typer.Option(help="GPUs per node")] = 8,
    run_s: Annotated[float, typer.Option(help="how long each fake task runs once bound")] = 2.0,
    hp_share: Annotated[float, typer.Option(help="share of HP submissions")] = 0.5,
    seed: Annotated[int, typer.Option()] = 7,
    keep_schema: Annotated[bool, typer.Option(help="keep the run's Postgres schema")] = False,
    profile: Annotated[
        Path | None, typer.Option(help="run the service under cProfile (CPU time), stats to this file")
    ] = None,
) -> None:
    """Submit -> TaskAccepted latency (p50/p90/p99/max, from broker timestamps) at a steady rate on
    a small pool, through a running preemption service (prints numbers; needs the stack)."""
    bench = run_accept_bench(
        PlatformSettings(), rate=rate, seconds=seconds, nodes=nodes, gpus=gpus, run_s=run_s,
        hp_share=hp_share, seed=seed, keep_schema=keep_schema, profile=profile,
    )  # fmt: skip
    asyncio.run(bench)


async def run_accept_bench(
    settings: PlatformSettings, *, rate: float, seconds: float, nodes: int = 4, gpus: int = 8,
    run_s: float = 2.0, hp_share: float = 0.5, seed: int = 7, keep_schema: bool = False,
    profile: Path | None = None, echo: Callable[[str], None] = print,
) -> dict[str, Any]:  # fmt: skip
    """The benchmark; returns what it printed as numbers (tests read `submitted`, `accepted`)."""
    rng = random.Random(seed)
    run = uuid.uuid4().hex[:6]
    schema = f"bench_accept_{run}"
    pool = f"ACCEPT.{run}"
    node_names = [f"{run}-n{i}" for i in range(nodes)]
    secret = os.environ.get("GFS_COMMAND_SECRET") or uuid.uuid4().hex * 2
    admin = await asyncpg.connect(settings.database_url)
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    dsn = with_search_path(settings.database_url, schema)
    connection = await asyncpg.connect(dsn)
    await migrate(connection, discover())
    await connection.close()
    port = free_port()  # not from the seed: two runs side by side (before/after) must not collide
    env = os.environ | {
        "DATABASE_URL": dsn, "GFS_COMMAND_SECRET": secret,
        "PREEMPTION_GROUP": f"bench-accept-{run}", "PREEMPTION_ROUTER_GROUP": f"bench-accept-router-{run}",
        "PREEMPTION_INBOX_TOPIC": f"bench-accept-inbox-{run}", "PREEMPTION_POOLS": pool,
        "PREEMPTION_INBOX_PARTITIONS": str(INBOX_PARTITIONS),
        "PREEMPTION_ROUTER_OFFSET_RESET": "latest", "PREEMPTION_NODE_TIMEOUT_S": "1e9",
        "PREEMPTION_API_PORT": str(port), "PREEMPTION_GRACE_S": "5", "PREEMPTION_ACK_MARGIN_S": "5",
        "PREEMPTION_INSTANCE": f"bench-accept-{run}",
    }  # fmt: skip
    log_path = REPO / ".stack" / f"bench-accept-{run}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        argv = ["-m", "gfs.services", "serve", "preemption"]
        if profile is not None:
            argv = ["-c", CPU_PROFILER, str(profile)]
        service = subprocess.Popen(
            [sys.executable, *argv],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    capacity = nodes * gpus
    echo(f"run {run}: service pid {service.pid}, log {log_path}, schema {schema}")
    echo(f"pool {pool}: {nodes} nodes x {gpus} GPUs; {rate:g} submissions/s for {seconds:g} s, tasks run "
         f"{run_s:g} s once bound, HP share {hp_share:.0%}, seed {seed}")  # fmt: skip
    seen = Seen()
    reader: AIOKafkaConsumer | None = None
    read_task: asyncio.Task[None] | None = None
    summary: dict[str, Any] = {}
    try:
        async with EnvelopeProducer(
            bootstrap_servers=settings.bootstrap_servers, client_id=f"bench-accept-{run}"
        ) as producer:
            agents = FakeAgents(producer, run_s, secret)
            reader = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False)
            await reader.start()
            tps = [TopicPartition(t, p) for t in READ_TOPICS for p in range(topic(t).partitions)]
            reader.assign(tps)
            await reader.seek_to_end(*tps)
            for tp in tps:  # resolve the end offsets now: later records are this run's
                await reader.position(tp)
            read_task = asyncio.create_task(_read(reader, f"{run}-", seen, agents))

            async def heartbeat() -> None:
                now = datetime.now(UTC)
                samples = tuple(
                    GpuSample(index=i, utilisation_pct=0, memory_used_mib=0, memory_total_mib=80_000)
                    for i in range(gpus)
                )
                for name in node_names:
                    telemetry = NodeTelemetry(node=name, gpu_model=pool, sampled_at=now, gpus=samples)
                    telemetry = sign(telemetry, key=node_key(secret.encode("utf-8"), name))
                    await producer.send(TELEMETRY_TOPIC, wrap(telemetry, producer="bench-agent"))

            quota = SpotQuota(
                pool=pool, quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=0.6 * capacity)
                                        for h in (1, 2, 4)),
                eta=1.0, capacity_gpus=capacity, valid_from=datetime.now(UTC),
                valid_until=datetime.now(UTC) + timedelta(days=1), forecast_version="bench-accept",
            )  # fmt: skip
            t0 = time.perf_counter()
            # The router group starts at the topics' end once it is assigned: send until registered.
            deadline = time.monotonic() + 120
            while not await _registered(port, pool, nodes):
                if service.poll() is not None:
                    raise RuntimeError(f"the preemption service exited; see {log_path}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the service did not register the pool in 120 s; see {log_path}")
                await heartbeat()
                await producer.send(QUOTAS_TOPIC, wrap(quota, producer="bench"))
                await asyncio.sleep(1.0)
            echo(f"registered {nodes} nodes and the quota in {time.perf_counter() - t0:.1f} s")

            shapes = [g for g, _ in SHAPES if g <= gpus]
            weights = [w for g, w in SHAPES if g <= gpus]
            load_before = os.getloadavg()
            start = time.monotonic()
            next_heartbeat = start + 5.0
            k = 0
            submissions: list[asyncio.Future[Any]] = []
            while (elapsed := time.monotonic() - start) < seconds:
                due = min(int(elapsed * rate) + 1, int(seconds * rate))
                while k < due:
                    cls = TaskClass.HP if rng.random() < hp_share else TaskClass.SPOT
                    task = TaskSubmitted(
                        task_id=f"{run}-t{k}", tenant=f"org-{rng.randrange(20)}", gpu_model=pool,
                        gpus_per_worker=rng.choices(shapes, weights)[0], workers=1, task_class=cls,
                        command=("gfs", "fake-task"),
                    )  # fmt: skip
                    envelope = wrap(task, producer="bench")
                    submissions.append(
                        await producer.send_raw_later(
                            TASK_SUBMIT_TOPIC, value=encode(envelope), key=key_of(envelope)
                        )
                    )
                    k += 1
                await agents.due()
                if time.monotonic() >= next_heartbeat:
                    next_heartbeat += 5.0
                    await heartbeat()
                if len(submissions) > 100:
                    await asyncio.gather(*submissions)
                    submissions.clear()
                await agents.flush()
                await asyncio.sleep(max(0.0, min(0.005, start + k / rate - time.monotonic())))
            await asyncio.gather(*submissions)
            offered_s = time.monotonic() - start
            # Every submission answered (accepted or rejected), read back; agents keep playing.
            wait_until = time.monotonic() + 60
            while time.monotonic() < wait_until:
                answered = sum(1 for t in seen.submitted if t in seen.accepted or t in seen.rejected)
                if len(seen.submitted) >= k and answered >= k:
                    break
                await agents.due()
                await agents.flush()
                await asyncio.sleep(0.05)
            load_after = os.getloadavg()
            read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await read_task
            service_cpu_s = _cpu_seconds(service.pid)
        plain = await _placed_on_arrival(dsn)
        stages = await _stages(settings, dsn, f"bench-accept-inbox-{run}", seen)
        accept_ms = [seen.accepted[t] - s for t, s in seen.submitted.items() if t in seen.accepted]
        bind_ms = [seen.first_bind[t] - seen.submitted[t] for t in plain
                   if t in seen.first_bind and t in seen.submitted]  # fmt: skip
        kinds = {0: "CreateTime", 1: "LogAppendTime"}
        stamps = ", ".join(sorted(kinds.get(t, str(t)) for t in seen.timestamp_types)) or "none"
        summary = {
            "run": run, "submitted": k, "read_back": len(seen.submitted), "accepted": len(seen.accepted),
            "rejected": len(seen.rejected), "binds": seen.binds, "evictions": seen.evicts,
            "accept_ms": summarise(accept_ms), "bind_ms": summarise(bind_ms),
            "load_before": load_before, "load_after": load_after, "service_cpu_s": service_cpu_s,
        }  # fmt: skip
        echo(f"offered {k} submissions in {offered_s:.1f} s ({k / offered_s:.1f}/s); read back "
             f"{len(seen.submitted)}: {len(seen.accepted)} accepted, {len(seen.rejected)} rejected; "
             f"{seen.binds} binds, {seen.evicts} evictions (record timestamps: {stamps})")  # fmt: skip
        echo(_line("submit -> TaskAccepted", summary["accept_ms"]))
        echo(_line("submit -> first BindCommand (placed on arrival, no preemption)", summary["bind_ms"]))
        for label, values in stages.items():
            summary[f"stage {label}"] = summarise(values)
            echo(_line(f"  {label}", summary[f"stage {label}"]))
        echo(f"load average (1/5/15 min) before {_load(load_before)}, after {_load(load_after)}; "
             f"{os.cpu_count()} cores; the service's CPU {service_cpu_s:.1f} s")  # fmt: skip
    finally:
        if read_task is not None:
            read_task.cancel()
            await asyncio.gather(read_task, return_exceptions=True)
        if reader is not None:
            await reader.stop()
        service.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            service.wait(timeout=20)
        if service.poll() is None:
            service.kill()
        if not keep_schema:
            await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await admin.close()
    return summary


def _load(values: tuple[float, float, float]) -> str:
    return "/".join(f"{v:.2f}" for v in values)


def _cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


async def _registered(port: int, pool: str, nodes: int) -> bool:
    import aiohttp

    with contextlib.suppress(aiohttp.ClientError, OSError, KeyError, ValueError):
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/pools", timeout=aiohttp.ClientTimeout(total=2)) as response,
        ):
            body = await response.json()
            found = body["pools"].get(pool)
            return found is not None and found["nodes"] >= nodes and bool(found["quota_version"])
    return False

"""`gfs livebench scale`: decisions/s with N preemption instances sharing the pools (issue 23, item 5).

Scale-out is Kafka's: every instance runs the router and a decider in one consumer group per role,
and the inbox's partitions (one pool each here) are spread over the instances by the group. This
benchmark measures what that gives, side by side for each N of `--instances` in one run:

1. per N: a fresh Postgres schema, an inbox topic (one partition per pool, `--replication-factor`
   replicas), consumer groups and pool names of its own; N `gfs serve preemption` processes;
2. registers `--nodes` nodes per pool (signed NodeTelemetry) and a SpotQuota per pool, waits until
   the instances own every pool between them (each owns some) and the router has caught up;
3. offers `--tasks` 1-GPU HP tasks spread evenly over the pools, closed-loop: at most `--window`
   submitted and not yet bound (so the queues stay short and the number is the pipeline's rate,
   not a backlog's cost; issue 23 item 4 is that cost). Nothing finishes: the tasks fit the cluster;
4. prints decisions/s (BindCommands read back per second between the 10th and 90th percentile
   bind), submit -> BindCommand p50/p99, the CPU seconds each instance spent, and how busy the
   machine's cores were (all processes, /proc/stat), which says whether the run was CPU-bound.

Point it at the 3-broker cluster (`infra/stack.sh cluster up`, then `--bootstrap-servers` or
`eval "$(infra/stack.sh cluster env)"`), or at the shared broker with `--replication-factor 1`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from gfs.schemas.topics import BIND_TOPIC, QUOTAS_TOPIC, TASK_SUBMIT_TOPIC, TELEMETRY_TOPIC
from gfs.services.livebench.instances import until_pools, until_split, until_stable
from gfs.services.livebench.proc_stats import cpu_s, machine_ticks
from gfs.services.toolkit.processes import ServiceProcess, free_port, stop_all


@dataclass(slots=True)
class Outcome:
    instances: int
    pools: int
    tasks: int
    binds: int = 0
    rate: float = 0.0  # decisions/s between the 10th and the 90th percentile bind
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    cpu_s: list[float] = field(default_factory=list)  # per instance, during the measured phase
    busy: float = 0.0  # share of the machine's cores busy during the measured phase
    machine_cpu_s: float = 0.0  # CPU seconds all processes spent then (other users' too)
    bench_cpu_s: float = 0.0  # of which this benchmark's own process (producer and reader)
    wall_s: float = 0.0
    owned: list[int] = field(default_factory=list)  # pools per instance


def scale(
    instances: Annotated[str, typer.Option(help="instance counts to run, side by side")] = "1,2",
    pools: Annotated[int, typer.Option(min=1, help="pools (one inbox partition each)")] = 4,
    nodes: Annotated[int, typer.Option(min=1, help="nodes per pool")] = 100,
    gpus: Annotated[int, typer.Option(min=1, help="GPUs per node")] = 8,
    tasks: Annotated[int, typer.Option(min=10, help="tasks offered per run (must fit the GPUs)")] = 3000,
    window: Annotated[int, typer.Option(min=1, help="most tasks submitted and not yet bound")] = 400,
    bootstrap_servers: Annotated[
        str | None, typer.Option("--bootstrap-servers", help="default: KAFKA_BOOTSTRAP_SERVERS")
    ] = None,
    replication_factor: Annotated[int, typer.Option(min=1, help="replicas of the inbox topic")] = 3,
    keep_schema: Annotated[bool, typer.Option(help="keep each run's Postgres schema")] = False,
) -> None:
    """Decisions/s of 1..N preemption instances sharing the pools (prints a table; needs a broker
    and Postgres: `make up`, and `infra/stack.sh cluster up` for the 3-broker cluster)."""
    from gfs.services.platform.settings import PlatformSettings

    counts = [int(n) for n in instances.split(",") if n.strip()]
    if tasks > pools * nodes * gpus:
        raise typer.BadParameter(f"--tasks {tasks} do not fit {pools * nodes * gpus} GPUs")
    settings = PlatformSettings()
    servers = bootstrap_servers or settings.kafka_bootstrap_servers
    shape = (pools, nodes, gpus, tasks, window, replication_factor, keep_schema)
    results = [asyncio.run(_run(n, settings.database_url, servers, *shape)) for n in counts]
    print(f"\nbroker {servers}; {pools} pools x {nodes} nodes x {gpus} GPUs; {tasks} tasks, window {window}; "
          f"{os.cpu_count()} cores on this machine")  # fmt: skip
    print(f"{'N':>2} {'pools/inst':>10} {'decisions/s':>11} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'inst CPU s (each)':>18} {'bench CPU s':>11} {'machine CPU s':>13} "
          f"{'busy':>5} {'wall s':>6}")  # fmt: skip
    for r in results:
        cpu = "/".join(f"{c:.1f}" for c in r.cpu_s)
        owned = "/".join(str(o) for o in r.owned)
        print(f"{r.instances:>2} {owned:>10} {r.rate:>11.0f} {r.p50_ms:>7.0f} {r.p99_ms:>7.0f} "
              f"{cpu:>18} {r.bench_cpu_s:>11.1f} {r.machine_cpu_s:>13.1f} "
              f"{r.busy:>5.0%} {r.wall_s:>6.1f}")  # fmt: skip
    if len(results) > 1 and results[0].rate > 0:
        for r in results[1:]:
            ratio = r.rate / results[0].rate
            print(f"N={r.instances}: {ratio:.2f}x the decisions/s of N={results[0].instances}")


def _pool_names(run: str, pools: int) -> list[str]:
    """Pool names that land on distinct inbox partitions (one partition per pool)."""
    from gfs.services.producers.partitioning import partition_for_key

    found: dict[int, str] = {}
    i = 0
    while len(found) < pools:
        name = f"SC{i}.{run}"
        found.setdefault(partition_for_key(name.encode(), pools), name)
        i += 1
    return [found[p] for p in sorted(found)]


async def _run(
    n: int, database_url: str, servers: str, pools: int, nodes: int, gpus: int, tasks: int, window: int,
    replication_factor: int, keep_schema: bool,
) -> Outcome:  # fmt: skip
    import asyncpg

    from gfs.services.livebench.pipeline.load import percentile as _percentile
    from gfs.services.platform.kafka.producer import EnvelopeProducer
    from gfs.services.platform.kafka.topic_admin import ensure_topics
    from gfs.services.platform.migrations import migrated_schema
    from gfs.services.platform.paths import state_dir
    from gfs.services.preemption.router.routing import inbox_spec

    run = uuid.uuid4().hex[:6]
    schema = f"scale_{run}"
    dsn = await migrated_schema(database_url, schema)
    names = _pool_names(run, pools)
    inbox = f"scale-inbox-{run}"
    spec = replace(inbox_spec(pools), name=inbox)
    await ensure_topics(servers, [spec], replication_factor=replication_factor)
    secret = os.environ.get("GFS_COMMAND_SECRET") or uuid.uuid4().hex * 2
    env = os.environ | {
        "DATABASE_URL": dsn, "KAFKA_BOOTSTRAP_SERVERS": servers, "GFS_COMMAND_SECRET": secret,
        "PREEMPTION_GROUP": f"scale-pre-{run}", "PREEMPTION_ROUTER_GROUP": f"scale-router-{run}",
        "PREEMPTION_INBOX_TOPIC": inbox, "PREEMPTION_INBOX_PARTITIONS": str(pools),
        "PREEMPTION_POOLS": ",".join(names), "PREEMPTION_NODE_TIMEOUT_S": "1e9", "PYTHONUNBUFFERED": "1",
        # From the end: nothing of this run is sent before both groups are stable (below), and
        # a router catching up with earlier runs' records while a second instance joins is the
        # rebalance that can kill it (docs/operations.md, "Scaling out").
        "PREEMPTION_ROUTER_OFFSET_RESET": "latest",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
    }  # fmt: skip
    ports = [free_port() for _ in range(n)]
    procs: list[ServiceProcess] = []
    outcome = Outcome(n, pools, tasks)
    print(f"N={n}: run {run}, schema {schema}, {pools} pools on {servers}")
    try:
        for i, port in enumerate(ports):
            log = state_dir(f"bench-scale-{run}-{i}.log")
            log.parent.mkdir(parents=True, exist_ok=True)
            instance = env | {"PREEMPTION_API_PORT": str(port), "PREEMPTION_INSTANCE": f"scale-{run}-{i}"}
            procs.append(ServiceProcess(f"preemption-{i}", ["serve", "preemption"], instance, log))
            procs[-1].start()
        # Every instance in both groups before any record flows (livebench/instances.py).
        await until_split(ports, pools)
        await until_stable(servers, [f"scale-pre-{run}", f"scale-router-{run}"], n)
        async with EnvelopeProducer(bootstrap_servers=servers, client_id=f"scale-{run}") as producer:
            await _register(producer, run, names, nodes, gpus, secret)
            outcome.owned = await _until_owned(ports, names, nodes)
            cpu0 = [cpu_s(p.pid) for p in procs]
            self0 = cpu_s(os.getpid())
            busy0, total0 = machine_ticks()
            latencies, bound_at = await _offer(producer, servers, run, names, tasks, window)
            busy1, total1 = machine_ticks()
            outcome.cpu_s = [cpu_s(p.pid) - c for p, c in zip(procs, cpu0, strict=True)]
            outcome.bench_cpu_s = cpu_s(os.getpid()) - self0
            outcome.busy = (busy1 - busy0) / max(1, total1 - total0)
            outcome.machine_cpu_s = (busy1 - busy0) / os.sysconf("SC_CLK_TCK")
        outcome.binds = len(latencies)
        ordered = sorted(bound_at)
        if len(ordered) >= 10:
            lo, hi = ordered[len(ordered) // 10], ordered[len(ordered) * 9 // 10]
            outcome.rate = (len(ordered) * 8 // 10) / max(1e-9, hi - lo)
            outcome.wall_s = ordered[-1] - ordered[0]
        outcome.p50_ms = _percentile(latencies, 0.5) * 1000
        outcome.p99_ms = _percentile(latencies, 0.99) * 1000
        print(f"N={n}: {outcome.binds} binds, {outcome.rate:.0f} decisions/s")
    finally:
        stop_all(procs, timeout_s=20.0)
        if not keep_schema:
            admin = await asyncpg.connect(database_url)
            await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await admin.close()
    return outcome


async def _register(producer: Any, run: str, names: list[str], nodes: int, gpus: int, secret: str) -> None:
    from gfs.schemas.envelope import wrap
    from gfs.schemas.quota import GuaranteeQuota, SpotQuota
    from gfs.schemas.telemetry import GpuSample, NodeTelemetry
    from gfs.services.platform.signing import node_key, sign

    now = datetime.now(UTC)
    samples = tuple(
        GpuSample(index=i, utilisation_pct=0, memory_used_mib=0, memory_total_mib=80_000) for i in range(gpus)
    )
    sends = []
    for pool in names:
        for j in range(nodes):
            node = f"{run}-{pool.split('.')[0].lower()}-n{j}"
            telemetry = NodeTelemetry(node=node, gpu_model=pool, sampled_at=now, gpus=samples)
            signed = sign(telemetry, key=node_key(secret.encode("utf-8"), node))
            sends.append(producer.send(TELEMETRY_TOPIC, wrap(signed, producer="bench-scale")))
        cap = nodes * gpus
        quota = SpotQuota(
            pool=pool, quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=cap) for h in (1, 2, 4)),
            eta=1.0, capacity_gpus=cap, valid_from=now, valid_until=now + timedelta(days=1),
            forecast_version="bench-scale",
        )  # fmt: skip
        sends.append(producer.send(QUOTAS_TOPIC, wrap(quota, producer="bench-scale")))
    await asyncio.gather(*sends)


async def _until_owned(ports: list[int], names: list[str], nodes: int, timeout: float = 300.0) -> list[int]:
    """Every pool owned by exactly one instance, each instance some, every node and quota in;
    returns the pools per instance."""

    def ready(owned: list[dict[str, Any]]) -> bool:
        every = [p for o in owned for p in o]
        registered = all(
            o[p]["nodes"] == nodes and o[p]["quota_version"] for o in owned for p in o if p in names
        )
        return sorted(every) == sorted(names) and all(owned) and registered

    owned = await until_pools(ports, ready, "come to own every pool between them", timeout)
    return [len(o) for o in owned]


async def _offer(
    producer: Any, servers: str, run: str, names: list[str], tasks: int, window: int
) -> tuple[list[float], list[float]]:
    """Submit `tasks` closed-loop (at most `window` unbound); (submit -> bind latencies, bind times)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from gfs.schemas.commands import BindCommand
    from gfs.schemas.envelope import wrap
    from gfs.schemas.tasks import TaskClass, TaskSubmitted
    from gfs.schemas.topics import decode, topic

    submitted: dict[str, float] = {}
    bound: dict[str, float] = {}
    consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    await consumer.start()
    tps = [TopicPartition(BIND_TOPIC, p) for p in range(topic(BIND_TOPIC).partitions)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    for tp in tps:
        await consumer.position(tp)
    prefix = f"{run}-"

    async def read() -> None:
        while len(bound) < tasks:
            batch = await consumer.getmany(timeout_ms=100)
            at = time.perf_counter()
            for records in batch.values():
                for r in records:
                    if not (r.key or b"").decode().startswith(prefix):
                        continue
                    payload = decode(r.topic, r.value or b"").payload
                    if isinstance(payload, BindCommand) and payload.task_id in submitted:
                        bound.setdefault(payload.task_id, at)

    reader = asyncio.create_task(read())
    try:
        k = 0
        deadline = time.monotonic() + 600 + tasks / 5
        while k < tasks and time.monotonic() < deadline:
            room = window - (len(submitted) - len(bound))
            if room <= 0:
                await asyncio.sleep(0.005)
                continue
            sends = []
            for _ in range(min(room, tasks - k, 100)):
                pool = names[k % len(names)]
                task = TaskSubmitted(
                    task_id=f"{run}-t{k}", tenant="org-scale", gpu_model=pool, gpus_per_worker=1, workers=1,
                    task_class=TaskClass.HP, command=("gfs", "fake-task"),
                )  # fmt: skip
                submitted[task.task_id] = time.perf_counter()
                sends.append(producer.send(TASK_SUBMIT_TOPIC, wrap(task, producer="bench-scale")))
                k += 1
            await asyncio.gather(*sends)
        await asyncio.wait_for(reader, timeout=max(1.0, deadline - time.monotonic()))
    except TimeoutError:
        print(f"timed out: {len(bound)} of {len(submitted)} tasks bound")
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
        await consumer.stop()
    return [bound[t] - submitted[t] for t in bound], list(bound.values())

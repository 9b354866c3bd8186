"""The fault harness: the whole live pipeline under steady load while it is hurt, then checked.

It is the supervisor of every GFS process it starts (forecast, quota, preemption, node agents):
each is killed with -9 at random moments (seeded) and restarted, any that exits on its own (a
service that lost its broker or database and gave up) is restarted after a pause; the broker and
Postgres are stopped for `outage_s` each, under load. Then the load stops, the system settles, and
the promises are checked from Postgres, the topics and the agents' journals:

- no accepted task lost: every TaskAccepted task finished, or the preemption service holds it
  (running or queued);
- no eviction carried out twice: no running worker was the target of two eviction commands;
- no task running on two nodes: the live workers of a task all belong to its latest bind;
- the quota ledger agrees with the guarantee outcomes: the quota service's recorded outcomes are
  exactly the GuaranteePeriodClosed events published for the pool;
- every service is back (ready endpoints answer, agents alive and reporting).

Bounded in time and count, stops by itself, and leaves the shared stack running as it found it
(the broker and Postgres are started again even when the harness fails).

Producers during a broker outage: `GfsClient.submit` waits up to its send timeout for the broker,
then raises `KafkaUnavailableError`; the record's fate is then unknown (it may have been written),
so the load generator counts it as failed and does not assume it was accepted. The harness
measures how many submissions failed that way and requires that they did fail with that error,
not hang or crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.commands import BindCommand, EvictCommand
from schemas.envelope import wrap
from schemas.forecast import HourlyDemand, PoolDemandForecast
from schemas.tasks import GuaranteePeriodClosed, TaskAccepted, TaskClass, TaskFinished, TaskSubmitted
from schemas.topics import (
    BIND_TOPIC,
    EVICT_ACK_TOPIC,
    EVICT_TOPIC,
    FORECASTS_TOPIC,
    POOL_STATUS_TOPIC,
    QUOTAS_TOPIC,
    TASK_LIFECYCLE_TOPIC,
    TASK_SUBMIT_TOPIC,
    TELEMETRY_TOPIC,
    WORKER_ACK_TOPIC,
    decode,
    topic,
)
from services.faults.soak import SoakLog, kill_schedule, sample_loop, summarize
from services.platform.kafka.producer import EnvelopeProducer
from services.platform.migrations import migrated_schema
from services.platform.settings import REPO_ROOT, PlatformSettings
from services.platform.timer import every

CHECKED_TOPICS = (TASK_LIFECYCLE_TOPIC, BIND_TOPIC, EVICT_TOPIC)
# What the preemption router and the quota service read (docs/live-pipeline.md): their groups start
# at these topics' ends (_start_at_end).
ROUTER_TOPICS = (TASK_SUBMIT_TOPIC, TELEMETRY_TOPIC, QUOTAS_TOPIC, EVICT_ACK_TOPIC, WORKER_ACK_TOPIC)
QUOTA_TOPICS = (FORECASTS_TOPIC, POOL_STATUS_TOPIC, TASK_LIFECYCLE_TOPIC)


@dataclass(frozen=True, slots=True)
class FaultPlan:
    kills_per_service: int = 2
    agents: int = 3
    gpus_per_agent: int = 4
    outage_s: float = 10.0
    outage_of: tuple[str, ...] = ("broker", "postgres")  # which parts of the stack go down
    node_timeout_s: float = 60.0  # the preemption service's: an outage longer than it must evict nothing
    load_s: float = 120.0
    rate: float = 0.4  # task submissions per second (about 3/4 of the GPUs busy on average)
    settle_s: float = 40.0
    seed: int = 0
    # The soak run (soak.py): > 0 replaces the fault schedule by a kill of the preemption service
    # every `kill_every_s` for `soak_s` seconds of load, sampled every `sample_s`.
    soak_s: float = 0.0
    kill_every_s: float = 600.0
    sample_s: float = 60.0
    report_every_s: float = 3600.0


@dataclass(slots=True)
class Supervised:
    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    kills: int = 0
    restarts: int = 0
    paused: bool = False  # the fault loop is killing and restarting it: the supervisor keeps off
    exits: int = 0  # exited on its own and restarted

    def start(self) -> None:
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services", *self.args], cwd=REPO_ROOT, env=self.env,
            stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        handle.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive():
            assert self.proc is not None
            # The agent's workers run in their own sessions: killing the agent's group leaves them.
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.kills += 1

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


@dataclass(slots=True)
class Report:
    plan: FaultPlan
    run: str
    submitted: int = 0
    submit_failures: Counter[str] = field(default_factory=Counter)
    accepted: int = 0
    finished: int = 0
    binds: int = 0
    evictions: int = 0
    # Why the evictions happened (EvictCommand.reason): a preemption by HP is the scheduler doing
    # its job; a NODE_LOST during an outage would be a stall taken for a failure.
    evictions_by_reason: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    evicted_twice: list[str] = field(default_factory=list)
    on_two_nodes: list[str] = field(default_factory=list)
    ledger_missing: int = 0
    ledger_extra: int = 0
    not_ready: list[str] = field(default_factory=list)
    kills: dict[str, int] = field(default_factory=dict)
    exits: dict[str, int] = field(default_factory=dict)
    outages: list[str] = field(default_factory=list)
    recovery_s: dict[str, float] = field(default_factory=dict)
    soak: list[dict[str, Any]] = field(default_factory=list)  # soak.summarize's intervals
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.evicted_twice or self.on_two_nodes or self.ledger_missing
                    or self.ledger_extra or self.not_ready)  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "plan": asdict(self.plan),
            "submitted": self.submitted,
            "submit_failures": dict(self.submit_failures),
            "accepted": self.accepted,
            "finished": self.finished,
            "binds": self.binds,
            "evictions": self.evictions,
            "evictions_by_reason": dict(self.evictions_by_reason),
            "lost": self.lost,
            "evicted_twice": self.evicted_twice,
            "on_two_nodes": self.on_two_nodes,
            "ledger_missing": self.ledger_missing,
            "ledger_extra": self.ledger_extra,
            "not_ready": self.not_ready,
            "kills": self.kills,
            "exits": self.exits,
            "outages": self.outages,
            "recovery_s": self.recovery_s,
            "soak": self.soak,
            "wall_s": round(self.wall_s, 1),
            "ok": self.ok,
        }


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def run_faults(plan: FaultPlan, *, workdir: Path, keep_schema: bool = False) -> Report:
    """Run the plan; always restores the broker and Postgres before returning."""
    settings = PlatformSettings()
    rng = random.Random(plan.seed)
    if plan.soak_s > 0:
        plan = replace(plan, load_s=plan.soak_s)
    soak_log = SoakLog()
    run = uuid.uuid4().hex[:6]
    report = Report(plan, run)
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    schema = f"faults_{run}"
    dsn = await migrated_schema(settings.database_url, schema)
    pool = f"FLT-{run}"
    secret = uuid.uuid4().hex * 2
    ports = {"quota": _free_port(), "preemption": _free_port(), "forecast": _free_port()}
    base = os.environ | {
        "DATABASE_URL": dsn,
        "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        "GFS_COMMAND_SECRET": secret,
        "PYTHONUNBUFFERED": "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
    }
    services = [
        Supervised(
            "forecast",
            ["serve", "forecast"],
            base
            | {
                "FORECAST_APP_ID": f"faults-forecast-{run}",
                "FORECAST_STORE": "memory://",
                "FORECAST_DATADIR": str(workdir / "faust"),
                "FORECAST_WEB_PORT": str(ports["forecast"]),
                "FORECAST_TICK_S": "3600",
            },
            workdir / "forecast.log",
        ),
        Supervised(
            "quota",
            ["serve", "quota"],
            base
            | {
                "QUOTA_GROUP": f"faults-quota-{run}",
                "QUOTA_API_PORT": str(ports["quota"]),
                "QUOTA_REFRESH_S": "5",
                "QUOTA_FENCE_KEY": str(rng.getrandbits(48)),
                "QUOTA_FENCE_POLL_S": "0.5",
            },
            workdir / "quota.log",
        ),
        Supervised(
            "preemption",
            ["serve", "preemption"],
            base
            | {
                "PREEMPTION_GROUP": f"faults-pre-{run}",
                "PREEMPTION_ROUTER_GROUP": f"faults-router-{run}",
                "PREEMPTION_INBOX_TOPIC": f"faults-inbox-{run}",
                "PREEMPTION_POOLS": pool,
                "PREEMPTION_API_PORT": str(ports["preemption"]),
                "PREEMPTION_STATUS_S": "5",
                "PREEMPTION_GRACE_S": "2",
                "PREEMPTION_ACK_MARGIN_S": "5",
                "PREEMPTION_NODE_TIMEOUT_S": f"{plan.node_timeout_s:g}",
                "PREEMPTION_INSTANCE": f"faults-{run}",
            },
            workdir / "preemption.log",
        ),
    ]
    nodes = [f"flt-{run}-n{i}" for i in range(plan.agents)]
    for node in nodes:
        services.append(Supervised(node, [
            "serve", "node-agent", "--node", node, "--gpu-model", pool, "--gpus", str(plan.gpus_per_agent),
            "--fake-gpus", "--telemetry-s", "1", "--state-dir", str(workdir / node)],
            base | {"AGENT_COMMAND_MAX_AGE_S": "86400"}, workdir / f"agent-{node}.log"))  # fmt: skip
    by_name = {s.name: s for s in services}
    start_offsets = await _end_offsets(settings)
    await _start_at_end(settings, f"faults-router-{run}", ROUTER_TOPICS)
    await _start_at_end(settings, f"faults-quota-{run}", QUOTA_TOPICS)
    try:
        for s in services:
            s.start()
        await _until_ready(ports, nodes, pool, timeout=120)
        async with EnvelopeProducer(
            bootstrap_servers=settings.bootstrap_servers, client_id=f"faults-{run}"
        ) as producer:
            await _forecast(producer, pool, plan)
            stop = asyncio.Event()
            load = asyncio.create_task(_load(settings, pool, run, plan, rng, report, stop))
            supervise = asyncio.create_task(_supervise(services, stop))
            forecasts = asyncio.create_task(
                every(30.0, stop, lambda: _forecast(producer, pool, plan), name="faults.forecast")
            )
            # Faults at random moments of the load window: kills of every service, then one
            # broker and one Postgres outage in the second half. A soak: its periodic kills only.
            events: list[tuple[float, str]] = kill_schedule(plan.soak_s, plan.kill_every_s)
            sampler = None
            if plan.soak_s > 0:
                groups = [f"faults-pre-{run}", f"faults-router-{run}", f"faults-quota-{run}"]
                sampler = asyncio.create_task(sample_loop(
                    soak_log, lambda: {s.name: s.proc.pid for s in services if s.alive() and s.proc},
                    settings, groups, dsn, plan.sample_s, stop))  # fmt: skip
            kill_window = plan.load_s * 0.45
            for s in (services if plan.agents <= 1 else services[:4]) if plan.soak_s <= 0 else ():
                events += [
                    (rng.uniform(5.0, kill_window), f"kill:{s.name}") for _ in range(plan.kills_per_service)
                ]
            if plan.outage_s > 0 and plan.soak_s <= 0:  # 0: kills only (the shared stack stays up)
                for i, part in enumerate(p for p in ("broker", "postgres") if p in plan.outage_of):
                    events.append((plan.load_s * 0.5 + i * (plan.outage_s + 15.0), part))
            t0 = time.monotonic()
            for at, what in sorted(events):
                await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
                if what.startswith("kill:"):
                    victim = by_name[what[5:]]
                    victim.paused = True
                    victim.kill9()
                    await asyncio.sleep(rng.uniform(0.5, 2.0))
                    victim.start()
                    victim.paused = False
                    victim.restarts += 1
                    if victim.name == "preemption":
                        began = time.monotonic()
                        await _until_ready(ports, [], pool, timeout=60, only="preemption")
                        took = time.monotonic() - began
                        soak_log.failovers.append((began - t0, took))
                        report.recovery_s.setdefault("preemption_ready_after_restart", 0.0)
                        report.recovery_s["preemption_ready_after_restart"] = max(
                            report.recovery_s["preemption_ready_after_restart"], took
                        )
                elif what == "broker":
                    report.outages.append(f"broker {plan.outage_s:g}s at +{at:.0f}s")
                    _script("kafka/stop.sh")
                    try:
                        await asyncio.sleep(plan.outage_s)
                    finally:
                        _script("kafka/start.sh")
                        _script("kafka/wait.sh")
                else:
                    report.outages.append(f"postgres {plan.outage_s:g}s at +{at:.0f}s")
                    _script("postgres/stop.sh")
                    try:
                        await asyncio.sleep(plan.outage_s)
                    finally:
                        _script("postgres/start.sh")
            await asyncio.sleep(max(0.0, t0 + plan.load_s - time.monotonic()))
            stop.set()
            await load
            if sampler is not None:
                await sampler
                report.soak = summarize(soak_log, plan.report_every_s)
            await asyncio.sleep(plan.settle_s)  # the supervisor keeps restarting what died
            supervise.cancel()
            forecasts.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await supervise
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await forecasts
            for s in services:
                if not s.alive():
                    s.start()
                    s.exits += 1
            await _check(settings, report, dsn, pool, run, ports, nodes, workdir, start_offsets)
    finally:
        for s in services:
            s.stop()
        _kill_workers(workdir, nodes)
        # Restore the shared stack whatever happened.
        _script("kafka/start.sh")
        _script("kafka/wait.sh")
        _script("postgres/start.sh")
        report.kills = {s.name: s.kills for s in services}
        report.exits = {s.name: s.exits for s in services}
        report.wall_s = time.monotonic() - started
        if not keep_schema:
            with contextlib.suppress(Exception):
                admin = await asyncpg.connect(settings.database_url)
                await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
                await admin.close()
    return report


def _script(name: str) -> None:
    subprocess.run(["bash", str(REPO_ROOT / "infra" / name)], check=False, capture_output=True, timeout=180)


async def _supervise(services: list[Supervised], stop: asyncio.Event) -> None:
    """Restart any service that exited on its own (it gave up on the broker or the database)."""
    while True:
        for s in services:
            if s.proc is not None and not s.paused and not s.alive():
                s.exits += 1
                await asyncio.sleep(1.0)
                s.start()
        await asyncio.sleep(1.0)


async def _get(url: str) -> tuple[int, Any]:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http, http.get(url) as r:
            text = await r.text()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return 0, None
    try:
        return r.status, json.loads(text)
    except ValueError:  # /metrics is text
        return r.status, None


async def _until_ready(
    ports: dict[str, int], nodes: list[str], pool: str, *, timeout: float, only: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = await _get(f"http://127.0.0.1:{ports['preemption']}/pools")
        ok = status == 200 and (
            not nodes or (pool in body["pools"] and body["pools"][pool]["nodes"] == len(nodes))
        )
        if only != "preemption":
            ok = ok and (await _get(f"http://127.0.0.1:{ports['quota']}/readyz"))[0] == 200
        if ok:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError("the services did not become ready")


async def _forecast(producer: EnvelopeProducer, pool: str, plan: FaultPlan) -> None:
    """A pool forecast (as the forecast stream would publish hourly): a modest HP demand, so the
    quota admits spot tasks and HP tasks preempt some."""
    now = datetime.now(UTC)
    hp = plan.agents * plan.gpus_per_agent * 0.4
    horizon = tuple(
        HourlyDemand(hour_ahead=h, mean=hp, std=1.0, quantiles={"0.5": hp, "0.9": hp + 1.3})
        for h in range(1, 5)
    )
    forecast = PoolDemandForecast(
        pool=pool,
        origin_time=now.replace(minute=0, second=0, microsecond=0),
        tenants=1,
        model_name="faults",
        model_version=f"{int(now.timestamp())}",
        horizon=horizon,
    )
    await producer.send(FORECASTS_TOPIC, wrap(forecast, producer="faults"))


async def _load(
    settings: PlatformSettings, pool: str, run: str, plan: FaultPlan, rng: random.Random, report: Report,
    stop: asyncio.Event,
) -> None:  # fmt: skip
    from services.producers.client import GfsClient, KafkaUnavailableError

    fake = (sys.executable, "-m", "services.node_agent.fake_task")
    async with GfsClient(bootstrap_servers=settings.bootstrap_servers, producer_name="faults-load",
                         send_timeout_s=15.0) as client:  # fmt: skip
        k = 0
        t0 = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(max(0.0, t0 + k / plan.rate - time.monotonic()))
            k += 1
            cls = TaskClass.HP if rng.random() < 0.4 else TaskClass.SPOT
            task = TaskSubmitted(
                task_id=f"flt-{run}-{k}", tenant=f"org-{rng.randrange(3)}", gpu_model=pool,
                gpus_per_worker=rng.choice((1, 1, 2)), workers=1, task_class=cls,
                command=(*fake, "--duration", f"{rng.uniform(5, 25):.1f}", "--checkpoint-s", "5"),
                checkpoint_interval_s=5.0,
            )  # fmt: skip
            report.submitted += 1
            try:
                await client.submit(task)
            except KafkaUnavailableError:
                report.submit_failures["KafkaUnavailableError"] += 1
            except Exception as exc:  # anything else is a finding: reported by type
                report.submit_failures[type(exc).__name__] += 1


async def _end_offsets(settings: PlatformSettings) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in CHECKED_TOPICS for p in range(topic(t).partitions)]
        return dict(await consumer.end_offsets(tps))
    finally:
        await consumer.stop()


async def _start_at_end(settings: PlatformSettings, group: str, topics: tuple[str, ...]) -> None:
    """Commit `group`'s offsets at the topics' current ends before its service first starts. The
    run's pool and names are new, so the shared topics' history is none of its business: without
    this, a long-lived broker's history is replayed first and readiness waits for it. And a group
    with committed offsets on every partition never falls back to its reset policy after a kill."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(topic(t).partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.commit({tp: ends[tp] for tp in tps})
    finally:
        await consumer.stop()


async def _read_all(settings: PlatformSettings, start: dict[TopicPartition, int]) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    out: list[Any] = []
    try:
        tps = list(start)
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, start[tp])
        remaining = {tp for tp in tps if ends[tp] > start[tp]}
        while remaining:
            batch = await consumer.getmany(timeout_ms=1000)
            for tp, records in batch.items():
                for r in records:
                    with contextlib.suppress(ValueError):
                        out.append(decode(r.topic, r.value or b""))
                if records and records[-1].offset + 1 >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    return out


async def _check(
    settings: PlatformSettings, report: Report, dsn: str, pool: str, run: str, ports: dict[str, int],
    nodes: list[str], workdir: Path, start: dict[TopicPartition, int],
) -> None:  # fmt: skip
    await _until_ready(ports, nodes, pool, timeout=120)
    envelopes = await _read_all(settings, start)
    prefix = f"flt-{run}-"
    mine = [
        e
        for e in envelopes
        if str(
            getattr(e.payload, "task_id", "") or (getattr(e.payload, "task_ids", None) or ("",))[0]
        ).startswith(prefix)
    ]
    accepted = {e.payload.task_id for e in mine if isinstance(e.payload, TaskAccepted)}
    finished = {e.payload.task_id for e in mine if isinstance(e.payload, TaskFinished)}
    report.accepted, report.finished = len(accepted), len(finished & accepted)
    # Lost: accepted, not finished, and not held (running or queued) by the preemption service.
    for tid in sorted(accepted - finished):
        _, body = await _get(f"http://127.0.0.1:{ports['preemption']}/explain/{tid}")
        state = ((body or {}).get("live") or {}).get("state")
        if state not in ("running", "queued"):
            report.lost.append(tid)
    # Bind attempts per task (the binds of one attempt share issued_at).
    binds: dict[str, list[BindCommand]] = defaultdict(list)
    for e in mine:
        if isinstance(e.payload, BindCommand):
            binds[e.payload.task_id].append(e.payload)
    evict_ids = {e.payload.command_id for e in mine if isinstance(e.payload, EvictCommand)}
    report.binds = len({b.command_id for bs in binds.values() for b in bs})
    report.evictions = len(evict_ids)
    by_id = {e.payload.command_id: e.payload for e in mine if isinstance(e.payload, EvictCommand)}
    report.evictions_by_reason = Counter(c.reason.name for c in by_id.values())
    # From the agents' journals: a worker targeted by two eviction commands was evicted twice; the
    # live workers of a task must all come from its latest attempt.
    latest: dict[str, set[str]] = {}
    for tid, bs in binds.items():
        last = max(b.issued_at for b in bs)
        latest[tid] = {str(b.command_id) for b in bs if b.issued_at >= last - timedelta(seconds=1)}
    targeted: Counter[str] = Counter()
    live_by_task: dict[str, set[str]] = defaultdict(set)
    for node in nodes:
        path = workdir / node / "journal.json"
        if not path.exists():
            continue
        journal = json.loads(path.read_text())
        for command in journal.get("commands", {}).values():
            if command.get("kind") == "evict" and command.get("command_id") in {str(i) for i in evict_ids}:
                for key in command.get("targets", []):
                    targeted[key] += 1
        for worker in journal.get("workers", {}).values():
            if worker.get("exited_at") is None and worker.get("pid") and _alive(int(worker["pid"])):
                live_by_task[worker["task_id"]].add(str(worker["command_id"]))
    report.evicted_twice = sorted(k for k, n in targeted.items() if n > 1)
    report.on_two_nodes = sorted(
        t for t, cmds in live_by_task.items() if t.startswith(prefix) and not cmds <= latest.get(t, set())
    )
    # The quota ledger against the outcomes published for the pool.
    published = {(e.payload.task_id, e.payload.period_start) for e in mine
                 if isinstance(e.payload, GuaranteePeriodClosed) and e.payload.pool == pool}  # fmt: skip
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT task_id, period_start FROM guarantee_period_outcome WHERE pool = $1", pool
        )
    finally:
        await connection.close()
    recorded = {(r["task_id"], r["period_start"]) for r in rows}
    report.ledger_missing = len(published - recorded)
    report.ledger_extra = len(recorded - published)
    # Every service back.
    for name, url in (("preemption", f"http://127.0.0.1:{ports['preemption']}/readyz"),
                      ("quota", f"http://127.0.0.1:{ports['quota']}/readyz"),
                      ("forecast", f"http://127.0.0.1:{ports['forecast']}/metrics")):  # fmt: skip
        deadline = time.monotonic() + 60
        while (await _get(url))[0] != 200 and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
        if (await _get(url))[0] != 200:
            report.not_ready.append(name)
    _, body = await _get(f"http://127.0.0.1:{ports['preemption']}/pools")
    down = (body or {}).get("pools", {}).get(pool, {}).get("down", ["?"])
    report.not_ready += [f"node {n} down" for n in down]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_workers(workdir: Path, nodes: list[str]) -> None:
    for node in nodes:
        path = workdir / node / "journal.json"
        with contextlib.suppress(OSError, ValueError):
            for worker in json.loads(path.read_text()).get("workers", {}).values():
                pid = worker.get("pid")
                if pid and _alive(int(pid)):
                    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                        if b"fake_task" in cmdline.read():
                            os.killpg(int(pid), signal.SIGKILL)

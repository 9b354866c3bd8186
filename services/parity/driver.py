"""`gfs parity run`: a trace through the live pipeline on the controllable clock, against the simulator.

The live side is the real thing, in real processes on the real broker and Postgres: the forecast
service (persistence forecast), the quota service, the preemption service and one node agent per
trace node with fake GPUs, all started with the topic clock (schemas/clock.py), in a fresh
Postgres schema and fresh consumer groups; names of the run's pools, nodes and tasks carry a run
suffix so older records on the shared topics never reach it. The driver replays the trace's
submissions and cancellations through `GfsClient` and plays every instant at which something can
happen (an arrival, a cancellation, a quota refresh every `quota_period_s`, the earliest exit the
agents announce) as

    ADVANCE t  -> agents answer (fake tasks due by t exited) -> settle
    submissions and cancellations at t -> settle
    STATUS t (quota instants) -> the quota service computes the quota for t -> settle
    PASS t -> binds, evictions, acks -> settle
    ADVANCE t again -> agents announce their new workers' exits -> settle

where "settle" is `Barrier.settle`: nothing in flight anywhere. The simulator side is
`gfs simulate --decisions` on the same trace (a subprocess: the reference exactly as users run it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, cast

import asyncpg

from gfs.schemas.clock import ClockPhase, ClockTick
from gfs.schemas.envelope import wrap
from gfs.schemas.fields import GuaranteeHours
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.topics import (
    CLOCK_TOPIC,
    EVICT_ACK_TOPIC,
    FORECASTS_TOPIC,
    POOL_DEMAND_TOPIC,
    POOL_STATUS_TOPIC,
    QUOTAS_TOPIC,
    TASK_LIFECYCLE_TOPIC,
    TASK_SUBMIT_TOPIC,
    TELEMETRY_TOPIC,
    WORKER_ACK_TOPIC,
)
from gfs.services.parity.barrier import Barrier
from gfs.services.parity.compare import Diff, compare, live_lines, sim_lines
from gfs.services.parity.observer import Observer
from gfs.services.parity.startup import _joined, _ready, _until
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.migrations import migrated_schema
from gfs.services.platform.settings import REPO_ROOT, PlatformSettings
from gfs.services.simulator.traces.gfs_format import load_gfs_trace
from gfs.services.simulator.traces.records import Trace, TraceJob
from gfs.services.toolkit.consumer_groups import start_groups_at_end
from gfs.services.toolkit.processes import ServiceProcess, free_port, kill_agent_workers

log = logging.getLogger(__name__)

BASE_S = 1767225600.0  # 2026-01-01T00:00:00Z is the trace's t = 0: a whole hour, so hours line up
FORECAST_SOURCES = (TASK_SUBMIT_TOPIC, TASK_LIFECYCLE_TOPIC, POOL_DEMAND_TOPIC)
QUOTA_TOPICS = (FORECASTS_TOPIC, POOL_STATUS_TOPIC, TASK_LIFECYCLE_TOPIC)
ROUTER_TOPICS = (
    TASK_SUBMIT_TOPIC, TELEMETRY_TOPIC, QUOTAS_TOPIC, EVICT_ACK_TOPIC,
    WORKER_ACK_TOPIC, CLOCK_TOPIC,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ParityOptions:
    trace_dir: Path
    workdir: Path
    quota_period_s: float = 300.0
    settle_timeout_s: float = 60.0
    ack_timeout_s: float = 3.0  # an agent that has not answered a tick by then is sent it again
    keep_schema: bool = False
    progress: Callable[[str], None] | None = None


@dataclass(slots=True)
class LiveRun:
    run: str
    instants: int = 0
    ticks: int = 0
    submitted: int = 0
    cancelled: int = 0
    wall_s: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)
    tasks: dict[str, str] = field(default_factory=dict)  # live task id -> trace task
    nodes: dict[str, str] = field(default_factory=dict)
    pools: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ParityReport:
    diff: Diff
    live: LiveRun
    sim_log: Path
    sim_wall_s: float

    def describe(self) -> str:
        return (
            f"{self.diff.describe()}\n"
            f"live: run {self.live.run}, {self.live.instants} instants, {self.live.ticks} ticks, "
            f"{self.live.submitted} submissions, {self.live.cancelled} cancellations, "
            f"{self.live.wall_s:.1f} s; "
            f"simulator {self.sim_wall_s:.1f} s ({self.sim_log})"
        )


def simulate(options: ParityOptions, horizon_end_s: float) -> tuple[Path, float]:
    """The reference: `gfs simulate --decisions` with the persistence forecast, the window covering
    the whole trace and everything it takes to finish."""
    out = options.workdir / "sim-decisions.jsonl"
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "gfs.services", "simulate", "--trace", str(options.trace_dir),
         "--policy", "gfs",
         "--forecast", "persistence", "--window-days", "3650", "--window-end-s", f"{horizon_end_s:g}",
         "--drain-days", "0", "--decisions", str(out)],
        cwd=REPO_ROOT, check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return out, time.monotonic() - began


async def run_parity(options: ParityOptions) -> ParityReport:
    options.workdir.mkdir(parents=True, exist_ok=True)
    trace = load_gfs_trace(options.trace_dir)
    live = await run_live(options, trace)
    # The window must outlast everything the live run did: its last decision, rounded up a day.
    end = max([j.submit_s + j.duration_s for j in trace.jobs] + [r["at"] - BASE_S for r in live.rows])
    sim_log, sim_wall = simulate(options, math.ceil(end / 86400.0 + 1) * 86400.0)
    sim = sim_lines(sim_log)
    got = live_lines(live.rows, base_s=BASE_S, tasks=live.tasks, nodes=live.nodes, pools=live.pools)
    return ParityReport(compare(sim, got), live, sim_log, sim_wall)


async def run_live(options: ParityOptions, trace: Trace) -> LiveRun:
    settings = PlatformSettings()
    run = uuid.uuid4().hex[:6]
    result = LiveRun(run)
    began = time.monotonic()
    say = options.progress or (lambda _: None)
    schema = f"parity_{run}"
    dsn = await migrated_schema(settings.database_url, schema)
    result.pools = {f"{p}-{run}": p for p in sorted({n.gpu_model for n in trace.nodes})}
    live_pool = {v: k for k, v in result.pools.items()}
    result.nodes = {f"{n.name}-{run}": n.name for n in trace.nodes}
    result.tasks = {f"{j.name}-{run}": j.name for j in trace.jobs}
    groups = {
        f"parity-router-{run}": ROUTER_TOPICS, f"parity-quota-{run}": QUOTA_TOPICS,
        f"parity-forecast-{run}": (*FORECAST_SOURCES, CLOCK_TOPIC),
    }  # fmt: skip
    await start_groups_at_end(settings.bootstrap_servers, groups)
    ports = {name: free_port() for name in ("quota", "preemption", "forecast")}
    clock = f"parity-{run}"  # the run's own clock: another replay on the broker never moves it
    workdir = options.workdir / run
    workdir.mkdir(parents=True, exist_ok=True)
    base = os.environ | {
        "DATABASE_URL": dsn, "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        "GFS_COMMAND_SECRET": uuid.uuid4().hex * 2, "PYTHONUNBUFFERED": "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
    }  # fmt: skip
    services = [
        ServiceProcess("forecast", ["serve", "forecast"], base | {
            "FORECAST_APP_ID": f"parity-forecast-{run}", "FORECAST_STORE": "memory://",
            "FORECAST_ARTIFACT": "",
            # The simulator's demand series start at trace t = 0 for every pool.
            "FORECAST_HISTORY_ORIGIN": datetime.fromtimestamp(BASE_S, UTC).isoformat(),
            "FORECAST_DATADIR": str(workdir / "faust"), "FORECAST_WEB_PORT": str(ports["forecast"]),
            "FORECAST_CLOCK": "topic", "FORECAST_CLOCK_NAME": clock}, workdir / "forecast.log"),
        ServiceProcess("quota", ["serve", "quota"], base | {
            "QUOTA_GROUP": f"parity-quota-{run}", "QUOTA_API_PORT": str(ports["quota"]),
            "QUOTA_POOLS": ",".join(result.pools),
            "QUOTA_REFRESH_S": f"{options.quota_period_s:g}", "QUOTA_CLOCK": "topic",
            "QUOTA_FENCE_KEY": str(uuid.uuid4().int % 2**48)}, workdir / "quota.log"),
        ServiceProcess("preemption", ["serve", "preemption"], base | {
            "PREEMPTION_GROUP": f"parity-pre-{run}", "PREEMPTION_ROUTER_GROUP": f"parity-router-{run}",
            "PREEMPTION_INBOX_TOPIC": f"parity-inbox-{run}", "PREEMPTION_POOLS": ",".join(result.pools),
            "PREEMPTION_API_PORT": str(ports["preemption"]), "PREEMPTION_CLOCK": "topic",
            "PREEMPTION_CLOCK_NAME": clock,
            "PREEMPTION_INSTANCE": f"parity-{run}"}, workdir / "preemption.log"),
    ]  # fmt: skip
    agents: list[ServiceProcess] = []
    checkpoints = workdir / "checkpoints"
    for node in trace.nodes:
        name = f"{node.name}-{run}"
        agents.append(ServiceProcess(name, [
            "serve", "node-agent", "--node", name, "--gpu-model", live_pool[node.gpu_model],
            "--gpus", str(node.gpus), "--fake-gpus", "--telemetry-s", "86400",
            "--state-dir", str(workdir / name)],
            base | {"AGENT_COMMAND_MAX_AGE_S": "86400", "AGENT_CLOCK": "topic", "AGENT_CLOCK_NAME": clock,
                    "AGENT_CHECKPOINT_ROOT": str(checkpoints)}, workdir / f"agent-{name}.log"))  # fmt: skip
    observer = Observer(settings.bootstrap_servers, frozenset(result.nodes), frozenset(result.tasks))
    api = f"http://127.0.0.1:{ports['preemption']}"
    # The forecast app also reads its own re-keyed topic (created when it starts).
    watched = {
        **groups,
        f"parity-forecast-{run}": (
            *groups[f"parity-forecast-{run}"],
            f"parity-forecast-{run}-demand-by-pool",
        ),
    }
    internal = {
        f"parity-inbox-{run}": 6,
        f"parity-forecast-{run}-demand-by-pool": 6,
    }  # the services' defaults
    barrier = Barrier(
        settings.bootstrap_servers, dsn, watched, f"parity-inbox-{run}", api, observer, internal
    )
    try:
        for s in services:
            s.start()
        await _until(partial(_ready, api, ports), 120, "the services did not become ready")
        # Agents one at a time, each joined before the next starts: a pool's nodes get their
        # indices in join order, and the simulator numbers them in the trace's order.
        for joined, agent in enumerate(agents, start=1):
            agent.start()
            await _until(partial(_joined, api, joined), 60, f"node {agent.name} did not join")
        say(f"run {run}: {len(services)} services and {len(agents)} agents up")
        await observer.start()
        await barrier.start()
        async with EnvelopeProducer(
            bootstrap_servers=settings.bootstrap_servers, client_id=f"parity-{run}"
        ) as producer:
            player = _Player(
                options, trace, result, producer, observer, barrier, [a.name for a in agents], live_pool
            )
            await player.play()
        async with asyncpg.create_pool(dsn, min_size=1, max_size=1) as db:
            rows = await db.fetch(
                "SELECT pool, task_id, kind, extract(epoch FROM at) AS at, detail "
                "FROM preemption_decision ORDER BY id"
            )
        result.rows = [
            {"pool": r["pool"], "task_id": r["task_id"], "kind": r["kind"], "at": float(r["at"]),
             "detail": json.loads(r["detail"])}
            for r in rows
        ]  # fmt: skip
    finally:
        with contextlib.suppress(Exception):
            await barrier.stop()
        with contextlib.suppress(Exception):
            await observer.stop()
        for s in [*agents, *services]:
            s.stop()
        kill_agent_workers(workdir / agent / "journal.json" for agent in result.nodes)
        if not options.keep_schema:
            with contextlib.suppress(Exception):
                admin = await asyncpg.connect(settings.database_url)
                await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
                await admin.close()
        result.wall_s = time.monotonic() - began
    return result


@dataclass(slots=True)
class _Player:
    options: ParityOptions
    trace: Trace
    result: LiveRun
    producer: EnvelopeProducer
    observer: Observer
    barrier: Barrier
    agents: Sequence[str]
    live_pool: dict[str, str]
    sequence: int = 0

    async def play(self) -> None:
        from gfs.services.producers.client import GfsClient

        arrivals: dict[float, list[TraceJob]] = defaultdict(list)
        cancels: dict[float, list[TraceJob]] = defaultdict(list)
        for job in self.trace.jobs:
            arrivals[job.submit_s].append(job)
            cancel_s = getattr(job, "cancel_s", None)
            if cancel_s is not None:
                cancels[float(cancel_s)].append(job)
        pending = sorted(set(arrivals) | set(cancels))
        period = self.options.quota_period_s
        now = {"t": 0.0}
        client = GfsClient(bootstrap_servers=self.barrier.bootstrap_servers, producer_name="gfs-parity",
                           now=lambda: datetime.fromtimestamp(BASE_S + now["t"], UTC))  # fmt: skip
        fake = (sys.executable, "-m", "gfs.services.node_agent.fake_task")
        settle = self.options.settle_timeout_s
        async with client:
            t = 0.0
            while True:
                now["t"] = t
                self.result.instants += 1
                await self._advance(t)
                await self.barrier.settle(settle)
                if arrivals.get(t) or cancels.get(t):
                    for job in arrivals.get(t, ()):
                        await client.submit(self._task(job, fake))
                        self.result.submitted += 1
                    for job in cancels.get(t, ()):
                        await client.cancel(
                            f"{job.name}-{self.result.run}", job.organization, "trace cancellation"
                        )
                        self.result.cancelled += 1
                    await self.barrier.settle(settle)
                if math.isclose(t / period, round(t / period), abs_tol=1e-9):
                    await self._tick(ClockPhase.STATUS, t)
                    await self.barrier.settle(settle)
                await self._tick(ClockPhase.PASS, t)
                await self.barrier.settle(settle)
                next_exit = await self._advance(t)  # the workers started at t announce their exits
                await self.barrier.settle(settle)
                pending = [p for p in pending if p > t]
                if not pending and self.observer.done >= set(self.result.tasks):
                    return
                candidates = [*pending[:1], (math.floor(t / period + 1e-9) + 1) * period]
                if next_exit is not None and next_exit > t:
                    candidates.append(next_exit)
                t = min(candidates)

    def _task(self, job: TraceJob, fake: tuple[str, ...]) -> TaskSubmitted:
        command = (*fake, "--duration", repr(float(job.duration_s)))
        return TaskSubmitted(
            task_id=f"{job.name}-{self.result.run}", tenant=job.organization,
            gpu_model=self.live_pool[job.gpu_model],
            gpus_per_worker=job.gpus_per_worker, workers=job.workers,
            task_class=TaskClass.HP if job.job_class == "HP" else TaskClass.SPOT,
            guarantee_hours=cast(GuaranteeHours, job.guarantee_hours),
            expected_duration_s=job.duration_s or None,
            checkpoint_interval_s=job.checkpoint_interval_s, command=command,
        )  # fmt: skip

    async def _tick(self, phase: ClockPhase, t: float) -> int:
        self.sequence += 1
        tick = ClockTick(
            clock=f"parity-{self.result.run}",
            at=datetime.fromtimestamp(BASE_S + t, UTC),
            sequence=self.sequence,
            phase=phase,
        )
        await self.producer.send(CLOCK_TOPIC, wrap(tick, producer="gfs-parity", occurred_at=tick.at))
        self.result.ticks += 1
        return self.sequence

    async def _advance(self, t: float) -> float | None:
        """ADVANCE to t, wait for every agent's answer (sending the tick again to one that seems to
        have missed it); the earliest exit any agent announced, in trace seconds."""
        seq = await self._tick(ClockPhase.ADVANCE, t)
        wanted = {f"node-agent/{a}" for a in self.agents}
        deadline = time.monotonic() + self.options.settle_timeout_s
        resend = time.monotonic() + self.options.ack_timeout_s
        while True:
            acks = self.observer.clock_acks.get(seq, {})
            if wanted <= set(acks):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"agents did not answer tick {seq} (t={t:g}): {sorted(wanted - set(acks))}"
                )
            if time.monotonic() > resend:
                tick = ClockTick(
                    clock=f"parity-{self.result.run}",
                    at=datetime.fromtimestamp(BASE_S + t, UTC),
                    sequence=seq,
                    phase=ClockPhase.ADVANCE,
                )
                await self.producer.send(CLOCK_TOPIC, wrap(tick, producer="gfs-parity", occurred_at=tick.at))
                resend = time.monotonic() + self.options.ack_timeout_s
            await asyncio.sleep(0.01)
        exits = [a.next_exit_at.timestamp() - BASE_S for a in acks.values() if a.next_exit_at is not None]
        return min(exits) if exits else None

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

Parts: this module runs the faults (`run_faults`); plan.py holds the plan and the report,
processes.py the supervised processes, load.py the steady load, checks.py the checks at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
import uuid
from dataclasses import replace
from pathlib import Path

import asyncpg

from gfs.schemas.topics import (
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
from gfs.services.faults.checks import _check, _end_offsets
from gfs.services.faults.load import _forecast, _load
from gfs.services.faults.plan import FaultPlan, Report
from gfs.services.faults.processes import Supervised, _kill_workers, _script, _supervise, _until_ready
from gfs.services.faults.soak import SoakLog, kill_schedule, sample_loop, summarize
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.migrations import migrated_schema
from gfs.services.platform.settings import PlatformSettings
from gfs.services.platform.timer import every
from gfs.services.toolkit.consumer_groups import start_group_at_end
from gfs.services.toolkit.processes import free_port

# What the preemption router and the quota service read (docs/live-pipeline.md): their groups start
# at these topics' ends (start_group_at_end).
ROUTER_TOPICS = (TASK_SUBMIT_TOPIC, TELEMETRY_TOPIC, QUOTAS_TOPIC, EVICT_ACK_TOPIC, WORKER_ACK_TOPIC)
QUOTA_TOPICS = (FORECASTS_TOPIC, POOL_STATUS_TOPIC, TASK_LIFECYCLE_TOPIC)
# And the forecast stream's: a fresh app would otherwise read the shared topics' whole history.
FORECAST_TOPICS = (TASK_SUBMIT_TOPIC, TASK_LIFECYCLE_TOPIC, POOL_DEMAND_TOPIC)
# The stack scripts' folder of each part an outage stops.
OUTAGE_SCRIPTS = {"broker": "kafka", "postgres": "postgres"}


def agent_fence(node_timeout_s: float, max_skew_s: float = 10.0) -> dict[str, str]:
    """The agents' self-fence for the service's node timeout (docs/attempts.md, "No two runs at
    once"): thaw window = timeout - the service's clock skew (its default, 10 s), freeze 5 s
    before that; off when the timeout leaves no room (a fault run's 8 s)."""
    thaw = node_timeout_s - max_skew_s
    after = thaw - 5.0
    if after <= 0:
        return {"AGENT_FENCE_AFTER_S": "0"}
    return {"AGENT_FENCE_AFTER_S": f"{after:g}", "AGENT_FENCE_THAW_WITHIN_S": f"{thaw:g}"}


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
    ports = {"quota": free_port(), "preemption": free_port(), "forecast": free_port()}
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
                "QUOTA_POOLS": pool,
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
            base | {"AGENT_COMMAND_MAX_AGE_S": "86400"} | agent_fence(plan.node_timeout_s),
            workdir / f"agent-{node}.log"))  # fmt: skip
    by_name = {s.name: s for s in services}
    start_offsets = await _end_offsets(settings)
    await start_group_at_end(settings.bootstrap_servers, f"faults-router-{run}", ROUTER_TOPICS)
    await start_group_at_end(settings.bootstrap_servers, f"faults-quota-{run}", QUOTA_TOPICS)
    await start_group_at_end(settings.bootstrap_servers, f"faults-forecast-{run}", FORECAST_TOPICS)
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
            # broker and one Postgres outage. A soak: its periodic kills and the outages.
            events: list[tuple[float, str]] = kill_schedule(plan.soak_s, plan.kill_every_s)
            sampler = None
            if plan.soak_s > 0:
                groups = [f"faults-pre-{run}", f"faults-router-{run}", f"faults-quota-{run}"]
                sampler = asyncio.create_task(sample_loop(
                    soak_log, lambda: {s.name: s.proc.pid for s in services if s.alive() and s.proc},
                    settings, groups, dsn, plan.sample_s, stop))  # fmt: skip
            kill_window = plan.load_s * 0.45
            # The three services, and the first agent unless the plan spares the agents.
            killable = services[:4] if plan.kill_agents else services[:3]
            for s in killable if plan.soak_s <= 0 else ():
                events += [
                    (rng.uniform(5.0, kill_window), f"kill:{s.name}") for _ in range(plan.kills_per_service)
                ]
            if plan.outage_s > 0:  # 0: kills only (the shared stack stays up)
                # A soak's outages fall in its first half, so its last half judges flat memory
                # after them (issue 38 item 4); a fault run's in the second half of its load.
                first = plan.load_s * (0.25 if plan.soak_s > 0 else 0.5)
                for i, part in enumerate(p for p in ("broker", "postgres") if p in plan.outage_of):
                    events.append((first + i * (plan.outage_s + 15.0), part))
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
                else:
                    report.outages.append(f"{what} {plan.outage_s:g}s at +{at:.0f}s")
                    _script(f"{OUTAGE_SCRIPTS[what]}/stop.sh")
                    try:
                        await asyncio.sleep(plan.outage_s)
                    finally:
                        _script(f"{OUTAGE_SCRIPTS[what]}/start.sh")
                        if what == "broker":
                            _script("kafka/wait.sh")
                    # Recovery: from the part's return until every service answers ready again.
                    began = time.monotonic()
                    with contextlib.suppress(TimeoutError):
                        await _until_ready(ports, nodes, pool, timeout=120)
                        took = time.monotonic() - began
                        soak_log.recoveries.append((began - t0, what, took))
                        key = f"ready_after_{what}_outage"
                        report.recovery_s[key] = max(report.recovery_s.get(key, 0.0), took)
            await asyncio.sleep(max(0.0, t0 + plan.load_s - time.monotonic()))
            stop.set()
            await load
            if sampler is not None:
                await sampler
                report.soak = summarize(soak_log, plan.report_every_s, plan.soak_s)
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

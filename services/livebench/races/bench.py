"""`gfs livebench races`: the live pipeline driven hard with racing acks, then checked (issue 22).

What it runs, on the stack (`make up`), all of it its own (schema, groups, inbox, pool, node and
task names), so it never meets another run:
- `gfs serve preemption` for one pool, grace `--grace-s`, its router starting at the topics' end;
- `--nodes` real `gfs serve node-agent`s with `--gpus` fake GPUs each, every ack delayed at random
  by up to `--ack-delay-max-s` (AGENT_ACK_DELAY_MAX_S, seeded per node: services/node_agent/
  ack_delay.py), so exits, eviction acks and starts reach the service in shifting orders;
- a spot quota of `--spot-quota` of the pool, so spot fills what HP leaves and HP preempts it;
- `--tasks` seeded submissions at `--rate`/s (paused while `--max-backlog` are unfinished): HP and
  spot, 1-4 GPUs, some 2-worker gangs, workers that sleep `--min-s`..`--max-s` seconds, so that
  many end on their own while an eviction is on its way; a share (`--trap-share`) exits 0 at once
  when signalled (a task that checkpoints and leaves), the rest die by the signal.
Then it waits for every task to finish, and checks from the topics and the agents' journals
(`races/check.py`): GPUs bound twice, false evictions, unfinished tasks (and whether the service
still holds them), and counts the races that really happened. Prints the numbers (and writes them
to `<workdir>/report.json`); exits 1 when a check fails.

Parts: this module runs the races; races/processes.py starts the processes, races/records.py reads
and keeps what the check needs, races/check.py checks it, races/render.py prints the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import resource
import signal
import time
import uuid
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import asyncpg
import typer

from gfs.schemas.envelope import wrap
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.topics import (
    QUOTAS_TOPIC,
    TASK_SUBMIT_TOPIC,
)
from gfs.services.livebench.races.check import RaceReport, check
from gfs.services.livebench.races.processes import _get, _Proc, _until
from gfs.services.livebench.races.records import _Journals, _keep, _kill_workers, _Reader, recheck
from gfs.services.livebench.races.render import render
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.migrations import migrated_schema
from gfs.services.platform.settings import REPO_ROOT, PlatformSettings
from gfs.services.toolkit.processes import free_port


@dataclass(frozen=True, slots=True)
class RacePlan:
    tasks: int = 10_000
    rate: float = 10.0
    nodes: int = 4
    gpus: int = 8
    hp_share: float = 0.35
    gang_share: float = 0.05
    trap_share: float = 0.25
    min_s: float = 0.2
    max_s: float = 2.0
    ack_delay_max_s: float = 0.3
    spot_quota: float = 0.9
    grace_s: float = 2.0
    ack_margin_s: float = 5.0
    max_backlog: int = 200
    settle_s: float = 300.0
    seed: int = 1


_DEFAULT = RacePlan()


def _task(plan: RacePlan, rng: random.Random, tid: str, pool: str) -> TaskSubmitted:
    cls = TaskClass.HP if rng.random() < plan.hp_share else TaskClass.SPOT
    gang = rng.random() < plan.gang_share
    gpus = 4 if gang else rng.choice((1, 1, 1, 2, 2, 4))
    seconds = f"{rng.uniform(plan.min_s, plan.max_s):.2f}"
    if rng.random() < plan.trap_share:  # leaves with 0 at once when signalled (a checkpointing task)
        command: tuple[str, ...] = ("/bin/sh", "-c", f"trap 'exit 0' TERM; sleep {seconds} & wait")
    else:  # dies by the signal
        command = ("/bin/sleep", seconds)
    return TaskSubmitted(task_id=tid, tenant=f"org-{rng.randrange(4)}", gpu_model=pool, gpus_per_worker=gpus,
                         workers=2 if gang else 1, task_class=cls, command=command)  # fmt: skip


async def run_races(plan: RacePlan, workdir: Path, *, echo: Any = print) -> tuple[RaceReport, dict[str, Any]]:
    """Run the plan; returns the check and the run's other numbers. Leaves nothing running."""
    settings = PlatformSettings()
    rng = random.Random(plan.seed)
    run = uuid.uuid4().hex[:6]
    workdir.mkdir(parents=True, exist_ok=True)
    schema = f"races_{run}"
    dsn = await migrated_schema(settings.database_url, schema)
    pool = f"RACE-{run}"
    nodes = [f"race-{run}-n{i}" for i in range(plan.nodes)]
    prefix = f"race-{run}-t"
    port = free_port()
    secret = uuid.uuid4().hex * 2
    base = os.environ | {
        "DATABASE_URL": dsn, "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        "GFS_COMMAND_SECRET": secret, "PYTHONUNBUFFERED": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "",
    }  # fmt: skip
    pre_env = base | {
        "PREEMPTION_GROUP": f"races-pre-{run}", "PREEMPTION_ROUTER_GROUP": f"races-router-{run}",
        "PREEMPTION_INBOX_TOPIC": f"races-inbox-{run}", "PREEMPTION_POOLS": pool,
        "PREEMPTION_ROUTER_OFFSET_RESET": "latest", "PREEMPTION_API_PORT": str(port),
        "PREEMPTION_STATUS_S": "5", "PREEMPTION_GRACE_S": str(plan.grace_s),
        "PREEMPTION_ACK_MARGIN_S": str(plan.ack_margin_s), "PREEMPTION_NODE_TIMEOUT_S": "60",
        "PREEMPTION_INSTANCE": f"races-{run}",
    }  # fmt: skip
    started = time.monotonic()
    procs: list[_Proc] = []
    reader = _Reader(settings.bootstrap_servers, prefix, set(nodes))
    journals = _Journals({n: workdir / n / "journal.json" for n in nodes})
    numbers: dict[str, Any] = {"run": run, "plan": asdict(plan), "workdir": str(workdir)}
    end = datetime.now(UTC)
    try:
        await reader.start()
        service = _Proc("preemption", ["serve", "preemption"], pre_env, workdir / "preemption.log")
        service.start()
        procs.append(service)
        api = f"http://127.0.0.1:{port}"

        async def answers() -> bool:
            return (await _get(f"{api}/pools"))[0] == 200

        await _until("the preemption service", answers, 120, procs)
        for i, node in enumerate(nodes):
            agent_env = base | {
                "AGENT_ACK_DELAY_MAX_S": str(plan.ack_delay_max_s),
                "AGENT_ACK_DELAY_SEED": str(plan.seed + i),
                # A short freshness window keeps the journals (rewritten on every change) small;
                # the commands are seconds old.
                "AGENT_COMMAND_MAX_AGE_S": "90",
            }  # fmt: skip
            args = ["serve", "node-agent", "--node", node, "--gpu-model", pool, "--gpus", str(plan.gpus),
                    "--fake-gpus", "--telemetry-s", "1", "--state-dir", str(workdir / node)]  # fmt: skip
            agent = _Proc(node, args, agent_env, workdir / f"agent-{node}.log")
            agent.start()
            procs.append(agent)

        async def registered() -> bool:
            _, body = await _get(f"{api}/pools")
            return bool(body) and body.get("pools", {}).get(pool, {}).get("nodes") == len(nodes)

        await _until("the nodes' registration", registered, 120, procs)
        capacity = plan.nodes * plan.gpus
        async with EnvelopeProducer(
            bootstrap_servers=settings.bootstrap_servers, client_id=f"races-{run}"
        ) as out:

            async def quota() -> bool:
                now = datetime.now(UTC)
                share = plan.spot_quota * capacity
                quotas = tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=share) for h in (1, 2, 4))
                q = SpotQuota(pool=pool, quotas=quotas, eta=1.0, capacity_gpus=capacity, valid_from=now,
                              valid_until=now + timedelta(days=1), forecast_version=run)  # fmt: skip
                await out.send(QUOTAS_TOPIC, wrap(q, producer="races"))
                await asyncio.sleep(1.0)
                _, body = await _get(f"{api}/pools")
                return bool(((body or {}).get("pools", {}).get(pool) or {}).get("quota_version"))

            await _until("the quota", quota, 60, procs)
            echo(f"run {run}: {plan.nodes} nodes x {plan.gpus} GPUs, pool {pool}, files in {workdir}")

            async def snapshots() -> None:
                while True:
                    journals.snapshot()
                    await asyncio.sleep(3.0)

            snapper = asyncio.create_task(snapshots())
            t0 = time.monotonic()
            paused_s = 0.0
            submitted: list[str] = []
            next_line = t0 + 30
            for k in range(plan.tasks):
                due = t0 + paused_s + k / plan.rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                # Bounded backlog: the run measures races, not an ever longer queue.
                while len(submitted) - len(reader.finished) >= plan.max_backlog:
                    await asyncio.sleep(0.2)
                    paused_s += 0.2
                    if any(not p.alive() for p in procs):
                        raise RuntimeError("a process of the run exited; see its log in " + str(workdir))
                tid = f"{prefix}{k}"
                await out.send(TASK_SUBMIT_TOPIC, wrap(_task(plan, rng, tid, pool), producer="races"))
                submitted.append(tid)
                if time.monotonic() >= next_line:
                    next_line += 30
                    echo(f"  t={time.monotonic() - t0:5.0f}s submitted {len(submitted):,} finished "
                         f"{len(reader.finished):,} records {len(reader.records):,}")  # fmt: skip
            submit_s = time.monotonic() - t0
            rate_s = len(submitted) / submit_s
            echo(f"submitted {len(submitted):,} in {submit_s:.0f} s ({rate_s:.1f}/s); settling")
            settle_until = time.monotonic() + plan.settle_s
            while time.monotonic() < settle_until and not set(submitted) <= reader.finished:
                await asyncio.sleep(1.0)
            await asyncio.sleep(plan.ack_delay_max_s + 3.0)  # the last delayed acks
            end = datetime.now(UTC)
            snapper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await snapper
            journals.snapshot()
            numbers["submitted"] = len(submitted)
            numbers["never_answered"] = sorted(set(submitted) - reader.accepted - reader.finished)
            numbers["submit_s"] = round(submit_s, 1)
            numbers["offered_rate"] = round(len(submitted) / submit_s, 2)
            held: dict[str, str] = {}
            for tid in sorted(set(submitted) - reader.finished)[:200]:
                _, body = await _get(f"{api}/explain/{tid}")
                held[tid] = str(((body or {}).get("live") or {}).get("state"))
            numbers["unfinished_state"] = held
            own = resource.getrusage(resource.RUSAGE_SELF)
            numbers["cpu_s"] = {"preemption": round(procs[0].cpu_s(), 1),
                                "agents": round(sum(p.cpu_s() for p in procs[1:]), 1),
                                "runner": round(own.ru_utime + own.ru_stime, 1)}  # fmt: skip
    finally:
        for p in reversed(procs):
            p.stop()
        await reader.stop()
        _kill_workers(journals)
        with contextlib.suppress(Exception):
            admin = await asyncpg.connect(settings.database_url)
            await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await admin.close()
    _keep(workdir, reader.records, journals)
    numbers["wall_s"] = round(time.monotonic() - started, 1)
    numbers["journal_snapshots"] = journals.snapshots
    report = check(
        reader.records,
        {n: list(w.values()) for n, w in journals.workers.items()},
        {n: list(c.values()) for n, c in journals.commands.items()},
        end=end,
    )
    return report, numbers


def races(
    tasks: Annotated[int, typer.Option(help="task submissions")] = _DEFAULT.tasks,
    rate: Annotated[
        float, typer.Option(help="submissions per second (paused at the backlog cap)")
    ] = _DEFAULT.rate,
    nodes: Annotated[int, typer.Option(help="node agents")] = _DEFAULT.nodes,
    gpus: Annotated[int, typer.Option(help="fake GPUs per node")] = _DEFAULT.gpus,
    hp_share: Annotated[float, typer.Option(help="share of HP submissions")] = _DEFAULT.hp_share,
    trap_share: Annotated[
        float, typer.Option(help="share of workers exiting 0 when signalled")
    ] = _DEFAULT.trap_share,
    min_s: Annotated[float, typer.Option(help="shortest worker run, s")] = _DEFAULT.min_s,
    max_s: Annotated[float, typer.Option(help="longest worker run, s")] = _DEFAULT.max_s,
    ack_delay_max_s: Annotated[
        float, typer.Option(help="agents' random ack delay, max s")
    ] = _DEFAULT.ack_delay_max_s,
    max_backlog: Annotated[
        int, typer.Option(help="unfinished tasks before submitting pauses")
    ] = _DEFAULT.max_backlog,
    settle_s: Annotated[float, typer.Option(help="how long to wait for the last tasks")] = _DEFAULT.settle_s,
    seed: Annotated[int, typer.Option()] = _DEFAULT.seed,
    workdir: Annotated[Path | None, typer.Option(help="logs, journals, report.json")] = None,
    recheck_only: Annotated[
        bool, typer.Option("--recheck", help="check a kept --workdir again, run nothing")
    ] = False,
) -> None:
    """Exits racing evictions and randomly delayed acks on the live pipeline; counts GPUs bound
    twice, false evictions and lost tasks from the topics and the agents' journals."""
    plan = RacePlan(tasks=tasks, rate=rate, nodes=nodes, gpus=gpus, hp_share=hp_share, trap_share=trap_share,
                    min_s=min_s, max_s=max_s, ack_delay_max_s=ack_delay_max_s, max_backlog=max_backlog,
                    settle_s=settle_s, seed=seed)  # fmt: skip
    folder = workdir or REPO_ROOT / ".stack" / f"races-{uuid.uuid4().hex[:6]}"
    # SIGTERM stops the run as Ctrl-C does (its processes stopped, its schema dropped): a run
    # started in the background ignores SIGINT.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if recheck_only:
        report, numbers = recheck(folder)
    else:
        report, numbers = asyncio.run(run_races(plan, folder, echo=typer.echo))
    lines = render(report, numbers)
    for line in lines:
        typer.echo(line)
    (folder / "report.json").write_text(
        # Not asdict: it rebuilds a Counter from (key, count) pairs, counting the pairs.
        json.dumps(
            {
                "numbers": numbers,
                "report": {f.name: getattr(report, f.name) for f in fields(report)},
                "lines": lines,
            },
            indent=1,
            default=str,
        )
    )
    unfinished = numbers.get("unfinished_state", {})
    lost = [t for t, s in unfinished.items() if s not in ("running", "queued")]
    if not report.ok or lost:
        raise typer.Exit(1)

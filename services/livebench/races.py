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
(`race_check.py`): GPUs bound twice, false evictions, unfinished tasks (and whether the service
still holds them), and counts the races that really happened. Prints the numbers (and writes them
to `<workdir>/report.json`); exits 1 when a check fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import aiohttp
import asyncpg
import typer
from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.envelope import wrap
from schemas.quota import GuaranteeQuota, SpotQuota
from schemas.tasks import TaskAccepted, TaskClass, TaskFinished, TaskRejected, TaskSubmitted
from schemas.topics import (
    BIND_TOPIC,
    EVICT_ACK_TOPIC,
    EVICT_TOPIC,
    QUOTAS_TOPIC,
    TASK_LIFECYCLE_TOPIC,
    TASK_SUBMIT_TOPIC,
    WORKER_ACK_TOPIC,
    decode,
    topic,
)
from services.livebench.race_check import RaceReport, Seen, check
from services.node_agent.journal import CommandEntry, JournalState, WorkerEntry
from services.platform.kafka.producer import EnvelopeProducer
from services.platform.migrations import migrated_schema
from services.platform.settings import REPO_ROOT, PlatformSettings

READ_TOPICS = (
    TASK_LIFECYCLE_TOPIC,
    BIND_TOPIC,
    EVICT_TOPIC,
    WORKER_ACK_TOPIC,
    EVICT_ACK_TOPIC,
)


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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Proc:
    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        handle = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services", *args], cwd=REPO_ROOT, env=env, stdout=handle,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        handle.close()
        self.log = log

    def alive(self) -> bool:
        return self.proc.poll() is None

    def cpu_s(self) -> float:
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        return float("nan")

    def stop(self) -> None:
        if not self.alive():
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


class _Reader:
    """The run's records on READ_TOPICS from their end at `start()` on, filtered by key before
    decoding (the shared broker carries other runs' traffic)."""

    def __init__(self, servers: list[str], task_prefix: str, nodes: set[str]) -> None:
        self.consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
        self.task_prefix = task_prefix.encode()
        self.nodes = {n.encode() for n in nodes}
        self.records: list[Seen] = []
        self.finished: set[str] = set()
        self.accepted: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        parts = [TopicPartition(t, p) for t in READ_TOPICS for p in range(topic(t).partitions)]
        self.consumer.assign(parts)
        await self.consumer.seek_to_end(*parts)
        for tp in parts:  # resolve the end offsets now, before anything of the run is published
            await self.consumer.position(tp)
        self._task = asyncio.create_task(self._run())

    def _mine(self, topic_name: str, key: bytes) -> bool:
        if topic_name == TASK_LIFECYCLE_TOPIC:
            return key.startswith(self.task_prefix)
        return key in self.nodes

    async def _run(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    if not self._mine(r.topic, r.key or b""):
                        continue
                    with contextlib.suppress(ValueError):
                        envelope = decode(r.topic, r.value or b"")
                        self.records.append(
                            Seen(r.topic, r.timestamp, envelope.occurred_at, envelope.payload)
                        )
                        if isinstance(envelope.payload, TaskFinished | TaskRejected):
                            self.finished.add(envelope.payload.task_id)
                        elif isinstance(envelope.payload, TaskAccepted):
                            self.accepted.add(envelope.payload.task_id)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.consumer.stop()


class _Journals:
    """Snapshots of the agents' journals merged by entry (an agent prunes entries after its
    freshness window; a snapshot every few seconds sees each one in its final state)."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths
        self.workers: dict[str, dict[str, WorkerEntry]] = {n: {} for n in paths}
        self.commands: dict[str, dict[str, CommandEntry]] = {n: {} for n in paths}
        self.snapshots = 0

    def snapshot(self) -> None:
        for node, path in self.paths.items():
            with contextlib.suppress(OSError, ValueError):
                state = JournalState.model_validate_json(path.read_bytes())
                self.workers[node].update(state.workers)
                self.commands[node].update(state.commands)
        self.snapshots += 1


async def _get(url: str) -> tuple[int, Any]:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http, http.get(url) as r:
            return r.status, await r.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return 0, None


async def _until(what: str, probe: Any, timeout: float, procs: list[_Proc]) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        dead = [p.log for p in procs if not p.alive()]
        if dead:
            raise RuntimeError(f"a process exited while waiting for {what}; see {dead[0]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


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
    port = _free_port()
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
        service = _Proc(["serve", "preemption"], pre_env, workdir / "preemption.log")
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
            procs.append(_Proc(args, agent_env, workdir / f"agent-{node}.log"))

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


def _keep(workdir: Path, records: list[Seen], journals: _Journals) -> None:
    """What the check read, for a second look: records.jsonl and the merged journals."""
    with (workdir / "records.jsonl").open("w") as out:
        for r in records:
            line = {
                "topic": r.topic,
                "timestamp_ms": r.timestamp_ms,
                "occurred_at": r.occurred_at.isoformat(),
                "type": type(r.payload).__name__,
                "payload": r.payload.model_dump(mode="json"),
            }
            out.write(json.dumps(line) + "\n")
    merged = {
        node: {"workers": {k: w.model_dump(mode="json") for k, w in journals.workers[node].items()},
               "commands": {k: c.model_dump(mode="json") for k, c in journals.commands[node].items()}}
        for node in journals.paths
    }  # fmt: skip
    (workdir / "journals.json").write_text(json.dumps(merged))


def recheck(workdir: Path) -> tuple[RaceReport, dict[str, Any]]:
    """The check again on what a run kept (records.jsonl, journals.json, report.json)."""
    records: list[Seen] = []
    with (workdir / "records.jsonl").open() as kept:
        for line in kept:
            r = json.loads(line)
            payload = topic(r["topic"]).payload_type(r["type"]).model_validate(r["payload"])
            occurred = datetime.fromisoformat(r["occurred_at"])
            records.append(Seen(r["topic"], r["timestamp_ms"], occurred, payload))
    merged = json.loads((workdir / "journals.json").read_text())
    workers = {n: [WorkerEntry.model_validate(w) for w in v["workers"].values()] for n, v in merged.items()}
    commands = {
        n: [CommandEntry.model_validate(c) for c in v["commands"].values()] for n, v in merged.items()
    }
    numbers: dict[str, Any] = json.loads((workdir / "report.json").read_text())["numbers"]
    end = datetime.fromtimestamp(max((r.timestamp_ms for r in records), default=0) / 1000 + 1, UTC)
    return check(records, workers, commands, end=end), numbers


def _kill_workers(journals: _Journals) -> None:
    """Workers still alive when the agents stopped (none after a settled run)."""
    journals.snapshot()
    for entries in journals.workers.values():
        for w in entries.values():
            if w.pid is None or w.exited_at is not None or w.start_ticks is None:
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{w.pid}/stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[19]) == w.start_ticks:
                    os.killpg(w.pid, signal.SIGKILL)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def render(report: RaceReport, numbers: dict[str, Any]) -> list[str]:
    plan = numbers["plan"]
    unfinished = numbers.get("unfinished_state", {})
    lost = sorted(t for t, s in unfinished.items() if s not in ("running", "queued"))
    d = report.ack_delays_ms
    r = report
    lines = [
        f"races run {numbers['run']}: {plan['tasks']:,} tasks, {plan['nodes']} nodes x {plan['gpus']} GPUs, "
        f"offered {numbers.get('offered_rate', 0)}/s (target {plan['rate']}/s, "
        f"backlog cap {plan['max_backlog']}), "
        f"acks delayed up to {plan['ack_delay_max_s']} s, grace {plan['grace_s']} s, seed {plan['seed']}; "
        f"wall {numbers['wall_s']:.0f} s",
        f"  tasks: accepted {report.accepted:,}, finished {report.finished:,}, rejected {report.rejected}, "
        f"unfinished {len(report.unfinished)} (held by the service: {len(report.unfinished) - len(lost)}, "
        f"LOST: {len(lost)}), never answered {len(numbers.get('never_answered', []))}",
        f"  commands: {r.binds:,} binds ({r.binds_reissued} re-issued), {r.evictions:,} evictions "
        f"{dict(r.evictions_by_reason)}; {r.task_evicted:,} TaskEvicted; workers run {r.workers_run:,}",
        f"  GPUs bound twice: on the nodes {len(report.double_bound_on_node)}, "
        f"in the commands {len(report.double_bound_in_commands)}",
        f"  false evictions {len(report.false_evictions)} (genuine {report.genuine_evictions:,}, of which "
        f"{r.evicted_before_start} before the worker started, {r.gang_nodes_ended_on_their_own} "
        f"for a gang's node whose worker had ended on its own; unverifiable {len(r.unverified_evictions)}); "
        f"evicted twice {len(report.evicted_twice)}; finished twice {len(report.finished_twice)}; "
        f"false FAILED periods {len(report.false_failed_periods)}",
        f"  races: {report.evictions_raced_by_exit:,} evictions raced by an exit on its own "
        f"({report.exits_before_eviction_issued:,} exited before the eviction was issued, "
        f"{report.exits_while_eviction_in_flight:,} while it was on its way); {report.not_running_acks:,} "
        f"NOT_RUNNING acks; {report.evict_read_before_bind} evictions read before their bind",
        f"  ack delay (record time - occurred_at), ms: n={len(d):,} p50 {_pct(d, 0.5):.0f} "
        f"p90 {_pct(d, 0.9):.0f} p99 {_pct(d, 0.99):.0f} max {max(d, default=float('nan')):.0f}; "
        f"mean {statistics.fmean(d) if d else float('nan'):.0f}",
        f"  CPU s: {numbers.get('cpu_s')}",
    ]
    for name, found in (("double bound on a node", report.double_bound_on_node),
                        ("double bound in the commands", report.double_bound_in_commands),
                        ("false eviction", report.false_evictions), ("evicted twice", report.evicted_twice),
                        ("false FAILED period", report.false_failed_periods), ("lost", lost)):  # fmt: skip
        lines += [f"  {name}: {x}" for x in found[:10]]
    return lines


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

"""Bad input at volume while good traffic flows (issue 14, item 2), every service a real process.

`gfs serve forecast`, `gfs serve quota`, `gfs serve preemption` and a `gfs serve node-agent` (fake
GPUs) run as child processes with groups, inbox, pools, fence key and database schema of their own.
While a GfsClient submits good tasks (HP and spot, each a real `gfs fake-task` run by the agent),
`BAD_INPUT_COUNT` bad records are published, spread over every input topic of every service:

- not JSON, not UTF-8, a JSON array instead of an object, a required payload field missing;
- oversized (a ~900 KB envelope with an extra field: the broker takes up to ~1 MB, so the consumer
  must cope; its dead letter keeps the first 256 KiB with the size and SHA-256);
- `schema_version` 2 (a producer upgraded before its consumers);
- the wrong type (a valid payload of another topic, its event_type not carried by this one).

Checked: every bad record is in gfs.deadletter once per consumer group that reads its topic
(matched by source topic, partition and offset, with the reason its category gives), every good
task is accepted, started and finished, the forecast stream still forecasts and the quota service
still publishes quotas, and no service restarted (same processes, /healthz, /readyz, /metrics).

CI runs 1,000 bad records (about a minute on the 2-core machine). The full version of the issue
(10,000 records):

    GFS_BAD_INPUT_COUNT=10000 .venv/bin/python -m pytest tests/integration/test_bad_input.py -s
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, TopicPartition
from bad_records import (
    BIND,
    EVICT,
    FORECASTS,
    LIFECYCLE,
    OVERSIZED_BYTES,
    POOL_DEMAND,
    QUOTAS,
    READS,
    REASON_CODES,
    REASONS,
    WORKER_ACK,
    BadRecords,
    _plan,
    documented_reasons,
)
from kafka_harness import start_at_end
from live_cluster import _fake, _kill_fake_task, _until
from live_harness import ServiceProcess, Tap
from quota_harness import _free_port, _migrated

from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import wrap
from gfs.schemas.forecast import PoolDemandForecast
from gfs.schemas.pool_demand import PoolDemandLevel
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import TaskAccepted, TaskClass, TaskFinished, TaskStarted
from gfs.schemas.workers import WorkerStarted
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.producers.client import GfsClient

pytestmark = [pytest.mark.integration, pytest.mark.disruptive]

# The issue asks for 10,000; CI runs this many (override with GFS_BAD_INPUT_COUNT).
BAD_INPUT_COUNT = int(os.environ.get("GFS_BAD_INPUT_COUNT", "1000"))
GOOD_TASKS = 24  # submitted interleaved with the bad records
# Each wait's bound: generous, the 2-core machine is shared with the broker, Postgres and other tests.
WAIT_S = 180.0


def _now() -> datetime:
    return datetime.now(UTC)


async def _committed(
    bootstrap: str, group: str, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return {tp: (await consumer.committed(tp)) or 0 for tp in partitions}
    finally:
        await consumer.stop()


async def _get(port: int, path: str) -> tuple[int, str]:
    try:
        timeout = aiohttp.ClientTimeout(total=5)
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.get(f"http://127.0.0.1:{port}{path}") as r,
        ):
            return r.status, await r.text()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return 0, ""


class World:
    def __init__(self, dsn: str, kafka: str, tmp: Path) -> None:
        self.run = uuid.uuid4().hex[:6]
        self.kafka = kafka
        self.tmp = tmp
        self.pool = f"BAD-{self.run}"
        self.node = f"bad-{self.run}-n0"
        self.groups = {
            "forecast": f"bad-forecast-{self.run}",
            "quota": f"bad-quota-{self.run}",
            "router": f"bad-router-{self.run}",
            "agent": f"gfs-agent-{self.node}",
        }
        self.ports = {name: _free_port() for name in ("forecast", "quota", "preemption", "agent")}
        self.procs: dict[str, ServiceProcess] = {}
        self.env = os.environ | {
            "DATABASE_URL": dsn,
            "KAFKA_BOOTSTRAP_SERVERS": kafka,
            "PYTHONUNBUFFERED": "1",
            "GFS_COMMAND_SECRET": "bad-input-" + "k" * 24,
        }

    def start(self) -> None:
        env = self.env
        self.procs["forecast"] = ServiceProcess(
            ["serve", "forecast"],
            env
            | {
                "FORECAST_APP_ID": self.groups["forecast"],
                "FORECAST_STORE": "memory://",
                "FORECAST_ARTIFACT": "",
                "FORECAST_DATADIR": str(self.tmp / "faust"),
                "FORECAST_TICK_S": "3600",
                "FORECAST_WEB_PORT": str(self.ports["forecast"]),
            },
            self.tmp / "forecast.log",
        ).start()
        self.procs["quota"] = ServiceProcess(
            ["serve", "quota"],
            env
            | {
                "QUOTA_GROUP": self.groups["quota"],
                "QUOTA_API_PORT": str(self.ports["quota"]),
                "QUOTA_REFRESH_S": "2",
                "QUOTA_FENCE_KEY": str(random.getrandbits(48)),
                "QUOTA_FENCE_POLL_S": "0.5",
            },
            self.tmp / "quota.log",
        ).start()
        self.procs["preemption"] = ServiceProcess(
            ["serve", "preemption"],
            env
            | {
                "PREEMPTION_GROUP": f"bad-pre-{self.run}",
                "PREEMPTION_ROUTER_GROUP": self.groups["router"],
                "PREEMPTION_INBOX_TOPIC": f"bad-inbox-{self.run}",
                "PREEMPTION_INBOX_PARTITIONS": "1",
                "PREEMPTION_POOLS": self.pool,
                "PREEMPTION_API_PORT": str(self.ports["preemption"]),
                "PREEMPTION_INSTANCE": f"bad-{self.run}",
                "PREEMPTION_TICK_S": "0.2",
                "PREEMPTION_STATUS_S": "3",
                "PREEMPTION_NODE_TIMEOUT_S": "60",
            },
            self.tmp / "preemption.log",
        ).start()
        self.procs["agent"] = ServiceProcess(
            [
                "serve",
                "node-agent",
                "--node",
                self.node,
                "--gpu-model",
                self.pool,
                "--gpus",
                "8",
                "--fake-gpus",
                "--telemetry-s",
                "1",
                "--state-dir",
                str(self.tmp / self.node),
                "--metrics-port",
                str(self.ports["agent"]),
            ],
            env,
            self.tmp / "agent.log",
        ).start()
        self.pids = {name: proc.proc.pid for name, proc in self.procs.items() if proc.proc is not None}

    def running(self) -> bool:
        """True while every process started runs (fails at once, with its log, when one exited)."""
        for name, proc in self.procs.items():
            assert proc.proc is not None and proc.proc.poll() is None, f"{name} exited:\n{proc.tail(40)}"
        return True

    async def alive_and_answering(self) -> dict[str, str]:
        """Per service, what is wrong (empty when every process is the one started and answers)."""
        wrong: dict[str, str] = {}
        for name, proc in self.procs.items():
            assert proc.proc is not None
            if proc.proc.poll() is not None or proc.proc.pid != self.pids[name]:
                wrong[name] = f"exited with {proc.proc.returncode}"
        probes = [
            ("preemption", "/healthz"),
            ("preemption", "/readyz"),
            ("quota", "/healthz"),
            ("quota", "/readyz"),
            ("forecast", "/metrics"),
            ("agent", "/metrics"),
        ]
        for name, path in probes:
            status, _ = await _get(self.ports[name], path)
            if status != 200:
                wrong[f"{name}{path}"] = f"HTTP {status}"
        return wrong

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{p.tail(30)}" for name, p in self.procs.items())

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def world(
    database_url: str,
    kafka_bootstrap: str,
    registry_topics: TopicsReport,
    scratch_schema: str,
    tmp_path: Path,
) -> AsyncIterator[tuple[World, Tap]]:
    dsn = await _migrated(database_url, scratch_schema)
    w = World(dsn, kafka_bootstrap, tmp_path)
    await start_at_end(kafka_bootstrap, {w.groups[s]: READS[s] for s in ("forecast", "quota", "router")})
    tap = await Tap(kafka_bootstrap, (LIFECYCLE, FORECASTS, QUOTAS, WORKER_ACK, "gfs.deadletter")).start()
    try:
        w.start()
        yield w, tap
    finally:
        w.stop()
        # Agents leave their workers running when they stop: the test's own must not outlive it.
        for started in tap.payloads(WorkerStarted, lambda s: s.node == w.node):
            _kill_fake_task(started.pid)
        await tap.stop()


@pytest.mark.asyncio(loop_scope="session")
async def test_bad_input_at_volume_is_dead_lettered_while_good_traffic_flows(
    world: tuple[World, Tap], kafka_bootstrap: str
) -> None:
    w, tap = world
    # Each kind's code is one the protocol page's table names (the letters are checked below).
    assert set(REASON_CODES.values()) <= documented_reasons(), documented_reasons()
    try:
        await _run(w, tap, kafka_bootstrap)
    except BaseException:
        print(w.logs())
        raise


async def _run(w: World, tap: Tap, kafka: str) -> None:
    # Ready: the forecast worker joined its group, the quota service is active, the preemption
    # service owns the pool and knows the agent's node and a quota.
    forecast_log = w.tmp / "forecast.log"
    launched = time.monotonic()
    await _until(
        lambda: w.running() and "[^Worker]: Ready" in forecast_log.read_text(errors="replace"),
        WAIT_S,
        "the forecast worker",
    )

    async def pool_ready() -> bool:
        w.running()
        status, body = await _get(w.ports["preemption"], "/pools")
        pools = json.loads(body)["pools"] if status == 200 else {}
        return w.pool in pools and pools[w.pool]["nodes"] == 1 and bool(pools[w.pool]["quota_version"])

    async with EnvelopeProducer(bootstrap_servers=kafka, client_id="bad-input") as producer:
        quota = SpotQuota(
            pool=w.pool,
            quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=8.0) for h in (1, 2, 4)),
            eta=1.0,
            capacity_gpus=8,
            valid_from=_now(),
            valid_until=_now() + timedelta(hours=1),
            forecast_version="bad-input:1",
        )
        await producer.send(QUOTAS, wrap(quota, producer="bad-input"))
        await _until(pool_ready, WAIT_S, "the preemption service to own the pool with a node and a quota")

        async def quota_ready() -> bool:
            return (await _get(w.ports["quota"], "/readyz"))[0] == 200

        await _until(quota_ready, WAIT_S, "the quota service")
        ready_s = time.monotonic() - launched
        assert not await w.alive_and_answering(), await w.alive_and_answering()

        # Forecast stream's good input, part 1 (backdated, as in test_forecast_stream): the servable
        # levels a preemption service would publish for pool FC (issue 35's default series): tenant
        # x at 8 GPUs from minute 10; part 2 after the flood closes the hours.
        fc_pool = f"FC-{w.run}"
        t0 = _now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)

        def fc_level(minute: int, gpus: float) -> PoolDemandLevel:
            return PoolDemandLevel(pool=fc_pool, at=t0 + timedelta(minutes=minute), levels={"x": gpus})

        first = [await producer.send(POOL_DEMAND, wrap(fc_level(10, 8.0), producer="bad-input"))]
        where = [TopicPartition(m.topic, m.partition) for m in first]

        async def forecast_read_part_one() -> bool:
            committed = await _committed(kafka, w.groups["forecast"], where)
            return all(committed[tp] > m.offset for tp, m in zip(where, first, strict=True))

        await _until(forecast_read_part_one, WAIT_S, "the forecast stream to read its first events")

        # The flood, with good tasks interleaved.
        bad = BadRecords()
        plan = _plan(BAD_INPUT_COUNT)
        sent: list[tuple[str, str, int, int]] = []  # topic, category, partition, offset
        good = [f"{w.run}-good-{i}" for i in range(GOOD_TASKS)]
        chunk = max(1, len(plan) // GOOD_TASKS)
        began = time.monotonic()
        async with GfsClient(bootstrap_servers=kafka, producer_name="bad-input-good") as client:
            for k, start in enumerate(range(0, len(plan), chunk)):
                futures = []
                for i in range(start, min(start + chunk, len(plan))):
                    name, category = plan[i]
                    key = w.node.encode() if name in (BIND, EVICT) else f"bad-{w.run}-{i}".encode()
                    future = await producer.send_raw_later(name, value=bad.value(name, category, i), key=key)
                    futures.append((name, category, future))
                for name, category, future in futures:
                    meta = await future
                    sent.append((name, category, meta.partition, meta.offset))
                if k < GOOD_TASKS:
                    await client.submit_new(
                        task_id=good[k],
                        tenant="org-good",
                        gpu_model=w.pool,
                        gpus_per_worker=1,
                        workers=1,
                        task_class=TaskClass.HP if k % 2 else TaskClass.SPOT,
                        command=_fake("--duration", "1"),
                    )
            for task in good[k + 1 :]:
                await client.submit_new(
                    task_id=task,
                    tenant="org-good",
                    gpu_model=w.pool,
                    gpus_per_worker=1,
                    workers=1,
                    task_class=TaskClass.SPOT,
                    command=_fake("--duration", "1"),
                )
        published_s = time.monotonic() - began
        assert len(sent) == BAD_INPUT_COUNT

        # Forecast stream's good input, part 2: the level at minute 180 closes hours 0-2 of FC.
        await producer.send(POOL_DEMAND, wrap(fc_level(180, 16.0), producer="bad-input"))

        # Every bad record dead-lettered once by every group that reads its topic.
        expected: dict[str, set[tuple[str, int, int]]] = {
            w.groups[s]: {(t, p, o) for t, _, p, o in sent if t in topics} for s, topics in READS.items()
        }
        total = sum(len(v) for v in expected.values())
        category_of = {(t, p, o): c for t, c, p, o in sent}

        def letters() -> dict[str, dict[tuple[str, int, int], list[DeadLetter]]]:
            found: dict[str, dict[tuple[str, int, int], list[DeadLetter]]] = defaultdict(
                lambda: defaultdict(list)
            )
            for letter in tap.payloads(DeadLetter, lambda d: d.consumer_group in expected):
                where = (letter.source_topic, letter.source_partition, letter.source_offset)
                if where in category_of:
                    found[letter.consumer_group][where].append(letter)
            return found

        def all_letters() -> bool:
            found = letters()
            return all(set(found[g]) >= want for g, want in expected.items())

        await _until(all_letters, WAIT_S + BAD_INPUT_COUNT * 0.05, f"{total} dead letters")
        dead_lettered_s = time.monotonic() - began
        found = letters()
        for group, want in expected.items():
            assert set(found[group]) == want, group
            for where, copies in found[group].items():
                # One letter per record and group (a redelivery would make a second: none here).
                assert len(copies) == 1, (group, where, [c.error for c in copies])
                letter, category = copies[0], category_of[where]
                assert REASONS[category] in letter.error, (category, letter.error)
                # The code the page names for this kind, from every service (issue 38 item 3).
                assert letter.reason == REASON_CODES[category], (group, category, letter.reason)
                if category == "oversized":
                    assert (
                        letter.truncated and letter.original_size and letter.original_size > OVERSIZED_BYTES
                    )
                    assert len(base64.b64decode(letter.original)) == 256 * 1024
                elif category in ("not_json", "not_utf8"):
                    assert not letter.truncated
                    raw = base64.b64decode(letter.original)
                    assert letter.original_sha256 == hashlib.sha256(raw).hexdigest()

        # Good traffic unaffected: every good task accepted, started and finished (exit 0).
        def task_events(kind: type) -> set[str]:
            return {p.task_id for p in tap.payloads(kind, lambda p: p.task_id in good)}

        await _until(lambda: task_events(TaskFinished) == set(good), WAIT_S, "every good task to finish")
        finished_s = time.monotonic() - began
        assert task_events(TaskAccepted) == task_events(TaskStarted) == set(good)
        assert {p.exit_code for p in tap.payloads(TaskFinished, lambda p: p.task_id in good)} == {0}
        # The forecast stream forecasts pool FC (persistence: x held 8 in the last hour) once hours
        # 0-2 closed (its first forecast, at the first demand, is the empty history's zeros) ...
        (forecast, *_) = await tap.wait(
            PoolDemandForecast,
            lambda f: f.pool == fc_pool and f.origin_time == t0 + timedelta(hours=3),
            timeout=WAIT_S,
        )
        assert forecast.horizon[0].quantiles["0.5"] == 8.0

        # ... and the quota service computes the good pool's quota from the preemption service's status.
        def quota_published() -> bool:
            return any(
                t == QUOTAS
                and e.producer == "gfs-quota"
                and isinstance(e.payload, SpotQuota)
                and e.payload.pool == w.pool
                for t, e, _ in tap.items
            )

        await _until(quota_published, WAIT_S, "a quota from the quota service")

        # No service restarted; each still answers.
        assert not await w.alive_and_answering(), await w.alive_and_answering()
        _, metrics = await _get(w.ports["agent"], "/metrics")
        agent_undecodable = next(
            (
                float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if line.startswith("gfs_agent_commands_rejected_total{") and 'reason="undecodable"' in line
            ),
            0.0,
        )
        assert agent_undecodable == len(expected[w.groups["agent"]])

    by_topic = Counter(t for t, _, _, _ in sent)
    by_category = Counter(c for _, c, _, _ in sent)
    per_group = {g: len(v) for g, v in expected.items()}
    print(
        f"\nbad input: {BAD_INPUT_COUNT} records ({by_category['oversized']} oversized of "
        f"~{OVERSIZED_BYTES // 1000} KB) and {GOOD_TASKS} good tasks published in {published_s:.1f} s; "
        f"all {total} dead letters in {dead_lettered_s:.1f} s from the first record; every good task "
        f"finished {finished_s:.1f} s after it (services ready {ready_s:.1f} s after their start)\n"
        f"  per topic: {dict(by_topic)}\n  per category: {dict(by_category)}\n"
        f"  dead letters per group: {per_group}"
    )

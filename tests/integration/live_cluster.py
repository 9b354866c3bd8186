"""The live cluster the end-to-end tests drive (test_live_cluster.py, and the scale-out, key
rotation, command security, bad input, Kafka security, dashboard and Jaeger tests that reuse its
pieces): `Live` starts real `gfs serve preemption` and `gfs serve node-agent` processes (fake GPUs)
with groups, inbox and signing secret of their own, publishes quotas and signs as an agent would;
`live_world` sets one up on a scratch schema and cleans up after it; `ack_like_agents` plays the
agents where a test runs none; the waits, probes and the cleanup of the agents' workers go with
it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from live_harness import ServiceProcess, Tap, groups_from_the_end, tap_and_producer
from quota_harness import _migrated

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.envelope import wrap
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.workers import WorkerStarted
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.signing import SignedCommand, SignedMessage, node_key, sign
from gfs.services.preemption.router.routing import ROUTED_TOPICS

TAPPED = (
    "gfs.tasks.submit",
    "gfs.commands.bind",
    "gfs.commands.evict",
    "gfs.commands.evict-ack",
    "gfs.tasks.lifecycle",
    "gfs.commands.worker-ack",
)


def _fake(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "gfs.services.node_agent.fake_task", *args)


def _now() -> datetime:
    return datetime.now(UTC)


async def _until(check: Callable[[], Any], timeout: float = 40.0, what: str = "a condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def _get(port: int, path: str) -> Any:
    try:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}{path}") as response:
            return await response.json()
    except (aiohttp.ClientError, OSError):
        return None


class Live:
    def __init__(self, dsn: str, kafka: str, tmp: Path, tap: Tap, producer: EnvelopeProducer) -> None:
        self.run = uuid.uuid4().hex[:6]
        self.tmp = tmp
        self.tap = tap
        self.producer = producer
        self.secret = "e2e-" + uuid.uuid4().hex
        self.procs: list[ServiceProcess] = []
        self.base = os.environ | {
            "DATABASE_URL": dsn,
            "KAFKA_BOOTSTRAP_SERVERS": kafka,
            "GFS_COMMAND_SECRET": self.secret,
            "PREEMPTION_GROUP": f"e2e-pre-{self.run}",
            "PREEMPTION_ROUTER_GROUP": f"e2e-router-{self.run}",
            "PREEMPTION_INBOX_TOPIC": f"e2e-inbox-{self.run}",
            "PREEMPTION_INBOX_PARTITIONS": "2",
            "PREEMPTION_TICK_S": "0.2",
            "PREEMPTION_GRACE_S": "2",
            "PREEMPTION_ACK_MARGIN_S": "3",
            "PREEMPTION_NODE_TIMEOUT_S": "4",
            "PREEMPTION_STATUS_S": "5",
            "PREEMPTION_SESSION_TIMEOUT_MS": "6000",
            "PYTHONUNBUFFERED": "1",
        }

    def owns(self, payload: Any) -> bool:
        """Whether a tapped message is this run's: every pool and node a whole-cluster test names
        carries `run`; one that names neither (TaskFinished, a dead letter) is kept."""
        named = getattr(payload, "pool", None) or getattr(payload, "gpu_model", None)
        named = named if isinstance(named, str) else getattr(payload, "node", None)
        return not isinstance(named, str) or self.run in named.lower()

    def signed(self, message: SignedCommand) -> SignedCommand:
        """An agent's message signed with its node's key, as the agent signs it."""
        return sign(message, key=node_key(self.secret.encode(), message.node))

    async def report(self, topic_name: str, message: SignedMessage) -> None:
        """An agent's message, signed with its node's key, published as the agent does."""
        await self.producer.send(topic_name, wrap(self.signed(message), producer="e2e"))

    def preemption(self, name: str, port: int, pools: list[str], **env: str) -> ServiceProcess:
        extra = {
            "PREEMPTION_API_PORT": str(port),
            "PREEMPTION_INSTANCE": name,
            "PREEMPTION_POOLS": ",".join(pools),
        }
        proc = ServiceProcess(
            ["serve", "preemption"], self.base | extra | env, self.tmp / f"{name}.log"
        ).start()
        self.procs.append(proc)
        return proc

    def agent(self, node: str, pool: str, gpus: int = 2, **env: str) -> ServiceProcess:
        """`gfs serve node-agent` for `node` of `pool` (fake GPUs); `env` added to the base one."""
        args = [
            "serve",
            "node-agent",
            "--node",
            node,
            "--gpu-model",
            pool,
            "--gpus",
            str(gpus),
            "--fake-gpus",
            "--telemetry-s",
            "0.5",
            "--state-dir",
            str(self.tmp / node),
        ]
        proc = ServiceProcess(args, self.base | env, self.tmp / f"agent-{node}.log").start()
        self.procs.append(proc)
        return proc

    async def quota(self, pool: str, gpus: float, capacity: int) -> None:
        q = SpotQuota(
            pool=pool,
            quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=gpus) for h in (1, 2, 4)),
            eta=1.0,
            capacity_gpus=capacity,
            valid_from=_now(),
            valid_until=_now() + timedelta(hours=1),
            forecast_version="e2e:1",
        )
        await self.producer.send("gfs.quotas", wrap(q, producer="e2e"))

    def worker_log(self, node: str, task: str) -> str:
        return "".join(p.read_text(errors="replace") for p in (self.tmp / node).rglob(f"{task}.*.log"))

    def logs(self) -> str:
        return "\n".join(f"--- {p.log.name}\n{p.tail(25)}" for p in self.procs)

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.stop()

    def kill_workers(self, nodes: str) -> None:
        """The workers started on the nodes named `nodes`* (as the tap saw them), killed: agents
        leave their workers running when they stop (a restarted agent re-adopts them); the test's
        own must not outlive it."""
        for started in self.tap.payloads(WorkerStarted, lambda w: w.node.startswith(nodes)):
            _kill_fake_task(started.pid)


@contextlib.asynccontextmanager
async def live_world(
    database_url: str,
    kafka: str,
    schema: str,
    tmp: Path,
    client_id: str,
    tapped: Sequence[str] = TAPPED,
    make: Callable[[str, str, Path, Tap, EnvelopeProducer], Live] = Live,
    nodes: str = "e2e",
) -> AsyncIterator[Live]:
    """A `Live` (`make` builds it) on a migrated scratch schema, its tap on `tapped` started first;
    after the test, its processes stopped and the workers of its nodes (named `nodes`-<run>-*)
    killed."""
    dsn = await _migrated(database_url, schema)
    async with tap_and_producer(kafka, tapped, client_id) as (tap, producer):
        world = make(dsn, kafka, tmp, tap, producer)
        tap.keep = world.owns  # the tests beside it use the same task ids ("A", "H1")
        # Its router's new group reads only what the test publishes from now on (live_harness.py).
        groups_from_the_end(kafka, {world.base["PREEMPTION_ROUTER_GROUP"]: ROUTED_TOPICS})
        try:
            yield world
        finally:
            world.stop_all()
            world.kill_workers(f"{nodes}-{world.run}")


async def ack_like_agents(
    tap: Tap, ours: Callable[[Any], bool], report: Callable[[str, Any], Awaitable[None]], pid: int
) -> None:
    """The test in the agents' seat, until cancelled: a WorkerStarted (`pid`) for every worker of
    every bind, and an EvictAck (CHECKPOINTED) for every eviction, of the commands `ours` picks,
    each published once through `report` (which signs it as the node's agent would)."""
    done: set[Any] = set()
    while True:
        for payload in tap.payloads((BindCommand, EvictCommand), ours):
            if payload.command_id in done:
                continue
            done.add(payload.command_id)
            if isinstance(payload, BindCommand):
                for p in payload.placements:
                    ack: Any = WorkerStarted(command_id=payload.command_id, node=payload.node,
                                             task_id=payload.task_id, worker_index=p.worker_index,
                                             pid=pid, started_at=_now())  # fmt: skip
                    await report("gfs.commands.worker-ack", ack)
            else:
                ack = EvictAck(command_id=payload.command_id, node=payload.node, task_ids=payload.task_ids,
                               outcome=EvictOutcome.CHECKPOINTED, acked_at=_now())  # fmt: skip
                await report("gfs.commands.evict-ack", ack)
        await asyncio.sleep(0.05)


def _pools_ready(port: int, want: dict[str, int]) -> Callable[[], Any]:
    async def check() -> bool:
        body = await _get(port, "/pools")
        if not body:
            return False
        pools = body["pools"]
        return all(
            p in pools and pools[p]["nodes"] == n and pools[p]["quota_version"] for p, n in want.items()
        )

    return check


def _kill_fake_task(pid: int) -> None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            if b"fake_task" not in cmdline.read():
                return  # the pid was reused by something else
        os.killpg(pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


async def _pool_has(port: int, pool: str, check: Callable[[dict[str, Any]], bool]) -> bool:
    body = await _get(port, "/pools")
    return bool(body) and pool in body["pools"] and check(body["pools"][pool])


async def _owned(port: int) -> set[str]:
    body = await _get(port, "/pools")
    return set(body["pools"]) if body else set()

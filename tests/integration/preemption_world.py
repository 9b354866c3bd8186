"""The preemption service in-process on the real broker and Postgres, with the test in the node
agents' seat (test_preemption_service.py and the tests beside it: attempts, reconciliation, stalls,
safety controls, hostile input, the one decode, the wake, deployments, reclaim warnings, route
expiry, dead-letter replay, the OpenAPI contract): `Cluster` is the test's side (a unique pool, its
nodes' signed telemetry and acks, submissions, the tap of what the service published), `world` and
`cluster_world` set it up on a migrated scratch schema, `service` runs the service for a block, and
`Heartbeats` keeps nodes reporting while a scenario runs."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest_asyncio
from live_harness import Tap, groups_from_the_end, in_background, tap_and_producer
from quota_harness import _free_port, _migrated

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.envelope import wrap
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import TaskClass, TaskStarted, TaskSubmitted
from gfs.schemas.telemetry import GpuSample, NodeTelemetry, RunningWorker
from gfs.schemas.topics import CLOCK_TOPIC
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.signing import SignedMessage, node_key, sign
from gfs.services.preemption.decider import Decider
from gfs.services.preemption.router.routing import ROUTED_TOPICS
from gfs.services.preemption.service import PreemptionSettings, run_preemption_service

SECRET = "it-preemption-master-secret-0123456789"
TAPPED = ("gfs.commands.bind", "gfs.commands.evict", "gfs.tasks.lifecycle", "gfs.pools.status")
Running = dict[str, set[tuple[str, int, int]]]  # node -> (task, attempt, worker) its reports list


def _now() -> datetime:
    return datetime.now(UTC)


class Cluster:
    """The test's side: a unique pool, its nodes' telemetry and acks, submissions."""

    def __init__(self, producer: EnvelopeProducer, tap: Tap) -> None:
        self.pool = f"IT-{uuid.uuid4().hex[:8]}"
        self.producer = producer
        self.tap = tap
        self.secret = SECRET  # the service's GFS_COMMAND_SECRET: the "agents" sign with its node keys

    def node(self, i: int) -> str:
        return f"{self.pool.lower()}-n{i}"

    def owns(self, payload: Any) -> bool:
        """Whether a tapped message is about this pool (its pool, or one of its nodes); one that
        names neither (TaskFinished, TaskRejected, a dead letter) is kept, the test filters it."""
        pool = getattr(payload, "pool", None) or getattr(payload, "gpu_model", None)
        if isinstance(pool, str):
            return pool == self.pool
        node = getattr(payload, "node", None)
        return not isinstance(node, str) or node.startswith(f"{self.pool.lower()}-")

    def node_telemetry(
        self,
        node: str,
        gpus: int,
        *,
        running: tuple[RunningWorker, ...] | None = None,
        sampled_at: datetime | None = None,
    ) -> NodeTelemetry:
        """A report of `gpus` idle GPUs (`running`: what the node says runs there; None says
        nothing of it, as an agent that does not report it)."""
        samples = tuple(
            GpuSample(index=i, utilisation_pct=0, memory_used_mib=0, memory_total_mib=80_000)
            for i in range(gpus)
        )
        return NodeTelemetry(node=node, gpu_model=self.pool, sampled_at=sampled_at or _now(), gpus=samples,
                             running=running)  # fmt: skip

    async def telemetry(
        self, node: str, gpus: int, *, running: tuple[RunningWorker, ...] | None = None
    ) -> None:
        await self.report("gfs.nodes.telemetry", self.node_telemetry(node, gpus, running=running))

    async def report(self, topic_name: str, message: SignedMessage, *, signer: str | None = None) -> None:
        """Publish an agent's message as its agent does: signed with the key of the node it names
        (`signer`: another node's key, as a forger holding only that key would)."""
        key = node_key(self.secret.encode(), signer or message.node)
        await self.producer.send(topic_name, wrap(sign(message, key=key), producer="it"))

    async def quota(self, gpus: float) -> None:
        quotas = tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=gpus) for h in (1, 2, 4))
        q = SpotQuota(pool=self.pool, quotas=quotas, eta=1.0, capacity_gpus=4, valid_from=_now(),
                      valid_until=_now() + timedelta(hours=1), forecast_version="it:1")  # fmt: skip
        await self.producer.send("gfs.quotas", wrap(q, producer="it"))

    async def submit(self, tid: str, cls: TaskClass, gpus: float = 2, workers: int = 1) -> None:
        task = TaskSubmitted(task_id=tid, tenant="org-it", gpu_model=self.pool, gpus_per_worker=gpus,
                             workers=workers, task_class=cls, command=("gfs", "fake-task"))  # fmt: skip
        await self.producer.send("gfs.tasks.submit", wrap(task, producer="it"))

    async def bind_of(self, tid: str, count: int = 1) -> list[BindCommand]:
        return await self.tap.wait(BindCommand, lambda b: b.task_id == tid, count=count)

    async def started(self, bind: BindCommand, *, attempt: int | None = None, pid: int = 4000) -> None:
        """Each worker of `bind` started (`pid` the first one's; `attempt` echoed when given)."""
        for p in bind.placements:
            ack = WorkerStarted(command_id=bind.command_id, node=bind.node, task_id=bind.task_id,
                                worker_index=p.worker_index, pid=pid + p.worker_index,
                                started_at=_now(), attempt=attempt)  # fmt: skip
            await self.report("gfs.commands.worker-ack", ack)

    async def exited(self, bind: BindCommand, exit_code: int = 0) -> None:
        """The first worker of `bind` ended on its own with `exit_code`."""
        done = WorkerExited(command_id=bind.command_id, node=bind.node, task_id=bind.task_id,
                            worker_index=0, exit_code=exit_code, exited_at=_now())  # fmt: skip
        await self.report("gfs.commands.worker-ack", done)

    def ack_of(self, evict: EvictCommand, outcome: EvictOutcome, **changes: Any) -> EvictAck:
        """The EvictAck answering `evict` (`changes`: what an agent, or a forger, puts otherwise)."""
        fields: dict[str, Any] = {
            "command_id": evict.command_id,
            "node": evict.node,
            "task_ids": evict.task_ids,
            "outcome": outcome,
            "acked_at": _now(),
        }
        return EvictAck(**(fields | changes))

    async def up(self, decider: Decider, nodes: int, gpus: int = 2, quota: float = 4.0) -> None:
        """`nodes` nodes of `gpus` GPUs and a quota of `quota` GPUs, registered by the service.
        Inputs on different topics are not ordered: the nodes and the quota land first."""
        for i in range(nodes):
            await self.telemetry(self.node(i), gpus)
        await self.quota(quota)
        await _until(_registered(decider, self.pool, nodes))

    async def spot_running(self, tid: str, gpus: float = 2) -> BindCommand:
        """Spot task `tid` submitted, bound, its workers started and the service saying so."""
        await self.submit(tid, TaskClass.SPOT, gpus=gpus)
        (bind,) = await self.bind_of(tid)
        await self.started(bind)
        await self.tap.wait(TaskStarted, lambda e: e.task_id == tid)
        return bind

    async def hp_evicts_the_younger(
        self, a: str, b: str, h: str
    ) -> tuple[BindCommand, BindCommand, EvictCommand]:
        """Spot `a` runs, then spot `b` (younger, so the cheaper victim); HP `h` then needs `b`'s
        GPUs. Returns the two binds and the eviction for `h`."""
        bind_a = await self.spot_running(a)
        await asyncio.sleep(1.0)  # b runs for less time than a: b is the cheaper victim
        bind_b = await self.spot_running(b)
        await self.submit(h, TaskClass.HP)
        (evict,) = await self.tap.wait(EvictCommand, lambda e: e.preemptor_task_id == h)
        return bind_a, bind_b, evict


class Heartbeats:
    """The test's node agents' heartbeats: telemetry every `every` s from each node of `nodes`
    (name -> GPUs), each listing what `running[node]` holds then (without `running`, reports that
    say nothing of what runs); a node taken out of `nodes` goes silent, one put back reports again."""

    def __init__(self, cluster: Cluster, nodes: dict[str, int], running: Running | None = None,
                 every: float = 0.5) -> None:  # fmt: skip
        self.cluster = cluster
        self.nodes = nodes
        self.running = running
        self.every = every
        self._beating = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Heartbeats:
        await self._beating.enter_async_context(in_background(self._run()))
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._beating.aclose()

    async def _run(self) -> None:
        while True:
            for node, gpus in list(self.nodes.items()):
                report = None
                if self.running is not None:
                    listed = sorted(self.running.get(node, ()))
                    report = tuple(RunningWorker(task_id=t, attempt=a, worker_index=w) for t, a, w in listed)
                await self.cluster.telemetry(node, gpus, running=report)
            await asyncio.sleep(self.every)


def _settings(dsn: str, kafka: str, pool: str, **kw: Any) -> PreemptionSettings:
    values: dict[str, Any] = {
        "database_url": dsn,
        "kafka_bootstrap_servers": kafka,
        "preemption_group": f"it-pre-{uuid.uuid4().hex[:8]}",
        "preemption_router_group": f"it-router-{uuid.uuid4().hex[:8]}",
        "preemption_inbox_topic": f"it-inbox-{uuid.uuid4().hex[:8]}",
        "preemption_pools": pool,
        "preemption_inbox_partitions": 2,
        "preemption_tick_s": 0.2,
        "preemption_status_s": 1.0,
        "preemption_grace_s": 2.0,
        "preemption_ack_margin_s": 1.0,
        "preemption_node_timeout_s": 600.0,
        "preemption_api_port": 0,
        "gfs_command_secret": SECRET,
    }
    settings = PreemptionSettings(**(values | kw))
    if kafka:  # the router's new group reads only what is published from now on (live_harness.py)
        topics = (*ROUTED_TOPICS, CLOCK_TOPIC) if settings.topic_clock else ROUTED_TOPICS
        groups_from_the_end(kafka, {settings.preemption_router_group: topics})
    return settings


def _api_settings(dsn: str, kafka: str, pool: str, **kw: Any) -> tuple[int, PreemptionSettings]:
    """`_settings` with the SRE API on a free port of its own, and that port."""
    port = _free_port()
    return port, _settings(dsn, kafka, pool, preemption_api_port=port, **kw)


@contextlib.asynccontextmanager
async def _service(settings: PreemptionSettings) -> AsyncIterator[tuple[Decider, asyncio.Task[Any]]]:
    stop, ready = asyncio.Event(), asyncio.Event()
    holder: list[Decider] = []
    task = asyncio.create_task(run_preemption_service(settings, stop, ready=ready, started=holder.append))
    try:
        await asyncio.wait_for(ready.wait(), timeout=40)
        yield holder[0], task
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, timeout=20)


@contextlib.asynccontextmanager
async def cluster_world(
    database_url: str,
    kafka_bootstrap: str,
    schema: str,
    tapped: tuple[str, ...] = TAPPED,
    client_id: str = "it-preemption",
) -> AsyncIterator[tuple[Cluster, str]]:
    """A migrated scratch schema, a tap on `tapped` and a producer: the test in the agents' seat."""
    dsn = await _migrated(database_url, schema)
    async with tap_and_producer(kafka_bootstrap, tapped, client_id) as (tap, producer):
        cluster = Cluster(producer, tap)
        tap.keep = cluster.owns  # only this pool's messages: other tests use the same task ids
        yield cluster, dsn


@pytest_asyncio.fixture(loop_scope="session")
async def world(
    database_url: str, kafka_bootstrap: str, registry_topics: TopicsReport, scratch_schema: str
) -> AsyncIterator[tuple[Cluster, str]]:
    async with cluster_world(database_url, kafka_bootstrap, scratch_schema) as found:
        yield found


async def _until(check: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out waiting for the service's state")
        await asyncio.sleep(0.05)


def _registered(decider: Decider, pool: str, nodes: int) -> Any:
    def check() -> bool:
        ctl = decider.owned_pools().get(pool)
        return ctl is not None and len(ctl.nodes) == nodes and bool(ctl.quota_version)

    return check


def _sample(text: str, name: str, labels: dict[str, str]) -> float | None:
    """The value of the Prometheus sample `name` whose labels include `labels`."""
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and labels.items() <= dict(re.findall(r'(\w+)="([^"]*)"', match.group(1))).items():
            return float(match.group(2))
    return None


async def _metrics(port: int) -> str:
    """The service's /metrics page (Prometheus text)."""
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
        return await response.text()


def _key(node: str) -> bytes:
    return node_key(SECRET.encode(), node)

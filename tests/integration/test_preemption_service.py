"""The preemption service on the real broker and Postgres, with the test in the node agents' seat:
telemetry registers two nodes, a quota admits spot tasks, an HP task evicts the cheaper one; the
HP task's bind waits for the EvictAck; every command is signed with its node's key; decisions and
their explanations are in Postgres; a restart rebuilds the same state from the journal."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import asyncpg
import pytest
import pytest_asyncio
from live_harness import Tap
from quota_harness import _free_port, _migrated

from schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from schemas.envelope import wrap
from schemas.pool_status import PoolStatus
from schemas.quota import GuaranteeQuota, SpotQuota
from schemas.tasks import (
    EvictionReason,
    RejectionReason,
    TaskAccepted,
    TaskCancelled,
    TaskClass,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
    TaskStarted,
    TaskSubmitted,
)
from schemas.telemetry import GpuSample, NodeTelemetry
from schemas.workers import WorkerExited, WorkerStarted
from services.platform.kafka.producer import EnvelopeProducer
from services.platform.kafka.topic_admin import TopicsReport
from services.platform.signing import SignatureCheck, SignedMessage, check_signature, node_key, sign
from services.preemption.decider import Decider
from services.preemption.service import PreemptionSettings, run_preemption_service

pytestmark = pytest.mark.integration

SECRET = "it-preemption-master-secret-0123456789"
TAPPED = ("gfs.commands.bind", "gfs.commands.evict", "gfs.tasks.lifecycle", "gfs.pools.status")


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

    async def telemetry(self, node: str, gpus: int) -> None:
        samples = tuple(
            GpuSample(index=i, utilisation_pct=0, memory_used_mib=0, memory_total_mib=80_000)
            for i in range(gpus)
        )
        await self.report(
            "gfs.nodes.telemetry",
            NodeTelemetry(node=node, gpu_model=self.pool, sampled_at=_now(), gpus=samples),
        )

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

    async def started(self, bind: BindCommand) -> None:
        for p in bind.placements:
            ack = WorkerStarted(command_id=bind.command_id, node=bind.node, task_id=bind.task_id,
                                worker_index=p.worker_index, pid=4000 + p.worker_index,
                                started_at=_now())  # fmt: skip
            await self.report("gfs.commands.worker-ack", ack)


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
    return PreemptionSettings(**(values | kw))


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
    database_url: str, kafka_bootstrap: str, schema: str, tapped: tuple[str, ...] = TAPPED
) -> AsyncIterator[tuple[Cluster, str]]:
    """A migrated scratch schema, a tap on `tapped` and a producer: the test in the agents' seat."""
    dsn = await _migrated(database_url, schema)
    tap = await Tap(kafka_bootstrap, tapped).start()
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap, client_id="it-preemption") as producer:
        try:
            yield Cluster(producer, tap), dsn
        finally:
            await tap.stop()


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


def _key(node: str) -> bytes:
    return node_key(SECRET.encode(), node)


@pytest.mark.asyncio(loop_scope="session")
async def test_hp_evicts_then_binds_after_the_ack_signed_and_explained(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    port = _free_port()
    settings = _settings(dsn, kafka_bootstrap, c.pool, preemption_api_port=port)
    async with _service(settings) as (decider, _):
        await c.telemetry(c.node(0), 2)
        await c.telemetry(c.node(1), 2)
        await c.quota(4.0)
        # Inputs on different topics are not ordered: let the nodes and the quota land first.
        await _until(_registered(decider, c.pool, 2))
        await c.submit("A", TaskClass.SPOT)
        (bind_a,) = await c.bind_of("A")
        await c.started(bind_a)
        await c.tap.wait(TaskStarted, lambda e: e.task_id == "A")
        await asyncio.sleep(1.0)  # B runs for less time than A: B is the cheaper victim
        await c.submit("B", TaskClass.SPOT)
        (bind_b,) = await c.bind_of("B")
        assert {bind_a.node, bind_b.node} == {c.node(0), c.node(1)}
        await c.started(bind_b)
        await c.submit("H", TaskClass.HP)
        (evict,) = await c.tap.wait(EvictCommand, lambda e: e.preemptor_task_id == "H")
        assert (
            evict.task_ids == ("B",)
            and evict.node == bind_b.node
            and evict.reason is EvictionReason.PREEMPTED_BY_HP
        )
        assert check_signature(evict, key=_key(evict.node)) is SignatureCheck.VALID
        assert check_signature(evict, key=_key(bind_a.node)) is SignatureCheck.MISMATCH  # another node's key
        await asyncio.sleep(0.5)
        assert not c.tap.payloads(BindCommand, lambda b: b.task_id == "H")  # held until the ack
        ack = EvictAck(
            command_id=evict.command_id,
            node=evict.node,
            task_ids=("B",),
            outcome=EvictOutcome.CHECKPOINTED,
            acked_at=_now(),
        )
        await c.report("gfs.commands.evict-ack", ack)
        (bind_h,) = await c.bind_of("H")
        assert bind_h.node == bind_b.node and bind_h.placements[0].gpu_indices == (0, 1)
        assert check_signature(bind_h, key=_key(bind_h.node)) is SignatureCheck.VALID
        (evicted,) = await c.tap.wait(TaskEvicted, lambda e: e.task_id == "B")
        assert evicted.requeued and evicted.command_id == evict.command_id

        # Rejections with a reason; a duplicate id.
        await c.submit("too-big", TaskClass.HP, gpus=4)
        await c.submit("A", TaskClass.HP, gpus=1)
        rejected = {
            r.task_id: r.reason
            for r in await c.tap.wait(TaskRejected, lambda r: r.task_id in ("too-big", "A"), count=2)
        }
        assert rejected == {
            "too-big": RejectionReason.REQUEST_LARGER_THAN_ANY_NODE,
            "A": RejectionReason.DUPLICATE_TASK_ID,
        }

        # A finishes on its own: its GPUs go to B, which was requeued.
        done = WorkerExited(
            command_id=bind_a.command_id,
            node=bind_a.node,
            task_id="A",
            worker_index=0,
            exit_code=0,
            exited_at=_now(),
        )
        await c.report("gfs.commands.worker-ack", done)
        await c.tap.wait(TaskFinished, lambda e: e.task_id == "A")
        (_, rebind_b) = await c.bind_of("B", count=2)
        assert rebind_b.node == bind_a.node

        # Cancel the running B: an EvictCommand with reason CANCELLED.
        await c.producer.send(
            "gfs.tasks.submit", wrap(TaskCancelled(task_id="B", tenant="org-it"), producer="it")
        )
        (cancel,) = await c.tap.wait(
            EvictCommand, lambda e: e.task_ids == ("B",) and e.reason is EvictionReason.CANCELLED
        )
        assert cancel.node == bind_a.node

        # Pool status for the quota service.
        status = await c.tap.wait(PoolStatus, lambda s: s.pool == c.pool)
        assert status[-1].capacity_gpus == 4

        # The SRE API explains B's eviction: victims, the alternative and the costs.
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/explain/B") as response,
        ):
            body = await response.json()
        evictions = [
            d for d in body["decisions"] if d["kind"] == "evicted" and d["detail"].get("preemptor") == "H"
        ]
        assert evictions, body
        plan = evictions[0]["detail"]["explanation"]["last_eviction"]["plan"]
        assert plan["winner"]["victims"] == ["B"] and plan["alternatives"][0]["victims"] == ["A"]
        assert plan["winner"]["cost"] < plan["alternatives"][0]["cost"]
        # Metrics SREs scrape: decision latency, decisions by kind, tasks per class/state/pool,
        # evictions by reason.
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
            metrics = await response.text()
        assert "gfs_preemption_decision_latency_seconds_bucket" in metrics
        assert 'gfs_preemption_decisions_total{kind="evicted"' in metrics
        assert (
            _sample(metrics, "gfs_preemption_tasks", {"class": "hp", "pool": c.pool, "state": "running"})
            == 1.0
        )
        assert (
            _sample(metrics, "gfs_preemption_evictions_total", {"pool": c.pool, "reason": "PREEMPTED_BY_HP"})
            == 1.0
        )
        before = {name: sorted(ctl.runtime.state.running) for name, ctl in decider.owned_pools().items()}
        queued = {name: ctl.runtime.queued_ids() for name, ctl in decider.owned_pools().items()}
        counter = {name: ctl.counter for name, ctl in decider.owned_pools().items()}

    # A restart (a new process would do the same) rebuilds the same state from the journal and
    # emits nothing again.
    c.tap.items.clear()
    async with _service(settings) as (again, _):
        await asyncio.sleep(1.5)
        assert {
            name: sorted(ctl.runtime.state.running) for name, ctl in again.owned_pools().items()
        } == before
        assert {name: ctl.runtime.queued_ids() for name, ctl in again.owned_pools().items()} == queued
        assert {name: ctl.counter for name, ctl in again.owned_pools().items()} == counter
        assert not c.tap.payloads((BindCommand, EvictCommand))
    connection = await asyncpg.connect(dsn)
    try:
        kinds = [
            r["kind"]
            for r in await connection.fetch(
                "SELECT kind FROM preemption_decision WHERE task_id = 'H' ORDER BY id"
            )
        ]
    finally:
        await connection.close()
    assert kinds[:3] == ["accepted", "started", "bind_held"] and "bound" in kinds


@pytest.mark.asyncio(loop_scope="session")
async def test_dry_run_decides_and_records_but_publishes_nothing(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    settings = _settings(dsn, kafka_bootstrap, c.pool, preemption_dry_run=True)
    async with _service(settings) as (decider, _):
        await c.telemetry(c.node(0), 2)
        await c.quota(2.0)
        await _until(_registered(decider, c.pool, 1))
        await c.submit("D", TaskClass.SPOT)
        await _until(lambda: decider.stats.decisions >= 3)
        await asyncio.sleep(1.0)
    assert not c.tap.payloads((BindCommand, TaskAccepted), lambda p: p.task_id == "D")
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT kind, dry_run FROM preemption_decision WHERE task_id = 'D' ORDER BY id"
        )
    finally:
        await connection.close()
    assert [(r["kind"], r["dry_run"]) for r in rows] == [("accepted", True), ("started", True)]

"""Scale-out on Kafka (issue 23, item 5): two `gfs serve preemption` instances in one consumer group
share the pools on a 3-broker KRaft cluster (replication factor 3, min.insync.replicas 2) started by
the stack scripts (`infra/kafka/cluster.sh`) for this test only, beside the shared broker. Real
processes throughout: the instances, one `gfs serve node-agent` with fake GPUs per pool running
`fake_task` workers, tasks submitted through `GfsClient`.

1. Both instances up: every pool is owned by exactly one of them (their /pools are disjoint and
   cover the pools), and Postgres's fence rows name the same owner for each inbox partition.
2. One instance is killed with -9 right after a round of submissions: the survivor takes its pools
   over (its fence epoch) and places that round.
3. One broker is killed with -9 (then started again): a round submitted while it is down is placed.

Then no decision is lost or doubled: every task is accepted once (one event id, however often the
outbox relay published it) and bound once (one command id), every task started; no GPU of a node is
bound to two tasks (none of them ends, so every bind still holds its GPUs); every agent started each
command's worker once (its journal); no inbox event was journaled twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
from live_cluster import TAPPED, Live, _fake, _get, _kill_fake_task, _owned, _until
from live_harness import REPO, Tap
from quota_harness import _free_port, _migrated

from gfs.schemas.commands import BindCommand
from gfs.schemas.tasks import TaskAccepted, TaskClass, TaskStarted
from gfs.schemas.topics import TOPICS
from gfs.schemas.workers import WorkerStarted
from gfs.services.faults.harness import agent_fence
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import ensure_topics
from gfs.services.preemption.router.routing import inbox_spec
from gfs.services.producers.client import GfsClient
from gfs.services.producers.partitioning import partition_for_key

pytestmark = pytest.mark.integration

CLUSTER_SH = REPO / "infra" / "kafka" / "cluster.sh"
POOLS = 4  # one per inbox partition, so both instances own some
INBOX_PARTITIONS = 4
GPUS = 4  # per pool (one agent each); three rounds of one 1-GPU task per pool fit without preemption


@dataclass(frozen=True, slots=True)
class KafkaCluster:
    """The 3-broker cluster of `infra/kafka/cluster.sh`, in a folder and on ports of its own."""

    folder: Path
    base_port: int

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base_port + i}" for i in range(3))

    def script(self, *args: str, timeout: float = 240.0) -> None:
        env = os.environ | {"KAFKA_CLUSTER_DIR": str(self.folder), "KAFKA_CLUSTER_PORT": str(self.base_port)}
        done = subprocess.run(
            ["bash", str(CLUSTER_SH), *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"cluster.sh {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


def _free_base_port() -> int:
    """A base port whose three client and three controller ports (base+i, base+100+i) are free."""
    # Below the kernel's ephemeral range (outgoing connections, the brokers' own among them, take
    # ports from it and could grab one between this probe and the broker's bind).
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(50):
        base = rng.randrange(20_000, min(low, 32_768) - 200)
        ports = [base + i for i in range(3)] + [base + 100 + i for i in range(3)]
        try:
            for port in ports:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free block of ports for the 3-broker cluster")


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Starts the 3-broker cluster for this module and stops and wipes it after (the shared
    broker on 9092 is never touched)."""
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), _free_base_port())
    try:
        cluster.script("up")
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.script("reset")


@pytest_asyncio.fixture(loop_scope="session")
async def world(
    kafka_cluster: KafkaCluster, database_url: str, scratch_schema: str, tmp_path: Path
) -> AsyncIterator[Live]:
    bootstrap = kafka_cluster.bootstrap
    # Every topic with three replicas, the inbox too (created here, so the service finds it
    # and never creates it with the default single replica).
    await ensure_topics(bootstrap, TOPICS, replication_factor=3, timeout_ms=60_000)
    dsn = await _migrated(database_url, scratch_schema)
    tap = await Tap(bootstrap, TAPPED).start()
    async with EnvelopeProducer(bootstrap_servers=bootstrap, client_id="scale-out") as producer:
        world = Live(dsn, bootstrap, tmp_path, tap, producer)
        world.base |= {
            "PREEMPTION_INBOX_PARTITIONS": str(INBOX_PARTITIONS),
            "PREEMPTION_NODE_TIMEOUT_S": "600",  # a broker outage must not be taken for dead nodes
        }
        inbox = replace(inbox_spec(INBOX_PARTITIONS), name=world.base["PREEMPTION_INBOX_TOPIC"])
        await ensure_topics(bootstrap, [inbox], replication_factor=3, timeout_ms=60_000)
        try:
            yield world
        finally:
            world.stop_all()
            for started in tap.payloads(WorkerStarted, lambda w: w.node.startswith(f"sx-{world.run}")):
                _kill_fake_task(started.pid)
            await tap.stop()


def _pools_on_distinct_partitions(run: str) -> list[str]:
    by_partition: dict[int, str] = {}
    i = 0
    while len(by_partition) < POOLS:
        name = f"SX{i}-{run}"
        by_partition.setdefault(partition_for_key(name.encode(), INBOX_PARTITIONS), name)
        i += 1
    return [by_partition[p] for p in sorted(by_partition)]


async def _fence_owners(dsn: str, inbox: str) -> dict[int, str]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT partition, owner FROM preemption_partition WHERE inbox_topic = $1", inbox
        )
    finally:
        await connection.close()
    return {int(r["partition"]): str(r["owner"]) for r in rows}


async def _registered(port: int, pools: set[str]) -> set[str]:
    body = await _get(port, "/pools")
    if not body:
        return set()
    return {p for p, v in body["pools"].items() if p in pools and v["nodes"] == 1 and v["quota_version"]}


@pytest.mark.asyncio(loop_scope="session")
async def test_two_instances_share_the_pools_through_an_instance_kill_and_a_broker_kill(
    world: Live, kafka_cluster: KafkaCluster
) -> None:
    live = world
    pools = _pools_on_distinct_partitions(live.run)
    partition_of = {p: partition_for_key(p.encode(), INBOX_PARTITIONS) for p in pools}
    nodes = {p: f"sx-{live.run}-{i}" for i, p in enumerate(pools)}
    inbox = live.base["PREEMPTION_INBOX_TOPIC"]
    port1, port2 = _free_port(), _free_port()
    first = live.preemption("pre-1", port1, pools)
    live.preemption("pre-2", port2, pools)
    # Both in the group before any input flows (a router whose group rebalances with records in
    # flight can die on its offset commit: docs/operations.md, "Scaling out on Kafka").
    await _until(
        lambda: _partitions_split(port1, port2), 120, "the inbox partitions split over both instances"
    )
    for p in pools:
        # The agents' self-fence as the 600-s node timeout allows (a broker kill is no cut).
        live.agent(nodes[p], p, gpus=GPUS, **agent_fence(600.0))
        await live.quota(p, float(GPUS), GPUS)
    submitted: list[str] = []
    try:
        # 1. Both instances own pools, each pool exactly one of them, as the fence rows say.
        async def split_and_registered() -> bool:
            a, b = await _registered(port1, set(pools)), await _registered(port2, set(pools))
            return bool(a) and bool(b) and not (a & b) and a | b == set(pools)

        await _until(split_and_registered, 120, "the pools split over both instances, every node registered")
        owned = {"pre-1": await _owned(port1), "pre-2": await _owned(port2)}
        assert not (owned["pre-1"] & owned["pre-2"]) and owned["pre-1"] | owned["pre-2"] == set(pools)
        fence = await _fence_owners(live.base["DATABASE_URL"], inbox)
        assert {p: fence[partition_of[p]] for p in pools} == {
            p: name for name, mine in owned.items() for p in mine
        }

        async with GfsClient(bootstrap_servers=kafka_cluster.bootstrap, producer_name="scale-out") as client:

            async def submit_round(k: int) -> list[str]:
                ids = [f"{p}-t{k}" for p in pools]
                for p, tid in zip(pools, ids, strict=True):
                    await client.submit_new(
                        task_id=tid, tenant="org-sx", gpu_model=p, gpus_per_worker=1, workers=1,
                        task_class=TaskClass.SPOT, command=_fake("--duration", "900"),
                    )  # fmt: skip
                submitted.extend(ids)
                return ids

            async def all_started(ids: list[str], timeout: float) -> None:
                await live.tap.wait(TaskStarted, lambda e: e.task_id in ids, count=len(ids), timeout=timeout)

            await all_started(await submit_round(0), 60)

            # 2. kill -9 one instance right after a round is sent: its decisions for that round
            # may be anywhere between the inbox and the outbox; the survivor takes over.
            round1 = await submit_round(1)
            killed_at = time.monotonic()
            first.kill9()
            await _until(lambda: _owns_all(port2, pools), 60, "the survivor to own every pool")
            takeover_s = time.monotonic() - killed_at
            await all_started(round1, 90)
            print(f"instance kill -9: survivor owned every pool after {takeover_s:.1f} s, "
                  f"placed the round after {time.monotonic() - killed_at:.1f} s")  # fmt: skip
            assert set((await _fence_owners(live.base["DATABASE_URL"], inbox)).values()) == {"pre-2"}

            # 3. kill -9 one broker (the first of the bootstrap list); a round sent while it is down
            # is placed (two replicas in sync still take acks=all writes), then it comes back.
            kafka_cluster.script("stop-broker", "1", "--kill")
            broker_down_at = time.monotonic()
            try:
                await all_started(await submit_round(2), 120)
                print(f"broker kill -9: the round was placed {time.monotonic() - broker_down_at:.1f} s after")
            finally:
                kafka_cluster.script("start-broker", "1")

        # No lost and no doubled decision.
        accepted = Counter(
            e.payload.task_id
            for e in {
                env.event_id: env for _, env, _ in live.tap.items if isinstance(env.payload, TaskAccepted)
            }.values()
        )
        assert {t: accepted[t] for t in submitted} == dict.fromkeys(submitted, 1)
        binds = {b.command_id: b for b in live.tap.payloads(BindCommand, lambda b: b.task_id in submitted)}
        assert Counter(b.task_id for b in binds.values()) == Counter(dict.fromkeys(submitted, 1))
        started = {e.task_id for e in live.tap.payloads(TaskStarted, lambda e: e.task_id in submitted)}
        assert started == set(submitted)
        gpus = Counter((pl.node, g) for b in binds.values() for pl in b.placements for g in pl.gpu_indices)
        assert [k for k, n in gpus.items() if n > 1] == []
        assert len(gpus) == len(submitted)  # 1 GPU each
        # Each agent started each command's worker once (its journal, which outlives restarts).
        workers: Counter[str] = Counter()
        for node in nodes.values():
            journal = json.loads((live.tmp / node / "journal.json").read_text())
            workers.update(str(w["command_id"]) for w in journal.get("workers", {}).values())
        assert workers == Counter({str(c): 1 for c in binds})
        connection = await asyncpg.connect(live.base["DATABASE_URL"])
        try:
            duplicates = await connection.fetchval(
                "SELECT count(*) - count(DISTINCT (inbox_topic, event_id)) FROM preemption_journal "
                "WHERE event_id IS NOT NULL"
            )
        finally:
            await connection.close()
        assert duplicates == 0
    except BaseException:
        print(live.logs())
        raise


async def _partitions_split(port1: int, port2: int) -> bool:
    a, b = await _get(port1, "/readyz"), await _get(port2, "/readyz")
    if not a or not b or not a.get("partitions") or not b.get("partitions"):
        return False
    return sorted(a["partitions"] + b["partitions"]) == list(range(INBOX_PARTITIONS))


async def _owns_all(port: int, pools: list[str]) -> bool:
    return set(pools) <= await _owned(port)

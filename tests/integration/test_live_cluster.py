"""The live pipeline end to end, every part a real process on the real broker and Postgres:
`gfs serve preemption`, `gfs serve node-agent` with fake GPUs running `gfs fake-task` workers.

1. Spot tasks run on the agents; HP submissions evict the cheapest spot task at the right agent
   (one that checkpoints on SIGTERM, one that ignores it and is SIGKILLed after the grace period),
   the acks come back, and only then is the HP task bound, on the freed GPU indices. A task that
   exits by itself frees its GPUs for a queued one. An agent killed with -9 falls silent: its node
   is marked down and its task requeued and restarted elsewhere; the restarted agent re-adopts the
   orphaned worker and stops it as told (NODE_LOST). `gfs explain` names the victims, the
   alternatives and their costs.
2. Two preemption instances split the pools; one killed with -9 hands its pools to the other,
   which goes on deciding; every decision is made once (no lost, no duplicated decision), and a
   restarted instance rebuilds the same state from Postgres.

The cluster itself (`Live`: the processes, quotas, signing) and its waits and probes are
live_cluster.py, shared with the other end-to-end tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from live_cluster import (
    Live,
    _alive,
    _fake,
    _get,
    _now,
    _owned,
    _pool_has,
    _pools_ready,
    _until,
    ack_like_agents,
    live_world,
)
from live_harness import REPO
from quota_harness import _free_port

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import EvictionReason, TaskAccepted, TaskClass, TaskEvicted, TaskFinished, TaskStarted
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.schemas.workers import WorkerStarted
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.producers.client import GfsClient
from gfs.services.producers.partitioning import partition_for_key

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(loop_scope="session")
async def live(
    database_url: str,
    kafka_bootstrap: str,
    registry_topics: TopicsReport,
    scratch_schema: str,
    tmp_path: Path,
) -> AsyncIterator[Live]:
    async with live_world(database_url, kafka_bootstrap, scratch_schema, tmp_path, "e2e") as world:
        yield world


def _of_pool(payload: Any, pool: str) -> bool:
    """Whether a tapped message is this run's (its pool, or a node of it): the topics are shared
    with the tests that run beside this one, and task ids like "A" are not unique."""
    node = str(getattr(payload, "node", "") or "")
    return pool in (getattr(payload, "pool", None), getattr(payload, "gpu_model", None)) or (
        node.startswith(pool.lower() + "-")
    )


@pytest.mark.asyncio(loop_scope="session")
async def test_agents_run_preempt_finish_and_survive_a_silent_node(live: Live, kafka_bootstrap: str) -> None:
    pool = f"E2E-{live.run}"
    nodes = [f"e2e-{live.run}-n{i}" for i in range(3)]
    port = _free_port()
    live.preemption("pre-a", port, [pool])
    agents = {n: live.agent(n, pool) for n in nodes}
    await live.quota(pool, 6.0, 6)
    try:
        await _until(_pools_ready(port, {pool: 3}), 60, "three nodes and a quota")
        async with GfsClient(bootstrap_servers=kafka_bootstrap, producer_name="e2e") as client:

            async def submit(tid: str, cls: TaskClass, *args: str) -> None:
                await client.submit_new(
                    task_id=tid,
                    tenant="org-e2e",
                    gpu_model=pool,
                    gpus_per_worker=2,
                    workers=1,
                    task_class=cls,
                    command=_fake(*args),
                )

            async def started(tid: str, count: int = 1) -> list[TaskStarted]:
                found: list[TaskStarted] = await live.tap.wait(
                    TaskStarted, lambda e: e.task_id == tid, count=count, timeout=40
                )
                return found

            # Three spot tasks, one per node, oldest first: A (exits by itself), B, C (ignores SIGTERM).
            await submit("A", TaskClass.SPOT, "--duration", "14")
            (a,) = await started("A")
            await asyncio.sleep(0.5)
            await submit("B", TaskClass.SPOT)
            (b,) = await started("B")
            await asyncio.sleep(0.5)
            await submit("C", TaskClass.SPOT, "--ignore-sigterm")
            (c,) = await started("C")
            node_of = {t.task_id: t.placements[0].node for t in (a, b, c)}
            assert sorted(node_of.values()) == sorted(nodes)
            await _until(lambda: "started" in live.worker_log(node_of["C"], "C"), 20, "C's worker to run")

            # H1 evicts the youngest (cheapest) spot task, C, which ignores SIGTERM: SIGKILL after 2 s.
            await submit("H1", TaskClass.HP)
            (evict_c,) = await live.tap.wait(EvictCommand, lambda e: e.preemptor_task_id == "H1")
            assert evict_c.task_ids == ("C",) and evict_c.node == node_of["C"]
            assert not live.tap.payloads(BindCommand, lambda e: e.task_id == "H1")  # held until the ack
            (ack_c,) = await live.tap.wait(EvictAck, lambda e: e.command_id == evict_c.command_id)
            assert ack_c.outcome is EvictOutcome.KILLED
            assert "sigterm ignored" in live.worker_log(node_of["C"], "C")
            (bind_h1,) = await live.tap.wait(BindCommand, lambda e: e.task_id == "H1")
            assert bind_h1.node == node_of["C"] and bind_h1.placements[0].gpu_indices == (0, 1)
            assert bind_h1.issued_at >= ack_c.acked_at - timedelta(seconds=1)
            await started("H1")

            # H2 evicts B, which checkpoints.
            await submit("H2", TaskClass.HP)
            (evict_b,) = await live.tap.wait(EvictCommand, lambda e: e.preemptor_task_id == "H2")
            assert evict_b.task_ids == ("B",) and evict_b.node == node_of["B"]
            (ack_b,) = await live.tap.wait(EvictAck, lambda e: e.command_id == evict_b.command_id)
            assert ack_b.outcome is EvictOutcome.CHECKPOINTED
            assert "checkpointed" in live.worker_log(node_of["B"], "B")
            (bind_h2,) = await live.tap.wait(BindCommand, lambda e: e.task_id == "H2")
            assert bind_h2.node == node_of["B"] and bind_h2.placements[0].gpu_indices == (0, 1)
            evicted = {
                e.task_id: e
                for e in await live.tap.wait(TaskEvicted, lambda e: e.task_id in ("B", "C"), count=2)
            }
            assert evicted["B"].requeued and evicted["C"].requeued

            # A exits by itself: its node's GPUs go to B or C (requeued, B first: it waited longer).
            (done,) = await live.tap.wait(TaskFinished, lambda e: e.task_id == "A", timeout=40)
            assert done.exit_code == 0
            (rebind,) = await live.tap.wait(
                BindCommand, lambda e: e.task_id in ("B", "C") and e.node == node_of["A"]
            )
            assert rebind.task_id == "B"

            # The agent running H1 is killed with -9: silent, its node goes down, H1 is requeued
            # and evicts the spot task on A's node; the lost node is told to stop H1 (NODE_LOST).
            h1_node = node_of["C"]
            h1_pid = next(w.pid for w in live.tap.payloads(WorkerStarted, lambda w: w.task_id == "H1"))
            agents[h1_node].kill9()
            (lost,) = await live.tap.wait(TaskEvicted, lambda e: e.task_id == "H1", timeout=30)
            assert lost.reason is EvictionReason.NODE_LOST and lost.requeued and lost.node == h1_node
            (stop_h1,) = await live.tap.wait(EvictCommand, lambda e: e.task_ids == ("H1",))
            assert stop_h1.node == h1_node and stop_h1.reason is EvictionReason.NODE_LOST
            await started("H1", count=2)
            os.kill(h1_pid, 0)  # the orphaned worker still runs while its agent is down

            # The restarted agent re-adopts the worker and stops it as told; its node comes back.
            agents[h1_node] = live.agent(h1_node, pool)
            (ack_lost,) = await live.tap.wait(
                EvictAck, lambda e: e.command_id == stop_h1.command_id, timeout=40
            )
            assert ack_lost.outcome in (EvictOutcome.CHECKPOINTED, EvictOutcome.KILLED)
            await _until(lambda: not _alive(h1_pid), 10, "the orphaned H1 worker to stop")
            await _until(lambda: _pool_has(port, pool, lambda p: not p["down"]), 20, "the node back up")

        # One trace per task across every hop: the submit (GfsClient), the acceptance, the bind
        # command, the agent's WorkerStarted and TaskStarted; for the victim C, its eviction
        # command and the agent's EvictAck as well.
        def trace_ids(task: str, kinds: tuple[str, ...]) -> dict[str, set[str]]:
            out: dict[str, set[str]] = {}
            for _, env, headers in live.tap.items:
                p = env.payload
                tasks = getattr(p, "task_ids", None) or (getattr(p, "task_id", None),)
                if env.event_type in kinds and task in tasks and _of_pool(p, pool):
                    parent = dict(headers).get("traceparent", b"").decode()
                    out.setdefault(env.event_type, set()).add(parent.split("-")[1] if parent else "none")
            return out

        hops = ("TaskSubmitted", "TaskAccepted", "BindCommand", "WorkerStarted", "TaskStarted")
        a_traces = trace_ids("A", hops)
        assert set(a_traces) == set(hops), a_traces
        assert len(set().union(*a_traces.values())) == 1 and "none" not in a_traces["TaskSubmitted"], a_traces
        c_traces = trace_ids("C", ("TaskSubmitted", "EvictCommand", "EvictAck", "TaskEvicted"))
        assert len(c_traces) == 4 and len(set().union(*c_traces.values())) == 1, c_traces

        # gfs explain, through the CLI: victims, the alternatives and their costs for C's eviction.
        out = subprocess.run([sys.executable, "-m", "gfs.services", "explain", "C", "--api", f"http://127.0.0.1:{port}"],
                             cwd=REPO, env=live.base, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "PREEMPTED_BY_HP by H1" in out.stdout
        assert f"chosen node {node_of['C']}: victims C" in out.stdout
        assert f"alternative {node_of['B']}: victims B" in out.stdout and "cost" in out.stdout
        raw = json.loads(subprocess.run(
            [sys.executable, "-m", "gfs.services", "explain", "C", "--api", f"http://127.0.0.1:{port}",
             "--json"],
            cwd=REPO, env=live.base, capture_output=True, text=True, timeout=60).stdout)  # fmt: skip
        plan = next(d for d in raw["decisions"] if d["kind"] == "evicted")["detail"]["explanation"][
            "last_eviction"
        ]["plan"]
        costs = [plan["winner"]["cost"]] + [a["cost"] for a in plan["alternatives"]]
        assert costs == sorted(costs) and len(costs) >= 2
    except BaseException:
        print(live.logs())
        raise


@pytest.mark.asyncio(loop_scope="session")
async def test_two_instances_split_pools_and_fail_over_without_lost_or_duplicated_decisions(
    live: Live, kafka_bootstrap: str
) -> None:
    # Two pools on different inbox partitions (2 partitions), one 4-GPU node each (the test acks
    # as the agents would: a WorkerStarted per bind, an EvictAck per eviction).
    names: dict[int, str] = {}
    i = 0
    while len(names) < 2:
        name = f"F{i}-{live.run}"
        names.setdefault(partition_for_key(name.encode(), 2), name)
        i += 1
    pools = [names[0], names[1]]
    nodes = {p: f"{p.lower()}-node" for p in pools}
    port1, port2 = _free_port(), _free_port()
    env = {"PREEMPTION_NODE_TIMEOUT_S": "600"}
    first = live.preemption("pre-1", port1, pools, **env)
    acking = asyncio.create_task(_ack_like_agents(live))
    try:
        for p in pools:
            samples = tuple(
                GpuSample(index=g, utilisation_pct=0, memory_used_mib=0, memory_total_mib=1) for g in range(4)
            )
            telemetry = NodeTelemetry(node=nodes[p], gpu_model=p, sampled_at=_now(), gpus=samples)
            await live.report("gfs.nodes.telemetry", telemetry)
            await live.quota(p, 4.0, 4)
        await _until(_pools_ready(port1, {p: 1 for p in pools}), 60, "both pools on the first instance")
        submitted: list[str] = []

        async def submit(tid: str, pool: str, cls: TaskClass) -> None:
            task = {
                "task_id": tid,
                "tenant": "org-e2e",
                "gpu_model": pool,
                "gpus_per_worker": 1,
                "workers": 1,
                "task_class": cls,
                "command": ("true",),
            }
            from gfs.schemas.tasks import TaskSubmitted

            await live.producer.send("gfs.tasks.submit", wrap(TaskSubmitted(**task), producer="e2e"))
            submitted.append(tid)

        for k in range(2):
            for p in pools:
                await submit(f"{p}-s{k}", p, TaskClass.SPOT)
        await live.tap.wait(TaskStarted, lambda e: e.task_id in submitted, count=4)

        second = live.preemption("pre-2", port2, pools, **env)
        await _until(lambda: _split(port1, port2), 60, "the pools split over the two instances")
        owned1, owned2 = await _owned(port1), await _owned(port2)
        assert len(owned1) == len(owned2) == 1 and owned1 | owned2 == set(pools)
        for p in pools:
            await submit(f"{p}-s2", p, TaskClass.SPOT)
        await live.tap.wait(TaskStarted, lambda e: e.task_id in submitted, count=6)

        # Kill the first instance with -9: the second takes its pool over and keeps deciding.
        lost_pool = next(iter(owned1))
        killed_at = time.monotonic()
        first.kill9()
        await _until(lambda: _owns_all(port2, pools), 30, "the survivor to own both pools")
        takeover_s = time.monotonic() - killed_at
        for p in pools:
            await submit(f"{p}-s3", p, TaskClass.SPOT)  # the pools are full: these queue
            await submit(f"{p}-h0", p, TaskClass.HP)  # ... and these preempt
        await live.tap.wait(TaskStarted, lambda e: e.task_id.endswith("-h0"), count=2, timeout=40)
        print(f"takeover after kill -9: {takeover_s:.1f} s (pool {lost_pool})")

        # A restarted instance (the killed one back) rebuilds the same state from Postgres.
        before = (await _get(port2, "/pools"))["pools"]
        first = live.preemption("pre-1", port1, pools, **env)
        await _until(lambda: _split(port1, port2), 60, "the pools split again")
        await asyncio.sleep(1.0)
        after = (await _get(port1, "/pools"))["pools"] | (await _get(port2, "/pools"))["pools"]
        # The same state from the same inputs: a quota the quota service published meanwhile (its
        # feedback after the HP tasks' evictions) is a new input, so a pool's quota is compared only
        # while its quota version is the one read before (the CI run of stop 44 met a new one).
        keys = ("hp_running", "spot_running", "hp_queued", "spot_queued", "capacity_gpus")
        assert {p: {k: after[p][k] for k in keys} for p in pools} == {
            p: {k: before[p][k] for k in keys} for p in pools
        }
        for p in pools:
            if after[p]["quota_version"] == before[p]["quota_version"]:
                assert after[p]["quota_gpus"] == before[p]["quota_gpus"], (p, before[p], after[p])

        # No lost and no duplicated decision: every task accepted once (one event id, however
        # often the relay published it), bound once per start, one start record per bind.
        accepted = Counter(e.task_id for e in live.tap.once(TaskAccepted))
        assert {t: accepted[t] for t in submitted} == dict.fromkeys(submitted, 1)
        binds = Counter(
            b.task_id
            for b in {
                b.command_id: b for b in live.tap.payloads(BindCommand, lambda b: b.task_id in submitted)
            }.values()
        )
        connection = await asyncpg.connect(live.base["DATABASE_URL"])
        try:
            rows = await connection.fetch(
                "SELECT task_id, count(*) AS n FROM preemption_decision "
                "WHERE kind = 'started' GROUP BY task_id"
            )
            duplicates = await connection.fetchval(
                "SELECT count(*) - count(DISTINCT event_id) FROM preemption_journal "
                "WHERE event_id IS NOT NULL"
            )
        finally:
            await connection.close()
        starts = {r["task_id"]: int(r["n"]) for r in rows if r["task_id"] in submitted}
        assert starts == dict(binds)
        assert duplicates == 0
        _ = second
    except BaseException:
        print(live.logs())
        raise
    finally:
        acking.cancel()


async def _split(port1: int, port2: int) -> bool:
    a, b = await _owned(port1), await _owned(port2)
    return bool(a) and bool(b) and not (a & b)


async def _owns_all(port: int, pools: list[str]) -> bool:
    return set(pools) <= await _owned(port)


def _ack_like_agents(live: Live) -> Coroutine[Any, Any, None]:
    """WorkerStarted for every bind and an EvictAck for every eviction of the F* pools' nodes."""
    return ack_like_agents(live.tap, lambda c: c.node.startswith("f"), live.report, pid=1)

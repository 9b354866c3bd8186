"""Issue 22 item 7 on the real broker: reconciliation after commands refused as stale.

The preemption service runs for real (Kafka, Postgres) with the test in the node agents' seat (as
in test_preemption_service): the "agents" publish heartbeats that report what they run
(`NodeTelemetry.running`) and refuse the commands the scenario says they refused as stale (they
never answer them, which is all a refusal looks like to the service)."""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from live_harness import Tap
from node_agent_world import _settings as _agent_settings
from node_agent_world import agent_in_process
from preemption_world import Cluster, Heartbeats, Running, _registered, _service, _settings, _until

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import EvictionReason, TaskClass, TaskEvicted, TaskStarted, TaskSubmitted
from gfs.schemas.workers import WorkerExited
from gfs.services.node_agent import procs
from gfs.services.node_agent.journal import Journal
from gfs.services.node_agent.service import AgentOptions

pytestmark = pytest.mark.integration

# Short reconciliation timers, so each scenario takes seconds (the defaults are 120 s and 60 s).
RECONCILE = {
    "preemption_bind_start_timeout_s": 3.0,
    "preemption_unknown_work_after_s": 1.5,
    "preemption_report_every_s": 0.5,
}


def _reporting(c: Cluster, nodes: dict[str, int], running: Running) -> Heartbeats:
    """Heartbeats every 0.3 s for `nodes` (name -> GPUs), each reporting `running[node]` as it is
    then; a node taken out of `nodes` goes silent."""
    return Heartbeats(c, nodes, running, every=0.3)


async def _start(c: Cluster, bind: BindCommand, attempt: int) -> None:
    await c.started(bind, attempt=attempt, pid=5000)


@pytest.mark.asyncio(loop_scope="session")
async def test_a_bind_the_agent_refused_as_stale_is_issued_again_and_the_task_starts(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    tid = f"S-{c.pool}"
    node = c.node(0)
    nodes, running = {node: 2}, {node: set[tuple[str, int, int]]()}
    settings = _settings(dsn, kafka_bootstrap, c.pool, **RECONCILE)
    async with _service(settings) as (decider, _), _reporting(c, nodes, running):
        await c.quota(4.0)
        await _until(_registered(decider, c.pool, 1))
        await c.submit(tid, TaskClass.SPOT)
        (first,) = await c.bind_of(tid)
        # The agent refused it as stale: no WorkerStarted, its reports list nothing. Within the
        # bind-start timeout (3 s) plus a tick and a report, the service issues it again.
        again = await c.tap.wait(BindCommand, lambda b: b.task_id == tid, count=2, timeout=15.0)
        fresh = again[1]
        assert fresh.command_id != first.command_id and fresh.issued_at > first.issued_at
        assert (fresh.node, fresh.attempt, fresh.placements) == (first.node, first.attempt, first.placements)
        waited = (fresh.issued_at - first.issued_at).total_seconds()
        assert 3.0 <= waited < 10.0, waited
        # The agent accepts the fresh command: the task starts (it does not stay bound for ever).
        running[node].add((tid, 1, 0))
        await _start(c, fresh, 1)
        (started,) = await c.tap.wait(TaskStarted, lambda e: e.task_id == tid)
        assert started.attempt == 1
        await asyncio.sleep(4.0)
        assert len(c.tap.payloads(BindCommand, lambda b: b.task_id == tid)) == 2  # not issued again


@pytest.mark.asyncio(loop_scope="session")
async def test_an_eviction_refused_as_stale_is_issued_again_and_the_hp_bind_waits_for_its_end(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    a, b, h = f"A-{c.pool}", f"B-{c.pool}", f"H-{c.pool}"
    n0, n1 = c.node(0), c.node(1)
    nodes = {n0: 2, n1: 2}
    running: dict[str, set[tuple[str, int, int]]] = {n0: set(), n1: set()}
    # grace 2 s + margin 1 s: on today's main H is bound at 3 s, onto B's GPUs.
    settings = _settings(dsn, kafka_bootstrap, c.pool, **RECONCILE)
    async with _service(settings) as (decider, _), _reporting(c, nodes, running):
        bind_b, evict = await _two_spots_then_hp(c, decider, running, a, b, h)
        assert evict.task_ids == (b,) and evict.node == bind_b.node
        # The agent refused it as stale: no ack, B still runs. After grace + margin the eviction is
        # issued again (a new id, a fresh issued_at), and H is not bound while B runs.
        both = await c.tap.wait(EvictCommand, lambda e: e.task_ids == (b,), count=2, timeout=15.0)
        fresh = both[1]
        assert fresh.command_id != evict.command_id and fresh.issued_at > evict.issued_at
        assert (fresh.node, fresh.attempt, fresh.preemptor_task_id) == (evict.node, 1, h)
        assert (fresh.issued_at - evict.issued_at).total_seconds() >= 3.0
        await asyncio.sleep(4.0)  # more than another grace + margin
        assert not c.tap.payloads(BindCommand, lambda x: x.task_id == h)
        assert not c.tap.payloads(TaskEvicted, lambda e: e.task_id == b)
        # The agent takes the latest command and stops B: H goes, B's eviction is reported once.
        latest = c.tap.payloads(EvictCommand, lambda e: e.task_ids == (b,))[-1]
        running[evict.node].discard((b, 1, 0))
        ack = c.ack_of(latest, EvictOutcome.KILLED, node=evict.node, attempt=1)
        await c.report("gfs.commands.evict-ack", ack)
        (bind_h,) = await c.bind_of(h)
        assert bind_h.node == evict.node
        (evicted,) = await c.tap.wait(TaskEvicted, lambda e: e.task_id == b)
        assert evicted.command_id == evict.command_id
        assert decider.stats.refused_acks == 0


@pytest.mark.asyncio(loop_scope="session")
async def test_a_forged_report_without_the_victim_does_not_release_the_hp_bind(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    """Why telemetry is signed (docs/decisions.md): a report of what runs that leaves the victim's
    attempt out releases its GPUs to the HP task. One in the victim's node's name, signed with the
    other node's key or not at all, and dated ahead (so later genuine reports would look older),
    is refused: H waits while B runs, and goes once the node itself acks."""
    c, dsn = world
    a, b, h = f"A-{c.pool}", f"B-{c.pool}", f"H-{c.pool}"
    n0, n1 = c.node(0), c.node(1)
    nodes = {n0: 2, n1: 2}
    running: dict[str, set[tuple[str, int, int]]] = {n0: set(), n1: set()}
    settings = _settings(dsn, kafka_bootstrap, c.pool, **RECONCILE)
    async with _service(settings) as (decider, _), _reporting(c, nodes, running):
        _, evict = await _two_spots_then_hp(c, decider, running, a, b, h)
        victim, other = evict.node, (n0 if evict.node == n1 else n1)
        ahead = datetime.now(UTC) + timedelta(minutes=10)
        forged = c.node_telemetry(victim, 2, running=(), sampled_at=ahead)
        await c.report("gfs.nodes.telemetry", forged, signer=other)
        await c.producer.send("gfs.nodes.telemetry", wrap(forged, producer="it"))
        await _until(lambda: decider.stats.unauthenticated == 2, timeout=10.0)
        await asyncio.sleep(4.0)  # more than grace + margin: the genuine reports still list B
        assert not c.tap.payloads(BindCommand, lambda x: x.task_id == h)
        assert not c.tap.payloads(TaskEvicted, lambda e: e.task_id == b)
        # The victim's node itself answers (the latest eviction command): H goes.
        latest = c.tap.payloads(EvictCommand, lambda e: e.task_ids == (b,))[-1]
        running[victim].discard((b, 1, 0))
        ack = c.ack_of(latest, EvictOutcome.KILLED, node=victim, attempt=1)
        await c.report("gfs.commands.evict-ack", ack)
        (bind_h,) = await c.bind_of(h)
        assert bind_h.node == victim
        assert decider.stats.refused_acks == 2


@pytest.mark.asyncio(loop_scope="session")
async def test_a_node_back_after_a_long_partition_is_told_to_stop_the_attempt_rerun_elsewhere(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    b = f"B-{c.pool}"
    n0, n1 = c.node(0), c.node(1)
    nodes = {n1: 2}
    running: dict[str, set[tuple[str, int, int]]] = {n0: set(), n1: set()}
    # Unchanged reports journaled at the default period (60 s): unknown work must still be judged
    # every `unknown_after_s` (1.5 s), not at the larger of the two (issue 38).
    reconcile = RECONCILE | {"preemption_report_every_s": 60.0}
    settings = _settings(dsn, kafka_bootstrap, c.pool, preemption_node_timeout_s=3.0, **reconcile)
    async with _service(settings) as (decider, _), _reporting(c, nodes, running):
        await c.quota(4.0)
        await _until(_registered(decider, c.pool, 1))
        await c.submit(b, TaskClass.SPOT)
        (bind_1,) = await c.bind_of(b)
        assert bind_1.node == n1
        running[n1].add((b, 1, 0))
        await _start(c, bind_1, 1)
        await c.tap.wait(TaskStarted, lambda e: e.task_id == b)
        # n0 joins; n1 is cut off: declared lost, B runs again on n0 as attempt 2. The NODE_LOST
        # eviction never reaches n1 in time (its agent refuses it as stale when it comes back).
        nodes[n0] = 2
        await _until(_registered(decider, c.pool, 2))
        del nodes[n1]
        (lost,) = await c.tap.wait(EvictCommand, lambda e: e.task_ids == (b,), timeout=20.0)
        assert lost.reason is EvictionReason.NODE_LOST
        bind_2 = (await c.bind_of(b, count=2))[1]
        assert (bind_2.node, bind_2.attempt) == (n0, 2)
        running[n0].add((b, 2, 0))
        await _start(c, bind_2, 2)
        await c.tap.wait(TaskStarted, lambda e: e.task_id == b and e.attempt == 2)
        # n1 comes back, still running attempt 1: it is told to stop that attempt (and only it).
        nodes[n1] = 2
        stops = await c.tap.wait(EvictCommand, lambda e: e.task_ids == (b,), count=2, timeout=20.0)
        stop = stops[1]
        assert stop.command_id != lost.command_id and stop.issued_at > lost.issued_at
        assert (stop.node, stop.attempt, stop.grace_seconds) == (n1, 1, 0.0)
        running[n1].discard((b, 1, 0))
        ack = c.ack_of(stop, EvictOutcome.KILLED, attempt=1)
        await c.report("gfs.commands.evict-ack", ack)
        await asyncio.sleep(3.0)
        # Attempt 2 on n0 is untouched: never told to stop, never reported evicted after its start.
        assert not c.tap.payloads(EvictCommand, lambda e: e.node == n0)
        assert len(c.tap.payloads(EvictCommand, lambda e: e.task_ids == (b,))) == 2
        assert decider.owned_pools()[c.pool].tasks[b].run.number == 2  # type: ignore[union-attr]


AGENT_SECRET = "it-reconcile-master-secret-0123456789"


@pytest.mark.asyncio(loop_scope="session")
async def test_the_real_agent_back_after_a_partition_stops_the_attempt_rerun_elsewhere(
    world: tuple[Cluster, str],
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    c, dsn = world
    c.secret = AGENT_SECRET  # the service's and the real agent's secret: the test's n0 signs with it
    b = f"B-{c.pool}"
    n0, n1 = c.node(0), c.node(1)
    nodes: dict[str, int] = {}
    running: dict[str, set[tuple[str, int, int]]] = {n0: set()}
    settings = _settings(
        dsn,
        kafka_bootstrap,
        c.pool,
        preemption_node_timeout_s=3.0,
        gfs_command_secret=AGENT_SECRET,
        **RECONCILE,
    )
    # The agent refuses commands older than 4 s: its partition below lasts longer than that.
    agent_settings = _agent_settings(
        kafka_bootstrap, tmp_path, gfs_command_secret=AGENT_SECRET, agent_kill_wait_s=3.0,
        agent_command_max_age_s=4.0,
    )  # fmt: skip
    options = AgentOptions(
        node=n1, gpu_model=c.pool, gpus=2, fake_gpus=True, telemetry_s=0.5, state_dir=tmp_path / n1
    )
    acks = await Tap(kafka_bootstrap, ("gfs.commands.evict-ack", "gfs.commands.worker-ack")).start()
    try:
        async with _service(settings) as (decider, _), _reporting(c, nodes, running):
            async with agent_in_process(agent_settings, options, wait_s=40):
                await c.quota(4.0)
                await _until(_registered(decider, c.pool, 1))
                argv = (sys.executable, "-m", "gfs.services.node_agent.fake_task", "--duration", "300")
                task = TaskSubmitted(task_id=b, tenant="org-it", gpu_model=c.pool, gpus_per_worker=2,
                                     workers=1, task_class=TaskClass.SPOT, command=argv)  # fmt: skip
                await c.producer.send("gfs.tasks.submit", wrap(task, producer="it"))
                (bind_1,) = await c.bind_of(b)
                assert (bind_1.node, bind_1.attempt) == (n1, 1)
                await c.tap.wait(TaskStarted, lambda e: e.task_id == b)
            # n1's agent is cut off (its worker keeps running); n0 joins. n1 is declared lost and B
            # runs again on n0 as attempt 2.
            nodes[n0] = 2
            (lost,) = await c.tap.wait(EvictCommand, lambda e: e.task_ids == (b,), timeout=30.0)
            assert (lost.node, lost.reason) == (n1, EvictionReason.NODE_LOST)
            bind_2 = (await c.bind_of(b, count=2))[1]
            assert (bind_2.node, bind_2.attempt) == (n0, 2)
            running[n0].add((b, 2, 0))
            await _start(c, bind_2, 2)
            await asyncio.sleep(5.0)  # the NODE_LOST eviction is now older than the agent accepts
            async with agent_in_process(agent_settings, options, wait_s=40):
                # Back: the agent refuses the stale eviction, re-adopts attempt 1's worker and reports
                # it; the service tells it to stop that attempt, and it does.
                stops = await c.tap.wait(EvictCommand, lambda e: e.task_ids == (b,), count=2, timeout=30.0)
                stop = stops[1]
                assert (stop.node, stop.attempt, stop.grace_seconds) == (n1, 1, 0.0)
                assert stop.issued_at > lost.issued_at
                (ack,) = await acks.wait(EvictAck, lambda a: a.command_id == stop.command_id, timeout=30.0)
                assert ack.outcome in (EvictOutcome.KILLED, EvictOutcome.CHECKPOINTED)
                await acks.wait(WorkerExited, lambda e: e.task_id == b and e.attempt == 1 and e.evicted)
                assert not acks.payloads(EvictAck, lambda a: a.command_id == lost.command_id)  # refused
            assert decider.owned_pools()[c.pool].tasks[b].run.number == 2  # type: ignore[union-attr]
            assert not c.tap.payloads(EvictCommand, lambda e: e.node == n0)
    finally:
        await acks.stop()
        journal = Journal.open(tmp_path / n1 / "journal.json", node=n1)
        for worker in journal.state.workers.values():
            if worker.pid is not None and worker.start_ticks is not None:
                procs.signal_group(worker.pid, worker.start_ticks, signal.SIGKILL)


async def _two_spots_then_hp(
    c: Cluster, decider: Any, running: Running, a: str, b: str, h: str
) -> tuple[BindCommand, EvictCommand]:
    """Spot A, then spot B (younger, so the cheaper victim) start as their agents report them; HP
    H then needs B's GPUs. Returns B's bind and the first eviction command for H."""
    await c.quota(4.0)
    await _until(_registered(decider, c.pool, 2))
    binds = []
    for tid in (a, b):
        await c.submit(tid, TaskClass.SPOT)
        (bind,) = await c.bind_of(tid)
        running[bind.node].add((tid, 1, 0))
        await _start(c, bind, 1)
        await c.tap.wait(TaskStarted, lambda e, t=tid: e.task_id == t)
        binds.append(bind)
        if tid == a:
            await asyncio.sleep(1.0)
    await c.submit(h, TaskClass.HP)
    (evict,) = await c.tap.wait(EvictCommand, lambda e: e.preemptor_task_id == h)
    return binds[1], evict

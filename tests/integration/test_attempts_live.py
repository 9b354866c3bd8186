"""Issue 22 items 1-3 on the real broker: acks bound to their command, attempts, per-node order.

The preemption service runs for real (Kafka, Postgres) with the test in the node agents' seat
(as in test_preemption_service); the evict-before-bind race runs against the real node agent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from live_harness import Tap
from node_agent_world import Acks, _agent, _bind, _evict, _publish, _signed
from node_agent_world import _node as _agent_node
from preemption_world import Cluster, _api_settings, _metrics, _sample, _service, _settings

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import GuaranteeOutcome, GuaranteePeriodClosed, TaskEvicted, TaskFinished
from gfs.schemas.topics import DEAD_LETTER_TOPIC
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.preemption.decider import Decider

pytestmark = pytest.mark.integration


def _ids(c: Cluster) -> tuple[str, str, str]:
    return f"A-{c.pool}", f"B-{c.pool}", f"H-{c.pool}"


async def _victim_world(c: Cluster, decider: Decider) -> tuple[BindCommand, BindCommand, EvictCommand]:
    """Two 2-GPU nodes, spot A then B on them, HP H evicts B (the cheaper victim). Task ids carry
    the pool's name: other runs on the shared broker use the same topics."""
    a, b, h = _ids(c)
    await c.up(decider, 2)
    bind_a, bind_b, evict = await c.hp_evicts_the_younger(a, b, h)
    assert evict.task_ids == (b,) and evict.node == bind_b.node
    return bind_a, bind_b, evict


@pytest.mark.asyncio(loop_scope="session")
async def test_an_evict_ack_from_the_wrong_node_is_refused_and_dead_lettered(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    _, b, h = _ids(c)
    settings = _settings(dsn, kafka_bootstrap, c.pool, preemption_grace_s=20.0)
    async with _service(settings) as (decider, _):
        bind_a, _, evict = await _victim_world(c, decider)
        # The real command id of the eviction addressed to B's node, answered by A's node (and
        # published under A's node's Kafka key and signed with its own key: a real node, wrong ack).
        forged = c.ack_of(evict, EvictOutcome.CHECKPOINTED, node=bind_a.node)
        assert forged.node != evict.node
        letters = await Tap(kafka_bootstrap, (DEAD_LETTER_TOPIC,)).start()
        try:
            await c.report("gfs.commands.evict-ack", forged)
            found = await letters.wait(DeadLetter, lambda d: "EvictAck refused" in d.error)
        finally:
            await letters.stop()
        assert any(bind_a.node in d.error and evict.node in d.error for d in found), found
        assert {d.reason for d in found if evict.node in d.error} == {"unmatched"}, found  # protocol.md
        assert decider.stats.refused_acks == 1
        await asyncio.sleep(1.0)
        # Nothing applied: H is not bound onto B's GPUs while B still runs there, B not evicted.
        assert not c.tap.payloads(BindCommand, lambda x: x.task_id == h)
        assert not c.tap.payloads(TaskEvicted, lambda e: e.task_id == b)

        # The real node's ack is applied: H bound, B evicted.
        real = forged.model_copy(update={"node": evict.node})
        await c.report("gfs.commands.evict-ack", real)
        (bind_h,) = await c.bind_of(h)
        assert bind_h.node == evict.node
        await c.tap.wait(TaskEvicted, lambda e: e.task_id == b)


@pytest.mark.asyncio(loop_scope="session")
async def test_an_evict_ack_not_signed_with_its_nodes_key_is_refused_and_the_hp_bind_waits(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    """Issue 22 item 1, "only from that node": an ack matching the eviction in every field (command
    id, node, task, attempt, published under the node's Kafka key) is still not that node's word
    unless it carries the node's signature. A forger holding another node's key (A's), and one
    holding none, are refused and dead-lettered with the reason; B stays, H waits; the ack the
    node itself signs is applied."""
    c, dsn = world
    _, b, h = _ids(c)
    port, settings = _api_settings(dsn, kafka_bootstrap, c.pool, preemption_grace_s=20.0)
    async with _service(settings) as (decider, _):
        bind_a, bind_b, evict = await _victim_world(c, decider)
        assert bind_a.node != evict.node == bind_b.node
        ack = c.ack_of(evict, EvictOutcome.CHECKPOINTED, attempt=evict.attempt)
        letters = await Tap(kafka_bootstrap, (DEAD_LETTER_TOPIC,)).start()
        try:
            await c.report("gfs.commands.evict-ack", ack, signer=bind_a.node)  # A's key, B's name
            await c.producer.send("gfs.commands.evict-ack", wrap(ack, producer="it"))  # unsigned
            found = await letters.wait(
                DeadLetter, lambda d: "EvictAck refused" in d.error and evict.node in d.error, count=2
            )
        finally:
            await letters.stop()
        errors = sorted(d.error for d in found)
        assert all(f"not signed by node {evict.node!r}'s key" in e for e in errors), errors
        assert any("signed with another key" in e for e in errors), errors
        assert any("carries no signature" in e for e in errors), errors
        # The codes a tool reads (docs/protocol.md), one per refusal kind, as the metric's labels.
        assert sorted(d.reason or "" for d in found) == ["signature_mismatch", "unsigned"], found
        assert (decider.stats.unauthenticated, decider.stats.refused_acks) == (2, 2)
        await asyncio.sleep(1.0)
        # Nothing applied: H is not bound onto B's GPUs while B may still run there; B not evicted.
        assert not c.tap.payloads(BindCommand, lambda x: x.task_id == h)
        assert not c.tap.payloads(TaskEvicted, lambda e: e.task_id == b)
        metrics = await _metrics(port)
        refused = "gfs_preemption_acks_refused_total"
        assert _sample(metrics, refused, {"type": "EvictAck", "reason": "signature_mismatch"}) == 1.0
        assert _sample(metrics, refused, {"type": "EvictAck", "reason": "unsigned"}) == 1.0

        # The same ack signed by B's node is applied: H bound on B's GPUs, B evicted.
        await c.report("gfs.commands.evict-ack", ack)
        (bind_h,) = await c.bind_of(h)
        assert bind_h.node == evict.node
        await c.tap.wait(TaskEvicted, lambda e: e.task_id == b)
        assert decider.stats.refused_acks == 2


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("ack_first", [False, True], ids=["exit-then-ack", "ack-then-exit"])
async def test_a_victim_that_exits_0_while_its_eviction_is_in_flight_finished(
    world: tuple[Cluster, str], kafka_bootstrap: str, ack_first: bool
) -> None:
    c, dsn = world
    _, b, h = _ids(c)
    settings = _settings(dsn, kafka_bootstrap, c.pool, preemption_grace_s=20.0)
    async with _service(settings) as (decider, _):
        _, bind_b, evict = await _victim_world(c, decider)
        # B's worker exited 0 on its own just before the agent read the eviction: the agent
        # reports the exit and answers NOT_RUNNING (a message without attempt, as an agent
        # written before attempts existed would send it), the service reading either first.
        if ack_first:
            await c.report("gfs.commands.evict-ack", c.ack_of(evict, EvictOutcome.NOT_RUNNING))
            await asyncio.sleep(0.5)
            await c.exited(bind_b)
        else:
            await c.exited(bind_b)
            await asyncio.sleep(0.5)
            await c.report("gfs.commands.evict-ack", c.ack_of(evict, EvictOutcome.NOT_RUNNING))
        (finished,) = await c.tap.wait(TaskFinished, lambda e: e.task_id == b)
        assert finished.exit_code == 0
        (bind_h,) = await c.bind_of(h)
        assert bind_h.node == evict.node
        await asyncio.sleep(1.5)
        # A normal finish: no TaskEvicted, never bound again, and its guarantee period closed
        # once, SUCCEEDED, at the exit (docs/attempts.md), as any finish's last period.
        assert not c.tap.payloads(TaskEvicted, lambda e: e.task_id == b)
        closed = c.tap.payloads(GuaranteePeriodClosed, lambda e: e.task_id == b)
        assert [(p.outcome, p.period_end) for p in closed] == [
            (GuaranteeOutcome.SUCCEEDED, finished.finished_at)
        ], closed
        assert len(c.tap.payloads(BindCommand, lambda x: x.task_id == b)) == 1
        assert b not in decider.owned_pools()[c.pool].tasks


@pytest.mark.asyncio(loop_scope="session")
async def test_the_agent_never_starts_an_attempt_it_was_told_to_evict_first(
    kafka_bootstrap: str,
    publisher: EnvelopeProducer,
    ack_reader: Callable[[str], Acks],
    tmp_path: Path,
) -> None:
    node = _agent_node()
    acks = ack_reader(node)
    async with _agent(kafka_bootstrap, tmp_path, node):
        now = datetime.now(UTC)
        # Attempt 1's eviction is read before its bind (bind and evict travel on different
        # topics). The bind is stamped after the eviction, as a held bind re-issued on release
        # is, so only the attempt number can tell that it was revoked.
        evict_1 = _evict(node, "T", attempt=1, issued_at=now)
        bind_1 = _bind(node, "T", "--duration", "60", attempt=1, issued_at=now + timedelta(milliseconds=22))
        await _publish(publisher, _signed(evict_1, node))
        await acks.until(lambda a: bool(a.of(EvictAck)), "the eviction's ack")
        (ack_1,) = acks.of(EvictAck)
        assert (ack_1.outcome, ack_1.attempt) == (EvictOutcome.NOT_RUNNING, 1)
        await _publish(publisher, _signed(bind_1, node))
        await acks.until(lambda a: bool(a.of(WorkerExited)), "attempt 1 refused")
        (refused,) = acks.of(WorkerExited)
        assert (refused.attempt, refused.evicted, refused.exit_code) == (1, True, 127)
        assert not acks.of(WorkerStarted)  # attempt 1 never ran

        # Attempt 2 (the service re-bound it after the end of attempt 1) runs; a late copy of
        # an eviction of attempt 1 does not touch it.
        bind_2 = _bind(node, "T", "--duration", "60", attempt=2)
        await _publish(publisher, _signed(bind_2, node))
        await acks.until(lambda a: bool(a.of(WorkerStarted)), "attempt 2 started")
        (started,) = acks.of(WorkerStarted)
        assert started.attempt == 2 and started.command_id == bind_2.command_id
        late = _evict(node, "T", attempt=1)
        await _publish(publisher, _signed(late, node))
        await acks.until(lambda a: len(a.of(EvictAck)) == 2, "the late eviction's ack")
        assert acks.of(EvictAck)[1].outcome is EvictOutcome.NOT_RUNNING
        await asyncio.sleep(1.0)
        assert len(acks.of(WorkerExited)) == 1  # attempt 2 still runs


@pytest.mark.asyncio(loop_scope="session")
async def test_a_task_is_not_bound_again_on_a_node_before_that_node_ended_its_previous_attempt(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    a, b, h = _ids(c)
    settings = _settings(dsn, kafka_bootstrap, c.pool, preemption_grace_s=20.0)
    async with _service(settings) as (decider, _):
        # One 4-GPU node: spot A and B (2 GPUs each); HP H evicts B, the cheaper victim.
        await c.up(decider, 1, gpus=4)
        bind_a, _, evict = await c.hp_evicts_the_younger(a, b, h)
        assert evict.task_ids == (b,)
        # A finishes: its GPUs could take the requeued B at once, on the very node that has not
        # yet stopped B's first attempt (its agent may read that bind before the eviction).
        await c.exited(bind_a)
        await c.tap.wait(TaskFinished, lambda e: e.task_id == a)
        await asyncio.sleep(1.5)
        assert len(c.tap.payloads(BindCommand, lambda x: x.task_id == b)) == 1  # held
        await c.report("gfs.commands.evict-ack", c.ack_of(evict, EvictOutcome.KILLED))
        (_, again) = await c.bind_of(b, count=2)
        assert again.node == c.node(0) and again.attempt == 2 and evict.attempt == 1
        await c.tap.wait(TaskEvicted, lambda e: e.task_id == b)

"""Every ending of an attempt in docs/attempts.md's table closes exactly the guarantee periods the
page says, on the real broker and Postgres (issue 38 item 2). One test per row that ends a run
(the finish during an eviction, both orders, is test_attempts_live.py's):

| row (docs/attempts.md) | periods closed (a run shorter than one period) |
|---|---|
| BOUND, RUNNING + exit(own), every worker: FINISHED | one SUCCEEDED, from the placement to the exit |
| BOUND, RUNNING + lose: EVICTED | none: the interrupted period is void |
| EVICTING + ack CHECKPOINTED / KILLED / FAILED: EVICTED | one FAILED, ending at the eviction's decision |
| EVICTING + ack NOT_RUNNING, the worker's exit (evicted) after: EVICTED | one FAILED |
| EVICTING + expire (no ack, the node does not report what runs): EVICTED | one FAILED |
| FINISHED, EVICTED + anything: unchanged | nothing more |

The service runs for real with the test in the node agents' seat (preemption_world.py)."""

from __future__ import annotations

import asyncio

import pytest
from preemption_world import Cluster, _now, _service, _settings

from gfs.schemas.commands import BindCommand, EvictCommand, EvictOutcome
from gfs.schemas.tasks import (
    EvictionReason,
    GuaranteeOutcome,
    GuaranteePeriodClosed,
    TaskEvicted,
    TaskFinished,
)
from gfs.schemas.workers import WorkerExited
from gfs.services.preemption.decider import Decider

pytestmark = pytest.mark.integration


def _periods(c: Cluster, tid: str) -> list[GuaranteePeriodClosed]:
    return c.tap.payloads(GuaranteePeriodClosed, lambda p: p.task_id == tid)


async def _one_period(c: Cluster, tid: str) -> GuaranteePeriodClosed:
    """The run's one closed period, after a pause in which a second one would have come."""
    (closed,) = await c.tap.wait(GuaranteePeriodClosed, lambda p: p.task_id == tid)
    await asyncio.sleep(1.5)
    periods = _periods(c, tid)
    assert len(periods) == 1, periods
    return closed


async def _evicting(c: Cluster, decider: Decider) -> tuple[str, BindCommand, EvictCommand]:
    """Spot A, then spot B on two nodes; HP H evicts B (the younger): B is EVICTING."""
    a, b, h = (f"{x}-{c.pool}" for x in "ABH")  # the pool in the ids: other runs share the topics
    await c.up(decider, 2)
    _, bind_b, evict = await c.hp_evicts_the_younger(a, b, h)
    assert evict.task_ids == (b,) and evict.node == bind_b.node
    return b, bind_b, evict


async def _evicted_exit(c: Cluster, bind: BindCommand) -> None:
    """The worker of `bind` stopped by its eviction (what an agent reports after the SIGTERM)."""
    done = WorkerExited(command_id=bind.command_id, node=bind.node, task_id=bind.task_id, worker_index=0,
                        exit_code=-15, exited_at=_now(), evicted=True)  # fmt: skip
    await c.report("gfs.commands.worker-ack", done)


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("exit_code", [0, 3], ids=["exit-0", "exit-3"])
async def test_a_run_that_finishes_on_its_own_closes_one_succeeded_period_at_the_exit(
    world: tuple[Cluster, str], kafka_bootstrap: str, exit_code: int
) -> None:
    c, dsn = world
    tid = f"S-{c.pool}"
    async with _service(_settings(dsn, kafka_bootstrap, c.pool)) as (decider, _):
        await c.up(decider, 1)
        bind = await c.spot_running(tid)
        await asyncio.sleep(0.5)
        await c.exited(bind, exit_code=exit_code)
        (finished,) = await c.tap.wait(TaskFinished, lambda e: e.task_id == tid)
        assert finished.exit_code == exit_code
        closed = await _one_period(c, tid)
        # A failed program is the task's failure, not the guarantee's: the period succeeded.
        assert closed.outcome is GuaranteeOutcome.SUCCEEDED
        # From the placement (the bind's decision) to the finish.
        assert (closed.period_start, closed.period_end) == (bind.issued_at, finished.finished_at)


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("outcome", [EvictOutcome.CHECKPOINTED, EvictOutcome.KILLED, EvictOutcome.FAILED])
async def test_an_acked_eviction_closes_one_failed_period_and_a_late_exit_changes_nothing(
    world: tuple[Cluster, str], kafka_bootstrap: str, outcome: EvictOutcome
) -> None:
    c, dsn = world
    async with _service(_settings(dsn, kafka_bootstrap, c.pool, preemption_grace_s=20.0)) as (decider, _):
        b, bind_b, evict = await _evicting(c, decider)
        # Nothing closes while the eviction is in flight (docs/attempts.md: "nothing else yet").
        await asyncio.sleep(1.0)
        assert not _periods(c, b) and not c.tap.payloads(TaskEvicted, lambda e: e.task_id == b)
        await c.report("gfs.commands.evict-ack", c.ack_of(evict, outcome))
        (evicted,) = await c.tap.wait(TaskEvicted, lambda e: e.task_id == b)
        closed = await _one_period(c, b)
        # It ends at the eviction's decision, not at the ack (docs/attempts.md, the schema).
        assert closed.outcome is GuaranteeOutcome.FAILED and closed.period_end == evict.issued_at
        assert evicted.evicted_at > evict.issued_at
        # FINISHED, EVICTED + anything: unchanged. A late exit of the stopped run closes nothing.
        await c.exited(bind_b, exit_code=0)
        await asyncio.sleep(1.5)
        assert _periods(c, b) == [closed]
        assert not c.tap.payloads(TaskFinished, lambda e: e.task_id == b)


@pytest.mark.asyncio(loop_scope="session")
async def test_a_not_running_ack_waits_for_the_workers_exit_then_closes_one_failed_period(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    async with _service(_settings(dsn, kafka_bootstrap, c.pool, preemption_grace_s=20.0)) as (decider, _):
        b, bind_b, evict = await _evicting(c, decider)
        await c.report("gfs.commands.evict-ack", c.ack_of(evict, EvictOutcome.NOT_RUNNING))
        await asyncio.sleep(1.5)
        # The worker has no exit yet: the attempt waits for it (EVICTING), nothing closes.
        assert not _periods(c, b) and not c.tap.payloads(TaskEvicted, lambda e: e.task_id == b)
        await _evicted_exit(c, bind_b)
        await c.tap.wait(TaskEvicted, lambda e: e.task_id == b)
        closed = await _one_period(c, b)
        assert closed.outcome is GuaranteeOutcome.FAILED


@pytest.mark.asyncio(loop_scope="session")
async def test_an_eviction_never_acked_expires_and_closes_one_failed_period(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    # grace 2 s + margin 1 s (preemption_world's defaults); the node never reports what runs.
    async with _service(_settings(dsn, kafka_bootstrap, c.pool)) as (decider, _):
        b, _, evict = await _evicting(c, decider)
        (evicted,) = await c.tap.wait(TaskEvicted, lambda e: e.task_id == b, timeout=20.0)
        assert evicted.evicted_at > evict.issued_at  # expired after grace + margin
        closed = await _one_period(c, b)
        assert closed.outcome is GuaranteeOutcome.FAILED and closed.period_end == evict.issued_at


@pytest.mark.asyncio(loop_scope="session")
async def test_a_lost_node_evicts_its_run_at_once_and_its_interrupted_period_is_void(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    tid = f"L-{c.pool}"
    settings = _settings(dsn, kafka_bootstrap, c.pool, preemption_node_timeout_s=3.0)
    async with _service(settings) as (decider, _):
        await c.up(decider, 1)
        await c.spot_running(tid)
        # No heartbeat from the node after its first: it is lost after the node timeout.
        (evicted,) = await c.tap.wait(TaskEvicted, lambda e: e.task_id == tid, timeout=30.0)
        assert evicted.reason is EvictionReason.NODE_LOST
        # Neither SUCCEEDED nor FAILED: a lost node is not the scheduler's eviction (the spec, and
        # the simulator's count), and no period ran out before it.
        await asyncio.sleep(2.0)
        assert _periods(c, tid) == []

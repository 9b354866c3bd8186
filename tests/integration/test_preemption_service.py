"""The preemption service on the real broker and Postgres, with the test in the node agents' seat:
telemetry registers two nodes, a quota admits spot tasks, an HP task evicts the cheaper one; the
HP task's bind waits for the EvictAck; every command is signed with its node's key; decisions and
their explanations are in Postgres; a restart rebuilds the same state from the journal."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from preemption_world import (
    Cluster,
    _api_settings,
    _key,
    _metrics,
    _sample,
    _service,
    _settings,
    _until,
)
from quota_harness import _fetch

from gfs.schemas.commands import BindCommand, EvictCommand, EvictOutcome
from gfs.schemas.envelope import wrap
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.tasks import (
    EvictionReason,
    RejectionReason,
    TaskAccepted,
    TaskCancelled,
    TaskClass,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
)
from gfs.services.platform.signing import SignatureCheck, check_signature

pytestmark = pytest.mark.integration


@pytest.mark.asyncio(loop_scope="session")
async def test_hp_evicts_then_binds_after_the_ack_signed_and_explained(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    port, settings = _api_settings(dsn, kafka_bootstrap, c.pool)
    async with _service(settings) as (decider, _):
        await c.up(decider, 2)
        bind_a, bind_b, evict = await c.hp_evicts_the_younger("A", "B", "H")
        assert {bind_a.node, bind_b.node} == {c.node(0), c.node(1)}
        assert (
            evict.task_ids == ("B",)
            and evict.node == bind_b.node
            and evict.reason is EvictionReason.PREEMPTED_BY_HP
        )
        assert check_signature(evict, key=_key(evict.node)) is SignatureCheck.VALID
        assert check_signature(evict, key=_key(bind_a.node)) is SignatureCheck.MISMATCH  # another node's key
        await asyncio.sleep(0.5)
        assert not c.tap.payloads(BindCommand, lambda b: b.task_id == "H")  # held until the ack
        await c.report("gfs.commands.evict-ack", c.ack_of(evict, EvictOutcome.CHECKPOINTED))
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
        await c.exited(bind_a)
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
        metrics = await _metrics(port)
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
        # (Only this pool's nodes: the topics are shared with tests running beside this one.)
        assert not c.tap.payloads((BindCommand, EvictCommand), lambda x: x.node.startswith(c.node(0)[:-1]))
    kinds = [
        r["kind"]
        for r in await _fetch(dsn, "SELECT kind FROM preemption_decision WHERE task_id = 'H' ORDER BY id")
    ]
    assert kinds[:3] == ["accepted", "started", "bind_held"] and "bound" in kinds


@pytest.mark.asyncio(loop_scope="session")
async def test_dry_run_decides_and_records_but_publishes_nothing(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    settings = _settings(dsn, kafka_bootstrap, c.pool, preemption_dry_run=True)
    async with _service(settings) as (decider, _):
        await c.up(decider, 1, quota=2.0)
        await c.submit("D", TaskClass.SPOT)
        await _until(lambda: decider.stats.decisions >= 3)
        await asyncio.sleep(1.0)
    assert not c.tap.payloads((BindCommand, TaskAccepted), lambda p: p.task_id == "D")
    rows = await _fetch(dsn, "SELECT kind, dry_run FROM preemption_decision WHERE task_id = 'D' ORDER BY id")
    assert [(r["kind"], r["dry_run"]) for r in rows] == [("accepted", True), ("started", True)]

"""Stalls are not failures (issue 22, item 6), on the real broker and Postgres with a 5-s node
timeout: the preemption service's input held for 12 s (its inbox consumer paused while the nodes'
telemetry also stops, as in a broker outage: nobody can speak and nobody can hear) evicts nothing;
two of three nodes silent together are held, counted and logged, not declared lost; one node of
three that stops reporting is still declared lost after the timeout.

The shared broker is never stopped: the stall is made by pausing the service's own consumption
(aiokafka's `pause`) and by the test's node agents not publishing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from preemption_world import (
    Cluster,
    Heartbeats,
    _api_settings,
    _metrics,
    _registered,
    _sample,
    _service,
    _until,
)

from gfs.schemas.commands import EvictCommand
from gfs.schemas.tasks import EvictionReason, TaskEvicted
from gfs.services.preemption.decider import Decider

pytestmark = pytest.mark.integration

TIMEOUT_S = 5.0
STALL_S = 12.0


def _lost(c: Cluster) -> list[Any]:
    evictions = c.tap.payloads(
        EvictCommand, lambda e: e.reason is EvictionReason.NODE_LOST and e.node.startswith(c.node(0)[:-1])
    )
    events = c.tap.payloads(TaskEvicted, lambda e: e.task_id.startswith(c.pool))
    return evictions + events


async def _held(port: int, pool: str, reason: str) -> float:
    text = await _metrics(port)
    return _sample(text, "gfs_preemption_node_loss_held_total", {"pool": pool, "reason": reason}) or 0.0


@pytest.mark.asyncio(loop_scope="session")
async def test_an_input_stall_longer_than_the_node_timeout_evicts_nothing(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    port, settings = _api_settings(
        dsn, kafka_bootstrap, c.pool, preemption_node_timeout_s=TIMEOUT_S, preemption_inbox_partitions=1,
    )  # fmt: skip
    nodes = [c.node(i) for i in range(3)]
    alive = dict.fromkeys(nodes, 2)  # the nodes that report, each with 2 GPUs
    async with _service(settings) as (decider, _), Heartbeats(c, alive.copy()) as beats:
        await c.quota(6.0)
        await _until(_registered(decider, c.pool, 3))
        await c.spot_running(f"{c.pool}-a")

        # A broker outage, as the service sees it: no input can be read, and no node can report.
        consumer = decider.consumer
        assert consumer is not None
        assigned = list(consumer.assignment())
        beats.nodes.clear()
        consumer.pause(*assigned)
        await asyncio.sleep(STALL_S)  # 12 s > the 5-s node timeout
        consumer.resume(*assigned)
        beats.nodes.update(alive)  # the agents reconnect
        await asyncio.sleep(2 * TIMEOUT_S)  # long enough for the timer to mark nodes down
        ctl = _pool(decider, c.pool)
        assert ctl.down == set(), f"nodes declared lost after an input stall: {sorted(ctl.down)}"
        assert _lost(c) == [], "an input stall evicted tasks"
        assert await _held(port, c.pool, "input_lag") >= 1  # the stall was counted

        # Two of three nodes silent together (67 % > 55 %): held, counted, not lost.
        for node in nodes[:2]:
            del beats.nodes[node]
        await _until(lambda: decider.partitions and _holding(decider, c.pool) == "mass_silence", 20)
        await asyncio.sleep(TIMEOUT_S)
        assert _pool(decider, c.pool).down == set()
        assert _lost(c) == []
        assert await _held(port, c.pool, "mass_silence") >= 1
        beats.nodes.update(alive)
        await _until(lambda: _holding(decider, c.pool) is None, 20)

        # One node of three stops for good: it is lost after the timeout, the others are not.
        del beats.nodes[nodes[0]]
        await _until(lambda: _pool(decider, c.pool).down == {nodes[0]}, 4 * TIMEOUT_S)
        await asyncio.sleep(1.0)
        assert _pool(decider, c.pool).down == {nodes[0]}


def _pool(decider: Decider, pool: str) -> Any:
    found = decider.owned_pools().get(pool)
    assert found is not None, f"pool {pool} not owned"
    return found


def _holding(decider: Decider, pool: str) -> str | None:
    for state in decider.partitions.values():
        if pool in state.controllers:
            return state.holding.get(pool)
    return None

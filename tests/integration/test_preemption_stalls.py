"""Stalls are not failures (issue 22, item 6), on the real broker and Postgres with a 5-s node
timeout: the preemption service's input held for 12 s (its inbox consumer paused while the nodes'
telemetry also stops, as in a broker outage: nobody can speak and nobody can hear) evicts nothing;
two of three nodes silent together are held, counted and logged, not declared lost; one node of
three that stops reporting is still declared lost after the timeout.

The shared broker is never stopped: the stall is made by pausing the service's own consumption
(aiokafka's `pause`) and by the test's node agents not publishing."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import pytest
from quota_harness import _free_port
from test_preemption_service import (
    Cluster,
    _registered,
    _sample,
    _service,
    _settings,
    _until,
    world,  # noqa: F401 (the pytest fixture the tests take)
)

from schemas.commands import EvictCommand
from schemas.tasks import EvictionReason, TaskClass, TaskEvicted, TaskStarted
from services.preemption.decider import Decider

pytestmark = pytest.mark.integration

TIMEOUT_S = 5.0
STALL_S = 12.0


class Heartbeats:
    """The test's node agents: telemetry every 0.5 s from the nodes in `alive`."""

    def __init__(self, cluster: Cluster, nodes: list[str]) -> None:
        self.cluster = cluster
        self.alive = set(nodes)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Heartbeats:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        while True:
            for node in sorted(self.alive):
                await self.cluster.telemetry(node, 2)
            await asyncio.sleep(0.5)


def _lost(c: Cluster) -> list[Any]:
    evictions = c.tap.payloads(
        EvictCommand, lambda e: e.reason is EvictionReason.NODE_LOST and e.node.startswith(c.node(0)[:-1])
    )
    events = c.tap.payloads(TaskEvicted, lambda e: e.task_id.startswith(c.pool))
    return evictions + events


async def _held(port: int, pool: str, reason: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
        text = await response.text()
    return _sample(text, "gfs_preemption_node_loss_held_total", {"pool": pool, "reason": reason}) or 0.0


@pytest.mark.asyncio(loop_scope="session")
async def test_an_input_stall_longer_than_the_node_timeout_evicts_nothing(
    world: tuple[Cluster, str],  # noqa: F811 (the pytest fixture imported above)
    kafka_bootstrap: str,
) -> None:
    c, dsn = world
    port = _free_port()
    settings = _settings(
        dsn, kafka_bootstrap, c.pool, preemption_node_timeout_s=TIMEOUT_S, preemption_api_port=port,
        preemption_inbox_partitions=1,
    )  # fmt: skip
    nodes = [c.node(i) for i in range(3)]
    async with _service(settings) as (decider, _), Heartbeats(c, nodes) as beats:
        await c.quota(6.0)
        await _until(_registered(decider, c.pool, 3))
        task = f"{c.pool}-a"
        await c.submit(task, TaskClass.SPOT)
        (bind,) = await c.bind_of(task)
        await c.started(bind)
        await c.tap.wait(TaskStarted, lambda e: e.task_id == task)

        # A broker outage, as the service sees it: no input can be read, and no node can report.
        consumer = decider.consumer
        assert consumer is not None
        assigned = list(consumer.assignment())
        beats.alive.clear()
        consumer.pause(*assigned)
        await asyncio.sleep(STALL_S)  # 12 s > the 5-s node timeout
        consumer.resume(*assigned)
        beats.alive.update(nodes)  # the agents reconnect
        await asyncio.sleep(2 * TIMEOUT_S)  # long enough for the timer to mark nodes down
        ctl = _pool(decider, c.pool)
        assert ctl.down == set(), f"nodes declared lost after an input stall: {sorted(ctl.down)}"
        assert _lost(c) == [], "an input stall evicted tasks"
        assert await _held(port, c.pool, "input_lag") >= 1  # the stall was counted

        # Two of three nodes silent together (67 % > 55 %): held, counted, not lost.
        beats.alive.difference_update(nodes[:2])
        await _until(lambda: decider.partitions and _holding(decider, c.pool) == "mass_silence", 20)
        await asyncio.sleep(TIMEOUT_S)
        assert _pool(decider, c.pool).down == set()
        assert _lost(c) == []
        assert await _held(port, c.pool, "mass_silence") >= 1
        beats.alive.update(nodes)
        await _until(lambda: _holding(decider, c.pool) is None, 20)

        # One node of three stops for good: it is lost after the timeout, the others are not.
        beats.alive.discard(nodes[0])
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

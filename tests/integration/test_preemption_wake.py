"""The decider wakes at its pools' due times (decider/due_wake.py's DueWake), not at its next periodic
tick: a held start's binds go out at its deadline, within tens of milliseconds, with a tick far
longer than the test; and an idle pool whose due times lie an hour ahead does not wake at all.

On the real broker and Postgres, the test in the agents' seat (preemption_world.py's world):
two 2-GPU nodes, A and B (spot) running, H (HP) evicts B and waits for an ack that never comes;
grace 1 s + margin 0.5 s, so H's binds are due 1.5 s after the eviction."""

from __future__ import annotations

import asyncio

import pytest
from preemption_world import Cluster, _service, _settings, _until

from gfs.schemas.commands import BindCommand
from gfs.services.core.ids import TaskId
from gfs.services.preemption.decider import DueWake

pytestmark = pytest.mark.integration

TICK_S = 120.0  # far longer than the test: only a wake at the due time can release H in time


@pytest.mark.asyncio(loop_scope="session")
async def test_a_held_start_is_bound_at_its_deadline_not_at_the_next_tick(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    settings = _settings(
        dsn, kafka_bootstrap, c.pool, preemption_tick_s=TICK_S, preemption_grace_s=1.0,
        preemption_ack_margin_s=0.5,
    )  # fmt: skip
    async with _service(settings) as (decider, _):
        await c.up(decider, 2)
        await c.hp_evicts_the_younger("A", "B", "H")
        controller = decider.owned_pools()[c.pool]
        deadline = controller.driver.held.held[TaskId("H")].deadline
        (bind_h,) = await c.tap.wait(BindCommand, lambda b: b.task_id == "H", timeout=10.0)
        late = bind_h.issued_at.timestamp() - deadline
        # Before the wake: up to TICK_S late (the bind waited for the next periodic tick).
        assert 0.0 <= late < 0.25, f"H was bound {late:.3f}s after its deadline"
        # B's ending was due with H's start and ended then (no node reports it): what is left is
        # an hour away (A's first guarantee period, the quota's expiry), so the decider sleeps.
        await _until(lambda: not controller.driver.held.endings)
        wake = decider.on_committed
        assert isinstance(wake, DueWake)
        wakes = wake.wakes
        assert wakes >= 1
        await asyncio.sleep(2.0)
        assert wake.wakes == wakes, "the decider woke with nothing due"

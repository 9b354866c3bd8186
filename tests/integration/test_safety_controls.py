"""SRE safety controls on the real broker and Postgres (issue 14 item 4): each control changes what
the running preemption service decides, leaves an audit row (who, when, what, why) in Postgres and
shows in `GET /controls`; writes need the admin bearer token. On preemption_world.py's cluster
(the test plays the node agents)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import aiohttp
import asyncpg
import pytest
from preemption_world import Cluster, _api_settings, _service, _until
from quota_harness import _fetch, _fetchval

from gfs.schemas.commands import BindCommand, EvictCommand
from gfs.schemas.tasks import TaskClass
from gfs.services.preemption.decider import Decider
from gfs.services.preemption.service import PreemptionSettings

pytestmark = pytest.mark.integration

TOKEN = "it-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def _post(
    port: int, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{port}{path}", json=body, headers=headers) as r,
    ):
        return r.status, await r.json()


async def _get(port: int, path: str) -> Any:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}{path}") as r:
        assert r.status == 200
        return await r.json()


async def _audit(dsn: str, pool: str) -> list[asyncpg.Record]:
    return await _fetch(dsn, "SELECT * FROM preemption_control_audit WHERE scope = $1 ORDER BY id", pool)


def _check_audit(row: asyncpg.Record, who: str, control: str, reason: str) -> None:
    assert row["who"] == who and row["control"] == control and row["reason"] == reason
    assert abs((datetime.now(UTC) - row["at"]).total_seconds()) < 120
    assert row["instance"]


async def _two_spot(c: Cluster, decider: Decider) -> None:
    """Two 2-GPU nodes, each running one 2-GPU spot task (A, then B)."""
    await c.up(decider, 2)
    for tid in ("A", "B"):
        await c.spot_running(tid)


def _admin_settings(c: Cluster, dsn: str, kafka: str) -> tuple[int, PreemptionSettings]:
    """The service's settings with an SRE API on a port of its own that takes the admin token."""
    return _api_settings(dsn, kafka, c.pool, preemption_admin_token=TOKEN)


def _evictions_by(c: Cluster, preemptor: str) -> list[EvictCommand]:
    return c.tap.payloads(EvictCommand, lambda e: e.preemptor_task_id == preemptor)


@pytest.mark.asyncio(loop_scope="session")
async def test_writes_need_the_token_and_a_refused_write_changes_nothing(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    body = {"on": True, "pool": c.pool, "reason": "test", "who": "mallory"}
    port, settings = _api_settings(dsn, kafka_bootstrap, c.pool)
    async with _service(settings):
        status, answer = await _post(port, "/controls/kill-switch", body, AUTH)  # no token configured
        assert status == 503 and "PREEMPTION_ADMIN_TOKEN" in answer["error"]
    port, settings = _admin_settings(c, dsn, kafka_bootstrap)
    async with _service(settings):
        assert (await _post(port, "/controls/kill-switch", body))[0] == 401
        assert (await _post(port, "/controls/kill-switch", body, {"Authorization": "Bearer wrong"}))[0] == 401
        assert (await _post(port, "/controls/kill-switch", {"on": True, "who": "x"}, AUTH))[
            0
        ] == 400  # no reason
        state = await _get(port, "/controls")  # reads need no token
        assert state["controls"] == []
    assert await _audit(dsn, c.pool) == []


@pytest.mark.asyncio(loop_scope="session")
async def test_the_kill_switch_holds_a_preemption_until_it_is_off(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    port, settings = _admin_settings(c, dsn, kafka_bootstrap)
    async with _service(settings) as (decider, _):
        await _two_spot(c, decider)
        on = {"on": True, "pool": c.pool, "reason": "bad victim choices in INC-42", "who": "alice"}
        status, answer = await _post(port, "/controls/kill-switch", on, AUTH)
        assert status == 200 and answer["applied_here"][c.pool]["kill_switch"] is True
        await c.submit("H", TaskClass.HP)
        await _until(lambda: decider.owned_pools()[c.pool].running_and_queued()["hp_queued"] == 1)
        await asyncio.sleep(2.0)  # several passes (ticks every 0.2 s)
        assert not _evictions_by(c, "H") and not c.tap.payloads(BindCommand, lambda b: b.task_id == "H")
        state = await _get(port, "/controls")
        assert state["pools"][c.pool]["applied"]["kill_switch"] and state["pools"][c.pool]["in_sync"]
        off = {"on": False, "pool": c.pool, "reason": "INC-42 resolved", "who": "bob"}
        assert (await _post(port, "/controls/kill-switch", off, AUTH))[0] == 200
        (evict,) = await c.tap.wait(EvictCommand, lambda e: e.preemptor_task_id == "H")
        assert evict.task_ids == ("B",)
    first, second = await _audit(dsn, c.pool)
    _check_audit(first, "alice", "kill_switch", "bad victim choices in INC-42")
    _check_audit(second, "bob", "kill_switch", "INC-42 resolved")
    assert second["action"] == '{"cleared": true}' and second["previous"] == '{"on": true}'


@pytest.mark.asyncio(loop_scope="session")
async def test_a_frozen_quota_ignores_a_new_one_and_an_override_admits_up_to_it(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    port, settings = _admin_settings(c, dsn, kafka_bootstrap)
    async with _service(settings) as (decider, _):
        await c.up(decider, 2, quota=0.0)
        ctl = decider.owned_pools()[c.pool]
        freeze = {"pool": c.pool, "mode": "freeze", "reason": "forecast model rollout", "who": "carol"}
        assert (await _post(port, "/controls/quota", freeze, AUTH))[0] == 200
        await c.quota(4.0)  # recorded, not applied
        await _until(lambda: ctl.last_quota is not None and ctl.last_quota.quotas[0].quota_gpus == 4.0)
        assert ctl.runtime.quota[1] == 0.0
        await c.submit("S1", TaskClass.SPOT)
        await asyncio.sleep(1.5)
        assert not c.tap.payloads(BindCommand, lambda b: b.task_id == "S1")  # the frozen quota is 0
        override = {
            "pool": c.pool,
            "mode": "override",
            "quota_gpus": {"1": 4, "2": 4, "4": 4},
            "reason": "pool drained for HP maintenance is back",
            "who": "dave",
        }
        status, answer = await _post(port, "/controls/quota", override, AUTH)
        assert status == 200 and answer["applied_here"][c.pool]["quota_mode"] == "override"
        await c.submit("S2", TaskClass.SPOT)
        await c.submit("S3", TaskClass.SPOT)
        binds = await c.tap.wait(BindCommand, lambda b: b.task_id in ("S1", "S2", "S3"), count=2)
        await asyncio.sleep(1.0)
        # 4 GPUs of override: two 2-GPU spot tasks run, the third waits.
        assert (
            len({b.task_id for b in c.tap.payloads(BindCommand, lambda b: b.task_id in ("S1", "S2", "S3"))})
            == 2
        )
        assert {b.task_id for b in binds} <= {"S1", "S2", "S3"}
    first, second = await _audit(dsn, c.pool)
    _check_audit(first, "carol", "quota", "forecast model rollout")
    _check_audit(second, "dave", "quota", "pool drained for HP maintenance is back")
    held = await _fetchval(
        dsn, "SELECT count(*) FROM preemption_decision WHERE pool = $1 AND kind = 'quota_held'", c.pool
    )
    assert held >= 1


@pytest.mark.asyncio(loop_scope="session")
async def test_an_eviction_cap_of_one_per_hour_lets_one_preemption_through(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    port, settings = _admin_settings(c, dsn, kafka_bootstrap)
    async with _service(settings) as (decider, _):
        await _two_spot(c, decider)
        cap = {"pool": c.pool, "max_evictions": 1, "interval_s": 3600, "reason": "limit churn", "who": "erin"}
        assert (await _post(port, "/controls/eviction-cap", cap, AUTH))[0] == 200
        await c.submit("H1", TaskClass.HP)
        (first,) = await c.tap.wait(EvictCommand, lambda e: e.preemptor_task_id == "H1")
        await c.submit("H2", TaskClass.HP)
        await _until(lambda: decider.owned_pools()[c.pool].running_and_queued()["hp_queued"] == 1)
        await asyncio.sleep(2.0)
        assert not _evictions_by(c, "H2")
        explained = await _get(port, "/explain/H2")
        assert explained["live"]["queued"]["reason"] == "EVICTION_BUDGET"
        state = await _get(port, "/controls")
        assert state["pools"][c.pool]["eviction_budget_left"] == 0
        assert first.task_ids in (("A",), ("B",))
    (row,) = await _audit(dsn, c.pool)
    _check_audit(row, "erin", "eviction_cap", "limit churn")
    assert '"max_evictions": 1' in row["action"]
    # The cap survives a restart (journal replay, then the table).
    async with _service(settings) as (again, _):
        await _until(lambda: c.pool in again.owned_pools())
        assert again.owned_pools()[c.pool].runtime.cap.cap == (1, 3600.0)
        await asyncio.sleep(1.0)
        assert not _evictions_by(c, "H2")


@pytest.mark.asyncio(loop_scope="session")
async def test_a_tenant_budget_is_persisted_shown_with_what_is_left_and_yields_to_hp(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    port, settings = _admin_settings(c, dsn, kafka_bootstrap)
    async with _service(settings) as (decider, _):
        await _two_spot(c, decider)  # A and B, both of tenant org-it
        budget = {"tenant": "org-it", "max_evictions": 1, "per": "day", "reason": "INC-7 churn", "who": "gus"}
        for bad in ({"pool": c.pool}, {"per": "week"}, {"max_evictions": -1}):
            assert (await _post(port, "/controls/tenant-budget", {**budget, **bad}, AUTH))[0] == 400
        status, answer = await _post(port, "/controls/tenant-budget", budget, AUTH)
        assert status == 200 and answer["scope"] == "org-it"
        assert answer["applied_here"][c.pool]["tenant_budgets"] == {
            "org-it": {"max_evictions": 1, "per": "day"}
        }
        await c.submit("H1", TaskClass.HP)
        await c.tap.wait(EvictCommand, lambda e: e.preemptor_task_id == "H1")
        state = await _get(port, "/controls")
        left = {"max_evictions": 1, "per": "day", "used": 1, "left": 0}
        assert state["pools"][c.pool]["tenant_budgets"] == {"org-it": left}
        page = await _get(port, "/dashboard/data")
        assert page["pools"][c.pool]["tenant_budgets"] == {"org-it": left}
        # Every spot task left is org-it's: the budget is soft, so HP still preempts (decisions.md).
        await c.submit("H2", TaskClass.HP)
        await c.tap.wait(EvictCommand, lambda e: e.preemptor_task_id == "H2")
    (row,) = await _audit(dsn, "org-it")
    _check_audit(row, "gus", "tenant_budget", "INC-7 churn")
    # The budget and its count survive a restart (journal replay, then the table).
    async with _service(settings) as (again, _):
        await _until(lambda: c.pool in again.owned_pools())
        ctl = again.owned_pools()[c.pool]
        assert ctl.controls.tenant_budgets == (("org-it", 1, "day"),)
        assert ctl.runtime.tenant_evictions.left(ctl.runtime.now) == {"org-it": 0}

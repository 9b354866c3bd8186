"""Early reclaim warnings on the real broker and Postgres (issue 27 item 2): a pool whose quota
carries an HP-demand forecast above what spot leaves gets its spot task warned once: a
TaskReclaimWarning, a WarnCommand signed with the task's node key, a `warned` decision.

Hand-worked: two 2-GPU nodes (4 GPUs), spot task A (2 GPUs) runs, so spot leaves 4 - 2 = 2 GPUs to
HP; the forecast's hour holding now has mean 3, std 0, so its 0.95 quantile is 3 and the shortfall
is 3 - 2 = 1 GPU: A, the only running spot task, covers it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from preemption_world import TAPPED, Cluster, _key, _registered, _service, _settings, _until, cluster_world

from gfs.schemas.commands import WarnCommand
from gfs.schemas.envelope import wrap
from gfs.schemas.quota import GuaranteeQuota, HpDemandHour, SpotQuota
from gfs.schemas.tasks import TaskReclaimWarning
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.signing import SignatureCheck, check_signature

pytestmark = pytest.mark.integration


async def _quota_with_forecast(c: Cluster, mean: float) -> None:
    now = datetime.now(UTC)
    q = SpotQuota(
        pool=c.pool, quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=4.0) for h in (1, 2, 4)),
        eta=1.0, capacity_gpus=4, valid_from=now, valid_until=now + timedelta(hours=1),
        forecast_version="it:warn", hp_demand=(HpDemandHour(mean=mean, std=0.0),) * 2,
    )  # fmt: skip
    await c.producer.send("gfs.quotas", wrap(q, producer="it"))


@pytest.mark.asyncio(loop_scope="session")
async def test_a_spot_task_is_warned_once_signed_and_recorded(
    database_url: str, kafka_bootstrap: str, registry_topics: TopicsReport, scratch_schema: str
) -> None:
    async with cluster_world(database_url, kafka_bootstrap, scratch_schema, TAPPED) as (c, dsn):
        settings = _settings(dsn, kafka_bootstrap, c.pool)
        async with _service(settings) as (decider, _):
            await c.telemetry(c.node(0), 2)
            await c.telemetry(c.node(1), 2)
            await _quota_with_forecast(c, 3.0)
            await _until(_registered(decider, c.pool, 2), timeout=120)  # a busy shared broker
            bind = await c.spot_running("A")
            (event,) = await c.tap.wait(TaskReclaimWarning, lambda e: e.task_id == "A")
            assert (event.pool, event.attempt, event.lead_s, event.shortfall_gpus) == (c.pool, 1, 600.0, 1.0)
            (command,) = await c.tap.wait(WarnCommand, lambda w: w.task_id == "A")
            assert (command.node, command.warned_attempt) == (bind.node, 1)
            assert check_signature(command, key=_key(bind.node)) is SignatureCheck.VALID
            await asyncio.sleep(1.5)  # several ticks (0.2 s) later: still one warning per lead time
            assert len(c.tap.payloads(WarnCommand, lambda w: w.task_id == "A")) == 1
        connection = await asyncpg.connect(dsn)
        try:
            rows: list[Any] = await connection.fetch(
                "SELECT kind, detail FROM preemption_decision WHERE task_id = 'A' ORDER BY id"
            )
        finally:
            await connection.close()
        kinds = [r["kind"] for r in rows]
        assert kinds.count("warned") == 1 and kinds.index("accepted") < kinds.index("warned")

"""One decode per record (issue 23, item 2): an input the router of the deciding instance validated
reaches its decider as the validated envelope, not as bytes to decode and validate again; decisions
are the same (a spot task is bound, its worker's ack applied)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from test_preemption_service import Cluster, _registered, _service, _settings, _until, cluster_world

from schemas.tasks import TaskClass, TaskStarted
from services.platform.kafka.topic_admin import TopicsReport
from services.preemption.decider import reading

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(loop_scope="session")
async def world(
    database_url: str, kafka_bootstrap: str, registry_topics: TopicsReport, scratch_schema: str
) -> AsyncIterator[tuple[Cluster, str]]:
    async with cluster_world(database_url, kafka_bootstrap, scratch_schema) as found:
        yield found


@pytest.mark.asyncio(loop_scope="session")
async def test_the_decider_takes_what_its_router_validated_instead_of_decoding_it_again(
    world: tuple[Cluster, str], kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, dsn = world
    decoded: list[str] = []  # source topics of the inbox records the decider decoded itself
    real = reading.decode

    def counting(topic: str, value: bytes) -> Any:
        decoded.append(topic)
        return real(topic, value)

    monkeypatch.setattr(reading, "decode", counting)
    async with _service(_settings(dsn, kafka_bootstrap, c.pool)) as (decider, _):
        await c.telemetry(c.node(0), 2)
        await c.telemetry(c.node(1), 2)
        await c.quota(4.0)
        await _until(_registered(decider, c.pool, 2))
        await c.submit("A", TaskClass.SPOT)
        (bind,) = await c.bind_of("A")
        await c.started(bind)
        await c.tap.wait(TaskStarted, lambda e: e.task_id == "A")
        # The worker's ack, the last of the five inbox records (telemetry x2, the quota, the
        # submission, the ack), was applied: the decider has read them all. Each was decoded once,
        # by the router; one may race its own ack (the decider read it before the router heard
        # where it landed): that one is decoded from its bytes, as before.
        assert len(decoded) <= 1, decoded
        handoff = decider.handoff
        assert handoff is not None and handoff.handed >= 4 and handoff.missed == len(decoded)

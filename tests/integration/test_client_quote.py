"""`GfsClient.quote` on the real broker (issue 27 item 1): the survival probability a spot task's
TaskAccepted carries, read off the task's lifecycle partition; None for a task accepted without a
quote or rejected. Unique task ids; reads start at the test's own start time."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import RejectionReason, SurvivalQuote, TaskAccepted, TaskClass, TaskRejected
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.producers.client import GfsClient

pytestmark = pytest.mark.integration

LIFECYCLE = "gfs.tasks.lifecycle"
WAIT_S = 60.0
QUOTE = SurvivalQuote(guarantee_hours=2, guarantee=0.5, hours_1=0.691, hours_2=0.5, hours_4=0.159)


async def test_quote_reads_the_survival_of_the_task_accepted(
    registry_topics: TopicsReport, kafka_bootstrap: str
) -> None:
    prefix = f"it-quote-{uuid.uuid4().hex[:10]}-"
    since = datetime.now(UTC)
    spot, hp, rejected = f"{prefix}spot", f"{prefix}hp", f"{prefix}rejected"
    async with (
        GfsClient(bootstrap_servers=kafka_bootstrap) as client,
        EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as scheduler,
    ):
        for payload in (
            TaskAccepted(task_id=spot, pool="A100", task_class=TaskClass.SPOT, survival=QUOTE),
            TaskAccepted(task_id=hp, pool="A100", task_class=TaskClass.HP),
            TaskRejected(task_id=rejected, reason=RejectionReason.UNKNOWN_GPU_MODEL, message="no such pool"),
        ):
            await scheduler.send(LIFECYCLE, wrap(payload, producer="it-scheduler"))
        assert await client.quote(spot, timeout_s=WAIT_S, since=since) == QUOTE
        assert await client.quote(hp, timeout_s=WAIT_S, since=since) is None
        # A rejection is terminal: quote returns at once rather than waiting out its timeout.
        assert await client.quote(rejected, timeout_s=WAIT_S, since=since) is None

"""The forecast stream deletes an ended task's record `FORECAST_TASK_KEEP_S` after it processed
the ending, on the real broker (issue 25: its `tasks` table, and the table's changelog, kept every
task ever seen). The window is 20 s here (1 h by default).

Tasks a, b and c share a source partition (the producers' partitioner, murmur2 of the task id),
because a record is deleted while an event of its partition is processed. a is submitted, accepted
and finished, then c is submitted at once (a ended seconds ago: kept); 20 s after a's end, b is
submitted (a is due: deleted). The changelog then ends a's key with a tombstone (what compaction
removes the key by), and c's record is still there."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner
from forecast_worker import INPUTS, _caught_up, _consuming, _send_in_order, _submit, _worker

from gfs.schemas.tasks import TaskAccepted, TaskClass, TaskFinished
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.toolkit.consumer_groups import start_group_at_end

pytestmark = pytest.mark.integration

KEEP_S = 20.0


def _same_partition(run: str, n: int) -> list[str]:
    """`n` task ids of one source partition (6 partitions, the default producer partitioner)."""
    parts = list(range(6))
    found: dict[int, list[str]] = {}
    for i in range(1000):
        tid = f"{run}-{i}"
        group = found.setdefault(DefaultPartitioner()(tid.encode(), parts, parts), [])
        group.append(tid)
        if len(group) == n:
            return group
    raise AssertionError("no partition got enough ids")


async def _changelog(kafka_bootstrap: str, topic: str, keys: set[str]) -> dict[str, list[bytes | None]]:
    """Every value the changelog holds for `keys`, in order (None: a tombstone)."""
    reader = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await reader.start()
    out: dict[str, list[bytes | None]] = {k: [] for k in keys}
    try:
        parts = [TopicPartition(topic, p) for p in range(6)]  # the table's partitions
        reader.assign(parts)
        await reader.seek_to_beginning(*parts)
        ends = await reader.end_offsets(parts)
        while [tp for tp, end in ends.items() if await reader.position(tp) < end]:
            for records in (await reader.getmany(timeout_ms=500)).values():
                for r in records:
                    key = (r.key or b"").decode().strip('"')
                    if key in out:
                        out[key].append(r.value)
    finally:
        await reader.stop()
    return out


async def test_an_ended_tasks_record_is_deleted_an_hour_after_it_ended(
    kafka_bootstrap: str, tmp_path: Path, registry_topics: TopicsReport
) -> None:
    run = uuid.uuid4().hex[:8]
    pool, app_id = f"FX-{run}", f"it-forecast-{run}"
    a, b, c = _same_partition(run, 3)
    t0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    at = lambda minutes: t0 + timedelta(minutes=minutes)  # noqa: E731
    await start_group_at_end(kafka_bootstrap, app_id, INPUTS)  # only this test's events
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        with _worker(
            kafka_bootstrap, app_id, tmp_path / "worker.log", FORECAST_TASK_KEEP_S=str(KEEP_S)
        ) as log:
            await _consuming(producer, log, run)
            await _caught_up(kafka_bootstrap, app_id)

            async def send(steps: list[tuple[Any, datetime]]) -> None:
                await _send_in_order(producer, steps, kafka_bootstrap=kafka_bootstrap, app_id=app_id)

            steps = [
                (_submit(a, "x", pool, 2), at(0)),
                (TaskAccepted(task_id=a, pool=pool, task_class=TaskClass.HP), at(0)),
                (TaskFinished(task_id=a, exit_code=0, finished_at=at(10)), at(10)),
            ]
            await send(steps)
            ended = time.monotonic()  # a's ending was processed (committed) by now
            await _send_in_order(
                producer, [(_submit(c, "x", pool, 1), at(20))], kafka_bootstrap=kafka_bootstrap, app_id=app_id
            )
            kept = await _changelog(kafka_bootstrap, f"{app_id}-tasks-changelog", {a, b, c})
            if time.monotonic() - ended < KEEP_S - 5:  # (a loaded machine may take longer: unknown then)
                assert kept[a] and kept[a][-1] is not None  # ended less than the window ago: kept
            await asyncio.sleep(max(0.0, KEEP_S + 1 - (time.monotonic() - ended)))
            await _send_in_order(
                producer, [(_submit(b, "y", pool, 1), at(30))], kafka_bootstrap=kafka_bootstrap, app_id=app_id
            )
    logged = await _changelog(kafka_bootstrap, f"{app_id}-tasks-changelog", {a, b, c})
    assert logged[a][-1] is None, logged[a]  # the tombstone compaction deletes the key by
    assert logged[a][:-1] and all(v is not None for v in logged[a][:-1])
    assert logged[c] and logged[c][-1] is not None  # c is not ended: kept
    assert logged[b] and logged[b][-1] is not None

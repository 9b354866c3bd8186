"""The producers' tools on the real broker: `GfsClient` submit/cancel/follow/status and `gfs replay`.

Every test uses task ids with a fresh unique prefix and reads back only from the end offsets it saw
before producing, so it never depends on what else is on the shared topics.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.tasks import (
    TaskAccepted,
    TaskCancelled,
    TaskClass,
    TaskFinished,
    TaskStarted,
    TaskSubmitted,
)
from gfs.schemas.topics import decode
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.tracing import extract_context, traceparent_of
from gfs.services.producers.client import GfsClient, TaskState, is_terminal
from gfs.services.producers.partitioning import partition_for_key

pytestmark = pytest.mark.integration

SUBMIT = "gfs.tasks.submit"
LIFECYCLE = "gfs.tasks.lifecycle"
WAIT_S = 60.0  # upper bound for reading back; loops stop as soon as they have what they need
GFS = Path(sys.executable).parent / "gfs"


def unique_prefix() -> str:
    return f"it-prod-{uuid.uuid4().hex[:10]}-"


async def end_offsets(bootstrap: str, topic_name: str) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        cluster = await consumer._client.fetch_all_metadata()
        partitions = cluster.partitions_for_topic(topic_name) or set()
        assert partitions, f"{topic_name} has no partitions on the broker"
        tps = [TopicPartition(topic_name, p) for p in sorted(partitions)]
        return dict(await consumer.end_offsets(tps))
    finally:
        await consumer.stop()


async def read_since(
    bootstrap: str,
    since: dict[TopicPartition, int],
    wanted: Callable[[ConsumerRecord[bytes, bytes]], bool],
    count: int,
) -> list[ConsumerRecord[bytes, bytes]]:
    """Records after `since` (per partition) for which `wanted(record)`, until `count` of them."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    found: list[ConsumerRecord[bytes, bytes]] = []
    try:
        consumer.assign(list(since))
        for tp, offset in since.items():
            consumer.seek(tp, offset)
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while len(found) < count and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                found.extend(record for record in records if wanted(record))
    finally:
        await consumer.stop()
    return found


def submission(task_id: str, **overrides: Any) -> TaskSubmitted:
    fields: dict[str, Any] = {
        "task_id": task_id, "tenant": "org-it", "gpu_model": "A100", "gpus_per_worker": 1,
        "workers": 1, "task_class": "SPOT", "command": ["gfs", "fake-task", "--duration", "1"],
    }  # fmt: skip
    fields.update(overrides)
    return TaskSubmitted.model_validate(fields)


async def test_submit_and_cancel_land_keyed_on_the_task_ids_partition_with_a_trace_header(
    registry_topics: TopicsReport, kafka_bootstrap: str
) -> None:
    prefix = unique_prefix()
    ids = [f"{prefix}{i}" for i in range(8)]  # several keys: they spread over partitions
    before = await end_offsets(kafka_bootstrap, SUBMIT)
    provider = TracerProvider()
    async with GfsClient(bootstrap_servers=kafka_bootstrap, tracer_provider=provider) as client:
        sent = {task_id: await client.submit(submission(task_id)) for task_id in ids}
        cancel = await client.cancel(ids[0], "org-it", reason="changed my mind")

    records = await read_since(
        kafka_bootstrap, before, lambda r: (r.key or b"").startswith(prefix.encode()), len(ids) + 1
    )
    assert len(records) == len(ids) + 1
    submits = {}
    for record in records:
        envelope = decode(SUBMIT, record.value)
        key = record.key.decode()
        assert envelope.payload.task_id == key
        # The partition the broker stored it on is the one follow() computes for the key.
        assert record.partition == partition_for_key(record.key, len(before))
        assert traceparent_of(record.headers) is not None
        if isinstance(envelope.payload, TaskCancelled):
            assert envelope == cancel
            assert envelope.payload.reason == "changed my mind"
        else:
            submits[key] = (envelope, record)
    assert submits.keys() == set(ids)
    for task_id, (envelope, record) in submits.items():
        assert envelope == sent[task_id]
        context = trace.get_current_span(extract_context(record.headers)).get_span_context()
        assert context.is_valid
    # Different tasks, different traces: each task's trace starts at its own submit.
    trace_ids = {
        trace.get_current_span(extract_context(r.headers)).get_span_context().trace_id
        for _, r in submits.values()
    }
    assert len(trace_ids) == len(ids)
    assert len({r.partition for _, r in submits.values()}) > 1


async def test_follow_yields_the_tasks_lifecycle_until_the_terminal_event(
    registry_topics: TopicsReport, kafka_bootstrap: str
) -> None:
    task_id = f"{unique_prefix()}follow"
    other_id = f"{task_id}-other"
    now = datetime.now(UTC)

    def event(payload: Any) -> Envelope[Any]:
        return wrap(payload, producer="it-scheduler")

    accepted = event(TaskAccepted(task_id=task_id, pool="A100", task_class=TaskClass.SPOT))
    started = event(TaskStarted(
        task_id=task_id, pool="A100", task_class=TaskClass.SPOT, started_at=now,
        placements=[{"worker_index": 0, "node": "n1", "gpu_indices": [0]}],
    ))  # fmt: skip
    finished = event(TaskFinished(task_id=task_id, exit_code=0, finished_at=now))
    after_the_end = event(TaskAccepted(task_id=task_id, pool="A100", task_class=TaskClass.SPOT))
    unrelated = event(TaskAccepted(task_id=other_id, pool="A100", task_class=TaskClass.HP))

    async with (
        GfsClient(bootstrap_servers=kafka_bootstrap) as client,
        EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as scheduler,
    ):
        await client.submit(submission(task_id))
        assert await client.status(task_id) is TaskState.SUBMITTED
        await scheduler.send(LIFECYCLE, accepted)  # before following: still read (since the submit)

        seen: list[Envelope[Any]] = []

        async def follow() -> None:
            async for envelope in client.follow(task_id, timeout_s=WAIT_S):
                seen.append(envelope)

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.5)
        await scheduler.send(LIFECYCLE, unrelated)
        await scheduler.send(LIFECYCLE, started)
        assert await client.status(task_id) is TaskState.RUNNING
        await scheduler.send(LIFECYCLE, finished)
        await scheduler.send(LIFECYCLE, after_the_end)
        await asyncio.wait_for(follower, timeout=WAIT_S)

        assert [e.event_id for e in seen] == [accepted.event_id, started.event_id, finished.event_id]
        assert is_terminal(seen[-1])
        # status reads to the current end: the event after the end is the latest one there.
        assert await client.status(task_id) is TaskState.QUEUED
        assert await client.status(other_id, since=now) is TaskState.QUEUED
        assert await client.status(f"{task_id}-never", since=datetime.now(UTC)) is TaskState.UNKNOWN


async def test_follow_ends_at_its_timeout_when_nothing_happens(
    registry_topics: TopicsReport, kafka_bootstrap: str
) -> None:
    async with GfsClient(bootstrap_servers=kafka_bootstrap) as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        events = [e async for e in client.follow(f"{unique_prefix()}silent", timeout_s=1.5,
                                                  since=datetime.now(UTC))]  # fmt: skip
        assert events == []
        assert 1.0 <= loop.time() - started < 15.0


def write_trace(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "node_info_df.csv").write_text(
        "gpu_model,gpu_capacity_num,cpu_num,node_name\nA100,8,96,n1\nH800,8,128,n2\n", encoding="utf-8"
    )
    (directory / "job_info_df.csv").write_text(
        "job_name,organization,gpu_model,cpu_request,gpu_request,worker_num,submit_time,duration,job_type\n"
        "j-c,org-b,H800,16,8,2,300,7200,Spot\n"
        "j-a,org-a,A100,8,1,1,100,3600,HP\n"
        "j-bad,,A100,8,1,1,150,60,HP\n"
        "j-b,org-a,A100,4,0.5,1,200,600,Spot\n"
        "j-d,org-c,A100,8,4,1,300,0,HP\n",
        encoding="utf-8",
    )
    return directory


async def test_gfs_replay_publishes_every_job_in_order_with_the_right_fields(
    registry_topics: TopicsReport, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    trace_dir = write_trace(tmp_path / "trace")
    before = await end_offsets(kafka_bootstrap, SUBMIT)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    process = await asyncio.create_subprocess_exec(
        str(GFS), "replay", "--trace", str(trace_dir), "--speed", "1000", "--task-prefix", prefix,
        "--checkpoint-interval", "900", env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(process.communicate(), timeout=WAIT_S)
    text = output.decode()
    assert process.returncode == 0, text
    assert "skipped j-bad: tenant" in text

    records = await read_since(
        kafka_bootstrap, before, lambda r: (r.key or b"").startswith(prefix.encode()), 4
    )
    assert len(records) == 4
    envelopes = sorted(((decode(SUBMIT, r.value), r) for r in records), key=lambda pair: pair[0].occurred_at)
    tasks = [envelope.payload for envelope, _ in envelopes]
    # Trace order: by submit time, then name (j-c and j-d share t = 300).
    assert [t.task_id for t in tasks] == [f"{prefix}j-a", f"{prefix}j-b", f"{prefix}j-c", f"{prefix}j-d"]
    for envelope, record in envelopes:
        assert envelope.producer == "gfs-replay"
        assert record.key == envelope.payload.task_id.encode()
        assert record.partition == partition_for_key(record.key, len(before))
        assert traceparent_of(record.headers) is not None
    a, b, c, d = tasks
    assert (a.tenant, a.gpu_model, a.gpus_per_worker, a.workers) == ("org-a", "A100", 1, 1)
    assert a.task_class is TaskClass.HP
    assert (a.expected_duration_s, a.checkpoint_interval_s) == (3600.0, 900.0)
    assert a.command == ("gfs", "fake-task", "--duration", "3.6", "--checkpoint-s", "0.9")
    assert (b.gpus_per_worker, b.task_class, b.guarantee_hours) == (0.5, TaskClass.SPOT, 1)
    assert b.command[3] == "0.6"
    assert (c.tenant, c.gpu_model, c.gpus_per_worker, c.workers) == ("org-b", "H800", 8, 2)
    assert c.task_class is TaskClass.SPOT
    assert c.command[3] == "7.2"
    assert d.expected_duration_s is None and d.command[3] == "0"
    # Scaled time: 200 trace seconds between the first and the last at speed 1000 -> 0.2 s.
    spread = (envelopes[-1][0].occurred_at - envelopes[0][0].occurred_at).total_seconds()
    assert 0.15 <= spread < 5.0

"""`gfs deadletter replay` on the real broker against the real preemption service (issue 26 item 5).

A submission an older router could not handle sits in gfs.deadletter (written as that router would
have written it); a record that is bad today is dead-lettered by the running router. Replaying both
by offset, as an operator would (the CLI in a subprocess): the good one is published byte for byte
with a gfs-replayed-from header and the service accepts its task; the bad one is refused with
today's reason and exit status 1. Replaying the good one again changes nothing: the service
de-duplicates on the unchanged event_id (no second TaskAccepted, no DUPLICATE_TASK_ID rejection).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import pytest_asyncio
from preemption_world import Cluster, _service, _settings, cluster_world

from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import TaskAccepted, TaskClass, TaskRejected, TaskSubmitted
from gfs.schemas.topics import encode
from gfs.services.platform.dead_letters import REPLAY_HEADER
from gfs.services.platform.deadletter_cli import read_letters
from gfs.services.platform.kafka.dead_letter import FailedRecord, build_dead_letter
from gfs.services.platform.kafka.topic_admin import TopicsReport

pytestmark = pytest.mark.integration

TAPPED = ("gfs.tasks.lifecycle", "gfs.tasks.submit", "gfs.commands.bind", "gfs.pools.status")


@pytest_asyncio.fixture(loop_scope="session")
async def world(
    database_url: str, kafka_bootstrap: str, registry_topics: TopicsReport, scratch_schema: str
) -> AsyncIterator[tuple[Cluster, str]]:
    async with cluster_world(database_url, kafka_bootstrap, scratch_schema, TAPPED) as found:
        yield found


async def _cli(kafka_bootstrap: str, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from gfs.services.cli import main; main()", "deadletter", *args,
        env=os.environ | {"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode() + err.decode()


@pytest.mark.asyncio(loop_scope="session")
async def test_replay_applies_a_fixed_letter_once_and_refuses_a_bad_one(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    async with _service(_settings(dsn, kafka_bootstrap, c.pool)) as (decider, _):
        await c.up(decider, 1, gpus=4)

        good_id, bad_id = f"{c.pool}-good", f"{c.pool}-bad-{uuid.uuid4().hex[:6]}"
        task = TaskSubmitted(task_id=good_id, tenant="org-it", gpu_model=c.pool, gpus_per_worker=1, workers=1,
                             task_class=TaskClass.HP, command=("gfs", "fake-task"))  # fmt: skip
        value = encode(wrap(task, producer="it"))
        old = FailedRecord(topic="gfs.tasks.submit", partition=0, offset=0, value=value, consumer_group="old")
        error = ValueError("schema_version 2 is not supported")
        letter = build_dead_letter(old, error=error, failed_at=datetime.now(UTC), producer="it")
        good_offset = (await c.producer.send("gfs.deadletter", letter)).offset

        bad = json.loads(encode(wrap(task.model_copy(update={"task_id": bad_id}), producer="it")))
        bad["payload"]["gpus_per_worker"] = -1  # invalid today, and after any replay
        await c.producer.send_raw("gfs.tasks.submit", value=json.dumps(bad).encode(), key=bad_id.encode())
        bad_offset = None
        for _ in range(60):
            found = [i for i in await read_letters(kafka_bootstrap) if bad_id.encode() in i.original()]
            if found:
                bad_offset = found[0].offset
                assert "gpus_per_worker" in found[0].letter.error
                break
            await asyncio.sleep(1.0)
        assert bad_offset is not None, "the router never dead-lettered the invalid submission"
        assert not c.tap.payloads((TaskAccepted, TaskRejected), lambda e: e.task_id == good_id)

        rc, out = await _cli(kafka_bootstrap, "replay", str(good_offset), str(bad_offset), "--output", "json")
        assert rc == 1, out  # one letter could not be replayed
        results = {r["offset"]: r for r in json.loads(out[: out.rindex("]") + 1])}
        assert results[good_offset]["verdict"] == "replay" and results[good_offset]["published"]
        assert results[bad_offset]["verdict"] == "still_invalid"
        assert "gpus_per_worker" in results[bad_offset]["detail"]

        await c.tap.wait(TaskAccepted, lambda e: e.task_id == good_id)
        submits = [(e, h) for t, e, h in c.tap.items if t == "gfs.tasks.submit"]
        replayed = [(e, h) for e, h in submits if e.payload.task_id == good_id]
        assert len(replayed) == 1
        envelope, headers = replayed[0]
        assert encode(envelope) == value  # byte for byte: the same event_id
        assert (REPLAY_HEADER, f"gfs.deadletter/0/{good_offset}".encode()) in headers
        assert not c.tap.payloads(TaskSubmitted, lambda e: e.task_id == bad_id)

        rc, out = await _cli(kafka_bootstrap, "replay", str(good_offset))
        assert rc == 0, out
        await c.tap.wait(TaskSubmitted, lambda e: e.task_id == good_id, count=2)
        await asyncio.sleep(3.0)  # the service had time to act on the second copy
        assert len(c.tap.payloads(TaskAccepted, lambda e: e.task_id == good_id)) == 1
        assert not c.tap.payloads(TaskRejected, lambda e: e.task_id == good_id)

"""Hostile input never stops a partition (issue 22, item 8), on the real broker and Postgres.

The preemption service runs in-process on a one-partition inbox (so "the partition goes on" means
the one partition every input of the pool shares), with its own groups, inbox and database schema:

- a NUL in each free string of its inputs (task id, tenant, GPU model, command as a string and as
  an argv item, a cancel's tenant and reason, an ack's detail and task id) is dead-lettered at
  decode by the router with the field and the character, and a valid task submitted after them is
  accepted and bound. On the code before issue 22 the NUL task id crashed the router on its
  Postgres insert (and the service with it), and a NUL command made the decider retry its
  partition every 0.5 s for ever;
- defence in depth: a record that passes the schemas but fails to store (a Postgres trigger of the
  test's schema refuses it with a data exception, as Postgres refused the NUL) is dead-lettered
  after its second failure, once by the router (its route) and once by the decider (its journal
  row), and the records around it are decided;
- the SRE API answers a bad query parameter with 400 and a message (it answered 500; 422 from
  issue 22 until issue 26 made every SRE API's bad input a 400), an unknown one too.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import asyncpg
import pytest
import pytest_asyncio
from aiokafka.structs import RecordMetadata
from preemption_world import Cluster, _api_settings, _service, _settings, _until, cluster_world
from quota_harness import _fetchval

from gfs.schemas.commands import BindCommand
from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import TaskAccepted, TaskCancelled, TaskClass, TaskSubmitted
from gfs.schemas.topics import encode
from gfs.schemas.workers import WorkerExited
from gfs.services.platform.kafka.topic_admin import TopicsReport

pytestmark = pytest.mark.integration

SUBMIT, WORKER_ACK, DEAD = "gfs.tasks.submit", "gfs.commands.worker-ack", "gfs.deadletter"
TAPPED = ("gfs.commands.bind", "gfs.tasks.lifecycle", DEAD)


@pytest_asyncio.fixture(loop_scope="session")
async def hostile(
    database_url: str, kafka_bootstrap: str, registry_topics: TopicsReport, scratch_schema: str
) -> AsyncIterator[tuple[Cluster, str]]:
    async with cluster_world(database_url, kafka_bootstrap, scratch_schema, TAPPED, "it-hostile") as found:
        yield found


def _raw(payload: Any, **changes: Any) -> bytes:
    """`payload` encoded as the wire has it, then its payload fields replaced by `changes` (which
    the model would refuse to build): what a hostile or broken producer can publish."""
    message = json.loads(encode(wrap(payload, producer="it-hostile")))
    message["payload"].update(changes)
    return json.dumps(message).encode()


def _task(c: Cluster, tid: str) -> TaskSubmitted:
    return TaskSubmitted(task_id=tid, tenant="org-it", gpu_model=c.pool, gpus_per_worker=1, workers=1,
                         task_class=TaskClass.SPOT, command=("gfs", "fake-task"))  # fmt: skip


def _letters(c: Cluster, sent: RecordMetadata, group: str) -> list[DeadLetter]:
    """The letters of the record `sent` from consumer `group`: every service reading the shared
    topic (the other tests' too) dead-letters a bad record once per consumer group."""
    where = (sent.topic, sent.partition, sent.offset)
    return c.tap.payloads(
        DeadLetter,
        lambda d: (
            (d.source_topic, d.source_partition, d.source_offset) == where and d.consumer_group == group
        ),
    )


async def _accepted_and_bound(c: Cluster, tid: str) -> None:
    await c.tap.wait(TaskAccepted, lambda a: a.task_id == tid, timeout=60)
    await c.tap.wait(BindCommand, lambda b: b.task_id == tid, timeout=60)


@pytest.mark.asyncio(loop_scope="session")
async def test_a_nul_in_any_string_is_dead_lettered_and_the_partition_goes_on(
    hostile: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = hostile
    settings = _settings(dsn, kafka_bootstrap, c.pool, preemption_inbox_partitions=1)
    async with _service(settings) as (decider, service):
        node = c.node(0)
        await c.telemetry(node, 4)
        await c.quota(4.0)
        await _until(lambda: c.pool in decider.owned_pools() and bool(decider.owned_pools()[c.pool].nodes))
        valid = _task(c, "valid-0")
        exited = WorkerExited(command_id=uuid.uuid4(), node=node, task_id="valid-0", worker_index=0,
                              exit_code=1, exited_at=datetime.now(UTC))  # fmt: skip
        cancel = TaskCancelled(task_id="valid-0", tenant="org-it", reason="r")
        bad = {
            "task_id": (SUBMIT, b"t", _raw(valid, task_id="nul\x00task")),
            "tenant": (SUBMIT, b"t1", _raw(valid, task_id="t1", tenant="org\x00it")),
            "gpu_model": (SUBMIT, b"t2", _raw(valid, task_id="t2", gpu_model=c.pool + "\x00")),
            "command (string)": (SUBMIT, b"t3", _raw(valid, task_id="t3", command="run \x00 now")),
            "command (argv)": (SUBMIT, b"t4", _raw(valid, task_id="t4", command=["gfs", "fake\x00task"])),
            "cancel tenant": (SUBMIT, b"valid-0", _raw(cancel, tenant="\x00")),
            "cancel reason": (SUBMIT, b"valid-0", _raw(cancel, reason="stop\x00")),
            "ack detail": (WORKER_ACK, node.encode(), _raw(exited, detail="oops\x00")),
            "ack task id": (WORKER_ACK, node.encode(), _raw(exited, task_id="valid\x00")),
        }
        sent: dict[str, RecordMetadata] = {}
        for what, (topic_name, key, value) in bad.items():
            sent[what] = await c.producer.send_raw(topic_name, value=value, key=key)
        await c.submit("after-the-nuls", TaskClass.SPOT, gpus=1)

        await _accepted_and_bound(c, "after-the-nuls")
        router = settings.preemption_router_group
        for what, record in sent.items():
            await _until(lambda record=record: bool(_letters(c, record, router)), timeout=30)
            (letter,) = _letters(c, record, router)
            assert "control character U+0000" in letter.error, (what, letter.error)
        assert not service.done()
        routed = await _fetchval(
            dsn, "SELECT count(*) FROM preemption_task_route WHERE task_id <> 'after-the-nuls'"
        )
        assert routed == 0  # refused at decode: nothing of them reached Postgres


# A data exception (SQLSTATE class 22) like the one Postgres raises for a NUL, for records that pass
# the schemas: the route of tasks named poison-route-*, the journal row of tasks named poison-journal-*.
_POISON_TRIGGERS = """
CREATE FUNCTION refuse_poison_route() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.task_id LIKE 'poison-route-%' THEN
        RAISE EXCEPTION 'test poison in the route of %', NEW.task_id USING ERRCODE = '22023';
    END IF;
    RETURN NEW;
END $$;
CREATE FUNCTION refuse_poison_journal() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.data::text LIKE '%poison-journal-%' THEN
        RAISE EXCEPTION 'test poison in a journal row' USING ERRCODE = '22023';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER refuse_poison BEFORE INSERT ON preemption_task_route
    FOR EACH ROW EXECUTE FUNCTION refuse_poison_route();
CREATE TRIGGER refuse_poison BEFORE INSERT ON preemption_journal
    FOR EACH ROW EXECUTE FUNCTION refuse_poison_journal();
"""


@pytest.mark.asyncio(loop_scope="session")
async def test_a_record_that_fails_to_store_twice_is_dead_lettered_and_the_partition_goes_on(
    hostile: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = hostile
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(_POISON_TRIGGERS)
    finally:
        await connection.close()
    settings = _settings(dsn, kafka_bootstrap, c.pool, preemption_inbox_partitions=1)
    async with _service(settings) as (decider, service):
        await c.telemetry(c.node(0), 4)
        await c.quota(4.0)
        await _until(lambda: c.pool in decider.owned_pools() and bool(decider.owned_pools()[c.pool].nodes))
        sent = {}
        for tid in ("before", "poison-route-1", "poison-journal-1", "after"):
            value = encode(wrap(_task(c, tid), producer="it-hostile"))
            sent[tid] = await c.producer.send_raw(SUBMIT, value=value, key=tid.encode())

        for tid in ("before", "after"):
            await _accepted_and_bound(c, tid)
        # The router could not store the route: dead-lettered by the router, from the submit topic.
        router = settings.preemption_router_group
        await _until(lambda: bool(_letters(c, sent["poison-route-1"], router)), timeout=30)
        (by_router,) = _letters(c, sent["poison-route-1"], router)
        assert "could not be stored (2 attempts" in by_router.error
        assert "test poison in the route of poison-route-1" in by_router.error

        # The decider could not store the journal row: dead-lettered from the inbox, once.
        def from_inbox() -> list[DeadLetter]:
            return c.tap.payloads(DeadLetter, lambda d: d.source_topic == settings.preemption_inbox_topic)

        await _until(lambda: bool(from_inbox()), timeout=30)
        inbox = from_inbox()
        assert len(inbox) == 1
        assert inbox[0].consumer_group == settings.preemption_group
        assert "could not be stored (2 attempts" in inbox[0].error
        assert "test poison in a journal row" in inbox[0].error
        assert b"poison-journal-1" in _original(inbox[0])
        assert decider.stats.poisoned == 1
        assert not c.tap.payloads(TaskAccepted, lambda a: a.task_id.startswith("poison-"))
        assert not service.done()


def _original(letter: DeadLetter) -> bytes:
    return base64.b64decode(letter.original)


@pytest.mark.asyncio(loop_scope="session")
async def test_bad_query_parameters_are_400_with_a_message(
    hostile: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = hostile
    port, settings = _api_settings(dsn, kafka_bootstrap, c.pool)
    async with _service(settings), aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{port}"
        for path, parameter in (
            ("/decisions?limit=-1", "limit"),
            ("/decisions?limit=0", "limit"),
            ("/decisions?limit=501", "limit"),
            ("/decisions?limit=ten", "limit"),
            ("/controls/audit?limit=-5", "limit"),
            ("/explain/a%00b", "task_id"),
            ("/controls/audit?pool=a%00b", "pool"),
            ("/dashboard/data?limit=abc", "limit"),  # a 400 in plain text before
            ("/dashboard/data?window_s=-60", "window_s"),
            ("/decisions?limt=3", "limt"),  # unknown: a typo is refused, not ignored
            ("/pools?verbose=1", "verbose"),
        ):
            async with http.get(base + path) as response:
                assert response.status == 400, (path, response.status, await response.text())
                body = await response.json()
                assert body["parameter"] == parameter
                assert f"invalid query parameter '{parameter}'" in body["error"]
        async with http.get(base + "/decisions?limit=3") as response:
            assert response.status == 200
            assert isinstance(await response.json(), list)

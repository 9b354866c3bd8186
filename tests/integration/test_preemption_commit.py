"""The decider's one-statement commit on the real Postgres (issue 22): the epoch check, journal
rows, decisions and outbox rows of a batch are written together and in their order, or, once
another owner claimed the partition, not at all (FencedError), as the transaction it replaced."""

from __future__ import annotations

import json
import uuid

import asyncpg
import pytest
from quota_harness import _migrated

from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import TaskAccepted, TaskClass
from gfs.services.platform.outbox import outbox_values
from gfs.services.preemption.controller.types import Decision
from gfs.services.preemption.journal import store

pytestmark = pytest.mark.integration


async def test_a_batch_is_written_in_order_by_its_owner_and_not_at_all_once_fenced(
    database_url: str, scratch_schema: str
) -> None:
    connection = await asyncpg.connect(await _migrated(database_url, scratch_schema))
    try:
        topic = f"it-inbox-{uuid.uuid4().hex[:8]}"
        first = await store.claim(connection, 0, "first", topic=topic)
        ids = [uuid.uuid4(), None, uuid.uuid4()]
        rows = [("P", ("submit", {"n": 0}, 10.0), ids[0]), ("P", ("schedule", {}, 10.0), ids[1]),
                ("P", ("cancel", {"n": 2}, 10.5), ids[2])]  # fmt: skip
        decisions = [("P", Decision("t0", "accepted", 10.0, {"class": "SPOT"})),
                     ("P", Decision("t0", "started", 10.0, {"attempt": 1}))]  # fmt: skip
        events = [wrap(TaskAccepted(task_id=f"t{i}", pool="P", task_class=TaskClass.SPOT), producer="it")
                  for i in range(2)]  # fmt: skip
        outgoing = outbox_values([("gfs.tasks.lifecycle", e, [("h", b"v")]) for e in events])
        await store.commit_batch(connection, first, 7, rows, decisions, outgoing, dry_run=False)

        journal = await connection.fetch(
            "SELECT epoch, kind, at_s, data, event_id FROM preemption_journal "
            "WHERE inbox_topic = $1 ORDER BY seq",
            topic,
        )
        got = [(r["epoch"], r["kind"], r["at_s"], json.loads(r["data"]), r["event_id"]) for r in journal]
        assert got == [
            (first.epoch, "submit", 10.0, {"n": 0}, ids[0]), (first.epoch, "schedule", 10.0, {}, None),
            (first.epoch, "cancel", 10.5, {"n": 2}, ids[2]),
        ]  # fmt: skip
        kinds = await connection.fetch("SELECT kind, dry_run FROM preemption_decision ORDER BY id")
        assert [(r["kind"], r["dry_run"]) for r in kinds] == [("accepted", False), ("started", False)]
        queued = await connection.fetch("SELECT key, payload, headers FROM outbox ORDER BY id")
        assert [bytes(r["key"]) for r in queued] == [b"t0", b"t1"]
        payloads = [json.loads(bytes(r["payload"])) for r in queued]
        assert [p["event_id"] for p in payloads] == [str(e.event_id) for e in events]
        assert (await store.claim(connection, 0, "second", topic=topic)).next_offset == 7

        # `first` is fenced now: its next batch writes nothing and moves no offset.
        more = [("P", ("submit", {"n": 3}, 11.0), uuid.uuid4())]
        with pytest.raises(store.FencedError):
            await store.commit_batch(connection, first, 9, more, decisions, outgoing, dry_run=False)
        assert await connection.fetchval("SELECT count(*) FROM preemption_journal") == 3
        assert await connection.fetchval("SELECT count(*) FROM preemption_decision") == 2
        assert await connection.fetchval("SELECT count(*) FROM outbox") == 2
        assert await connection.fetchval("SELECT next_offset FROM preemption_partition") == 7
    finally:
        await connection.close()

"""Journal snapshots (issue 25, services/preemption/journal/snapshots.py) on the real Postgres: a claim
restores the newest snapshot and replays only the journal rows after it, into the state a full
replay gives; a fenced owner writes no snapshot; a snapshot of another version is ignored and the
whole journal replayed."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from quota_harness import _migrated

from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.services.platform.clock import SystemClock
from gfs.services.platform.postgres import open_pool
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.decider import Decider, NodeKeys
from gfs.services.preemption.journal import store
from gfs.services.preemption.journal.entries import NodeSeenEntry, ScheduleEntry
from gfs.services.preemption.journal.inputs import Entry, apply, entry_for
from gfs.services.preemption.service import PreemptionSettings

pytestmark = pytest.mark.integration
T0 = 1_800_000_000.0
POOL = "A100"
SECRET = "it-secret-of-32-bytes-for-tests!"


def _entries(first: int, count: int) -> list[Entry]:
    """Nodes and a quota first, then submissions alternating spot and HP, each with a pass."""
    out: list[Entry] = []
    if first == 0:
        out += [NodeSeenEntry(node=f"n{n}", gpus=2, at=T0) for n in range(3)]
        quota = SpotQuota(
            pool=POOL, quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=4.0) for h in (1, 2, 4)),
            eta=1.0, capacity_gpus=6, valid_from=datetime.fromtimestamp(T0, UTC),
            valid_until=datetime.fromtimestamp(T0 + 86400, UTC), forecast_version="m:1",
        )  # fmt: skip
        out.append(entry_for(quota, T0))
    for i in range(first, first + count):
        cls = TaskClass.HP if i % 3 == 0 else TaskClass.SPOT
        task = TaskSubmitted(task_id=f"t{i}", tenant="org-a", gpu_model=POOL, gpus_per_worker=1,
                             workers=1, task_class=cls, command=("gfs", "fake-task"))  # fmt: skip
        out += [entry_for(task, T0 + i), ScheduleEntry(at=T0 + i)]
    return out


def _fingerprint(c: PoolController) -> tuple[Any, ...]:
    now = T0 + 10_000
    return (
        c.status(now),
        c.counter,
        sorted(c.seen),
        sorted(c.tasks),
        sorted(c.pending),
        sorted(map(str, c.bound)),
    )


def _replayed(*parts: tuple[list[Entry], int]) -> PoolController:
    """A full replay by hand: (rows, the epoch they were written under) in order."""
    c = PoolController(POOL, _settings("", "").controller_settings())
    for entries, epoch in parts:
        c.id_salt = f"e{epoch}"  # the salt of the ids each row derived when it was live
        for entry in entries:
            apply(c, entry)
    return c


def _settings(dsn: str, topic: str) -> PreemptionSettings:
    return PreemptionSettings(
        database_url=dsn or "postgresql://unused", preemption_inbox_topic=topic or "unused",
        preemption_grace_s=2.0, preemption_ack_margin_s=1.0, gfs_command_secret=SECRET,
    )  # fmt: skip


async def _journal(dsn: str, topic: str, claim: store.Claim, rows: list[Entry]) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        await store.append_journal(connection, claim, [(POOL, e.to_row(), None) for e in rows])
    finally:
        await connection.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_a_claim_restores_the_newest_snapshot_and_replays_only_what_follows(
    database_url: str, scratch_schema: str
) -> None:
    dsn = await _migrated(database_url, scratch_schema)
    topic = f"it-snap-{uuid.uuid4().hex[:8]}"
    settings = _settings(dsn, topic)
    first, later = _entries(0, 60), _entries(60, 20)
    async with open_pool(dsn, max_size=2) as pool:

        def decider(name: str) -> Decider:
            return Decider(pool, settings, SystemClock(), name, NodeKeys(SECRET.encode()))

        a = decider("a")
        await a.take(0)  # epoch 1, nothing journaled yet
        claim_a = a.partitions[0].claim
        await _journal(dsn, topic, claim_a, first)
        a.partitions.release(0)
        await a.take(0)  # epoch 2: the whole journal, no snapshot yet
        state_a = a.partitions[0]
        assert state_a.replayed == len(first)
        async with a.lock:
            seq = await a.snapshot(state_a)
        async with pool.acquire() as connection:
            newest = await connection.fetchval("SELECT max(seq) FROM preemption_journal")
        assert seq == newest
        await _journal(dsn, topic, state_a.claim, later)  # rows after the snapshot (epoch 2)

        b = decider("b")
        await b.take(0)  # epoch 3
        assert b.partitions[0].replayed == len(later)  # only what follows the snapshot
        whole = _replayed((first, 1), (later, 2))
        assert _fingerprint(b.partitions[0].controllers[POOL]) == _fingerprint(whole)
        # The restored pool decides with the new owner's salt, as after a full replay.
        assert b.partitions[0].controllers[POOL].id_salt == "e3"

        # The fenced owner writes no snapshot.
        async with a.lock:
            assert await a.snapshot(state_a) is None
        async with pool.acquire() as connection:
            assert await connection.fetchval("SELECT count(*) FROM preemption_snapshot") == 1
            # A snapshot another release wrote is ignored: the whole journal is replayed.
            await connection.execute("UPDATE preemption_snapshot SET version = 'f0/another-release'")
        c = decider("c")
        await c.take(0)
        assert c.partitions[0].replayed == len(first) + len(later)
        assert _fingerprint(c.partitions[0].controllers[POOL]) == _fingerprint(whole)


@pytest.mark.asyncio(loop_scope="session")
async def test_snapshots_follow_the_journal_and_only_the_newest_two_are_kept(
    database_url: str, scratch_schema: str
) -> None:
    dsn = await _migrated(database_url, scratch_schema)
    topic = f"it-snap-{uuid.uuid4().hex[:8]}"
    settings = _settings(dsn, topic).model_copy(
        update={"preemption_snapshot_rows": 5, "preemption_snapshot_s": 0.0}
    )
    async with open_pool(dsn, max_size=2) as pool:
        d = Decider(pool, settings, SystemClock(), "d", NodeKeys(SECRET.encode()))
        await d.take(0)
        state = d.partitions[0]
        rows = _entries(0, 12)
        async with d.lock:
            for i in range(0, len(rows), 4):  # batches of 4 rows through the service's commit
                chunk = rows[i : i + 4]
                effects = [(POOL, apply(state.controller(POOL, d.settings), e), None) for e in chunk]
                await d.transaction.commit(state, [(POOL, e, None) for e in chunk], effects, next_offset=None)
        async with pool.acquire() as connection:
            snaps = await connection.fetch("SELECT seq FROM preemption_snapshot ORDER BY seq")
            journal = [
                r["seq"] for r in await connection.fetch("SELECT seq FROM preemption_journal ORDER BY seq")
            ]
        # 28 rows (3 nodes, a quota, 12 submissions with their passes) in batches of 4: 5 rows are
        # due after the 2nd batch, so snapshots after rows 8, 16 and 24 (the 7th batch leaves 4
        # rows unsnapped); the newest two are kept.
        assert len(rows) == 28
        assert [r["seq"] for r in snaps] == [journal[15], journal[23]]
        again = Decider(pool, settings, SystemClock(), "e", NodeKeys(SECRET.encode()))
        await again.take(0)
        assert again.partitions[0].replayed == 4
        assert _fingerprint(again.partitions[0].controllers[POOL]) == _fingerprint(_replayed((rows, 1)))

"""The router's offset commit across a rebalance (issue 23, found by the scale-out benchmark: a
second instance joining while the first had a commit in flight crashed the first with
IllegalStateError / CommitFailedError).

A forwarder loses nothing when the group refuses its commit: the partitions' new owner reads the
records again from the last committed offset, and downstream deduplicates by event id. So a commit
refused by a rebalance is logged and the loop goes on; any other commit failure still stops it; and
only partitions still assigned are committed."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaConnectionError

from gfs.services.platform.kafka.batches import CommitInFlight, assigned_offsets, settle_commit


def _records(tp: TopicPartition, *offsets: int) -> list[ConsumerRecord[bytes, bytes]]:
    return [
        ConsumerRecord(tp.topic, tp.partition, o, 0, 0, b"k", b"v", None, 1, 1, ())  # type: ignore[arg-type]
        for o in offsets
    ]


async def _failing(exc: Exception) -> None:
    raise exc


@pytest.mark.parametrize(
    "exc",
    [IllegalStateError("Partition gfs.tasks.submit-3 is not assigned"), CommitFailedError("rebalanced")],
)
async def test_a_commit_refused_by_a_rebalance_does_not_stop_the_router(exc: Exception) -> None:
    await settle_commit(asyncio.create_task(_failing(exc)))  # no exception: the loop goes on


async def test_any_other_commit_failure_still_stops_the_router() -> None:
    with pytest.raises(KafkaConnectionError):
        await settle_commit(asyncio.create_task(_failing(KafkaConnectionError())))


def test_only_partitions_still_assigned_are_committed_at_the_offset_after_their_last_record() -> None:
    a, b, c = (TopicPartition("gfs.tasks.submit", p) for p in (0, 1, 2))
    batch = {a: _records(a, 4, 5, 6), b: _records(b, 10), c: _records(c, 7)}
    # b was revoked while the batch was routed: its new owner reads record 10 again.
    assert assigned_offsets(batch, {a, c}) == {a: 7, c: 8}
    assert assigned_offsets(batch, set()) == {}


async def test_the_revocation_waits_for_the_commit_in_flight() -> None:
    landed = asyncio.Event()

    async def commit() -> None:
        await asyncio.sleep(0.05)
        landed.set()

    listener = CommitInFlight()
    listener.task = asyncio.create_task(commit())
    await listener.on_partitions_revoked([TopicPartition("gfs.tasks.submit", 0)])
    assert landed.is_set()
    # A refused one in flight does not break the rebalance either.
    listener.task = asyncio.create_task(_failing(CommitFailedError("rebalanced")))
    await listener.on_partitions_revoked([TopicPartition("gfs.tasks.submit", 0)])

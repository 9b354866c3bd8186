"""A tool run's fresh consumer groups, committed at the topics' current end before their services
first start: the run's pools and names are new, so the shared topics' history (other runs, other
tests) is none of its business; without this a long-lived broker's history is replayed first and
readiness waits for it. And a group with committed offsets on every partition never falls back to
its reset policy after a kill."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition

from gfs.schemas.topics import topic


async def start_group_at_end(bootstrap: list[str] | str, group: str, topics: Sequence[str]) -> None:
    """Commit, for `group` (not yet started), the current end offset of every partition of
    `topics` (their partition counts from the registry)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(topic(t).partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.commit({tp: ends[tp] for tp in tps})
    finally:
        await consumer.stop()


async def start_groups_at_end(bootstrap: list[str] | str, groups: Mapping[str, Sequence[str]]) -> None:
    """`start_group_at_end` for each group and its topics."""
    for group, topics in groups.items():
        await start_group_at_end(bootstrap, group, topics)

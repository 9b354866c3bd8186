"""Forgetting ended tasks in the forecast stream (issue 25: the `tasks` table kept a record per task
ever seen, and its changelog with it).

A task's record says whether its GPUs are counted. After the task ended it is still needed for a
while: its submission and its lifecycle come on two topics read independently, and delivery is
at least once, so an acceptance, a repeated submission or a second ending may still arrive; the
ended record makes them change nothing. `keep_s` after the stream processed the ending
(`forecast_task_keep_s`, 1 h; on the host's clock, or on the topic clock the newest event time
processed) the record is deleted: the table's changelog gets a tombstone and compaction removes
the key. An event for the task later than that finds no record:
- a submission or an acceptance alone starts a record that is never counted (a task counts only
  with both); both again, later than an hour after the end, would count it again: that is the
  redelivery this window protects (Faust redelivers what was read since the last commit, seconds);
- an ending creates an ended record, deleted again `keep_s` later.

Deletion happens in the stream, while an event of the same partition is processed (Faust writes a
table's changelog to the partition of the event being processed): each partition keeps its ended
tasks in the order the stream processed their endings (`EndedTasks`; the times are the expiry
clock's, so they only grow), and each event deletes its partition's ones that are due. A worker
that starts, or gets partitions in a rebalance, learns the ended records it holds from its table
once (`seed`, timed by their ending event; records ended before that field existed count as
ended at time 0, so they go at once).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from aiokafka.partitioner import murmur2

DEFAULT_KEEP_S = 3600.0


def partition_of(task_id: str, partitions: int) -> int:
    """The source partition of a task's events: the Kafka default partitioner (murmur2 of the key,
    the task id), which every producer of the task topics uses."""
    hashed: int = murmur2(task_id.encode())
    return (hashed & 0x7FFFFFFF) % partitions


class EndedTasks:
    """Per partition: the ended tasks in ending order, until they are due for deletion."""

    __slots__ = ("_by_partition", "keep_s", "newest_s", "seeded")

    def __init__(self, keep_s: float = DEFAULT_KEEP_S) -> None:
        if keep_s < 0:
            raise ValueError("forecast_task_keep_s must be >= 0")
        self.keep_s = keep_s
        self._by_partition: dict[int, deque[tuple[float, str]]] = {}
        self.seeded = False
        self.newest_s = 0.0  # the newest task event time processed

    def now(self, event_s: float, *, topic_clock: bool) -> float:
        """The expiry's clock: the host's on the wall clock (redelivery happens in processing time;
        event times are capped at now + FORECAST_MAX_AHEAD_S there), the newest event time
        processed on the topic clock (a replay forgets as the live stream did, however fast)."""
        self.newest_s = max(self.newest_s, event_s)
        return self.newest_s if topic_clock else time.time()

    def add(self, partition: int, ended_s: float, task_id: str) -> None:
        self._by_partition.setdefault(partition, deque()).append((ended_s, task_id))

    def due(self, partition: int, now_s: float) -> list[str]:
        """The tasks of `partition` that ended `keep_s` before `now_s` or earlier (removed here)."""
        queue = self._by_partition.get(partition)
        out: list[str] = []
        while queue and queue[0][0] <= now_s - self.keep_s:
            out.append(queue.popleft()[1])
        return out

    def reset(self) -> None:
        """Forget everything (partitions moved): the next event seeds again from the table."""
        self._by_partition.clear()
        self.seeded = False

    def seed(self, records: Iterable[tuple[Any, Any]], partition: Callable[[str], int]) -> int:
        """Learn the ended records of a table (task id -> record JSON); how many."""
        found: list[tuple[float, int, str]] = []
        for key, value in records:
            if isinstance(value, dict) and value.get("ended"):
                ended_s = value.get("ended_s")
                found.append((float(ended_s) if ended_s is not None else 0.0, partition(str(key)), str(key)))
        self._by_partition.clear()
        for ended_s, part, task_id in sorted(found):
            self.add(part, ended_s, task_id)
        self.seeded = True
        return len(found)

    def __len__(self) -> int:
        return sum(len(q) for q in self._by_partition.values())


def delete_due(
    table: MutableMapping[str, Any], ended: EndedTasks, partition: int, now_s: float, partitions: int
) -> int:
    """Delete from `table` (task id -> record JSON) the records of `partition`'s tasks that are
    due at `now_s`, seeding `ended` from the table first if needed; how many were deleted. Called
    while an event of `partition` is processed, so the tombstones go to its changelog partition."""
    if not ended.seeded:
        ended.seed(table.items(), lambda tid: partition_of(tid, partitions))
    deleted = 0
    for tid in ended.due(partition, now_s):
        stored = table.get(tid)
        if isinstance(stored, dict) and stored.get("ended"):
            del table[tid]
            deleted += 1
    return deleted

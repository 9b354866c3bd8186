"""Per-pool wait queues split into buckets, each kept sorted (spec 5.3).

Why buckets: the GFS pass skips every task whose per-worker request is at least the `failed`
threshold, and the queue is ordered largest request first. Grouping tasks by that size lets a
pass skip a whole blocked bucket in O(1) instead of walking thousands of queued A10 tasks; a
FIFO queue is one bucket, where the same rule is head-of-line blocking.

A `QueueOrder` supplies: the bucket (processing order = ascending bucket key), the sort key
inside a bucket (last tier = task id), the size that the `failed` threshold compares, and the
threshold a pass starts with.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import NamedTuple, Protocol

from gfs.services.core.ids import TaskId
from gfs.services.core.reasons import Unschedulable
from gfs.services.core.task import TaskSpec

SortKey = tuple[float, ...]


class QueueOrder(Protocol):
    name: str
    initial_threshold: float

    def bucket(self, spec: TaskSpec) -> SortKey: ...

    def key(self, spec: TaskSpec, enqueued_s: float) -> SortKey: ...

    def size(self, spec: TaskSpec) -> float: ...


class Blocked(NamedTuple):
    """A bucket whose head failed while the pool was at `version`: until the pool frees GPUs or
    the quota changes (a new version) and while the same task is head, it cannot succeed."""

    version: int
    head: TaskId
    raises_threshold: bool = True  # False for a spot quota miss (spec 5.3 skips without raising)
    reason: Unschedulable = Unschedulable.NO_FIT  # why the head could not start (explanations)


class BucketQueue:
    def __init__(self, order: QueueOrder) -> None:
        self.order = order
        self._buckets: dict[SortKey, list[tuple[SortKey, TaskId]]] = {}
        self._bucket_keys: list[SortKey] = []
        # task id -> (bucket, key): read it (cheap membership and emptiness tests), do not change it
        self.index: dict[TaskId, tuple[SortKey, SortKey]] = {}
        self.entered_s: dict[TaskId, float] = {}
        self.specs: dict[TaskId, TaskSpec] = {}
        self.blocked: dict[SortKey, Blocked] = {}
        # The queued whole-GPU gangs (two workers or more), task id -> when it entered, in entering
        # order: the reservation's candidates, so finding the longest-waiting one reads only them.
        self.gangs: dict[TaskId, float] = {}
        self.gpus = 0.0  # g x w summed over the queued tasks (observed demand, quota inputs)
        self.mutations = 0  # bumped by every push and remove (memo keys of derived views)

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self.index

    def push(self, spec: TaskSpec, now: float) -> None:
        self.mutations += 1
        bucket = self.order.bucket(spec)
        key = self.order.key(spec, now)
        entries = self._buckets.get(bucket)
        if entries is None:
            entries = self._buckets[bucket] = []
            bisect.insort(self._bucket_keys, bucket)
        bisect.insort(entries, (key, spec.task_id))
        self.index[spec.task_id] = (bucket, key)
        self.entered_s[spec.task_id] = now
        self.specs[spec.task_id] = spec
        if spec.workers >= 2 and not spec.is_fractional:
            self.gangs[spec.task_id] = now
        self.gpus += spec.total_gpus

    def remove(self, task_id: TaskId) -> TaskSpec:
        self.mutations += 1
        bucket, key = self.index.pop(task_id)
        entries = self._buckets[bucket]
        i = bisect.bisect_left(entries, (key, task_id))
        del entries[i]
        if not entries:
            del self._buckets[bucket]
            self._bucket_keys.remove(bucket)
            self.blocked.pop(bucket, None)
        del self.entered_s[task_id]
        self.gangs.pop(task_id, None)
        spec = self.specs.pop(task_id)
        # An empty queue holds exactly 0: float sums of fractional requests would otherwise drift.
        self.gpus = self.gpus - spec.total_gpus if self.index else 0.0
        return spec

    def buckets(self) -> Iterator[tuple[SortKey, list[tuple[SortKey, TaskId]]]]:
        """Buckets in processing order; each list is sorted (read it, do not change it)."""
        for b in list(self._bucket_keys):
            yield b, self._buckets[b]

    def bucket_of(self, task_id: TaskId) -> SortKey:
        return self.index[task_id][0]

    def bucket_head(self, bucket: SortKey) -> TaskId | None:
        entries = self._buckets.get(bucket)
        return entries[0][1] if entries else None

    def head(self) -> TaskId | None:
        if not self._bucket_keys:
            return None
        return self._buckets[self._bucket_keys[0]][0][1]

    def smallest_head_gpus(self) -> float | None:
        """The GPUs (g x w) of the smallest task at the head of a bucket (None: empty queue)."""
        if not self._bucket_keys:
            return None
        specs = self.specs
        return min(specs[entries[0][1]].total_gpus for entries in self._buckets.values())

    def oldest_gang(self, now: float, after_s: float) -> TaskSpec | None:
        """The longest-waiting queued whole-GPU gang that has waited at least `after_s` (ties: the
        smaller task id), or None: `reservation.pick_holder`'s answer, read from `gangs` alone.
        Entering times never decrease along the dict (a queue only appends at the driver's
        current time), so the scan stops at the first gang too young or younger than the best."""
        best: tuple[float, TaskId] | None = None
        for tid, entered in self.gangs.items():
            if now - entered < after_s or (best is not None and entered > best[0]):
                break
            if best is None or (entered, tid) < best:
                best = (entered, tid)
        return None if best is None else self.specs[best[1]]

    def task_ids(self) -> list[TaskId]:
        return list(self.index)

    def longest_blocked_wait(self, now: float, reason: Unschedulable) -> float | None:
        """How long the longest-waiting head of a bucket whose last attempt failed for `reason`
        has waited (memos of a head that has since changed do not count); None if there is none."""
        waits = [
            now - self.entered_s[memo.head]
            for bucket, memo in self.blocked.items()
            if memo.reason is reason and self.bucket_head(bucket) == memo.head
        ]
        return max(waits, default=None)


class LargestFirst:
    """GFS HP order (spec 5.3): 1. larger per-worker request first; 2. submit time; 3. task id.
    Threshold `failed` starts at 16."""

    name = "largest-first"
    initial_threshold = 16.0

    def bucket(self, spec: TaskSpec) -> SortKey:
        return (-spec.gpus_per_worker, float(spec.guarantee_hours))

    def key(self, spec: TaskSpec, enqueued_s: float) -> SortKey:
        return (spec.submit_s,)

    def size(self, spec: TaskSpec) -> float:
        return spec.gpus_per_worker


class LargestFirstFewWorkers(LargestFirst):
    """GFS spot order (spec 5.3): 1. larger per-worker request; 2. fewer workers; 3. submit time;
    4. task id. Buckets also split by guarantee hours so a quota miss blocks only its bucket."""

    name = "largest-first-few-workers"

    def key(self, spec: TaskSpec, enqueued_s: float) -> SortKey:
        return (float(spec.workers), spec.submit_s)


class Fifo:
    """Arrival order (re-queued tasks at the back), one bucket: a failure blocks the queue."""

    name = "fifo"
    initial_threshold = float("inf")

    def bucket(self, spec: TaskSpec) -> SortKey:
        return (0.0,)

    def key(self, spec: TaskSpec, enqueued_s: float) -> SortKey:
        return (enqueued_s,)

    def size(self, spec: TaskSpec) -> float:
        return 0.0

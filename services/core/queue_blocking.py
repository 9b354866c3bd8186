"""Largest-first queue with head-of-line blocking (Lyra's as coded in the GFS simulator, spec 6.2).

One bucket ordered by (-gpus per worker, submit time, task id); the first task that does not fit
blocks the rest of the pass (no backfilling of smaller tasks, unlike GFS's `failed` threshold).
"""

from __future__ import annotations

from gfs.services.core.queues import SortKey
from gfs.services.core.task import TaskSpec


class LargestFirstBlocking:
    name = "largest-first-blocking"
    initial_threshold = float("inf")

    def bucket(self, spec: TaskSpec) -> SortKey:
        return (0.0,)

    def key(self, spec: TaskSpec, enqueued_s: float) -> SortKey:
        return (-spec.gpus_per_worker, spec.submit_s)

    def size(self, spec: TaskSpec) -> float:
        return 0.0

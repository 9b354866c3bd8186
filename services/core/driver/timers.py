"""The driver's timer heap: guarantee-period ends of running spot tasks, and the quota's expiry.

A run is armed when it starts and disarmed when it stops (finish, eviction, cancel, node down,
a lease not renewed). Entries of a disarmed run stay in the heap and are dropped when they come
due (a lazy heap: a stop costs nothing), so `next_due` may name a time at which nothing turns
out to be due; a shell that wakes then finds nothing to do. Each run has its own token, so a run
started at the same instant as an earlier one of the same task never fires the earlier one's
periods.

`length`: a run whose length is known in advance (the simulator knows every task's duration) arms
no period ending at or after its end; the finish reports those periods. The live service does not
know, so its runs arm every period and the finish makes the rest stale.
"""

from __future__ import annotations

import heapq
import math

from gfs.services.core.driver.effects import PeriodClosed
from gfs.services.core.guarantee import GUARANTEE_PERIOD_S
from gfs.services.core.ids import TaskId


class PeriodTimers:
    def __init__(self, period_s: float = GUARANTEE_PERIOD_S) -> None:
        self.period_s = period_s
        # (period end, task, run token): equal ends fire in task-id order, whichever shell drives.
        self._heap: list[tuple[float, TaskId, int]] = []
        self._runs: dict[TaskId, tuple[int, float, float]] = {}  # task -> (token, start, end)
        self._tokens = 0
        self.popped = 0  # entries that came due, stale ones included (the simulator counts events)

    def arm(self, task_id: TaskId, start: float, length: float = math.inf) -> None:
        """A run of `task_id` started at `start`: its first period ends one period later."""
        self._tokens += 1
        self._runs[task_id] = (self._tokens, start, start + length)
        due = start + self.period_s
        if length > self.period_s:  # (not `due < start + length`: the same float rounding as ever)
            heapq.heappush(self._heap, (due, task_id, self._tokens))

    def disarm(self, task_id: TaskId) -> None:
        self._runs.pop(task_id, None)

    def armed(self, task_id: TaskId) -> bool:
        return task_id in self._runs

    @property
    def next_due(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def pop_due(self, now: float) -> list[PeriodClosed]:
        """The periods of armed runs that ended by `now`, in time order; each one's successor is
        armed (the caller logs the success)."""
        out: list[PeriodClosed] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, task_id, token = heapq.heappop(heap)
            self.popped += 1
            run = self._runs.get(task_id)
            if run is None or run[0] != token:
                continue  # that run stopped since: its stop reported the period
            out.append(PeriodClosed(task_id, run[1], due))
            nxt = due + self.period_s
            if nxt < run[2]:
                heapq.heappush(heap, (nxt, task_id, token))
        return out

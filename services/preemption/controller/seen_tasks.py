"""The task ids a pool accepted or rejected, forgotten a redelivery window after their submission
once their task has ended (issue 25: the set only grew, by every task ever submitted).

A pool answers a second submission of a task id with TaskRejected(DUPLICATE_TASK_ID). That guard is
what stops a redelivered submission (a producer's retry, a router re-reading its input after a
lost offset, a dead letter replayed) from running a task twice, so an id is kept:
- while the pool still knows its task (queued, running, or an attempt whose end is not known);
- and at least `window_s` after its submission was applied (the redelivery window; docs/operations.md).
After both, a submission with the same id is a new task. The router's task routes
(`preemption_task_route`, Postgres) and the journal's event ids keep their own, longer memory.

Expiry runs when a submission is applied (`expire` from `PoolController.submit`), at the entry's
recorded time, so a replay of the journal forgets exactly what the live owner forgot: no timer, no
wall clock. Kept in submission order (a deque), so each expiry looks only at the ids old enough.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Iterator

DEFAULT_WINDOW_S = 3600.0


class SeenTasks:
    """A set of task ids (membership, iteration, `add`) whose ended entries expire."""

    __slots__ = ("_ids", "_order", "window_s")

    def __init__(self, window_s: float = DEFAULT_WINDOW_S) -> None:
        if window_s <= 0:
            raise ValueError("the redelivery window must be positive")
        self.window_s = window_s
        self._ids: set[str] = set()
        self._order: deque[tuple[float, str]] = deque()  # (when it was added or last kept, id)

    def add(self, task_id: str, at: float) -> None:
        if task_id not in self._ids:
            self._ids.add(task_id)
            self._order.append((at, task_id))

    def expire(self, now: float, *known: Container[str]) -> int:
        """Forget the ids added `window_s` before `now` whose task is in none of `known` any more;
        an old id still known is looked at again a window later. How many were forgotten."""
        forgotten = 0
        horizon = now - self.window_s
        while self._order and self._order[0][0] <= horizon:
            _, task_id = self._order.popleft()
            if any(task_id in k for k in known):
                self._order.append((now, task_id))  # still queued or running: kept, checked later
            else:
                self._ids.discard(task_id)
                forgotten += 1
        return forgotten

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._ids

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SeenTasks):
            return self._ids == other._ids
        if isinstance(other, set | frozenset):
            return self._ids == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a set

    def __repr__(self) -> str:
        return f"SeenTasks({len(self._ids)} ids, window {self.window_s:.0f}s)"

"""A pool's eviction cap (the SRE's `max_evictions` per `interval_s`): the preemption evictions in
the last day and the budget each pass gets (services/core/cycle.py)."""

from __future__ import annotations

from collections import deque

from gfs.services.core.eviction_log import DAY_S


class EvictionCap:
    """Owns the cap (None: no cap), the times of the preemption evictions of the last day, and the
    budget the last pass got (a change of it is a new capacity version: memos are retried)."""

    __slots__ = ("_budget", "_times", "cap")

    def __init__(self) -> None:
        self.cap: tuple[int, float] | None = None  # (max evictions, interval seconds)
        self._times: deque[float] = deque()
        self._budget: int | None = None

    def set(self, max_evictions: int | None, interval_s: float = 3600.0) -> None:
        """At most `max_evictions` preemption evictions in any `interval_s` (at most a day); None
        lifts the cap. Evictions before the call count."""
        if max_evictions is None:
            self.cap = None
            return
        if max_evictions < 0 or not 0.0 < interval_s <= DAY_S:
            raise ValueError("max_evictions must be >= 0 and interval_s in (0, 86400]")
        self.cap = (int(max_evictions), float(interval_s))

    def budget(self, now: float) -> int | None:
        """Evictions a pass at `now` may still make under the cap (None: no cap)."""
        if self.cap is None:
            return None
        limit, interval = self.cap
        since = now - interval
        recent = sum(1 for t in self._times if t > since)
        return max(0, limit - recent)

    def take(self, budget: int | None) -> bool:
        """Record the budget a pass got; True if it differs from the previous pass's."""
        changed = budget != self._budget
        self._budget = budget
        return changed

    def evicted(self, now: float) -> None:
        """A preemption eviction at `now` (kept for a day at most)."""
        times = self._times
        times.append(now)
        while times[0] <= now - DAY_S:
            times.popleft()

"""A pool's record of spot guarantee-period outcomes (spec 4.2): all-time totals for the node cost
(F_v, S_v, spec 5.2) and the recent outcomes inside the feedback window for eta (spec 4.1).

Outcomes are logged in time order (the runtime's clock never goes back), so the recent ones are a
deque pruned from the left.
"""

from __future__ import annotations

from collections import deque


class GuaranteeLedger:
    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.failed_total = 0
        self.succeeded_total = 0
        self._success: deque[float] = deque()
        self._failure: deque[float] = deque()
        self._pruned_to = float("-inf")  # outcomes at or before this left the deques

    def success(self, now: float, count: int = 1) -> int:
        """Log `count` successful periods (a negative count logs none); returns how many."""
        n = max(0, count)
        for _ in range(n):
            self._success.append(now)
        self.succeeded_total += n
        return n

    def failure(self, now: float) -> None:
        self.failed_total += 1
        self._failure.append(now)

    def retract_failure(self, at: float) -> bool:
        """Withdraw one failure logged at `at` (a stop that turned out not to be an eviction);
        False if none was logged then. One already out of the window leaves only the total."""
        if self.failed_total <= 0:
            return False
        try:
            self._failure.remove(at)
        except ValueError:
            if at > self._pruned_to:
                return False  # not pruned from the window, yet not there: never logged
        self.failed_total -= 1
        return True

    def recent(self, now: float) -> tuple[int, int]:
        """(failed, succeeded) periods logged in (now - window, now]."""
        horizon = now - self.window_s
        self._pruned_to = max(self._pruned_to, horizon)
        for dq in (self._success, self._failure):
            while dq and dq[0] <= horizon:
                dq.popleft()
        return len(self._failure), len(self._success)

    def outcome_times(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(failure times, success times) still held (for tests and from-scratch checks)."""
        return tuple(self._failure), tuple(self._success)

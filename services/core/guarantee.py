"""Spot guarantee periods (spec 4.2) and what an eviction costs the victim (spec 5.4).

A spot task's period starts when it starts; every full `period_s` without eviction is one
success and starts a new period; finishing counts one success for the last (possibly partial)
period; an eviction counts one failure. Decision (docs/decisions.md): a run that ends exactly on
a period boundary has no partial period, so finishing at 3600 s counts one success, not two.
"""

from __future__ import annotations

import math

GUARANTEE_PERIOD_S = 3600.0
# The guaranteed durations a spot task may ask for, in hours: the wire's `GuaranteeHours` (a test
# checks the two agree), each with its own quota per pool. The forecast horizon (4 h) bounds them.
OFFERED_GUARANTEE_HOURS: tuple[int, ...] = (1, 2, 4)


def successes_on_finish(run_s: float, period_s: float = GUARANTEE_PERIOD_S) -> int:
    """Periods a run of `run_s` seconds that finished its work succeeds in (at least one)."""
    return max(1, math.ceil(run_s / period_s - 1e-9))


def successes_before_eviction(run_s: float, period_s: float = GUARANTEE_PERIOD_S) -> int:
    """Full periods completed before an eviction after `run_s` seconds (the eviction is one failure)."""
    return math.floor(run_s / period_s + 1e-9)


def remaining_after_eviction(
    remaining_s: float, run_s: float, checkpoint_interval_s: float, restart_overhead_s: float
) -> float:
    """Work left after an eviction: progress since the last checkpoint is lost and the restart
    costs `restart_overhead_s` (spec 5.4)."""
    lost = math.fmod(run_s, checkpoint_interval_s) if checkpoint_interval_s > 0 else 0.0
    return remaining_s - run_s + lost + restart_overhead_s


def periods_ended_by(
    start_s: float,
    now_s: float,
    total: int,
    new: int,
    limit_s: float,
    *,
    finished: bool,
    period_s: float = GUARANTEE_PERIOD_S,
) -> int:
    """Of the `new` periods just logged for a run that started at `start_s` and has `total`
    periods at `now_s` (the last `new` of them), how many ended by `limit_s`. Full periods end at
    start + k x period; a finished run's last period ends at the finish. For the in-window measure:
    a period that ends after the window (in the drain) is not counted."""
    count = 0
    for k in range(total - new + 1, total + 1):
        end = now_s if finished and k == total else start_s + k * period_s
        if end <= limit_s:
            count += 1
    return count


def useful_seconds_before_eviction(run_s: float, period_s: float = GUARANTEE_PERIOD_S) -> float:
    """GPU time of an evicted run that counts as useful: only its completed periods (spec 6.3)."""
    return successes_before_eviction(run_s, period_s) * period_s

"""Guarantee periods (spec 4.2), eviction effects (spec 5.4) and node eviction score (5.5)."""

from __future__ import annotations

import numpy as np
import pytest

from gfs.services.core.eviction_score import eviction_scores
from gfs.services.core.guarantee import (
    periods_ended_by,
    remaining_after_eviction,
    successes_before_eviction,
    successes_on_finish,
    useful_seconds_before_eviction,
)


@pytest.mark.parametrize(("run", "expected"), [(1, 1), (3600, 1), (3601, 2), (7200, 2), (10000, 3)])
def test_successes_on_finish(run: float, expected: int) -> None:
    assert successes_on_finish(run) == expected


@pytest.mark.parametrize(("run", "expected"), [(0, 0), (3599, 0), (3600, 1), (7300, 2)])
def test_successes_before_eviction(run: float, expected: int) -> None:
    assert successes_before_eviction(run) == expected
    assert useful_seconds_before_eviction(run) == expected * 3600


@pytest.mark.parametrize(
    ("start", "now", "total", "new", "finished", "limit", "expected"),
    [
        (0, 5000, 1, 1, False, 9000, 1),  # evicted at 5000: period 0-3600 ended in the window
        (0, 5000, 1, 1, False, 3000, 0),  # ... but not if the window ended at 3000
        (7040, 12480, 2, 1, True, 9000, 0),  # finished in the drain: its last period ends at 12480
        (0, 8000, 3, 3, True, 7200, 2),  # ends 3600, 7200 (in), 8000 (the finish, out)
        (0, 8000, 3, 1, True, 9000, 1),  # two already logged by ticks: only the last is new
        (0, 7200, 2, 0, False, 9000, 0),  # nothing new
    ],
)
def test_periods_ended_by(
    start: float, now: float, total: int, new: int, finished: bool, limit: float, expected: int
) -> None:
    assert periods_ended_by(start, now, total, new, limit, finished=finished) == expected


def test_eviction_loses_work_since_checkpoint_plus_overhead() -> None:
    # 10000 s left, ran 5000 s: 1400 s since the 3600 s checkpoint are lost, +40 s restart
    assert remaining_after_eviction(10000, 5000, 3600, 40) == 10000 - 5000 + 1400 + 40


@pytest.mark.parametrize(
    ("n1h", "n1d", "expected"),
    [(0, 0, 9900), (1, 1, 9800), (5, 5, 6800), (10, 10, 0)],
    ids=["none", "2^1", "2^5", "saturated"],
)
def test_eviction_score(n1h: float, n1d: float, expected: int) -> None:
    # E = 10000 * max(0, 1 - 0.01 * 2^(0.8 n1h + 0.2 n1d))
    assert eviction_scores(np.array([n1h]), np.array([n1d]))[0] == expected

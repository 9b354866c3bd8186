"""The two-pointer victim heuristic (spec 5.2), on whole GPUs and on one shared GPU's fractions: the
cheapest set of jobs to evict so that enough is left for the preemptor, sparing alternately from the
expensive end and the cheap end (core/victims_gfs.py applies it per node and per shared GPU)."""

from __future__ import annotations

from collections.abc import Mapping

from gfs.services.core.ids import TaskId

_EPS = 1e-9


def two_pointer(
    holdings: Mapping[TaskId, frozenset[int]],
    pool_ids: frozenset[int],
    cost: Mapping[TaskId, float],
    need: int,
) -> tuple[list[TaskId], set[int]]:
    """GFS victim heuristic over GPU-id sets (spec 5.2, loop condition l <= r).

    Jobs sorted by cost descending (ties by id); alternately spare from the expensive end and
    the cheap end while the remaining GPUs still cover `need`, evicting one job from an end
    whenever it cannot be spared. Returns (victims, GPUs left for the preemptor).
    """
    jobs = sorted(holdings, key=lambda t: (-cost[t], t))
    g = set(pool_ids)
    victims: list[TaskId] = []
    lo, hi = 0, len(jobs) - 1
    while lo <= hi:
        while lo <= hi and len(g - holdings[jobs[lo]]) >= need:
            g -= holdings[jobs[lo]]
            lo += 1
        if lo <= hi:
            victims.append(jobs[lo])
            lo += 1
        while lo <= hi and len(g - holdings[jobs[hi]]) >= need:
            g -= holdings[jobs[hi]]
            hi -= 1
        if lo <= hi:
            victims.append(jobs[hi])
            hi -= 1
    return victims, g


def fraction_two_pointer(
    fractions: Mapping[TaskId, float], available: float, cost: Mapping[TaskId, float], need: float
) -> list[TaskId]:
    """Two-pointer on one shared GPU: sparing keeps a job's fraction; loop while l <= r (the
    issue's decision; the reference code used l < r, which can skip the last job)."""
    jobs = sorted(fractions, key=lambda t: (-cost[t], t))
    victims: list[TaskId] = []
    lo, hi = 0, len(jobs) - 1
    while lo <= hi:
        while lo <= hi and available - fractions[jobs[lo]] >= need - _EPS:
            available -= fractions[jobs[lo]]
            lo += 1
        if lo <= hi:
            victims.append(jobs[lo])
            lo += 1
        while lo <= hi and available - fractions[jobs[hi]] >= need - _EPS:
            available -= fractions[jobs[hi]]
            hi -= 1
        if lo <= hi:
            victims.append(jobs[hi])
            hi -= 1
    return victims

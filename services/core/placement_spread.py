"""Baseline node choosers that differ from GFS's best fit with class affinity.

- `LeastAllocated`: kube-scheduler's default NodeResourcesFit scoring, which spreads: the node
  with the largest free share of its GPUs wins (ties: node index).
- `PackFree`: plain best fit on free GPUs with no HP/spot affinity and no eviction score (Lyra's
  consolidation; ties: node index).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from gfs.services.core.pool import PoolState
from gfs.services.core.task import TaskClass


class _Chooser(Protocol):
    def choose(self, pool: PoolState, gpus: int, cls: TaskClass) -> int: ...


def fill_by_choice(
    chooser: _Chooser, pool: PoolState, gpus: int, cls: TaskClass, workers: int
) -> list[tuple[int, int]] | None:
    """Place `workers` workers one after another, each seeing the GPUs the earlier ones took.

    Why not the core's fill-in-order shortcut: a spreading or fragmentation-driven chooser may
    prefer another node once a worker lands (its free share drops), so only repeating the single
    choice on tentative reservations is exact. The reservations are undone before returning."""
    taken: list[int] = []
    try:
        for _ in range(workers):
            node = chooser.choose(pool, gpus, cls)
            if node < 0:
                return None
            pool.take_whole(node, gpus, cls)
            taken.append(node)
    finally:
        for node in taken:
            pool.give_whole(node, gpus, cls)
    counts: dict[int, int] = {}
    for node in taken:
        counts[node] = counts.get(node, 0) + 1
    return sorted(counts.items())


class LeastAllocated:
    name = "least-allocated"

    def choose(self, pool: PoolState, gpus: int, cls: TaskClass) -> int:
        feasible = pool.free >= gpus
        if not feasible.any():
            return -1
        share = pool.free / np.maximum(pool.node_cap, 1)
        return int(np.where(feasible, share, -1.0).argmax())  # argmax: first index on ties

    def fill(self, pool: PoolState, gpus: int, cls: TaskClass, workers: int) -> list[tuple[int, int]] | None:
        return fill_by_choice(self, pool, gpus, cls, workers)


class PackFree:
    name = "pack-free"

    def choose(self, pool: PoolState, gpus: int, cls: TaskClass) -> int:
        feasible = pool.free >= gpus
        if not feasible.any():
            return -1
        return int(np.where(feasible, pool.free, np.iinfo(np.int64).max).argmin())

    def fill(self, pool: PoolState, gpus: int, cls: TaskClass, workers: int) -> list[tuple[int, int]] | None:
        return fill_by_choice(self, pool, gpus, cls, workers)

"""Fragmentation Gradient Descent placement (Weng et al., ATC'23; spec 6.2 and 8 #15).

A node's fragmentation is the expected number of its free GPUs that a typical task could not use.
For a whole-GPU task of p GPUs a node with f free GPUs runs floor(f/p) of them and leaves f mod p
unusable (all f when f < p). Under the typical-task mix {1: 0.35, 2: 0.10, 4: 0.05, 8: 0.50}
frag(f) = sum_p w_p (f mod p). The task goes where frag grows least (the "gradient" step).
The released GFS simulator used f - floor(f/p) instead; this follows the FGD paper (#15).
Weights are kept in hundredths so equal growths compare exactly and ties go to the node index.
"""

from __future__ import annotations

import numpy as np

from gfs.services.core.placement_spread import fill_by_choice
from gfs.services.core.pool import PoolState
from gfs.services.core.task import TaskClass

TYPICAL_TASKS: tuple[tuple[int, int], ...] = ((1, 35), (2, 10), (4, 5), (8, 50))  # (GPUs, weight %)


def fragmentation(free: np.ndarray) -> np.ndarray:
    """Expected unusable free GPUs per node, in hundredths of a GPU (integer)."""
    free = np.asarray(free, dtype=np.int64)
    out = np.zeros(free.shape, dtype=np.int64)
    for p, w in TYPICAL_TASKS:
        out += w * np.mod(free, p)
    return out


def frag_growth(free_before: np.ndarray, free_after: np.ndarray) -> np.ndarray:
    growth: np.ndarray = fragmentation(free_after) - fragmentation(free_before)
    return growth


class FgdPlacement:
    name = "fgd"

    def choose(self, pool: PoolState, gpus: int, cls: TaskClass) -> int:
        free = pool.free
        feasible = free >= gpus
        if not feasible.any():
            return -1
        growth = frag_growth(free, np.maximum(free - gpus, 0))
        big = np.iinfo(np.int64).max
        return int(np.where(feasible, growth, big).argmin())  # argmin: first index on ties

    def fill(self, pool: PoolState, gpus: int, cls: TaskClass, workers: int) -> list[tuple[int, int]] | None:
        return fill_by_choice(self, pool, gpus, cls, workers)

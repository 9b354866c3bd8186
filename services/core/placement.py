"""Normal (non-preemptive) placement: node scorers and whole-task placement (spec 5.1).

A `NodeChooser` picks one node for one worker of k whole GPUs, vectorised over the pool's arrays;
`place_task` repeats it per worker on tentative reservations and returns placements or None (a
task is placed whole or not at all). Fractional workers (g < 1) first try the shared GPU with the
least remaining fraction that still fits (best fit), then open a whole free GPU.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from gfs.services.core.decisions import WorkerPlacement
from gfs.services.core.pool import PoolState
from gfs.services.core.shared_gpus import open_slot
from gfs.services.core.task import TaskClass, TaskSpec

_EPS = 1e-9
_NO_NODE = np.iinfo(np.int64).max


class NodeChooser(Protocol):
    """Picks nodes for whole-GPU workers.

    `choose`: the node for one worker needing `gpus` free GPUs, or -1 if none fits.
    `fill`: nodes for `workers` such workers placed one after another (each seeing the earlier
    ones), as (node, workers there) pairs, or None if they do not all fit.
    """

    name: str

    def choose(self, pool: PoolState, gpus: int, cls: TaskClass) -> int: ...

    def fill(
        self, pool: PoolState, gpus: int, cls: TaskClass, workers: int
    ) -> list[tuple[int, int]] | None: ...


def _fill_in_order(
    pool: PoolState, gpus: int, workers: int, order: np.ndarray
) -> list[tuple[int, int]] | None:
    """Fill nodes in `order`, each with as many workers as fit. Why this equals repeated single
    choices: taking GPUs from the chosen node only makes it more preferred (fewer free GPUs, more
    of its class), so a greedy chooser keeps picking it until it is full."""
    per_node = pool.free[order] // gpus
    filled = np.cumsum(per_node)
    if len(filled) == 0 or filled[-1] < workers:
        return None
    last = int(np.searchsorted(filled, workers))
    out = [(int(order[i]), int(per_node[i])) for i in range(last)]
    out.append((int(order[last]), int(workers - (filled[last - 1] if last else 0))))
    return out


class BestFit:
    """GFS placement (spec 5.1), one composite key minimised with argmin:

    1. score = (free + 1) * 100 - exist[class]: fewest free GPUs first (bin packing), then the
       node already holding more GPUs of the same class (keeps HP and spot apart);
    2. eviction score E: spot prefers high E (few recent evictions), HP prefers low E;
    3. node index (deterministic tie-break).
    """

    name = "best-fit"

    def choose(self, pool: PoolState, gpus: int, cls: TaskClass) -> int:
        key = np.where(pool.free >= gpus, self._key(pool, cls), _NO_NODE)
        node = int(key.argmin())
        return node if key[node] != _NO_NODE else -1

    @staticmethod
    def _key(pool: PoolState, cls: TaskClass) -> np.ndarray:
        return pool.best_fit_key(cls)  # kept current by the pool (it changes on every placement)

    def fill(self, pool: PoolState, gpus: int, cls: TaskClass, workers: int) -> list[tuple[int, int]] | None:
        if workers == 1:
            node = self.choose(pool, gpus, cls)
            return None if node < 0 else [(node, 1)]
        idx = np.flatnonzero(pool.free >= gpus)
        if int((pool.free[idx] // gpus).sum()) < workers:
            return None
        key = self._key(pool, cls)
        return _fill_in_order(pool, gpus, workers, idx[np.argsort(key[idx], kind="stable")])


class FirstFit:
    """Production-like placement: the lowest-index node with enough free GPUs."""

    name = "first-fit"

    def choose(self, pool: PoolState, gpus: int, cls: TaskClass) -> int:
        feasible = pool.free >= gpus
        idx = int(feasible.argmax())
        return idx if feasible[idx] else -1

    def fill(self, pool: PoolState, gpus: int, cls: TaskClass, workers: int) -> list[tuple[int, int]] | None:
        if workers == 1:
            node = self.choose(pool, gpus, cls)
            return None if node < 0 else [(node, 1)]
        return _fill_in_order(pool, gpus, workers, np.flatnonzero(pool.free >= gpus))


def best_shared_slot(pool: PoolState, fraction: float) -> int:
    """Shared GPU with the smallest remaining fraction that still fits `fraction`, else -1."""
    if not pool.gpu_shared.any():
        return -1
    remaining = 1.0 - pool.gpu_hp - pool.gpu_spot
    ok = pool.gpu_shared & (remaining >= fraction - _EPS)
    if not ok.any():
        return -1
    return int(np.where(ok, remaining, np.inf).argmin())


def place_task(pool: PoolState, spec: TaskSpec, chooser: NodeChooser) -> tuple[WorkerPlacement, ...] | None:
    """Place every worker of `spec` without preemption, or return None (nothing reserved).

    Workers are reserved tentatively one by one (so a later worker sees the earlier ones) and the
    reservations are released before returning: the caller applies the placements.
    """
    cls = spec.task_class
    if not spec.is_fractional:
        k = spec.whole_gpus_per_worker
        nodes = chooser.fill(pool, k, cls, spec.workers)
        if nodes is None:
            return None
        return tuple(WorkerPlacement(node, k * count) for node, count in nodes)
    placed: list[WorkerPlacement] = []
    for _ in range(spec.workers):
        p = place_worker(pool, spec, chooser)
        if p is None:
            break
        reserve(pool, p, cls)
        placed.append(p)
    for p in reversed(placed):
        release(pool, p, cls)
    return tuple(placed) if len(placed) == spec.workers else None


def place_worker(pool: PoolState, spec: TaskSpec, chooser: NodeChooser) -> WorkerPlacement | None:
    if spec.is_fractional:
        slot = best_shared_slot(pool, spec.gpus_per_worker)
        if slot >= 0:
            return WorkerPlacement(int(pool.gpu_node[slot]), 0, slot, spec.gpus_per_worker)
        node = chooser.choose(pool, 1, spec.task_class)
        if node < 0:
            return None
        return WorkerPlacement(node, 0, open_slot(pool, node), spec.gpus_per_worker)
    k = spec.whole_gpus_per_worker
    node = chooser.choose(pool, k, spec.task_class)
    return WorkerPlacement(node, k) if node >= 0 else None


def reserve(pool: PoolState, p: WorkerPlacement, cls: TaskClass) -> None:
    if p.slot >= 0:
        pool.add_fraction(p.slot, p.fraction, cls)
    else:
        pool.take_whole(p.node, p.gpus, cls)


def release(pool: PoolState, p: WorkerPlacement, cls: TaskClass) -> None:
    if p.slot >= 0:
        pool.remove_fraction(p.slot, p.fraction, cls)
    else:
        pool.give_whole(p.node, p.gpus, cls)

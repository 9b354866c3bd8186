"""HP demand a pool can serve: the part of the HP queue that could take GPUs now (issue 21).

Why: the quota protects the HP usage the pool will have over the guarantee. Issue 10 floored that
usage at HP running plus *every* queued HP GPU. A queued gang that no arrangement of the pool can
hold (11 workers of 8 GPUs while only 80 GPUs are not held by HP) cannot take a single GPU before
HP work finishes, and when HP work finishes the gang takes those GPUs, not spot's. Counting it
zeroed the quota for days while GPUs sat idle (docs/quality-findings.md). So the floor counts a
queued HP task only if it fits, together with the queued HP before it, on the GPUs that HP does
not hold (idle or spot: what preemption can free), outside a reservation's nodes; a reserved gang
counts through its reservation instead (`reservation_growth`).

The fit is a packing of whole-GPU workers onto per-node preemptible capacity, the tasks taken in
queue order and each placed best-fit (fullest node that still fits first) the way the scheduler
would place it. Fractional workers take their fraction of a node's capacity. This is a floor
estimate, not a placement: it answers "could this task start now if spot gave way", never where.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from gfs.services.core.pool import PoolState
from gfs.services.core.task import TaskSpec

_EPS = 1e-9


def preemptible_capacity(pool: PoolState, excluded: Iterable[int] = ()) -> np.ndarray:
    """GPUs per node that HP could use after evicting spot (idle + spot), 0 on `excluded` nodes."""
    cap = np.asarray(pool.non_hp, dtype=np.float64).copy()
    for node in excluded:
        cap[node] = 0.0
    return cap


def fit_workers(cap: np.ndarray, spec: TaskSpec) -> bool:
    """Place every worker of `spec` on `cap` (GPUs per node, changed in place) or, if they do not
    all fit, change nothing and return False. Best fit: the node with the least capacity that
    still holds a worker takes it, so wide gangs find the emptiest nodes left."""
    if spec.is_fractional:
        need = spec.gpus_per_worker
        trial = cap.copy()
        for _ in range(spec.workers):
            fits = np.flatnonzero(trial + _EPS >= need)
            if len(fits) == 0:
                return False
            node = fits[np.argmin(trial[fits])]
            trial[node] -= need
        cap[:] = trial
        return True
    k = spec.whole_gpus_per_worker
    if spec.workers == 1:
        return fit_one(cap, k)[0] >= 0
    slots = np.floor((cap + _EPS) / k).astype(np.int64)
    if int(slots.sum()) < spec.workers:
        return False
    # Fullest-first: nodes in ascending capacity, each taking as many workers as it holds, until
    # every worker has a node (the last one takes only what is left).
    order = np.argsort(cap, kind="stable")
    take = slots[order]
    cum = np.cumsum(take)
    last = int(np.searchsorted(cum, spec.workers))
    take[last] -= int(cum[last]) - spec.workers
    take[last + 1 :] = 0
    cap[order] -= take * k
    return True


def fit_one(cap: np.ndarray, k: int) -> tuple[int, float]:
    """One worker of `k` whole GPUs: the node with the least capacity that holds it, the lowest
    index on a tie (what `fit_workers`' general fill gives; most queued tasks have one worker),
    taken from `cap`. Returns the node and its capacity before (-1 and 0: no node holds it,
    nothing changed)."""
    best = np.where(cap + _EPS >= k, cap, np.inf)
    node = int(best.argmin())
    before = float(best[node])
    if before == np.inf:
        return -1, 0.0
    cap[node] -= k
    return node, before


def placeable_tasks(
    cap: np.ndarray, groups: Iterable[Iterable[TaskSpec]], *, uniform: bool = False
) -> Iterator[TaskSpec]:
    """The queued tasks, taken in the order given (groups in order, tasks in order inside each),
    that fit on `cap` together with those before them that fit (`cap` is consumed as they are
    yielded). A task that does not fit is skipped, not a barrier: a smaller task behind it may
    still fit, as the scheduler's backfill would start it. `uniform`: every task of a group asks
    the same GPUs per worker (the largest-first queues' buckets), so a group whose size cannot take
    even one worker is passed over whole."""
    # Per GPUs-per-worker, the fewest workers that failed to fit since `cap` last changed: a task
    # of that shape with at least as many workers fails too (long queues repeat a few shapes).
    failed: dict[float, int] = {}
    left = float(cap.sum())
    for group in groups:
        if left <= _EPS:
            return  # nothing left to place on: an overloaded pool's long queue is not walked
        for spec in group:
            g = spec.gpus_per_worker
            if uniform and failed.get(g) == 1:
                break  # not one worker of this size fits: neither does any task of the group
            if spec.workers >= failed.get(g, spec.workers + 1):
                continue
            if fit_workers(cap, spec):
                left = float(cap.sum())
                failed.clear()
                yield spec
            else:
                failed[g] = spec.workers


def placeable_gpus(cap: np.ndarray, groups: Iterable[Iterable[TaskSpec]], *, uniform: bool = False) -> float:
    """GPUs (g x w) of `placeable_tasks`."""
    return sum((spec.total_gpus for spec in placeable_tasks(cap, groups, uniform=uniform)), 0.0)


def reservation_growth(pool: PoolState, spec: TaskSpec, nodes: Iterable[int]) -> float:
    """How much HP usage grows when a reserved task starts on its nodes: its GPUs minus the HP GPUs
    running on those nodes now (which must end first; they are counted as running already)."""
    held = sum(int(pool.hp_gpus[n]) for n in nodes)
    return max(0.0, spec.total_gpus - held)

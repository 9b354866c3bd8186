"""Work conservation, measured: GPUs idle while a queued task would fit on them, and why (issue 35).

A scheduler that protects HP by leaving GPUs idle while spot waits breaks GFS's promise however
good its HP numbers look, so the idle GPUs that queued work could use are counted, per pool, by
the named reason that held the work back:

- `reservation`: the task fits only with the idle GPUs a reservation holds for its holder;
- `claimed`: a spot task fits only on GPUs the servable HP queue is expected to take within the
  guarantee period (core/servable.py; GFS keeps spot off them);
- `quota:eta`, `quota:floor`, `quota:forecast`: a spot task over the pool's spot quota, named by
  what set the quota: the eviction feedback (it would be admitted at eta = 1), else the servable
  floor or the forecast quantile, whichever was larger when the quota was computed;
- `order`: the task fits, but waits behind another (head-of-line blocking, the `failed`
  threshold, a task not yet passed);
- `no-fit`: the idle GPUs are enough in number for a queued task but not in shape (fragmented).

How (`idle_while_work_fits`): the queued tasks, HP queue first then spot, each in its queue's
order, are packed best fit on the idle GPUs (whole free GPUs per node; a down node has none) the
way `placeable.fit_workers` packs them, a task that does not fit skipped; each packed task's GPUs
count under its reason. What is left idle counts as `no-fit` up to the GPUs of the queued tasks
that did not fit although no more than the idle GPUs left asked for them. The sum never exceeds
the idle GPUs. The simulator integrates it over its 60-s samples inside the window (GPU-hours per
pool and reason); the live preemption service over its status interval (`/metrics`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from gfs.services.core.placeable import fit_workers
from gfs.services.core.pool import PoolState
from gfs.services.core.queues import BucketQueue, LargestFirst
from gfs.services.core.reservation import Reservation
from gfs.services.core.task import TaskSpec

REASONS = ("reservation", "claimed", "quota:eta", "quota:floor", "quota:forecast", "order", "no-fit")
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class QuotaBasis:
    """What the quota in force was computed from, for naming what set it: the eta applied, and the
    HP usage the forecast quantile and the floor each gave (None: not known)."""

    eta: float = 1.0
    floor: float | None = None
    forecast: float | None = None


def quota_set_by(basis: QuotaBasis, limit: float, in_use: float, need: float) -> str:
    """Why a spot task asking `need` GPUs with `in_use` already running is over `limit`."""
    if basis.eta < 1.0 - _EPS and in_use + need <= limit / basis.eta + _EPS:
        return "quota:eta"
    if basis.floor is not None and (basis.forecast is None or basis.floor >= basis.forecast):
        return "quota:floor"
    return "quota:forecast"


def idle_while_work_fits(
    state: PoolState,
    hp: BucketQueue,
    spot: BucketQueue,
    *,
    reservation: Reservation | None,
    claims: np.ndarray | None,
    quota: Mapping[int, float] | None,
    basis: QuotaBasis,
) -> dict[str, float]:
    """GPUs idle now while queued work would fit on them, per reason (module doc). `quota`: the
    spot quota in force (None: not enforced); `claims`: GPUs per node the servable HP claims."""
    out = dict.fromkeys(REASONS, 0.0)
    free = np.asarray(state.free, dtype=np.float64).copy()
    if float(free.sum()) <= _EPS or not (hp.index or spot.index):
        return out
    reserved = np.zeros(len(free), dtype=bool)
    if reservation is not None:
        reserved[list(reservation.nodes)] = True
    claimed = np.zeros(len(free)) if claims is None else np.asarray(claims, dtype=np.float64)
    holder = None if reservation is None else reservation.task_id
    spot_in_use = float(state.spot_in_use)
    missed: list[float] = []  # GPUs of tasks that did not fit (for no-fit)

    left = float(free.sum())

    def walk(queue: BucketQueue, *, is_spot: bool) -> None:
        nonlocal spot_in_use, left
        uniform = isinstance(queue.order, LargestFirst)
        failed: dict[float, int] = {}
        for group in _groups(queue):
            for spec in group:
                if left <= _EPS:
                    return
                g = spec.gpus_per_worker
                if uniform and failed.get(g) == 1:
                    break
                if spec.workers >= failed.get(g, spec.workers + 1):
                    missed.append(spec.total_gpus)
                    continue
                before = free.copy()
                if not fit_workers(free, spec):
                    failed[g] = spec.workers
                    missed.append(spec.total_gpus)
                    continue
                failed.clear()
                left = float(free.sum())
                out[_reason(spec, before, is_spot=is_spot)] += spec.total_gpus
                if is_spot:
                    spot_in_use += spec.total_gpus

    def _reason(spec: TaskSpec, before: np.ndarray, *, is_spot: bool) -> str:
        if is_spot and quota is not None:
            limit = quota.get(spec.guarantee_hours, 0.0)
            if spot_in_use + spec.total_gpus > limit + _EPS:
                return quota_set_by(basis, limit, spot_in_use, spec.total_gpus)
        if spec.task_id == holder:
            return "order"  # the holder fits on idle GPUs: it starts at the next pass
        open_ = np.where(reserved, 0.0, before)
        if fit_workers(open_.copy(), spec):
            if is_spot and not fit_workers(np.maximum(open_ - claimed, 0.0), spec):
                return "claimed"
            return "order"
        return "reservation"

    walk(hp, is_spot=False)
    walk(spot, is_spot=True)
    fitting = sum(g for g in missed if g <= left + _EPS)
    out["no-fit"] = min(left, fitting)
    return out


def _groups(queue: BucketQueue) -> Iterable[Iterable[TaskSpec]]:
    specs = queue.specs
    return ((specs[tid] for _, tid in entries) for _, entries in queue.buckets())

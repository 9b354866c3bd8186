"""Could a task ever run on its pool? Checked at submission (spec 2.3): a task that never can
(more GPUs per worker than any node has, or a gang larger than the pool) would wait forever and
block its queue (head-of-line, or the `failed` threshold), so it is rejected with its reason."""

from __future__ import annotations

import math

from gfs.services.core.reasons import Rejection

_EPS = 1e-9


class PoolFeasibility:
    """Feasibility against one pool's nodes when the pool is empty, with per-size slot counts
    cached (the simulator checks every job of a trace)."""

    def __init__(self, node_gpus: tuple[int, ...]) -> None:
        self.node_gpus = node_gpus
        self._largest = max(node_gpus, default=0)
        self._slots: dict[int, int] = {}
        self._verdicts: dict[tuple[float, int], Rejection | None] = {}  # by (gpus per worker, workers)

    def slots(self, k: int) -> int:
        """Workers of `k` whole GPUs the empty pool holds at once (k = 0: its GPU total, since
        fractional workers may share any GPU)."""
        n = self._slots.get(k)
        if n is None:
            n = self._slots[k] = sum(self.node_gpus) if k == 0 else sum(g // k for g in self.node_gpus)
        return n

    def check(self, gpus_per_worker: float, workers: int) -> Rejection | None:
        """Why a task of this shape could never run on the pool (None: it can), memoised per shape."""
        shape = (gpus_per_worker, workers)
        try:
            return self._verdicts[shape]
        except KeyError:
            verdict = self._verdicts[shape] = self._check(gpus_per_worker, workers)
            return verdict

    def _check(self, gpus_per_worker: float, workers: int) -> Rejection | None:
        if workers < 1 or not gpus_per_worker > 0 or not math.isfinite(gpus_per_worker):
            return Rejection.INVALID_REQUEST
        if gpus_per_worker < 1.0:
            ok = workers * gpus_per_worker <= self.slots(0) + _EPS
            return None if ok else Rejection.GANG_LARGER_THAN_POOL
        k = math.ceil(gpus_per_worker - _EPS)
        if k > self._largest:
            return Rejection.WORKER_LARGER_THAN_NODE
        return None if self.slots(k) >= workers else Rejection.GANG_LARGER_THAN_POOL


def rejection_message(reason: Rejection, gpus_per_worker: float, workers: int, pool: str) -> str:
    """The reason with the numbers, for the submitter."""
    return f"{reason.message}: {workers} x {gpus_per_worker:g} GPUs on pool {pool}"

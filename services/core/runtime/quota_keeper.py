"""The spot quota in force in a pool, its eta, and what it was computed from (spec 4.1)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gfs.services.core.guarantee_ledger import GuaranteeLedger
from gfs.services.core.pool import PoolState
from gfs.services.core.queues import BucketQueue
from gfs.services.core.quota import QuotaInputs, QuotaPolicy, hp_floor
from gfs.services.core.reasons import Unschedulable
from gfs.services.core.work_conservation import QuotaBasis


class QuotaKeeper:
    """Owns the quota per guarantee hours, eta, the inputs of the last refresh, what set the quota
    (for naming what held spot back) and the failed-period count at the last refresh (eta shrinks
    on failures newer than it: core/quota.py)."""

    __slots__ = ("_failed_at_refresh", "basis", "eta", "last_inputs", "quota")

    def __init__(self, capacity: float, max_hours: int) -> None:
        self.quota: dict[int, float] = dict.fromkeys(range(1, max_hours + 1), float(capacity))
        self.eta = 1.0
        self.last_inputs: QuotaInputs | None = None
        self.basis = QuotaBasis()
        self._failed_at_refresh = 0

    def inputs(
        self,
        now: float,
        state: PoolState,
        ledger: GuaranteeLedger,
        spot: BucketQueue,
        *,
        hp_quantile: np.ndarray | None,
        hp_observed: float,
        hp_placeable: float | None,
    ) -> QuotaInputs:
        """What the quota policy needs at `now`: online capacity, idle GPUs, spot in use, the
        forecast quantile given, eta, and the outcomes inside the feedback window."""
        failed, succeeded = ledger.recent(now)
        head = spot.head()
        return QuotaInputs(
            capacity=state.online_capacity,
            idle_gpus=int(state.free.sum()),
            spot_in_use=state.spot_in_use,
            hp_quantile=hp_quantile,
            eta=self.eta,
            failed_recent=failed,
            succeeded_recent=succeeded,
            head_wait_s=None if head is None else now - spot.entered_s[head],
            hp_observed=hp_observed,
            hp_placeable=hp_placeable,
            # Eta grows only on this: the longest wait of a spot task the quota held back.
            quota_held_wait_s=spot.longest_blocked_wait(now, Unschedulable.OVER_QUOTA),
            failed_new=max(0, ledger.failed_total - self._failed_at_refresh),
            spot_smallest_gpus=spot.smallest_head_gpus(),
        )

    def update(self, quota: Mapping[int, float], eta: float) -> bool:
        """Put a quota in force; True if it changed (the caller's new capacity version)."""
        self.eta = eta
        if dict(quota) == self.quota:
            return False
        self.quota = dict(quota)
        return True

    def refresh(
        self, policy: QuotaPolicy, inputs: QuotaInputs, hp_quantile: np.ndarray | None, failed_total: int
    ) -> bool:
        """The policy's quota from `inputs`, put in force; True if it changed."""
        self.last_inputs = inputs
        self._failed_at_refresh = failed_total
        out = policy.refresh(inputs)
        forecast = None if hp_quantile is None or len(hp_quantile) == 0 else float(hp_quantile[0])
        self.basis = QuotaBasis(out.eta, hp_floor(inputs, policy.settings), forecast)
        return self.update(out.quota, out.eta)

"""State samples (every 60 s inside the window) and counters the result is built from."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gfs.services.core.ids import PoolId
from gfs.services.core.runtime import PoolRuntime
from gfs.services.core.work_conservation import REASONS
from gfs.services.simulator.workload import Workload

IDLE_FIT_EVERY = 5  # samples per idle-while-work-fits reading


class Recorder:
    def __init__(self, workload: Workload, pools: tuple[PoolId, ...]) -> None:
        self.pools = pools
        self.window = (workload.window_start_s, workload.window_end_s)
        self.times: list[float] = []
        self.allocated: list[list[int]] = []
        self.quota: list[list[float]] = []
        self.eta: list[list[float]] = []
        self.spot_in_use: list[list[float]] = []
        self.hp_in_use: list[list[float]] = []
        # GPU-hours idle while queued work would fit, per pool and reason (core/work_conservation.py),
        # read at every IDLE_FIT_EVERY-th sample of the window and standing for that many sample
        # periods (5 minutes, the quota's refresh: a reading walks the queues).
        self.idle_fit: dict[PoolId, dict[str, float]] = {p: dict.fromkeys(REASONS, 0.0) for p in pools}
        self.forecasts = 0
        self.forecast_fallbacks = 0
        self.wall_s = 0.0
        self.events = 0

    def sample(self, now: float, pools: Mapping[PoolId, PoolRuntime], sample_period_s: float) -> None:
        """The state of every pool at `now`, if inside the window (each sample stands for
        `sample_period_s`)."""
        if not (self.window[0] <= now < self.window[1]):
            return
        self.times.append(now)
        alloc, quota, eta, spot, hp = [], [], [], [], []
        for pool_id in self.pools:
            rt = pools[pool_id]
            st = rt.state
            alloc.append(st.capacity - int(st.free.sum()))
            if len(self.times) % IDLE_FIT_EVERY == 1:
                self._note_idle_fit(pool_id, rt, IDLE_FIT_EVERY * sample_period_s / 3600.0)
            quota.append(min(float(st.capacity), rt.quota.get(1, 0.0)))
            eta.append(rt.eta)
            spot.append(st.spot_in_use)
            hp.append(st.hp_in_use)
        self.allocated.append(alloc)
        self.quota.append(quota)
        self.eta.append(eta)
        self.spot_in_use.append(spot)
        self.hp_in_use.append(hp)

    def _note_idle_fit(self, pool_id: PoolId, rt: PoolRuntime, hours: float) -> None:
        # The runtime memoises the reading on what it reads: most samples of a quiet pool are free.
        totals = self.idle_fit[pool_id]
        for reason, gpus in rt.idle_while_work_fits(quota_enabled=True).items():
            if gpus:
                totals[reason] += gpus * hours

    def matrix(self, rows: list[list[float]] | list[list[int]]) -> np.ndarray:
        if not rows:
            return np.zeros((0, len(self.pools)))
        return np.asarray(rows, dtype=np.float64)

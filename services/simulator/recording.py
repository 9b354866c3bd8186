"""State samples (every 60 s inside the window) and counters the result is built from."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from services.core.ids import PoolId
from services.simulator.workload import Workload

if TYPE_CHECKING:
    from services.simulator.engine import Simulation


class Recorder:
    def __init__(self, workload: Workload, pools: tuple[PoolId, ...]) -> None:
        self.pools = pools
        self.times: list[float] = []
        self.allocated: list[list[int]] = []
        self.quota: list[list[float]] = []
        self.eta: list[list[float]] = []
        self.spot_in_use: list[list[float]] = []
        self.hp_in_use: list[list[float]] = []
        self.forecasts = 0
        self.forecast_fallbacks = 0
        self.wall_s = 0.0
        self.events = 0

    def sample(self, sim: Simulation) -> None:
        if not (sim.w.window_start_s <= sim.now < sim.w.window_end_s):
            return
        self.times.append(sim.now)
        alloc, quota, eta, spot, hp = [], [], [], [], []
        for pool_id in self.pools:
            rt = sim.pools[pool_id]
            st = rt.state
            alloc.append(st.capacity - int(st.free.sum()))
            quota.append(min(float(st.capacity), rt.quota.get(1, 0.0)))
            eta.append(rt.eta)
            spot.append(st.spot_in_use)
            hp.append(st.hp_in_use)
        self.allocated.append(alloc)
        self.quota.append(quota)
        self.eta.append(eta)
        self.spot_in_use.append(spot)
        self.hp_in_use.append(hp)

    def matrix(self, rows: list[list[float]] | list[list[int]]) -> np.ndarray:
        if not rows:
            return np.zeros((0, len(self.pools)))
        return np.asarray(rows, dtype=np.float64)

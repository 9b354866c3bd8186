"""Builders for ml tests: small synthetic demand series with known structure."""

from __future__ import annotations

from datetime import datetime

import numpy as np

from gfs.ml.series import SIMULATOR_ORIGIN, DemandSeries


def seasonal_series(
    *, days: int = 35, tenants: int = 3, seed: int = 0, noise: float = 0.5, start: datetime = SIMULATOR_ORIGIN
) -> DemandSeries:
    """Daily + weekly cycle with a little noise: persistence errs by the hourly slope (large),
    while a model that reads the calendar and the 24 h / 168 h lags can predict it."""
    rng = np.random.default_rng(seed)
    hours = np.arange(days * 24)
    # hour 0 is a Friday at 00:00 for the simulator origin; weekday = (4 + day) % 7
    weekday = (4 + hours // 24) % 7
    weekend = (weekday >= 5).astype(float)
    cols = []
    for j in range(tenants):
        base = 20.0 + 10.0 * j
        amp = 8.0 + 2.0 * j
        daily = amp * np.sin(2 * np.pi * (hours % 24) / 24.0 + j)
        y = base + daily - 6.0 * weekend + rng.normal(0.0, noise, hours.size)
        cols.append(np.maximum(0.0, np.round(y)))
    keys = tuple(("pool-a" if j % 2 == 0 else "pool-b", f"org-{j}") for j in range(tenants))
    return DemandSeries(keys, np.stack(cols, axis=1), start)


def step_series(*, days: int = 14, tenants: int = 4, seed: int = 0) -> DemandSeries:
    """Step-like random walk (3 hours in 4 unchanged), like real hourly peaks."""
    rng = np.random.default_rng(seed)
    n = days * 24
    jumps = rng.normal(0.0, 4.0, (n, tenants)) * (rng.random((n, tenants)) < 0.25)
    values = np.maximum(0.0, np.round(30.0 + np.cumsum(jumps, axis=0)))
    keys = tuple(("pool-a", f"org-{j}") for j in range(tenants))
    return DemandSeries(keys, values, SIMULATOR_ORIGIN)

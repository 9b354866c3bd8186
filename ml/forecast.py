"""The forecast object returned by every ml forecaster (matches services/core/forecast.py's
DemandForecast structurally; ml never imports the core)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gfs.ml.series import SeriesKey

Z90 = 1.2815515655446004  # Phi^-1(0.9): std is reported as (q90 - q50) / Z90


# Not frozen: the core's DemandForecast protocol declares plain (settable) attributes, and mypy
# only accepts a frozen dataclass for read-only protocol members. Nothing in ml mutates it.
@dataclass(slots=True)
class Forecast:
    keys: Sequence[SeriesKey]
    mean: np.ndarray  # [horizon, n_series]
    std: np.ndarray
    q50: np.ndarray
    q90: np.ndarray
    fallback: bool
    pool_fn: Callable[[str, float], np.ndarray]

    def pool_quantile(self, pool: str, p: float) -> np.ndarray:
        """p-quantile of the pool's total demand, shape [horizon] (not a sum of quantiles)."""
        if not any(k[0] == pool for k in self.keys):
            raise KeyError(f"no series in pool {pool!r}")
        if not 0.0 < p < 1.0:
            raise ValueError(f"p={p} outside (0, 1)")
        return self.pool_fn(pool, p)

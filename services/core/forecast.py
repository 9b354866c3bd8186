"""The structural Forecaster protocol the quota consumes.

`ml/` implements it without importing the core (the protocol is structural); the simulator's own
sources (oracle, persistence, seasonal-naive) implement it too. Demand series are hourly peaks of
HP GPU demand (GPUs x workers of HP tasks submitted and not yet finished), one column per
(pool, tenant) series. Hour index 0 is the time origin, 2024-03-01 00:00 (a Friday), so a model can
derive calendar covariates (hour of day, weekday, workday) from the index alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

SeriesKey = tuple[str, str]  # (pool, tenant)


class DemandForecast(Protocol):
    """Forecast for hours end_hour .. end_hour + horizon - 1 (row h is horizon hour h + 1).

    Per series arrays have shape [horizon, n_series] in the order of `keys`.
    """

    # Read-only members (properties) so frozen dataclasses satisfy the protocol.
    @property
    def keys(self) -> Sequence[SeriesKey]: ...
    @property
    def mean(self) -> np.ndarray: ...
    @property
    def std(self) -> np.ndarray: ...
    @property
    def q50(self) -> np.ndarray: ...
    @property
    def q90(self) -> np.ndarray: ...
    @property
    def fallback(self) -> bool: ...

    def pool_quantile(self, pool: str, p: float) -> np.ndarray:
        """The p-quantile of the pool's total HP demand, shape [horizon].

        A pool-level quantity: not the sum of per-tenant quantiles.
        """
        ...


class Forecaster(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...

    def fit(self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int) -> None:
        """(Re)train on hours [0, end_hour) of `hourly` ([T, n_series]); warm start allowed."""
        ...

    def predict(
        self, keys: Sequence[SeriesKey], hourly: np.ndarray, end_hour: int, horizon: int
    ) -> DemandForecast:
        """Forecast hours [end_hour, end_hour + horizon) using only hours [0, end_hour)."""
        ...

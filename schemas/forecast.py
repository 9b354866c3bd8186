"""Demand forecasts: the GPU Demand Estimator's Gaussian per (pool, tenant) and forecast hour."""

from __future__ import annotations

import math
from itertools import pairwise

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gfs.schemas.fields import FreeText, PoolName, TenantId, UtcDatetime

_CONTRACT = ConfigDict(extra="forbid", frozen=True)

REQUIRED_QUANTILES: tuple[str, ...] = ("0.5", "0.9")
"""Quantile levels every forecast carries: the median, and p = 0.9 that the quota uses (spec §4.1)."""


class HourlyDemand(BaseModel):
    """Predicted HP GPU demand for one hour ahead of the forecast's origin."""

    model_config = _CONTRACT

    hour_ahead: int = Field(ge=1, description="1 = the hour starting at origin_time, 2 = the next, ...")
    mean: float = Field(allow_inf_nan=False, description="Mean HP GPUs in use (Gaussian μ).")
    std: float = Field(ge=0, allow_inf_nan=False, description="Standard deviation (Gaussian σ).")
    quantiles: dict[str, float] = Field(
        description='Demand at quantile levels, keyed by the level as text ("0.5", "0.9", ...).'
    )

    @field_validator("quantiles")
    @classmethod
    def _levels(cls, value: dict[str, float]) -> dict[str, float]:
        missing = [level for level in REQUIRED_QUANTILES if level not in value]
        if missing:
            raise ValueError(f"missing required quantile levels {missing}")
        for level, demand in value.items():
            try:
                q = float(level)
            except ValueError:
                raise ValueError(f"quantile level {level!r} is not a number") from None
            if not 0 < q < 1:
                raise ValueError(f"quantile level {level!r} must lie strictly between 0 and 1")
            if not math.isfinite(demand):
                raise ValueError(f"quantile {level!r} is not finite ({demand})")
        # Quantiles must not cross: demand at a higher level is never lower.
        ordered = sorted(value.items(), key=lambda item: float(item[0]))
        for (low, low_demand), (high, high_demand) in pairwise(ordered):
            if high_demand < low_demand:
                raise ValueError(f"quantiles cross: {high!r} ({high_demand}) is below {low!r} ({low_demand})")
        return value


class _Forecast(BaseModel):
    """What every forecast carries: its origin, one entry per hour ahead, and the model behind it."""

    model_config = _CONTRACT

    origin_time: UtcDatetime = Field(description="Start of hour 1 of the horizon.")
    horizon: tuple[HourlyDemand, ...] = Field(min_length=1, description="One entry per forecast hour.")
    model_name: FreeText = Field(
        min_length=1, max_length=200, description="Forecaster that produced it, e.g. 'orglinear'."
    )
    model_version: FreeText = Field(
        min_length=1, max_length=1000, description="Version of the trained model artifact."
    )
    fallback: bool = Field(
        default=False, description="True when a naive fallback forecaster replaced the trained model."
    )

    @field_validator("horizon")
    @classmethod
    def _consecutive_hours(cls, value: tuple[HourlyDemand, ...]) -> tuple[HourlyDemand, ...]:
        hours = [entry.hour_ahead for entry in value]
        if hours != list(range(1, len(hours) + 1)):
            raise ValueError(f"hour_ahead must run 1, 2, ... without gaps (got {hours})")
        return value


class DemandForecast(_Forecast):
    """Forecast of one tenant's HP demand in one pool. Keyed by `pool` on gfs.forecasts."""

    pool: PoolName = Field(description="The GPU pool (GPU model).")
    tenant: TenantId = Field(description="The organization whose demand is forecast.")


class PoolDemandForecast(_Forecast):
    """Forecast of one pool's total HP demand (what the spot quota is sized from). Keyed by `pool`
    on gfs.forecasts, next to the per-tenant `DemandForecast`s of the same origin.

    A pool's quantile is not the sum of its tenants' quantiles (tenants peak at different
    minutes), so it travels as its own payload rather than being rebuilt by the quota service.
    """

    pool: PoolName = Field(description="The GPU pool (GPU model).")
    tenants: int = Field(ge=0, description="How many tenant series of the pool the forecast covers.")

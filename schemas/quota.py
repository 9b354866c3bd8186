"""Spot quotas: how many GPUs spot tasks may hold in a pool, per guaranteed duration (spec §4.1)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gfs.schemas.fields import FreeText, GuaranteeHours, PoolName, UtcDatetime

_CONTRACT = ConfigDict(extra="forbid", frozen=True)


class GuaranteeQuota(BaseModel):
    """The quota for spot tasks that asked for one guaranteed duration."""

    model_config = _CONTRACT

    guarantee_hours: GuaranteeHours = Field(description="The guaranteed duration this quota is for.")
    quota_gpus: float = Field(ge=0, description="Q_v(H) = η · min over h ≤ H of predicted free GPUs.")


class HpDemandHour(BaseModel):
    """The pool's HP demand forecast for one hour ahead (a Gaussian), as the quota used it."""

    model_config = _CONTRACT

    mean: float = Field(allow_inf_nan=False, description="Mean HP GPUs in use (Gaussian μ).")
    std: float = Field(ge=0, allow_inf_nan=False, description="Standard deviation (Gaussian σ).")


class SpotQuota(BaseModel):
    """The current spot quota of one pool, for every offered guaranteed duration.

    One message carries all durations because gfs.quotas is compacted by `pool`: per-duration
    messages under the same key would compact away all but the last one.
    """

    model_config = _CONTRACT

    pool: PoolName = Field(description="The GPU pool.")
    quotas: tuple[GuaranteeQuota, ...] = Field(min_length=1, description="One entry per offered duration.")
    eta: float = Field(gt=0, allow_inf_nan=False, description="The pool's safety factor η (starts at 1).")
    capacity_gpus: int = Field(ge=0, description="GPUs in the pool when the quota was computed.")
    valid_from: UtcDatetime = Field(description="When the quota takes effect.")
    valid_until: UtcDatetime = Field(description="When it expires if no newer quota arrives.")
    forecast_version: FreeText = Field(
        min_length=1, max_length=2000, description="The forecast (model version + origin) used."
    )
    hp_demand: tuple[HpDemandHour, ...] | None = Field(
        default=None,
        max_length=24,
        description=(
            "The pool's HP demand forecast behind the quota, hours 1..H ahead of its origin; the "
            "preemption service quotes spot tasks' survival from it (issue 27). Absent: no "
            "forecast (the quota fell back to what is idle), or a quota service before issue 27."
        ),
    )

    @field_validator("quotas")
    @classmethod
    def _one_per_duration(cls, value: tuple[GuaranteeQuota, ...]) -> tuple[GuaranteeQuota, ...]:
        hours = [q.guarantee_hours for q in value]
        if len(set(hours)) != len(hours):
            raise ValueError(f"guarantee_hours values must be distinct (got {hours})")
        return value

    @model_validator(mode="after")
    def _window(self) -> SpotQuota:
        if self.valid_until <= self.valid_from:
            raise ValueError("valid_until must be after valid_from")
        return self

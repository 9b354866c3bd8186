"""The servable HP demand of a pool, per tenant: the series the forecast stream forecasts (issue 35).

The preemption service owns the pool's state, so it alone can say which queued HP tasks could start
within a guarantee period (services/core/servable.py has the definition). After every scheduling
pass that changed the levels it publishes the new levels on gfs.pools.demand (keyed by pool); the
forecast stream samples them at minute boundaries and forecasts their hourly peaks, exactly as the
simulator samples the same levels.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gfs.schemas.fields import PoolName, TenantId, UtcDatetime

_CONTRACT = ConfigDict(extra="forbid", frozen=True)


class PoolDemandLevel(BaseModel):
    """A pool's servable HP demand from `at` on, per tenant (tenants left out are at 0)."""

    model_config = _CONTRACT

    pool: PoolName = Field(description="The GPU pool.")
    at: UtcDatetime = Field(description="The instant of the pass after which these levels hold.")
    levels: dict[TenantId, float] = Field(
        description="GPUs (g x w) per tenant: its HP running plus the queued HP of it that can start "
        "within the guarantee period on GPUs HP does not hold (docs/services.md, 'Servable demand')."
    )

    @field_validator("levels")
    @classmethod
    def _finite_and_positive(cls, levels: dict[str, float]) -> dict[str, float]:
        for tenant, gpus in levels.items():
            if not (gpus == gpus and 0.0 < gpus < float("inf")):
                raise ValueError(f"level of tenant {tenant!r} must be a positive finite number, got {gpus}")
        return levels

"""Per-pool scheduler status: what the quota service needs and only the preemption service knows.

The preemption service publishes one per pool every quota refresh interval (default 300 s) on
gfs.pools.status (compacted by pool: the latest message is the pool's status). The quota service
feeds it, with the latest forecast and the guarantee outcomes, to the core's quota function.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gfs.schemas.fields import FreeText, PoolName, TaskId, UtcDatetime

_CONTRACT = ConfigDict(extra="forbid", frozen=True)


class PoolStatus(BaseModel):
    """One pool's state at `observed_at`. Keyed by `pool` on gfs.pools.status."""

    model_config = _CONTRACT

    pool: PoolName = Field(description="The GPU pool.")
    observed_at: UtcDatetime = Field(description="When the preemption service took this status.")
    capacity_gpus: int = Field(ge=0, description="GPUs on the pool's nodes that are up (online capacity).")
    idle_gpus: int = Field(ge=0, description="GPUs no task holds.")
    spot_in_use_gpus: float = Field(
        ge=0, allow_inf_nan=False, description="S_v: GPUs held by running spot tasks."
    )
    hp_running_gpus: float = Field(ge=0, allow_inf_nan=False, description="GPUs held by running HP tasks.")
    hp_queued_gpus: float = Field(
        ge=0, allow_inf_nan=False, description="GPUs asked by HP tasks waiting in the queue (g x w summed)."
    )
    spot_head_wait_s: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="How long the spot queue's head has waited (None: empty).",
    )
    quota_held_wait_s: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="Longest wait of a spot task the last pass held back because of the quota "
        "(None: the quota held nobody back). The eta feedback grows only on this.",
    )

    hp_placeable_gpus: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="The pool's servable HP demand now (issue 35): HP running plus the GPUs the "
        "queued HP that can start within the guarantee period takes beyond what HP holds (on GPUs "
        "HP does not hold, outside a reservation's nodes, and on the GPUs HP freed in the last "
        "period): the HP usage the spot quota protects at least. None: not computed; the quota "
        "then floors at hp_running + hp_queued.",
    )
    spot_smallest_gpus: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="GPUs (g x w) of the smallest task at the head of a spot bucket (None: no spot "
        "waits). With no spot running, the quota admits at least that much if the forecast's "
        "spare holds it (issue 35: an idle pool with queued spot never stalls).",
    )
    reserved_task_id: TaskId | None = Field(
        default=None,
        description="The HP task holding the pool's head-of-queue reservation, if any.",
    )
    reserved_nodes: int = Field(default=0, ge=0, description="Nodes held by that reservation.")
    spot_head_held_by: FreeText | None = Field(
        default=None,
        max_length=64,
        description="Why the spot queue's head did not start in the last pass (an Unschedulable "
        "value such as OVER_QUOTA or NO_FIT); None: no spot task waits.",
    )

    @model_validator(mode="after")
    def _fits(self) -> PoolStatus:
        if self.idle_gpus > self.capacity_gpus:
            raise ValueError(f"idle_gpus {self.idle_gpus} exceeds capacity_gpus {self.capacity_gpus}")
        return self

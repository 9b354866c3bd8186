"""Task events: submission, admission, life cycle and the spot guarantee periods.

A task is the trace's job: `workers` identical workers, each needing `gpus_per_worker` GPUs of one
GPU model on a single node (spec §2.1). HP tasks must never be evicted; SPOT tasks may be, and are
promised a guaranteed duration (spec §4.2) whose periods are reported by `GuaranteePeriodClosed`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gfs.schemas.fields import (
    CommandText,
    FreeText,
    GpuModel,
    GuaranteeHours,
    NodeName,
    PoolName,
    TaskId,
    TenantId,
    UtcDatetime,
    no_control_in_command,
)

_CONTRACT = ConfigDict(extra="forbid", frozen=True)

MIN_GPU_FRACTION = 0.01
"""The smallest GPU share a worker may ask for: one GPU holds at most 100 workers (docs/decisions.md,
issue 22). The traces' fractions (0.2, 0.25, 0.3, 0.5; openb's gpu_milli / 1000) are well above it."""
MAX_GPUS_PER_WORKER = 1024
"""A bound far above any node (8 GPUs in the traces), so a typo cannot reach the core as 1e300."""
MAX_WORKERS = 1024
"""The most workers one task may have: far above the traces' gangs, far below what would make one
submission expand into millions of placements."""


class TaskClass(StrEnum):
    """HP: high priority, never evicted. SPOT: low priority, runs under the spot quota, evictable."""

    HP = "HP"
    SPOT = "SPOT"


class RejectionReason(StrEnum):
    """Why a submission was refused outright (a task that merely waits is not rejected)."""

    UNKNOWN_GPU_MODEL = "UNKNOWN_GPU_MODEL"
    REQUEST_LARGER_THAN_ANY_NODE = "REQUEST_LARGER_THAN_ANY_NODE"
    GANG_LARGER_THAN_POOL = "GANG_LARGER_THAN_POOL"
    INVALID_GUARANTEE = "INVALID_GUARANTEE"
    DUPLICATE_TASK_ID = "DUPLICATE_TASK_ID"
    UNKNOWN_TENANT = "UNKNOWN_TENANT"

    @property
    def message(self) -> str:
        """A default explanation; producers add specifics in `TaskRejected.message`."""
        return _REJECTION_MESSAGES[self]


_REJECTION_MESSAGES: dict[RejectionReason, str] = {
    RejectionReason.UNKNOWN_GPU_MODEL: "no pool in this cluster has that GPU model",
    RejectionReason.REQUEST_LARGER_THAN_ANY_NODE: (
        "one worker needs more GPUs than any node of that model has"
    ),
    RejectionReason.GANG_LARGER_THAN_POOL: "the pool does not have that many GPUs even when empty",
    RejectionReason.INVALID_GUARANTEE: "the guaranteed duration is not offered for this task class",
    RejectionReason.DUPLICATE_TASK_ID: "a task with this id was already submitted",
    RejectionReason.UNKNOWN_TENANT: "the organization is not known to the scheduler",
}


class GuaranteeOutcome(StrEnum):
    """How a spot guarantee period ended: SUCCEEDED (ran through it, or finished inside it) or
    FAILED (evicted inside it). The quota's eviction-rate feedback needs both counts (spec §4.1.6)."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class EvictionReason(StrEnum):
    """Why a running task is taken off its node."""

    PREEMPTED_BY_HP = "PREEMPTED_BY_HP"
    QUOTA_REDUCED = "QUOTA_REDUCED"
    CANCELLED = "CANCELLED"
    NODE_DRAIN = "NODE_DRAIN"
    NODE_LOST = "NODE_LOST"

    @property
    def message(self) -> str:
        return _EVICTION_MESSAGES[self]


_EVICTION_MESSAGES: dict[EvictionReason, str] = {
    EvictionReason.PREEMPTED_BY_HP: "a high-priority task needed the GPUs",
    EvictionReason.QUOTA_REDUCED: "the spot quota of the pool fell below the spot GPUs in use",
    EvictionReason.CANCELLED: "the task was cancelled by its owner",
    EvictionReason.NODE_DRAIN: "the node is being drained",
    EvictionReason.NODE_LOST: "the node stopped reporting; its tasks were stopped and requeued",
}


class TaskSubmitted(BaseModel):
    """A user asks to run a task. Keyed by `task_id` on gfs.tasks.submit."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="Cluster-wide unique task id, chosen by the submitter.")
    tenant: TenantId = Field(description="The organization the task belongs to.")
    gpu_model: GpuModel = Field(description="GPU model every worker must run on (selects the pool).")
    gpus_per_worker: float = Field(
        ge=MIN_GPU_FRACTION,
        le=MAX_GPUS_PER_WORKER,
        description=(
            "GPUs per worker: a fraction below 1 shares a GPU (at least 0.01, i.e. at most 100 workers "
            "on one GPU); above 1 it must be whole."
        ),
    )
    workers: int = Field(
        ge=1,
        le=MAX_WORKERS,
        description="Number of identical workers; each is placed on one node (at most 1024).",
    )
    task_class: TaskClass = Field(description="HP (never evicted) or SPOT (evictable, quota-gated).")
    guarantee_hours: GuaranteeHours = Field(
        default=1, description="SPOT only: the guaranteed run time per period, in hours (1, 2 or 4)."
    )
    expected_duration_s: float | None = Field(
        default=None, gt=0, description="The submitter's run-time estimate in seconds, if any."
    )
    checkpoint_interval_s: float | None = Field(
        default=None, gt=0, description="How often the task checkpoints; bounds the work an eviction loses."
    )
    command: CommandText | tuple[CommandText, ...] = Field(
        min_length=1,
        description=(
            "What each worker runs: an argv list, or one shell command string (no NUL or other control "
            "character but TAB, LF and CR)."
        ),
    )

    @field_validator("gpus_per_worker")
    @classmethod
    def _whole_gpus_above_one(cls, value: float) -> float:
        # Spec §2.1: fractional requests share one GPU; anything larger takes whole GPUs on a node.
        if value > 1 and not value.is_integer():
            raise ValueError(f"must be a whole number of GPUs when above 1 (got {value})")
        return value

    _command_without_control = field_validator("command", mode="before")(no_control_in_command)

    @field_validator("command")
    @classmethod
    def _no_empty_argv_items(cls, value: str | tuple[str, ...]) -> str | tuple[str, ...]:
        if isinstance(value, tuple) and not value[0]:
            raise ValueError("the program (first argv item) must not be empty")
        return value


Probability = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class SurvivalQuote(BaseModel):
    """How likely an accepted spot task is to run uninterrupted, quoted at acceptance (issue 27;
    the model and its calibration: docs/decisions.md, "A quoted survival probability")."""

    model_config = _CONTRACT

    guarantee_hours: GuaranteeHours = Field(description="The task's guaranteed duration.")
    guarantee: Probability = Field(description="P(uninterrupted for the guaranteed duration).")
    hours_1: Probability = Field(description="P(uninterrupted for 1 hour).")
    hours_2: Probability = Field(description="P(uninterrupted for 2 hours).")
    hours_4: Probability = Field(description="P(uninterrupted for 4 hours).")


class TaskAccepted(BaseModel):
    """The scheduler admitted the submission into its queue (it may still wait for GPUs)."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="The accepted task.")
    pool: PoolName = Field(description="The pool whose queue the task joined.")
    task_class: TaskClass = Field(description="The task's class, repeated so lifecycle readers need no join.")
    survival: SurvivalQuote | None = Field(
        default=None,
        description=(
            "Spot tasks: the quoted probability of running uninterrupted (absent for HP tasks, "
            "from schedulers before issue 27, and while the pool has no HP-demand forecast)."
        ),
    )


class TaskRejected(BaseModel):
    """The submission was refused; `message` tells the user what to change."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="The rejected task.")
    reason: RejectionReason = Field(description="Machine-readable reason code.")
    message: FreeText = Field(min_length=1, description="Human explanation with the values involved.")


class TaskCancelled(BaseModel):
    """The owner withdraws a task (queued or running). Keyed by `task_id` on gfs.tasks.submit."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="The task to cancel.")
    tenant: TenantId = Field(description="Who asks; must be the task's organization.")
    reason: FreeText = Field(default="", max_length=2000, description="Free text kept for audit.")


class Placement(BaseModel):
    """Where one worker runs: a node and the GPUs (or GPU share) it holds there."""

    model_config = _CONTRACT

    worker_index: int = Field(ge=0, description="0-based worker number within the task.")
    node: NodeName = Field(description="The node the worker runs on.")
    gpu_indices: tuple[int, ...] = Field(min_length=1, description="Device indices on that node.")
    gpu_fraction: float = Field(
        default=1.0, gt=0, le=1, description="Share of each listed GPU held (below 1 only when fractional)."
    )

    @field_validator("gpu_indices")
    @classmethod
    def _distinct_indices(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(index < 0 for index in value) or len(set(value)) != len(value):
            raise ValueError(f"must be distinct non-negative device indices (got {list(value)})")
        return value


class TaskStarted(BaseModel):
    """All workers of a task are bound and running (one event per start, including restarts)."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="The started task.")
    pool: PoolName = Field(description="The pool the task runs in.")
    task_class: TaskClass = Field(description="HP or SPOT.")
    placements: tuple[Placement, ...] = Field(min_length=1, description="One entry per worker.")
    started_at: UtcDatetime = Field(description="When the last worker started (the task's start).")
    attempt: int = Field(default=1, ge=1, description="1 for the first start, +1 after each eviction.")

    @field_validator("placements")
    @classmethod
    def _one_placement_per_worker(cls, value: tuple[Placement, ...]) -> tuple[Placement, ...]:
        workers = [p.worker_index for p in value]
        if len(set(workers)) != len(workers):
            raise ValueError(f"worker_index values must be distinct (got {workers})")
        return value


class TaskFinished(BaseModel):
    """The task ended on its own (not evicted): exit code 0 is success."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="The finished task.")
    exit_code: int = Field(description="The task's exit status; for several workers, the first non-zero.")
    finished_at: UtcDatetime = Field(description="When the last worker exited.")


class TaskEvicted(BaseModel):
    """A running task was stopped by an eviction command; a SPOT task goes back to its queue."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="The evicted task (the victim).")
    node: NodeName = Field(description="The node whose agent carried out the eviction.")
    command_id: UUID = Field(description="The EvictCommand that caused it (joins to EvictAck).")
    reason: EvictionReason = Field(description="Why it was evicted.")
    evicted_at: UtcDatetime = Field(description="When the agent stopped the task.")
    lost_gpu_seconds: float = Field(
        ge=0,
        description=(
            "GPU-seconds lost, all workers (spec §5.4): GPUs x the seconds from the run's placement by "
            "the scheduler to the eviction decision, reduced modulo `checkpoint_interval_s` when the "
            "task declared one (work since its last checkpoint). The seconds between the decision "
            "and `evicted_at` are not counted."
        ),
    )
    requeued: bool = Field(default=True, description="Whether the task went back to the queue.")


class TaskWithdrawn(BaseModel):
    """A queued task left its queue because its owner cancelled it (a running one is stopped
    instead and reported by TaskEvicted with reason CANCELLED and requeued false)."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="The withdrawn task.")
    pool: PoolName = Field(description="The pool whose queue it left.")
    withdrawn_at: UtcDatetime = Field(description="When the scheduler took it out of the queue.")
    reason: FreeText = Field(default="", max_length=2000, description="The cancellation's free text.")


class GuaranteePeriodClosed(BaseModel):
    """One spot guarantee period ended (spec §4.2). Successes and failures both count for η."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="The spot task whose period closed.")
    pool: PoolName = Field(description="The pool the task ran in (η is kept per pool).")
    guarantee_hours: GuaranteeHours = Field(default=1, description="The period length promised, in hours.")
    period_start: UtcDatetime = Field(
        description="When the period began: the run's placement (its BindCommand's issued_at) for its first "
        "period, the previous period's end after that."
    )
    period_end: UtcDatetime = Field(
        description="When it ended: its full length; the run's finish (its TaskFinished's finished_at); or, "
        "FAILED, the eviction's decision (the EvictCommand's issued_at, not the agent's ack)."
    )
    outcome: GuaranteeOutcome = Field(description="SUCCEEDED or FAILED (evicted inside the period).")

    @model_validator(mode="after")
    def _end_after_start(self) -> GuaranteePeriodClosed:
        if self.period_end < self.period_start:
            raise ValueError("period_end must not be before period_start")
        return self


class TaskReclaimWarning(BaseModel):
    """A running spot task is among the likeliest victims if HP demand rises as forecast within
    `lead_s` (issue 27): its workers were sent SIGUSR1 so they can checkpoint now. A warning changes
    no scheduling decision; the task may finish, or be evicted later, or never."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="The warned spot task.")
    pool: PoolName = Field(description="The pool whose HP demand is expected to reclaim spot GPUs.")
    attempt: int = Field(ge=1, description="The run of the task warned (docs/attempts.md).")
    lead_s: float = Field(gt=0, allow_inf_nan=False, description="How far ahead the warning looks, seconds.")
    shortfall_gpus: float = Field(
        gt=0, allow_inf_nan=False, description="Spot GPUs HP is expected to need back within the lead time."
    )
    issued_at: UtcDatetime = Field(description="When the scheduler issued the warning.")

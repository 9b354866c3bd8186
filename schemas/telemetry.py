"""Node telemetry: per-GPU samples from each node agent. It doubles as the node's heartbeat, so a
node that stops publishing is treated as gone by the scheduler. It is signed by the agent with its
node's key (docs/protocol.md section 5): the heartbeat, the GPUs and the `running` report all
drive the scheduler's decisions (a report without an attempt releases the GPUs to an HP task)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gfs.schemas.fields import FreeText, GpuModel, NodeName, TaskId, UtcDatetime

_CONTRACT = ConfigDict(extra="forbid", frozen=True)

# Allocation fractions are floats chosen by the scheduler (e.g. 3 x 1/3); allow rounding slack
# when checking that a GPU is not over-allocated.
_FRACTION_SLACK = 1e-6


class GpuProcess(BaseModel):
    """A process holding memory on a GPU (as NVML lists it)."""

    model_config = _CONTRACT

    pid: int = Field(ge=0, description="Process id on the node.")
    task_id: TaskId | None = Field(default=None, description="The task it belongs to, if the agent knows.")
    used_memory_mib: float = Field(ge=0, description="GPU memory held by the process, MiB.")


class GpuAllocation(BaseModel):
    """A share of a GPU the scheduler has bound to a task."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="The task holding the share.")
    fraction: float = Field(gt=0, le=1, description="Share of the GPU (1.0 = whole GPU).")


class GpuSample(BaseModel):
    """One GPU's state at the sample time."""

    model_config = _CONTRACT

    index: int = Field(ge=0, description="Device index on the node.")
    utilisation_pct: float = Field(ge=0, le=100, description="Compute utilisation over the sample window, %.")
    memory_used_mib: float = Field(ge=0, description="Memory in use, MiB.")
    memory_total_mib: float = Field(gt=0, description="Memory on the device, MiB.")
    processes: tuple[GpuProcess, ...] = Field(default=(), description="Processes using the GPU.")
    allocations: tuple[GpuAllocation, ...] = Field(default=(), description="Scheduler shares bound to it.")

    @model_validator(mode="after")
    def _consistent(self) -> GpuSample:
        if self.memory_used_mib > self.memory_total_mib:
            raise ValueError(
                f"memory_used_mib ({self.memory_used_mib}) exceeds memory_total_mib ({self.memory_total_mib})"
            )
        allocated = sum(a.fraction for a in self.allocations)
        if allocated > 1 + _FRACTION_SLACK:
            raise ValueError(f"allocations sum to {allocated:g} of GPU {self.index}, more than 1")
        return self


class RunningWorker(BaseModel):
    """One worker the agent runs now (reconciliation, docs/attempts.md): which run of which task."""

    model_config = _CONTRACT

    task_id: TaskId = Field(description="The task.")
    attempt: int | None = Field(default=None, ge=1, description="The run (the BindCommand's attempt).")
    worker_index: int = Field(ge=0, description="The worker of that run.")


class NodeTelemetry(BaseModel):
    """A node's sample of all its GPUs. Keyed by `node` on gfs.nodes.telemetry."""

    model_config = _CONTRACT

    node: NodeName = Field(description="The reporting node.")
    gpu_model: GpuModel = Field(description="The node's GPU model (its pool).")
    sampled_at: UtcDatetime = Field(description="When the sample was taken on the node.")
    gpus: tuple[GpuSample, ...] = Field(min_length=1, description="One sample per GPU on the node.")
    running: tuple[RunningWorker, ...] | None = Field(
        default=None,
        max_length=4096,
        description=(
            "Every worker the agent runs at `sampled_at` (its report for reconciliation); null: the "
            "agent does not report, and the service does not reconcile its node."
        ),
    )
    signature: FreeText = Field(
        default="",
        max_length=1024,
        description="HMAC-SHA256 hex of the unsigned sample under the node's key; '' if unsigned.",
    )

    @field_validator("gpus")
    @classmethod
    def _distinct_indices(cls, value: tuple[GpuSample, ...]) -> tuple[GpuSample, ...]:
        indices = [gpu.index for gpu in value]
        if len(set(indices)) != len(indices):
            raise ValueError(f"GPU index values must be distinct (got {indices})")
        return value

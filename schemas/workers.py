"""Per-worker acknowledgements from node agents: a worker started, a worker exited.

One agent speaks only for its own node, and a gang's workers may run on several nodes, so agents
report per worker; the preemption service aggregates them into TaskStarted (every worker started)
and TaskFinished (every worker exited on its own). Keyed by `node` on gfs.commands.worker-ack.

Both are signed by the agent with its node's key, like the commands it receives (the signed bytes:
docs/protocol.md section 5), so the scheduler applies a report only from the node it names.
"""

from __future__ import annotations

from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from gfs.schemas.fields import FreeText, NodeName, TaskId, UtcDatetime

_CONTRACT = ConfigDict(extra="forbid", frozen=True)


class WorkerStarted(BaseModel):
    """A worker of a BindCommand is running on `node`."""

    model_config = _CONTRACT

    command_id: UUID = Field(description="The BindCommand that started the worker.")
    node: NodeName = Field(description="The node running the worker.")
    task_id: TaskId = Field(description="The worker's task.")
    worker_index: int = Field(ge=0, description="The worker (Placement.worker_index).")
    pid: int = Field(ge=1, description="The worker's process id (leader of its process group).")
    started_at: UtcDatetime = Field(description="When the agent started the process.")
    attempt: int | None = Field(
        default=None, ge=1, description="The BindCommand's attempt (echoed; docs/attempts.md)."
    )
    signature: FreeText = Field(
        default="",
        max_length=1024,
        description="HMAC-SHA256 hex of the unsigned message under the node's key; '' if unsigned.",
    )


class WorkerExited(BaseModel):
    """A worker's process ended. `evicted` is set when an EvictCommand stopped it (the eviction's
    EvictAck reports the outcome; this exit is not the task finishing)."""

    model_config = _CONTRACT

    command_id: UUID = Field(description="The BindCommand that started the worker.")
    node: NodeName = Field(description="The node that ran the worker.")
    task_id: TaskId = Field(description="The worker's task.")
    worker_index: int = Field(ge=0, description="The worker (Placement.worker_index).")
    exit_code: int = Field(
        description="The exit status; negative: killed by that signal; 127: the program could not start."
    )
    exited_at: UtcDatetime = Field(description="When the agent saw the process end.")
    evicted: bool = Field(default=False, description="Stopped by an EvictCommand (not a finish).")
    detail: FreeText = Field(
        default="", max_length=2000, description="Why it could not start, when it could not."
    )
    attempt: int | None = Field(
        default=None, ge=1, description="The BindCommand's attempt (echoed; docs/attempts.md)."
    )
    signature: FreeText = Field(
        default="",
        max_length=1024,
        description="HMAC-SHA256 hex of the unsigned message under the node's key; '' if unsigned.",
    )

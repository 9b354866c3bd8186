"""Commands to node agents (bind, evict) and the agents' acknowledgements.

Commands are idempotent: the agent remembers `command_id`s it has executed and answers a repeat
with the same ack instead of acting twice. `signature` authenticates the sender: the HMAC-SHA256
(hex), under the node's key, of the command's compact JSON with `signature` set to "" and the
fields added after version 1 left out while they are null (empty signature = unsigned). The exact
bytes, the node-key formula and test vectors: docs/protocol.md, section 5. The agent signs its
EvictAck the same way under its own node key (the scheduler applies an ack only from its node);
`signature` is the ack's last field, so an ack written before it existed decodes unchanged.
"""

from __future__ import annotations

from enum import StrEnum
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gfs.schemas.fields import (
    CommandText,
    FreeText,
    NodeName,
    TaskId,
    UtcDatetime,
    no_control_in_command,
)
from gfs.schemas.tasks import EvictionReason, Placement, TaskClass

_CONTRACT = ConfigDict(extra="forbid", frozen=True)

# `attempt` numbers the runs of a task (1, 2, ... per task, docs/attempts.md): a bind starts one
# attempt, an eviction stops one, and every ack names the attempt it is about, so a late message
# of an earlier run can never be taken for the current one. It is optional so messages written
# before it existed still decode; such a message is about whichever run is current. A null
# `attempt` is left out of the signed bytes (services/platform/signing.py).


class EvictOutcome(StrEnum):
    """What the agent did with an eviction command."""

    CHECKPOINTED = "CHECKPOINTED"  # asked the task to checkpoint, it stopped within the grace period
    KILLED = "KILLED"  # the grace period ran out and the task was killed
    NOT_RUNNING = "NOT_RUNNING"  # none of the tasks ran on this node (already gone): nothing to do
    FAILED = "FAILED"  # the agent could not stop the tasks; see `detail`


class BindCommand(BaseModel):
    """Start a task's workers on a node. Keyed by `node` on gfs.commands.bind."""

    model_config = _CONTRACT

    command_id: UUID = Field(description="Idempotency key: the agent executes each id once.")
    node: NodeName = Field(description="The node that must start the workers.")
    task_id: TaskId = Field(description="The task to start.")
    task_class: TaskClass = Field(description="HP or SPOT (the agent labels processes with it).")
    placements: tuple[Placement, ...] = Field(
        min_length=1, description="The task's workers placed on this node (their node must be `node`)."
    )
    command: CommandText | tuple[CommandText, ...] = Field(min_length=1, description="What each worker runs.")
    checkpoint_interval_s: float | None = Field(default=None, gt=0, description="Passed to the task.")
    restart_overhead_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Seconds the start costs before work resumes (a restart after eviction, or a start that "
            "had to wait for evictions; spec 5.4); passed to the task as GFS_RESTART_OVERHEAD_S."
        ),
    )
    issued_at: UtcDatetime = Field(description="When the scheduler issued the command.")
    signature: FreeText = Field(
        default="", max_length=1024, description="HMAC-SHA256 hex of the unsigned command; '' if unsigned."
    )
    attempt: int | None = Field(
        default=None, ge=1, description="The run of the task this command is about (docs/attempts.md)."
    )

    _command_without_control = field_validator("command", mode="before")(no_control_in_command)

    @field_validator("placements")
    @classmethod
    def _distinct_workers(cls, value: tuple[Placement, ...]) -> tuple[Placement, ...]:
        workers = [p.worker_index for p in value]
        if len(set(workers)) != len(workers):
            raise ValueError(f"worker_index values must be distinct (got {workers})")
        return value

    @model_validator(mode="after")
    def _placements_on_this_node(self) -> BindCommand:
        # A bind goes to one node's agent (the Kafka key); a placement elsewhere would be ignored.
        elsewhere = sorted({p.node for p in self.placements if p.node != self.node})
        if elsewhere:
            raise ValueError(f"placements must all be on node {self.node!r} (found {elsewhere})")
        return self


class EvictCommand(BaseModel):
    """Stop tasks on a node, after letting them checkpoint for `grace_seconds`."""

    model_config = _CONTRACT

    command_id: UUID = Field(description="Idempotency key: the agent executes each id once.")
    node: NodeName = Field(description="The node that must stop the tasks.")
    task_ids: tuple[TaskId, ...] = Field(min_length=1, description="The victims on that node.")
    reason: EvictionReason = Field(description="Why they are evicted.")
    grace_seconds: float = Field(ge=0, description="Time allowed to checkpoint before a kill.")
    preemptor_task_id: TaskId | None = Field(default=None, description="The HP task that needs the GPUs.")
    issued_at: UtcDatetime = Field(description="When the scheduler issued the command.")
    signature: FreeText = Field(
        default="", max_length=1024, description="HMAC-SHA256 hex of the unsigned command; '' if unsigned."
    )
    attempt: int | None = Field(
        default=None,
        ge=1,
        description="The run of the task stopped (docs/attempts.md); only with a single task id.",
    )

    @field_validator("task_ids")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"task_ids must be distinct (got {list(value)})")
        return value

    @model_validator(mode="after")
    def _attempt_of_one_task(self) -> EvictCommand:
        # An attempt number belongs to one task: a command naming several has no single attempt.
        if self.attempt is not None and len(self.task_ids) != 1:
            raise ValueError("attempt may be given only when task_ids names a single task")
        return self


class WarnCommand(BaseModel):
    """Tell a spot task's workers on a node to checkpoint now: the agent sends them SIGUSR1 (issue
    27, docs/operations.md "Reclaim warnings"). Nothing is stopped and nothing is acknowledged.
    Published on gfs.commands.evict, so it stays in order with the node's evictions; an agent from
    before it dead-letters it as an unknown payload type and goes on."""

    model_config = _CONTRACT

    command_id: UUID = Field(description="Idempotency key: the agent signals once per id.")
    node: NodeName = Field(description="The node running the task's workers.")
    task_id: TaskId = Field(description="The warned task.")
    warned_attempt: int = Field(ge=1, description="The run warned: workers of another run are not signalled.")
    lead_seconds: float = Field(gt=0, allow_inf_nan=False, description="How far ahead the warning looks.")
    issued_at: UtcDatetime = Field(description="When the scheduler issued the command.")
    signature: FreeText = Field(
        default="", max_length=1024, description="HMAC-SHA256 hex of the unsigned command; '' if unsigned."
    )


class EvictAck(BaseModel):
    """The agent's answer to an EvictCommand. Keyed by `node` on gfs.commands.evict-ack."""

    model_config = _CONTRACT

    command_id: UUID = Field(description="The command answered.")
    node: NodeName = Field(description="The answering node.")
    task_ids: tuple[TaskId, ...] = Field(description="The tasks the command named.")
    outcome: EvictOutcome = Field(description="What the agent did.")
    acked_at: UtcDatetime = Field(description="When the agent finished handling the command.")
    detail: FreeText = Field(default="", max_length=2000, description="Error text when outcome is FAILED.")
    attempt: int | None = Field(
        default=None, ge=1, description="The attempt the command named (echoed; docs/attempts.md)."
    )
    signature: FreeText = Field(
        default="",
        max_length=1024,
        description="HMAC-SHA256 hex of the unsigned ack under the answering node's key; '' if unsigned.",
    )

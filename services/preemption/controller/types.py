"""The pool controller's vocabulary: the effects it returns, its decision records, and the records
its collaborators keep per task, bind, eviction and ending attempt.

Data only, no decision: every module of the controller package may import from here, and this
module from none of them (the package's layers contract in pyproject.toml). Each record is owned by
one collaborator (the package doc): `_Task` by the pool's task table, `_Bound` and `_Eviction` by
the command ledger, `_Ending` by the endings.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from gfs.schemas.commands import BindCommand, EvictCommand, WarnCommand
from gfs.schemas.tasks import (
    EvictionReason,
    GuaranteePeriodClosed,
    Placement,
    RejectionReason,
    TaskSubmitted,
)
from gfs.schemas.tasks import TaskClass as WireClass
from gfs.services.core import reasons as core_reasons
from gfs.services.preemption.controller.attempts import Attempt

_REJECTIONS = {
    core_reasons.Rejection.UNKNOWN_POOL: RejectionReason.UNKNOWN_GPU_MODEL,
    core_reasons.Rejection.WORKER_LARGER_THAN_NODE: RejectionReason.REQUEST_LARGER_THAN_ANY_NODE,
    core_reasons.Rejection.GANG_LARGER_THAN_POOL: RejectionReason.GANG_LARGER_THAN_POOL,
    core_reasons.Rejection.INVALID_REQUEST: RejectionReason.REQUEST_LARGER_THAN_ANY_NODE,
}
_EVICTION_REASONS = {
    core_reasons.EvictionReason.PREEMPTED_BY_HP: EvictionReason.PREEMPTED_BY_HP,
    core_reasons.EvictionReason.NODE_DOWN: EvictionReason.NODE_LOST,
    core_reasons.EvictionReason.CANCELLED: EvictionReason.CANCELLED,
    core_reasons.EvictionReason.LEASE_NOT_RENEWED: EvictionReason.QUOTA_REDUCED,
}


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision record (persisted; `gfs explain` reads them)."""

    task_id: str
    kind: str  # accepted, rejected, started, evicted, bound, withdrawn, finished, node_down, ...
    at_s: float
    detail: dict[str, Any]


@dataclass(slots=True)
class Effects:
    events: list[BaseModel] = field(default_factory=list)  # lifecycle events
    commands: list[BindCommand | EvictCommand | WarnCommand] = field(default_factory=list)  # unsigned
    decisions: list[Decision] = field(default_factory=list)

    def extend(self, other: Effects) -> None:
        self.events += other.events
        self.commands += other.commands
        self.decisions += other.decisions

    def __bool__(self) -> bool:
        return bool(self.events or self.commands or self.decisions)


@dataclass(slots=True)
class _Task:
    submitted: TaskSubmitted
    attempt: int = 0
    binds: dict[uuid.UUID, BindCommand] = field(default_factory=dict)  # current attempt's commands
    run: Attempt | None = None  # the current attempt's state machine (None: queued)
    started: dict[int, float] = field(default_factory=dict)  # worker -> WorkerStarted time
    periods_closed: int = 0  # guarantee periods of the current run already reported
    evicted: bool = False  # stopped and requeued before: its next start pays the restart overhead


@dataclass(frozen=True, slots=True)
class _Bound:
    """What a BindCommand addressed: its acks must match it (`CommandLedger.refusal`)."""

    task_id: str
    node: str
    attempt: int
    workers: frozenset[int]


@dataclass(slots=True)
class _Eviction:
    node: str
    task_ids: tuple[str, ...]
    attempt: int | None
    reported: bool = False  # its ack (or, NODE_LOST, the command itself) was recorded


@dataclass(slots=True)
class _Ending:
    """An evicted attempt whose end is not known yet: what to report once it is (endings.py). Its
    deadline and which nodes acknowledged for held starts are the driver's (core/driver/held.py)."""

    task_id: str
    task_class: WireClass
    run: Attempt
    commands: dict[uuid.UUID, str]  # eviction command -> node
    reason: EvictionReason
    lost: float  # GPU-seconds since the last checkpoint
    requeued: bool
    closes: list[BaseModel]  # the guarantee periods the stop closed (a FAILED one last if any)
    failed_close: bool
    placements: tuple[Placement, ...] = ()
    started: dict[int, float] = field(default_factory=dict)  # worker -> WorkerStarted time
    acked_at: dict[str, datetime] = field(default_factory=dict)
    exited_at: datetime | None = None
    preemptor: str | None = None  # the HP task that needed the GPUs (a re-issued eviction names it)
    decided_s: float = 0.0  # the runtime's time of the stop (its failed period was logged then)
    # The period the stop cut short, closed SUCCEEDED if the run turns out to have finished on its
    # own (a finish closes its last period as a success, docs/attempts.md); None: no period was
    # running (a stop at a period boundary, or not spot).
    finish_close: GuaranteePeriodClosed | None = None

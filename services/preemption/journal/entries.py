"""The controller's inputs as typed journal entries (issue 23 item 1): one frozen class per kind.

An entry is what a pool's controller is told, at `at` (seconds): a submission, a cancel, a quota,
an agent's ack or report, a node seen or lost, a timer's tick or pass, a clock tick, an SRE control.
The live shell builds entries (inputs.entry_for, the decider's timers, reconciliation, controls),
plays them (`apply_to`) and journals them as rows in the transaction that carries their effects; a
new owner of a partition reads the rows back (`from_row`) and plays the same entries.

The row is the stable format: `preemption_journal(kind, data jsonb, at_s)`. `to_row` writes exactly
what the release before typed entries wrote (same kind strings, same JSON data, keys in the same
order), so journals replay across an upgrade and across a rollback; tests/unit/preemption/
test_journal_rows.py holds hand-written rows of every kind in that format.

Why a method per class (`apply_to`) rather than an if-chain on the kind, functools.singledispatch
or a match on types: each kind's fields, its row and what it does to the controller sit in one
class, so a new kind cannot be added without saying how it is stored and played; it is also the
cheapest dispatch (one attribute lookup; singledispatch adds a registry lookup and a wrapper call
per entry, a match tests the types one after the other).

Wire payloads (submission, cancel, quota, acks) are held as their validated models: the live path
plays the payload its record was decoded into, never a dump of it validated a second time (issue
22); a replay validates the journaled data once, in `from_row`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ValidationError

from gfs.schemas.commands import EvictAck
from gfs.schemas.quota import SpotQuota
from gfs.schemas.tasks import TaskCancelled, TaskClass, TaskSubmitted
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.preemption.controller.reconcile_rules import NodeReport
from gfs.services.preemption.controller.settings import Controls

if TYPE_CHECKING:
    from gfs.services.preemption.controller.pool import PoolController
    from gfs.services.preemption.controller.types import Effects

Row = tuple[str, dict[str, Any], float]  # (kind, data, at_s): a journal row as Postgres stores it

log = logging.getLogger("gfs.services.preemption.journal.inputs")  # the logger replay warnings always used


def _dump(payload: BaseModel) -> dict[str, Any]:
    # An agent's signature was checked before the entry was built (report_auth.py); the journal
    # keeps the ack without it, so its rows read the same as before acks were signed (and the
    # previous release, which does not know the field, can still replay them after a rollback).
    return payload.model_dump(mode="json", exclude={"signature"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One input of one pool's controller at `at`; a subclass per kind."""

    kind: ClassVar[str]
    at: float

    def data(self) -> dict[str, Any]:
        """The row's JSON data, exactly as journaled since before entries were typed."""
        raise NotImplementedError

    def to_row(self) -> Row:
        return (self.kind, self.data(), self.at)

    def apply_to(self, controller: PoolController) -> Effects:
        raise NotImplementedError

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> Entry:
        raise NotImplementedError


def _journaled_submission(data: dict[str, Any]) -> TaskSubmitted:
    """A journaled submission, validated again; one the rules of its day accepted but today's refuse
    (issue 22 added the tenant's shape and the GPU bounds) is rebuilt as it was recorded, so an
    older journal still replays and its partition can be claimed."""
    try:
        return TaskSubmitted.model_validate(data)
    except ValidationError as exc:
        log.warning("journaled submission %r predates today's rules (%s); replayed as recorded",
                    data.get("task_id"), exc.errors(include_url=False)[0].get("msg"))  # fmt: skip
        command = data["command"]
        return TaskSubmitted.model_construct(
            **{**data, "task_class": TaskClass(data["task_class"]),
               "command": command if isinstance(command, str) else tuple(command)}
        )  # fmt: skip


def _journaled_cancel(data: dict[str, Any]) -> TaskCancelled:
    try:
        return TaskCancelled.model_validate(data)
    except ValidationError:
        return TaskCancelled.model_construct(**data)  # a tenant of an older rule, as for submissions


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitEntry(Entry):
    """A submission; `trace`: the task's trace carrier (live submissions), so a rebuilt owner
    continues the task's trace (None: not recorded, and no "trace" key in the row)."""

    kind: ClassVar[str] = "submit"
    task: TaskSubmitted
    duplicate: bool = False
    trace: Mapping[str, str] | None = None

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"task": _dump(self.task), "duplicate": self.duplicate}
        if self.trace is not None:
            out["trace"] = dict(self.trace)
        return out

    def apply_to(self, controller: PoolController) -> Effects:
        return controller.submit(self.task, self.at, duplicate=self.duplicate)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> SubmitEntry:
        trace = data.get("trace")
        return cls(
            task=_journaled_submission(data["task"]), duplicate=bool(data["duplicate"]), at=at,
            trace={str(k): str(v) for k, v in trace.items()} if isinstance(trace, dict) else None,
        )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelEntry(Entry):
    kind: ClassVar[str] = "cancel"
    cancel: TaskCancelled

    def data(self) -> dict[str, Any]:
        return _dump(self.cancel)

    def apply_to(self, controller: PoolController) -> Effects:
        c = self.cancel
        return controller.cancel(c.task_id, c.tenant, c.reason, self.at)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> CancelEntry:
        return cls(cancel=_journaled_cancel(data), at=at)


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaEntry(Entry):
    kind: ClassVar[str] = "quota"
    quota: SpotQuota

    def data(self) -> dict[str, Any]:
        return _dump(self.quota)

    def apply_to(self, controller: PoolController) -> Effects:
        return controller.quota(self.quota, self.at)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> QuotaEntry:
        return cls(quota=SpotQuota.model_validate(data), at=at)


@dataclass(frozen=True, slots=True, kw_only=True)
class EvictAckEntry(Entry):
    kind: ClassVar[str] = "evict_ack"
    ack: EvictAck

    def data(self) -> dict[str, Any]:
        return _dump(self.ack)

    def apply_to(self, controller: PoolController) -> Effects:
        return controller.evict_ack(self.ack, self.at)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> EvictAckEntry:
        return cls(ack=EvictAck.model_validate(data), at=at)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStartedEntry(Entry):
    kind: ClassVar[str] = "worker_started"
    started: WorkerStarted

    def data(self) -> dict[str, Any]:
        return _dump(self.started)

    def apply_to(self, controller: PoolController) -> Effects:
        return controller.worker_started(self.started, self.at)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> WorkerStartedEntry:
        return cls(started=WorkerStarted.model_validate(data), at=at)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerExitedEntry(Entry):
    kind: ClassVar[str] = "worker_exited"
    exited: WorkerExited

    def data(self) -> dict[str, Any]:
        return _dump(self.exited)

    def apply_to(self, controller: PoolController) -> Effects:
        return controller.worker_exited(self.exited, self.at)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> WorkerExitedEntry:
        return cls(exited=WorkerExited.model_validate(data), at=at)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSeenEntry(Entry):
    """A node's telemetry with `gpus` GPUs (the heartbeat itself is not journaled)."""

    kind: ClassVar[str] = "node_seen"
    node: str
    gpus: int

    def data(self) -> dict[str, Any]:
        return {"node": self.node, "gpus": self.gpus}

    def apply_to(self, controller: PoolController) -> Effects:
        return controller.node_seen(self.node, self.gpus, self.at)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> NodeSeenEntry:
        return cls(node=str(data["node"]), gpus=int(data["gpus"]), at=at)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDownEntry(Entry):
    """A node whose heartbeat stopped, marked down by the liveness rules (liveness.py)."""

    kind: ClassVar[str] = "node_down"
    node: str

    def data(self) -> dict[str, Any]:
        return {"node": self.node}

    def apply_to(self, controller: PoolController) -> Effects:
        return controller.node_down(self.node, self.at)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> NodeDownEntry:
        return cls(node=str(data["node"]), at=at)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeReportEntry(Entry):
    """What a node's agent runs (reconciliation, reconcile.py)."""

    kind: ClassVar[str] = "node_report"
    node: str
    report: NodeReport

    def data(self) -> dict[str, Any]:
        return {"node": self.node, **self.report.as_data()}

    def apply_to(self, controller: PoolController) -> Effects:
        return controller.node_report(self.node, self.report, self.at)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> NodeReportEntry:
        return cls(node=str(data["node"]), report=NodeReport.from_data(data), at=at)


@dataclass(frozen=True, slots=True, kw_only=True)
class TickEntry(Entry):
    """The timer's periodic work, then a pass. A flag at its default is left out of the row (the
    shell has always written `{}` or `{"reconcile": true}`)."""

    kind: ClassVar[str] = "tick"
    reconcile: bool = False
    preemption: bool = True

    def data(self) -> dict[str, Any]:
        return _flags(self.reconcile, self.preemption)

    def apply_to(self, controller: PoolController) -> Effects:
        effects = controller.tick(self.at, reconcile=self.reconcile)
        effects.extend(controller.schedule(self.at, preemption=self.preemption))
        return effects

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> TickEntry:
        reconcile, preemption = bool(data.get("reconcile", False)), bool(data.get("preemption", True))
        return cls(reconcile=reconcile, preemption=preemption, at=at)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleEntry(Entry):
    """A pass (after a batch of inputs touched the pool)."""

    kind: ClassVar[str] = "schedule"
    preemption: bool = True

    def data(self) -> dict[str, Any]:
        return _flags(False, self.preemption)

    def apply_to(self, controller: PoolController) -> Effects:
        return controller.schedule(self.at, preemption=self.preemption)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> ScheduleEntry:
        return cls(preemption=bool(data.get("preemption", True)), at=at)


def _flags(reconcile: bool, preemption: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if reconcile:
        out["reconcile"] = True
    if not preemption:
        out["preemption"] = False
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockEntry(Entry):
    """A tick of the controllable clock (schemas/clock.py), played at the tick's own instant."""

    kind: ClassVar[str] = "clock"
    phase: str
    sequence: int

    def data(self) -> dict[str, Any]:
        return {"phase": self.phase, "sequence": self.sequence}

    def apply_to(self, controller: PoolController) -> Effects:
        return controller.clock(self.phase, self.sequence, self.at)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> ClockEntry:
        return cls(phase=str(data["phase"]), sequence=int(data["sequence"]), at=at)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlEntry(Entry):
    """The SRE controls in force on the pool (controls.py), with the audit row that set them."""

    kind: ClassVar[str] = "control"
    controls: Controls
    audit_id: int | None = None

    def data(self) -> dict[str, Any]:
        return {"controls": self.controls.as_dict(), "audit_id": self.audit_id}

    def apply_to(self, controller: PoolController) -> Effects:
        return controller.control(self.controls, self.at, audit_id=self.audit_id)

    @classmethod
    def from_data(cls, data: dict[str, Any], at: float) -> ControlEntry:
        audit = data.get("audit_id")
        controls = Controls.from_dict(data["controls"])
        return cls(controls=controls, audit_id=None if audit is None else int(audit), at=at)


KINDS: dict[str, Callable[[dict[str, Any], float], Entry]] = {
    c.kind: c.from_data
    for c in (
        SubmitEntry, CancelEntry, QuotaEntry, EvictAckEntry, WorkerStartedEntry, WorkerExitedEntry,
        NodeSeenEntry, NodeDownEntry, NodeReportEntry, TickEntry, ScheduleEntry, ClockEntry, ControlEntry,
    )
}  # fmt: skip


def from_row(kind: str, data: dict[str, Any], at: float) -> Entry:
    """The entry a journal row holds; ValueError naming the kind when no entry has it."""
    read = KINDS.get(kind)
    if read is None:
        raise ValueError(f"unknown journal entry kind {kind!r} (known: {', '.join(sorted(KINDS))})")
    return read(data, float(at))

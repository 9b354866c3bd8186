"""The controller's inputs as journal entries: one function applies an entry, live or in replay.

A journal entry is (kind, data, at_s). The live shell builds entries from inbox records and
timers, applies them, and writes them to the journal in the transaction that carries their
effects; a restarted or new owner of a partition replays the same entries through `apply`, so
both paths run exactly the same code.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from schemas.clock import ClockTick
from schemas.commands import EvictAck
from schemas.quota import SpotQuota
from schemas.tasks import TaskCancelled, TaskClass, TaskSubmitted
from schemas.telemetry import NodeTelemetry
from schemas.workers import WorkerExited, WorkerStarted
from services.preemption.controller import Controls, Effects, PoolController
from services.preemption.reconcile import NodeReport

Entry = tuple[str, dict[str, Any], float]

log = logging.getLogger(__name__)


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


M = TypeVar("M", bound=BaseModel)


def _given(payload: BaseModel | None, model: type[M], data: dict[str, Any]) -> M:
    return payload if isinstance(payload, model) else model.model_validate(data)


def entry_for(payload: BaseModel, at_s: float, *, duplicate: bool = False) -> Entry | None:
    """The journal entry of a decoded inbox payload (None: a heartbeat changes nothing durable)."""
    # An agent's signature was checked before the entry was built (report_auth.py); the journal
    # keeps the ack without it, so its rows read the same as before acks were signed (and the
    # previous release, which does not know the field, can still replay them after a rollback).
    data = payload.model_dump(mode="json", exclude={"signature"})
    if isinstance(payload, TaskSubmitted):
        return ("submit", {"task": data, "duplicate": duplicate}, at_s)
    if isinstance(payload, TaskCancelled):
        return ("cancel", data, at_s)
    if isinstance(payload, SpotQuota):
        return ("quota", data, at_s)
    if isinstance(payload, EvictAck):
        return ("evict_ack", data, at_s)
    if isinstance(payload, WorkerStarted):
        return ("worker_started", data, at_s)
    if isinstance(payload, WorkerExited):
        return ("worker_exited", data, at_s)
    if isinstance(payload, NodeTelemetry):
        return ("node_seen", {"node": payload.node, "gpus": len(payload.gpus)}, at_s)
    if isinstance(payload, ClockTick):  # played at the tick's own instant, whatever the shell's time
        return ("clock", {"phase": payload.phase.value, "sequence": payload.sequence}, payload.at.timestamp())
    raise TypeError(f"the preemption service does not take {type(payload).__name__}")


def apply(controller: PoolController, entry: Entry, payload: BaseModel | None = None) -> Effects:
    """Play one entry. `payload`: the decoded wire payload the live shell built the entry from
    (`entry_for`), already validated when its record was read; it is used as is rather than
    validated a second time from the entry's data (issue 22). A replay has only the journaled data
    and validates it; both give the same model, since the data is the payload's own JSON dump."""
    kind, data, at = entry
    if kind == "submit":
        task = payload if isinstance(payload, TaskSubmitted) else _journaled_submission(data["task"])
        return controller.submit(task, at, duplicate=bool(data["duplicate"]))
    if kind == "cancel":
        cancel = payload if isinstance(payload, TaskCancelled) else _journaled_cancel(data)
        return controller.cancel(cancel.task_id, cancel.tenant, cancel.reason, at)
    if kind == "quota":
        return controller.quota(_given(payload, SpotQuota, data), at)
    if kind == "evict_ack":
        return controller.evict_ack(_given(payload, EvictAck, data), at)
    if kind == "worker_started":
        return controller.worker_started(_given(payload, WorkerStarted, data), at)
    if kind == "worker_exited":
        return controller.worker_exited(_given(payload, WorkerExited, data), at)
    if kind == "node_seen":
        return controller.node_seen(str(data["node"]), int(data["gpus"]), at)
    if kind == "node_down":
        return controller.node_down(str(data["node"]), at)
    if kind == "node_report":  # reconciliation (reconcile.py); built by the shell, not entry_for
        return controller.node_report(str(data["node"]), NodeReport.from_data(data), at)
    if kind == "tick":
        effects = controller.tick(at, reconcile=bool(data.get("reconcile", False)))
        effects.extend(controller.schedule(at, preemption=bool(data.get("preemption", True))))
        return effects
    if kind == "schedule":
        return controller.schedule(at, preemption=bool(data.get("preemption", True)))
    if kind == "clock":
        return controller.clock(str(data["phase"]), int(data["sequence"]), at)
    if kind == "control":  # SRE controls (services/preemption/controls.py)
        audit = data.get("audit_id")
        wanted = Controls.from_dict(data["controls"])
        return controller.control(wanted, at, audit_id=None if audit is None else int(audit))
    raise ValueError(f"unknown journal entry kind {kind!r}")

"""The controller's inputs as journal entries: one function applies an entry, live or in replay.

Entries are typed (journal/entries.py: a frozen class per kind, with its row format). The live
shell builds entries from inbox records (`entry_for`) and timers, applies them, and writes their
rows to the journal in the transaction that carries their effects; a restarted or new owner of a
partition reads the rows back into the same entries and replays them through `apply`, so both
paths run exactly the same code.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from gfs.schemas.clock import ClockTick
from gfs.schemas.commands import EvictAck
from gfs.schemas.quota import SpotQuota
from gfs.schemas.tasks import TaskCancelled, TaskSubmitted
from gfs.schemas.telemetry import NodeTelemetry
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.types import Effects
from gfs.services.preemption.journal.entries import (
    CancelEntry,
    ClockEntry,
    Entry,
    EvictAckEntry,
    NodeSeenEntry,
    QuotaEntry,
    Row,
    SubmitEntry,
    WorkerExitedEntry,
    WorkerStartedEntry,
    from_row,
)

__all__ = ["Entry", "Row", "apply", "entry_for", "from_row"]


def entry_for(
    payload: BaseModel, at_s: float, *, duplicate: bool = False, trace: Mapping[str, str] | None = None
) -> Entry:
    """The journal entry of a decoded inbox payload, holding the payload itself (validated when its
    record was read: never validated a second time). `trace`: a submission's trace carrier."""
    match payload:
        case TaskSubmitted():
            return SubmitEntry(task=payload, duplicate=duplicate, trace=trace, at=at_s)
        case TaskCancelled():
            return CancelEntry(cancel=payload, at=at_s)
        case SpotQuota():
            return QuotaEntry(quota=payload, at=at_s)
        case EvictAck():
            return EvictAckEntry(ack=payload, at=at_s)
        case WorkerStarted():
            return WorkerStartedEntry(started=payload, at=at_s)
        case WorkerExited():
            return WorkerExitedEntry(exited=payload, at=at_s)
        case NodeTelemetry():
            return NodeSeenEntry(node=payload.node, gpus=len(payload.gpus), at=at_s)
        case ClockTick():  # played at the tick's own instant, whatever the shell's time
            return ClockEntry(phase=payload.phase.value, sequence=payload.sequence, at=payload.at.timestamp())
    raise TypeError(f"the preemption service does not take {type(payload).__name__}")


def apply(controller: PoolController, entry: Entry | Row) -> Effects:
    """Play one entry. A row `(kind, data, at_s)` as the journal stores it (written by hand in
    tests and tools) is read first, by `from_row`, as a replay reads it."""
    if not isinstance(entry, Entry):
        entry = from_row(*entry)
    return entry.apply_to(controller)

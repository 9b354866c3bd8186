"""A task's state as the lifecycle topic tells it (what `GfsClient.status` returns), read off the
lifecycle envelopes one at a time: which event moves the task to which state, which ends it, and
the survival quote a TaskAccepted carries."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from gfs.schemas.envelope import Envelope
from gfs.schemas.tasks import (
    SurvivalQuote,
    TaskAccepted,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
    TaskStarted,
    TaskWithdrawn,
)


class TaskState(StrEnum):
    """A task's state as the lifecycle topic tells it (what `status` returns)."""

    UNKNOWN = "UNKNOWN"  # nothing on the lifecycle topic, and not submitted by this client
    SUBMITTED = "SUBMITTED"  # submitted by this client; the scheduler has not answered yet
    QUEUED = "QUEUED"  # accepted, or evicted and requeued: waiting for GPUs
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"  # terminal: ended by itself (see the exit code)
    REJECTED = "REJECTED"  # terminal: the scheduler refused it
    EVICTED = "EVICTED"  # terminal: evicted and not requeued (e.g. cancelled while running)
    WITHDRAWN = "WITHDRAWN"  # terminal: cancelled while queued, left the queue


TERMINAL_STATES = frozenset({TaskState.FINISHED, TaskState.REJECTED, TaskState.EVICTED, TaskState.WITHDRAWN})


def state_after(envelope: Envelope[Any]) -> TaskState | None:
    """The task's state once `envelope` happened; None for events that do not change it
    (GuaranteePeriodClosed)."""
    payload = envelope.payload
    if isinstance(payload, TaskAccepted):
        return TaskState.QUEUED
    if isinstance(payload, TaskStarted):
        return TaskState.RUNNING
    if isinstance(payload, TaskFinished):
        return TaskState.FINISHED
    if isinstance(payload, TaskRejected):
        return TaskState.REJECTED
    if isinstance(payload, TaskEvicted):
        return TaskState.QUEUED if payload.requeued else TaskState.EVICTED
    if isinstance(payload, TaskWithdrawn):
        return TaskState.WITHDRAWN
    return None


def survival_of(envelope: Envelope[Any]) -> SurvivalQuote | None:
    """The survival probability a TaskAccepted quoted (spot tasks, issue 27); None for any other
    event, an HP task, or a pool without a forecast."""
    payload = envelope.payload
    return payload.survival if isinstance(payload, TaskAccepted) else None


def is_terminal(envelope: Envelope[Any]) -> bool:
    """TaskFinished, TaskRejected, TaskWithdrawn, or TaskEvicted with requeued=False: nothing
    follows for the task."""
    return state_after(envelope) in TERMINAL_STATES

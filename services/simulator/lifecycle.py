"""Per-task bookkeeping the simulator keeps while it applies decisions (mutable, slotted)."""

from __future__ import annotations

import math

from gfs.services.core.task import TaskSpec


class Life:
    """What happened to one task: waits, runs, evictions, guarantee periods."""

    __slots__ = (
        "cancelled",
        "end",
        "entered",
        "epoch",
        "evictions",
        "failed",
        "failed_in_window",
        "first_start",
        "in_window",
        "logged",
        "remaining",
        "spec",
        "start",
        "succeeded",
        "succeeded_in_window",
        "wait",
    )

    def __init__(self, spec: TaskSpec, *, in_window: bool) -> None:
        self.spec = spec
        self.in_window = in_window
        self.remaining = spec.duration_s
        self.epoch = 0  # bumped on every start/eviction so stale finish/period events are ignored
        self.start = math.nan
        self.first_start = math.nan
        self.end = math.nan  # when it finished
        self.cancelled = math.nan  # when it was cancelled (then it never finishes)
        self.wait = 0.0
        self.entered = spec.submit_s
        self.logged = 0  # guarantee successes already logged for the current run
        self.failed = 0
        self.succeeded = 0
        # Guarantee periods that ended by the window's end (the in-window measure: a period that
        # ends in the drain, where preemption is off, is not counted).
        self.failed_in_window = 0
        self.succeeded_in_window = 0
        self.evictions = 0


def overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    """Length of [a0, a1) intersected with [b0, b1)."""
    return max(0.0, min(a1, b1) - max(a0, b0))

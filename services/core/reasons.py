"""Why something happened, as enums with human messages (never integer codes)."""

from __future__ import annotations

import enum


class EvictionReason(enum.Enum):
    PREEMPTED_BY_HP = "evicted to make room for a high-priority task"

    @property
    def message(self) -> str:
        return str(self.value)


class Unschedulable(enum.Enum):
    NO_FIT = "no node has enough free GPUs"
    NO_PREEMPTION_PLAN = "no node can free enough GPUs by evicting spot tasks"
    OVER_QUOTA = "admitting the spot task would exceed the pool's spot quota"
    THRESHOLD = "a task of this size already failed in this pass (spec 5.3 `failed` threshold)"
    HEAD_OF_LINE = "a task ahead in the queue is blocked"

    @property
    def message(self) -> str:
        return str(self.value)

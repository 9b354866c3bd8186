"""Why something happened, as enums with human messages (never integer codes)."""

from __future__ import annotations

import enum


class EvictionReason(enum.Enum):
    PREEMPTED_BY_HP = "evicted to make room for a high-priority task"
    NODE_DOWN = "stopped because its node went down"
    LEASE_NOT_RENEWED = "stopped because its lease was not renewed"
    CANCELLED = "stopped because it was cancelled"

    @property
    def message(self) -> str:
        return str(self.value)


class Unschedulable(enum.Enum):
    """Why a task is still queued after a scheduling pass."""

    NO_FIT = "no node has enough free GPUs"
    NO_PREEMPTION_PLAN = "no node can free enough GPUs by evicting spot tasks"
    EVICTION_BUDGET = "preempting would exceed the pool's eviction cap for this interval"
    OVER_QUOTA = "admitting the spot task would exceed the pool's spot quota"
    RESERVED = "it would fit only on GPUs held for a waiting HP task's reservation"
    CLAIMED = (
        "it would fit only on GPUs that queued HP tasks are expected to take within the guarantee period"
    )
    THRESHOLD = "a task of this size already failed in this pass (spec 5.3 `failed` threshold)"
    HEAD_OF_LINE = "a task ahead in the queue is blocked"
    NOT_YET_CONSIDERED = "queued after the pool's last scheduling pass"

    @property
    def message(self) -> str:
        return str(self.value)


class Rejection(enum.Enum):
    """Why a task is refused at submission: queued, it could never run (and would block its queue)."""

    UNKNOWN_POOL = "the task asks for a GPU pool this cluster does not have"
    WORKER_LARGER_THAN_NODE = "one worker asks for more GPUs than any node of the pool has"
    GANG_LARGER_THAN_POOL = "the gang asks for more GPUs than the whole pool can hold at once"
    INVALID_REQUEST = "the request is malformed (no workers, or a non-positive GPU count)"

    @property
    def message(self) -> str:
        return str(self.value)

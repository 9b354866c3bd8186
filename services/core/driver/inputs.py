"""What a driver is told: typed, frozen inputs, one per kind of thing that happens to a pool.

Every input carries the time it is applied at (`now`); the driver never reads a clock. The
simulator builds them from its event queue, the live service from decoded wire records; both
apply them with `PoolDriver.apply`, so the same sequence gives the same effects in either shell.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gfs.services.core.ids import TaskId
from gfs.services.core.task import TaskSpec

C = TypeVar("C", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Submit:
    spec: TaskSpec
    now: float


@dataclass(frozen=True, slots=True)
class Cancel:
    task_id: TaskId
    now: float


@dataclass(frozen=True, slots=True)
class Finish:
    """Every worker of the task's current run exited on its own."""

    task_id: TaskId
    now: float


@dataclass(frozen=True, slots=True)
class NodeSeen:
    """A node reported in: it joins the pool (unknown name) or comes back (a down one)."""

    name: str
    gpus: int
    now: float


@dataclass(frozen=True, slots=True)
class NodeDown:
    name: str
    now: float


@dataclass(frozen=True, slots=True)
class QuotaApplied:
    """A spot quota put in force (per guarantee hours), with its eta; `valid_until` None: it does
    not expire (the simulator refreshes its own every quota period)."""

    quota: Mapping[int, float]
    eta: float
    now: float
    valid_until: float | None = None


@dataclass(frozen=True, slots=True)
class Invalidate:
    """What a pass may do changed outside the runtime's state (preemption or the quota switched on
    or off, a kill switch): every memo is stale and the next trigger runs a pass."""

    now: float


@dataclass(frozen=True, slots=True)
class Advance:
    """Time reached `now`: the timers due by then fire (guarantee periods, quota expiry)."""

    now: float
    expire_quota: bool = True


@dataclass(frozen=True, slots=True)
class Pass:
    """One scheduling pass, run only when the pass trigger is set unless `force`."""

    now: float
    preemption: bool = True
    quota: bool = True
    force: bool = False


@dataclass(frozen=True, slots=True)
class EvictAcked(Generic[C]):
    """A node acknowledged eviction `command` (held.py: the original's id, for a re-issued one)."""

    command: C
    now: float


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """An evicted attempt's end is known: `evicted` (its acks and exits, or its deadline, say
    so) or, False, finished on its own while its eviction was in flight."""

    task_id: TaskId
    now: float
    evicted: bool = True


Input = (
    Submit | Cancel | Finish | NodeSeen | NodeDown | QuotaApplied | Invalidate | Advance | Pass
    | EvictAcked[Any] | AttemptEnded
)  # fmt: skip

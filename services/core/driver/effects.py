"""What a driver returns: typed, frozen effects. A shell maps them onto its world: the simulator
onto task lives and metrics, the live service onto wire events and commands.

A pass's decisions are the runtime's own outcomes (`Started`: bind the task, `Stopped`: evict
it); the driver adds the effects of the things around a pass."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from gfs.services.core.ids import TaskId
from gfs.services.core.outcomes import Finished, Started, Stopped
from gfs.services.core.reasons import Rejection


@dataclass(frozen=True, slots=True)
class Accepted:
    task_id: TaskId


@dataclass(frozen=True, slots=True)
class Rejected:
    task_id: TaskId
    reason: Rejection


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """A queued task cancelled: out of its queue, nothing ran."""

    task_id: TaskId


class PeriodClosed(NamedTuple):
    """A running spot task's guarantee period ended at `end` without an eviction: one success,
    logged in the pool's guarantee ledger. `run_start`: the start of the run it belongs to. (A
    named tuple, like the runtime's outcomes: the simulator makes one per period, and a frozen
    dataclass costs several times more to build.)"""

    task_id: TaskId
    run_start: float
    end: float


@dataclass(frozen=True, slots=True)
class QuotaExpired:
    """The quota in force passed its valid_until with no newer one: frozen at the spot GPUs
    running then (no new spot admissions above that, and no eviction)."""

    frozen_at_gpus: float


@dataclass(frozen=True, slots=True)
class NodeJoined:
    name: str
    index: int


@dataclass(frozen=True, slots=True)
class NodeUp:
    name: str


@dataclass(frozen=True, slots=True)
class NodeLost:
    name: str
    stopped: tuple[TaskId, ...]


@dataclass(frozen=True, slots=True)
class QuotaInForce:
    changed: bool


class ReleaseWhy(StrEnum):
    ACKED = "acked"  # the last eviction it waited for was acknowledged
    ENDED = "ended"  # its own previous attempt ended (evicted)
    DEADLINE = "deadline"  # grace + margin passed without every acknowledgement


@dataclass(frozen=True, slots=True)
class Released:
    """A held start may go out now (held.py): the shell sends the binds it keeps for it."""

    task_id: TaskId
    why: ReleaseWhy


Effect = (
    Accepted | Rejected | Withdrawn | Started | Stopped | Finished | PeriodClosed | QuotaExpired
    | NodeJoined | NodeUp | NodeLost | QuotaInForce | Released
)  # fmt: skip

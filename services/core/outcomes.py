"""What the per-pool runtime returns to its driver, and its settings (services/core/runtime.py).

The simulator records these outcomes; a live service turns them into commands and events
(`Started` -> bind, `Stopped` with a preemptor -> evict)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from gfs.services.core.decisions import WorkerPlacement
from gfs.services.core.devices import DeviceBinding
from gfs.services.core.ids import TaskId
from gfs.services.core.reasons import EvictionReason
from gfs.services.core.task import TaskClass


@dataclass(frozen=True, slots=True)
class RuntimeSettings:
    t_win_s: float = 31 * 86400.0  # node-cost normaliser T_win (spec 5.2)
    cost_weight: float = 5.0  # w of the node cost
    # GPU device indices per placement (node agents need them). No decision depends on them, so a
    # driver that never reads them (a simulation that only measures) may turn them off.
    device_indices: bool = True


class Started(NamedTuple):
    task_id: TaskId
    placements: tuple[WorkerPlacement, ...]
    devices: tuple[DeviceBinding, ...]
    preempted: bool  # it needed evictions (pays the restart overhead, spec 5.4)
    renewed: bool = False  # a lease renewal: the task keeps running, on these GPUs now


class Stopped(NamedTuple):
    """A running task that lost its GPUs: evicted, its node went down, or its lease ended."""

    task_id: TaskId
    task_class: TaskClass
    node: int  # the node that caused it (-1: the whole pool, a lease renewal)
    reason: EvictionReason
    preemptor: TaskId | None
    run_s: float  # since its (re)start
    successes: int  # guarantee periods logged as successes now
    failed_period: bool  # one failed guarantee period was logged


class Finished(NamedTuple):
    task_id: TaskId
    run_s: float
    successes: int


Outcome = Started | Stopped


class PassResult(NamedTuple):
    number: int  # the pool's pass counter
    at_s: float
    outcomes: tuple[Outcome, ...]  # in decision order, then lease stops

"""The only output of a scheduling pass: decisions the caller applies (decide/do split)."""

from __future__ import annotations

from typing import NamedTuple

from gfs.services.core.ids import TaskId
from gfs.services.core.preemption_plan import PreemptionPlan
from gfs.services.core.reasons import EvictionReason


class WorkerPlacement(NamedTuple):
    """A task's share of one node: `gpus` whole GPUs (one or more of its whole-GPU workers, all
    on this node), or one fractional worker holding `fraction` of shared GPU `slot`.

    `slot` is the pool-wide GPU index of a shared GPU (-1 for whole-GPU workers).
    """

    node: int
    gpus: int
    slot: int = -1
    fraction: float = 0.0


class StartTask(NamedTuple):
    task_id: TaskId
    placements: tuple[WorkerPlacement, ...]
    preempted: bool = False  # the HP task needed evictions (it pays the restart overhead, spec 5.4)
    # The preemption plans behind the evictions (one per worker that needed them), each with the
    # losing candidate nodes it was chosen over: the explanation, never an input to a decision.
    plans: tuple[PreemptionPlan, ...] = ()


class EvictTask(NamedTuple):
    task_id: TaskId
    preemptor: TaskId
    node: int
    reason: EvictionReason = EvictionReason.PREEMPTED_BY_HP


Decision = StartTask | EvictTask

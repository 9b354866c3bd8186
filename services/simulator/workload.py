"""Trace records -> core pools and task specs, with the evaluation window (spec 2.3).

The window is the last `window_days` before its end (the trace horizon, or `window_end_s`); before
it the simulation is HP-only warm-up, so spot jobs submitted before the window are dropped (the
authors keep only August's spot jobs). Jobs with a cancel time become cancellations
(`Workload.cancels`), played by the engine.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from gfs.services.core.feasibility import PoolFeasibility
from gfs.services.core.ids import PoolId, TaskId, TenantId
from gfs.services.core.pool import PoolState
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.simulator.traces.records import Trace

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class PoolLayout:
    pool: PoolId
    node_names: tuple[str, ...]
    node_gpus: tuple[int, ...]

    def build(self) -> PoolState:
        return PoolState(self.pool, self.node_names, self.node_gpus)


@dataclass(frozen=True, slots=True)
class Workload:
    pools: tuple[PoolLayout, ...]
    tasks: tuple[TaskSpec, ...]  # sorted by (submit_s, task_id)
    window_start_s: float
    window_end_s: float
    drain_s: float
    dropped_spot: int
    dropped_no_pool: int
    rejected_infeasible: int
    rejected_by_reason: dict[str, int]  # `reasons.Rejection` name -> jobs (the core's feasibility check)
    source: str
    # (cancel time, task) for every kept task with a cancel time, sorted; each at or after its submit.
    cancels: tuple[tuple[float, TaskId], ...] = ()

    @property
    def window_s(self) -> float:
        return self.window_end_s - self.window_start_s


def build_workload(
    trace: Trace, *, window_days: float = 31.0, drain_days: float = 7.0, window_end_s: float | None = None
) -> Workload:
    """`window_end_s`: where the evaluation window ends (default: the trace horizon); a window
    reaching past the horizon keeps quota and preemption on while queued and evicted work finishes."""
    if window_end_s is not None and not (math.isfinite(window_end_s) and window_end_s > 0):
        raise ValueError(f"window end must be a finite number of seconds > 0, got {window_end_s}")
    by_pool: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for node in trace.nodes:
        if node.gpus > 0:
            by_pool[node.gpu_model].append((node.name, node.gpus))
    layouts = tuple(
        PoolLayout(PoolId(p), tuple(n for n, _ in nodes), tuple(g for _, g in nodes))
        for p, nodes in sorted(by_pool.items())
    )
    end = trace.horizon_s if window_end_s is None else float(window_end_s)
    start = max(0.0, end - window_days * DAY_S)
    tasks: list[TaskSpec] = []
    cancels: list[tuple[float, TaskId]] = []
    seen: dict[str, int] = {}
    feasibility = {p: PoolFeasibility(tuple(g for _, g in nodes)) for p, nodes in by_pool.items()}
    dropped_spot = dropped_pool = infeasible = 0
    by_reason: dict[str, int] = {}
    for job in trace.jobs:
        if job.gpu_model not in by_pool:
            dropped_pool += 1
            continue
        rejection = feasibility[job.gpu_model].check(job.gpus_per_worker, job.workers)
        if rejection is not None:
            infeasible += 1
            by_reason[rejection.name] = by_reason.get(rejection.name, 0) + 1
            continue
        cls = TaskClass.HP if job.job_class == "HP" else TaskClass.SPOT
        if cls is TaskClass.SPOT and job.submit_s < start:
            dropped_spot += 1
            continue
        k = seen.get(job.name, 0)
        seen[job.name] = k + 1
        tid = job.name if k == 0 else f"{job.name}#{k}"
        if job.cancel_s is not None:
            if job.cancel_s < job.submit_s:
                raise ValueError(
                    f"job {job.name}: cancelled at {job.cancel_s} s, before its submission at "
                    f"{job.submit_s} s (a job cannot be cancelled before it is submitted)"
                )
            cancels.append((job.cancel_s, TaskId(tid)))
        tasks.append(
            TaskSpec(
                task_id=TaskId(tid),
                tenant=TenantId(job.organization),
                pool=PoolId(job.gpu_model),
                task_class=cls,
                gpus_per_worker=job.gpus_per_worker,
                workers=job.workers,
                submit_s=job.submit_s,
                duration_s=job.duration_s,
                guarantee_hours=job.guarantee_hours,
                checkpoint_interval_s=job.checkpoint_interval_s,
            )
        )
    tasks.sort(key=lambda s: (s.submit_s, s.task_id))
    return Workload(
        pools=layouts,
        tasks=tuple(tasks),
        window_start_s=start,
        window_end_s=end,
        drain_s=drain_days * DAY_S,
        dropped_spot=dropped_spot,
        dropped_no_pool=dropped_pool,
        rejected_infeasible=infeasible,
        rejected_by_reason=dict(sorted(by_reason.items())),
        source=trace.source,
        cancels=tuple(sorted(cancels)),
    )


def fits_empty_pool(node_gpus: tuple[int, ...], gpus_per_worker: float, workers: int) -> bool:
    """Could the job run at all on its pool when the pool is empty? (the core's feasibility check)"""
    return PoolFeasibility(node_gpus).check(gpus_per_worker, workers) is None

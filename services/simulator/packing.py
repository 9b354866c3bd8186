"""openb packing study (issue 4 item 4): fill the cluster with the trace's pods in creation order,
as the FGD paper does, and compare how each policy's placement allocates and fragments it.

Why a packing study: openb is light in real time (about 14 of 6,212 GPUs busy on average), so it
cannot test eviction; filling the cluster with every pod at once tests placement alone. Pods never
leave and nothing is preempted; a pod that does not fit is counted as failed and the fill goes on.
Fractional pods share GPUs with the core's best fit over shared GPUs (the same for every policy);
whole-GPU workers go where the policy's NodeChooser says.

Measured at every 5% of the requested GPUs that have arrived:
- allocation: GPUs with any allocation / capacity (spec 6.3's notion);
- fragmentation: FGD's expected unusable free GPUs under the typical-task mix, plus the free
  fractions of shared GPUs (no whole-GPU task can use them), as a share of the free GPUs;
- failed pods and their GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from gfs.services.core.ids import PoolId, TaskId, TenantId
from gfs.services.core.placement import NodeChooser, place_task
from gfs.services.core.placement_fgd import fragmentation
from gfs.services.core.pool import PoolState, RunningTask
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.simulator.traces.records import Trace

CHECKPOINTS = tuple(round(0.05 * i, 2) for i in range(1, 21))


@dataclass(frozen=True, slots=True)
class PackingPoint:
    arrived_share: float  # requested GPUs arrived so far / all requested GPUs
    allocation: float
    placed_gpus: float
    fragmented_gpus: float
    fragmentation_of_free: float
    failed_pods: int
    failed_gpus: float


@dataclass(frozen=True, slots=True)
class PackingResult:
    policy: str
    placement: str
    capacity: int
    pods: int
    points: tuple[PackingPoint, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "points": [asdict(p) for p in self.points]}


def _pool(trace: Trace) -> PoolState:
    pools = {n.gpu_model for n in trace.nodes}
    if len(pools) != 1:
        raise ValueError(
            f"the packing study fills one pool; load openb with single_pool=True (got {sorted(pools)})"
        )
    pool = pools.pop()
    return PoolState(PoolId(pool), tuple(n.name for n in trace.nodes), tuple(n.gpus for n in trace.nodes))


def fragmented_gpus(pool: PoolState) -> float:
    whole = float(fragmentation(pool.free).sum()) / 100.0  # hundredths of a GPU -> GPUs
    shared = pool.gpu_shared
    leftover = float((1.0 - pool.gpu_hp[shared] - pool.gpu_spot[shared]).clip(min=0.0).sum())
    return whole + leftover


def _point(pool: PoolState, share: float, placed: float, failed: int, failed_gpus: float) -> PackingPoint:
    frag = fragmented_gpus(pool)
    free = float(pool.free.sum()) + float((1.0 - pool.gpu_hp - pool.gpu_spot)[pool.gpu_shared].sum())
    return PackingPoint(
        arrived_share=share,
        allocation=(pool.capacity - int(pool.free.sum())) / pool.capacity,
        placed_gpus=placed,
        fragmented_gpus=frag,
        fragmentation_of_free=frag / free if free > 0 else 0.0,
        failed_pods=failed,
        failed_gpus=failed_gpus,
    )


def pack(trace: Trace, policy: str, chooser: NodeChooser) -> PackingResult:
    pool = _pool(trace)
    jobs = sorted(trace.jobs, key=lambda j: (j.submit_s, j.name))
    total = sum(j.total_gpus for j in jobs) or 1.0
    arrived = placed = failed_gpus = 0.0
    failed = 0
    points: list[PackingPoint] = []
    next_cp = 0
    for i, job in enumerate(jobs):
        spec = TaskSpec(
            task_id=TaskId(f"{job.name}#{i}"),
            tenant=TenantId(job.organization),
            pool=pool.pool,
            task_class=TaskClass.HP if job.job_class == "HP" else TaskClass.SPOT,
            gpus_per_worker=job.gpus_per_worker,
            workers=job.workers,
            submit_s=job.submit_s,
            duration_s=job.duration_s,
        )
        placements = place_task(pool, spec, chooser)
        if placements is None:
            failed += 1
            failed_gpus += spec.total_gpus
        else:
            pool.add_task(RunningTask(spec, 0.0, placements))
            placed += spec.total_gpus
        arrived += spec.total_gpus
        while next_cp < len(CHECKPOINTS) and arrived / total >= CHECKPOINTS[next_cp] - 1e-12:
            points.append(_point(pool, CHECKPOINTS[next_cp], placed, failed, failed_gpus))
            next_cp += 1
    return PackingResult(policy, getattr(chooser, "name", "?"), pool.capacity, len(jobs), tuple(points))


def pack_policies(trace: Trace, policies: Sequence[str]) -> list[PackingResult]:
    from gfs.services.core.policies.registry import build_policy

    return [pack(trace, name, build_policy(name).placement) for name in policies]


def summary_rows(results: Sequence[PackingResult]) -> list[dict[str, Any]]:
    """Per policy: when the first pod failed (arrived share) and the allocation then, the
    fragmentation (share of free GPUs) at 50/70/90% arrived, and the failures at the end."""
    rows = []
    for r in results:
        final = r.points[-1]
        at = {p.arrived_share: p for p in r.points}
        first = next((p for p in r.points if p.failed_pods > 0), None)
        rows.append(
            {
                "policy": r.policy,
                "placement": r.placement,
                "first_failure_share": first.arrived_share if first else None,
                "allocation_at_first_failure": first.allocation if first else final.allocation,
                "frag_50": at[0.5].fragmentation_of_free,
                "frag_70": at[0.7].fragmentation_of_free,
                "frag_90": at[0.9].fragmentation_of_free,
                "failed_pods": final.failed_pods,
                "failed_gpus": final.failed_gpus,
                "final_allocation": final.allocation,
            }
        )
    return rows


def allocation_curve(result: PackingResult) -> np.ndarray:
    return np.array([[p.arrived_share, p.allocation] for p in result.points])

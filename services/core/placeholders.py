"""Placeholders: HP tasks that exist only inside a scheduling pass, to keep idle GPUs from being
placed on (a reservation's nodes, the servable HP queue's claims, the nodes spot must leave free);
the pass's rollback removes them with everything else it did.

One placeholder per purpose, however many nodes it holds: a wide reservation or a long queue's
claims cover hundreds of nodes and are held, lifted and held again on every pass, and a task per
node made that bookkeeping the simulator's largest cost (issue 37). The pool accounts the
placements of one wide HP task in one numpy step (`PoolState._take_spread`).
"""

from __future__ import annotations

import numpy as np

from services.core.decisions import WorkerPlacement
from services.core.ids import TaskId, TenantId
from services.core.pool import PoolState, RunningTask
from services.core.task import TaskClass, TaskSpec


def hold(pool: PoolState, task_id: str, tenant: str, gpus: np.ndarray, now: float) -> bool:
    """Add one HP placeholder `task_id` holding `gpus[node]` whole GPUs on every node where that is
    above 0 (the caller makes sure they are idle). False: nothing to hold, nothing added."""
    nodes = np.flatnonzero(gpus > 0)
    if len(nodes) == 0:
        return False
    amounts = gpus[nodes]
    placements = tuple(WorkerPlacement(n, g) for n, g in zip(nodes.tolist(), amounts.tolist(), strict=True))
    spec = TaskSpec(
        task_id=TaskId(task_id),
        tenant=TenantId(tenant),
        pool=pool.pool,
        task_class=TaskClass.HP,
        gpus_per_worker=float(amounts.sum()),
        workers=1,
        submit_s=now,
        duration_s=0.0,
    )
    pool.add_task(RunningTask(spec, now, placements))
    return True


def lift(pool: PoolState, task_id: str) -> None:
    """Remove the placeholder `task_id` if it is held."""
    if task_id in pool.running:
        pool.remove_task(TaskId(task_id))

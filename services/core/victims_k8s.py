"""kube-scheduler-style preemption (DefaultPreemption PostFilter), for one HP worker.

Per candidate node (enough non-HP GPUs): evict every spot task, then reprieve them from the most
important down while the preemptor still fits. All spot tasks share one priority, so importance
is kube's tie-break: the task that started earlier is more important (kept first); the victims
are therefore the most recently started tasks. Node choice follows `pickOneNodeForPreemption`
with equal priorities and no PDBs: fewest victims, then the node whose earliest-started victim
started latest, then node index. No eviction rate, no lost-work term: kube knows neither.
"""

from __future__ import annotations

import numpy as np

from services.core.pool import PoolState
from services.core.task import TaskSpec
from services.core.victim_sets import node_holdings, reprieve
from services.core.victims import PreemptionContext, PreemptionPlan, lost_gpu_seconds, node_cost


class K8sVictims:
    name = "k8s-reprieve"

    def plan(self, pool: PoolState, spec: TaskSpec, ctx: PreemptionContext) -> PreemptionPlan | None:
        k = spec.whole_gpus_per_worker
        best: tuple[tuple[int, float, int], PreemptionPlan] | None = None
        for node in np.flatnonzero(pool.non_hp >= k).tolist():
            holdings = node_holdings(pool, node)
            important_first = sorted(holdings.tasks, key=lambda t: (pool.running[t].start_s, t))
            victims = reprieve(holdings, important_first, k)
            if holdings.freed(victims) < k:
                continue
            earliest = min((pool.running[t].start_s for t in victims), default=np.inf)
            key = (len(victims), -earliest, node)
            if best is None or key < best[0]:
                lost = sum(lost_gpu_seconds(pool, t, ctx.now) for t in victims)
                plan = PreemptionPlan(node, tuple(victims), node_cost(lost, len(victims), pool, ctx))
                best = (key, plan)
        return None if best is None else best[1]

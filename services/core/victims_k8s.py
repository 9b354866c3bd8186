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

from gfs.services.core.ids import TaskId
from gfs.services.core.pool import PoolState
from gfs.services.core.task import TaskSpec
from gfs.services.core.victim_sets import NodeHoldings, best_node_plan, reprieve
from gfs.services.core.victims import PreemptionContext, PreemptionPlan


class K8sVictims:
    name = "k8s-reprieve"

    def plan(self, pool: PoolState, spec: TaskSpec, ctx: PreemptionContext) -> PreemptionPlan | None:
        def choose(holdings: NodeHoldings) -> list[TaskId]:
            important_first = sorted(holdings.tasks, key=lambda t: (pool.running[t].start_s, t))
            return reprieve(holdings, important_first, spec.whole_gpus_per_worker)

        def rank(holdings: NodeHoldings, victims: list[TaskId]) -> tuple[float, ...]:
            earliest = min((pool.running[t].start_s for t in victims), default=np.inf)
            return (len(victims), -earliest, holdings.node)

        return best_node_plan(pool, spec.whole_gpus_per_worker, ctx, choose, rank)

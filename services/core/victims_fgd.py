"""FGD for preemptive HP placement: the node where the preemption grows fragmentation least.

Per candidate node the victims are the minimum set found by evicting every spot task and giving
them back in placement order while the worker still fits (FGD says nothing on victims; this
neither looks at work lost nor at eviction history). After the eviction the node has `freed`
free GPUs and the worker takes k of them, so the growth is frag(freed - k) - frag(idle before).
Node choice: least growth, then fewest victims, then node index.
"""

from __future__ import annotations

import numpy as np

from gfs.services.core.ids import TaskId
from gfs.services.core.placement_fgd import frag_growth
from gfs.services.core.pool import PoolState
from gfs.services.core.task import TaskSpec
from gfs.services.core.victim_sets import NodeHoldings, best_node_plan, reprieve
from gfs.services.core.victims import PreemptionContext, PreemptionPlan


class FgdVictims:
    name = "fgd-least-fragmentation"

    def plan(self, pool: PoolState, spec: TaskSpec, ctx: PreemptionContext) -> PreemptionPlan | None:
        k = spec.whole_gpus_per_worker

        def choose(holdings: NodeHoldings) -> list[TaskId]:
            return reprieve(holdings, list(holdings.tasks), k)

        def rank(holdings: NodeHoldings, victims: list[TaskId]) -> tuple[float, ...]:
            freed = holdings.freed(victims)
            growth = int(frag_growth(np.array([holdings.idle]), np.array([freed - k]))[0])
            return (growth, len(victims), holdings.node)

        return best_node_plan(pool, k, ctx, choose, rank)

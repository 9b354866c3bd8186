"""FGD for preemptive HP placement: the node where the preemption grows fragmentation least.

Per candidate node the victims are the minimum set found by evicting every spot task and giving
them back in placement order while the worker still fits (FGD says nothing on victims; this
neither looks at work lost nor at eviction history). After the eviction the node has `freed`
free GPUs and the worker takes k of them, so the growth is frag(freed - k) - frag(idle before).
Node choice: least growth, then fewest victims, then node index.
"""

from __future__ import annotations

import numpy as np

from services.core.placement_fgd import frag_growth
from services.core.pool import PoolState
from services.core.task import TaskSpec
from services.core.victim_sets import node_holdings, reprieve
from services.core.victims import PreemptionContext, PreemptionPlan, lost_gpu_seconds, node_cost


class FgdVictims:
    name = "fgd-least-fragmentation"

    def plan(self, pool: PoolState, spec: TaskSpec, ctx: PreemptionContext) -> PreemptionPlan | None:
        k = spec.whole_gpus_per_worker
        best: tuple[tuple[int, int, int], PreemptionPlan] | None = None
        for node in np.flatnonzero(pool.non_hp >= k).tolist():
            holdings = node_holdings(pool, node)
            victims = reprieve(holdings, list(holdings.tasks), k)
            freed = holdings.freed(victims)
            if freed < k:
                continue
            growth = int(frag_growth(np.array([holdings.idle]), np.array([freed - k]))[0])
            key = (growth, len(victims), node)
            if best is None or key < best[0]:
                lost = sum(lost_gpu_seconds(pool, t, ctx.now) for t in victims)
                best = (key, PreemptionPlan(node, tuple(victims), node_cost(lost, len(victims), pool, ctx)))
        return None if best is None else best[1]

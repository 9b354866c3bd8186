"""Lyra-style reclaim (EuroSys'23, spec 8 #16): take back capacity greedily at the least server
preemption cost.

Lyra loans idle inference servers to training and, when inference needs them back, reclaims the
servers whose preemption costs least, counting preempted jobs and weighting non-elastic ones.
Nothing here is elastic, so a victim's cost is the number of servers (workers) its gang loses:
evicting one worker of a w-worker gang stops all w (cost w); a single-worker job costs 1. The
work already done does not enter (unlike GFS's lost-GPU-time term).

Per candidate node: greedily add victims that free the most GPUs per unit cost until the worker
fits, then drop (most expensive first) any victim no longer needed. Node choice: least total
cost, then fewest victims, then node index. Lyra looks at every node, not only the best fit on
preemptible capacity as GFS does.
"""

from __future__ import annotations

from gfs.services.core.ids import TaskId
from gfs.services.core.pool import PoolState
from gfs.services.core.task import TaskSpec
from gfs.services.core.victim_sets import NodeHoldings, best_node_plan, reprieve
from gfs.services.core.victims import PreemptionContext, PreemptionPlan


def server_cost(pool: PoolState, task_id: TaskId) -> int:
    return pool.running[task_id].spec.workers


def greedy_victims(pool: PoolState, holdings: NodeHoldings, need: int) -> list[TaskId] | None:
    def gain(t: TaskId) -> tuple[float, int, TaskId]:
        return (-holdings.gpus_of(t) / server_cost(pool, t), server_cost(pool, t), t)

    chosen: list[TaskId] = []
    for tid in sorted(holdings.tasks, key=gain):
        if holdings.freed(chosen) >= need:
            break
        chosen.append(tid)
    if holdings.freed(chosen) < need:
        return None
    expensive_first = sorted(chosen, key=lambda t: (-server_cost(pool, t), t))
    kept = set(reprieve(holdings, expensive_first, need))
    return [t for t in chosen if t in kept]


class LyraVictims:
    name = "lyra-least-server-cost"

    def plan(self, pool: PoolState, spec: TaskSpec, ctx: PreemptionContext) -> PreemptionPlan | None:
        k = spec.whole_gpus_per_worker

        def rank(holdings: NodeHoldings, victims: list[TaskId]) -> tuple[float, ...]:
            return (sum(server_cost(pool, t) for t in victims), len(victims), holdings.node)

        return best_node_plan(pool, k, ctx, lambda h: greedy_victims(pool, h, k), rank)

"""The production-like victim selector the fifo baseline and the ablations use: the first node (by
index) where evicting spot frees enough GPUs, its spot tasks evicted in placement order."""

from __future__ import annotations

from gfs.services.core.ids import TaskId
from gfs.services.core.pool import PoolState
from gfs.services.core.shared_gpus import spot_slots_on_node
from gfs.services.core.task import TaskSpec
from gfs.services.core.victims import (
    PreemptionContext,
    PreemptionPlan,
    lost_gpu_seconds,
    node_cost,
    preemptible,
)


class FirstNodeVictims:
    """Production-like: the first node (by index) where evicting spot frees enough GPUs; its spot
    tasks are evicted in placement order until enough GPUs are free."""

    name = "first-node"

    def plan(self, pool: PoolState, spec: TaskSpec, ctx: PreemptionContext) -> PreemptionPlan | None:
        k = spec.whole_gpus_per_worker
        feasible = preemptible(pool, ctx) >= k
        node = int(feasible.argmax())
        if not feasible[node]:
            return None
        whole = pool.spot_whole[node]
        slots = spot_slots_on_node(pool, node)
        order = list(whole) + [t for s in slots for t in pool.slot_tasks.get(s, {})]
        idle = int(pool.free[node])
        victims: list[TaskId] = []

        def freed() -> int:
            gone = set(victims)
            full_slots = sum(1 for s in slots if all(t in gone for t in pool.slot_tasks.get(s, {})))
            return idle + sum(whole.get(t, 0) for t in gone) + full_slots

        for tid in order:
            if freed() >= k:
                break
            if tid not in victims:
                victims.append(tid)
        cost = sum(lost_gpu_seconds(pool, t, ctx.now) for t in victims)
        return PreemptionPlan(node, tuple(victims), node_cost(cost, len(victims), pool, ctx))

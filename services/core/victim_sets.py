"""What evicting a set of spot tasks frees on one node: the shared view the baseline victim
selectors (k8s-priority, Lyra, FGD) reason over.

Each non-HP GPU of the node gets a virtual id: idle GPUs first, then each whole-GPU spot holding,
then each spot-only shared GPU. A GPU is usable by the preemptor once every task on it is
evicted (a shared GPU may hold several fractional spot workers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from gfs.services.core.ids import TaskId
from gfs.services.core.pool import PoolState
from gfs.services.core.shared_gpus import spot_slots_on_node
from gfs.services.core.victims import (
    PreemptionContext,
    PreemptionPlan,
    lost_gpu_seconds,
    node_cost,
    preemptible,
)


@dataclass(frozen=True, slots=True)
class NodeHoldings:
    node: int
    idle: int  # GPUs with nothing on them
    holders: tuple[frozenset[TaskId], ...]  # per non-idle, non-HP GPU: the spot tasks on it
    tasks: tuple[TaskId, ...]  # spot tasks on the node, in placement-record order

    def freed(self, victims: Iterable[TaskId]) -> int:
        """GPUs the preemptor can use after evicting `victims` (idle ones included)."""
        gone = set(victims)
        return self.idle + sum(1 for h in self.holders if h <= gone)

    def gpus_of(self, task_id: TaskId) -> int:
        return sum(1 for h in self.holders if task_id in h)


def node_holdings(pool: PoolState, node: int) -> NodeHoldings:
    holders: list[frozenset[TaskId]] = []
    order: list[TaskId] = []
    for tid, n in pool.spot_whole[node].items():
        holders.extend([frozenset((tid,))] * n)
        order.append(tid)
    for slot in spot_slots_on_node(pool, node):
        occupants = pool.slot_tasks.get(slot, {})
        holders.append(frozenset(occupants))
        order.extend(t for t in occupants if t not in order)
    return NodeHoldings(node, int(pool.free[node]), tuple(holders), tuple(order))


def reprieve(holdings: NodeHoldings, candidates: list[TaskId], need: int) -> list[TaskId]:
    """Start from evicting every candidate, then give back (reprieve) candidates in the given
    order whenever the preemptor still fits without evicting them. Returns the victims in
    `candidates` order. This is kube-scheduler's `selectVictimsOnNode` shape."""
    victims = list(candidates)
    for tid in candidates:
        trial = [v for v in victims if v != tid]
        if holdings.freed(trial) >= need:
            victims = trial
    return victims


def best_node_plan(
    pool: PoolState,
    need: int,
    ctx: PreemptionContext,
    choose: Callable[[NodeHoldings], list[TaskId] | None],
    rank: Callable[[NodeHoldings, list[TaskId]], tuple[float, ...]],
) -> PreemptionPlan | None:
    """The one per-node loop of the baseline selectors: on every node with `need` non-HP GPUs,
    `choose` the victims (None: the node cannot serve); keep the node with the smallest `rank`
    (whose last tier is the node index). The plan's cost is GFS's node cost, for comparison only."""
    best: tuple[tuple[float, ...], NodeHoldings, list[TaskId]] | None = None
    for node in np.flatnonzero(preemptible(pool, ctx) >= need).tolist():
        holdings = node_holdings(pool, node)
        victims = choose(holdings)
        if victims is None or holdings.freed(victims) < need:
            continue
        key = rank(holdings, victims)
        if best is None or key < best[0]:
            best = (key, holdings, victims)
    if best is None:
        return None
    _, holdings, victims = best
    lost = sum(lost_gpu_seconds(pool, t, ctx.now) for t in victims)
    return PreemptionPlan(holdings.node, tuple(victims), node_cost(lost, len(victims), pool, ctx))

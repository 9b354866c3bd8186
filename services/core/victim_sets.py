"""What evicting a set of spot tasks frees on one node: the shared view the baseline victim
selectors (k8s-priority, Lyra, FGD) reason over.

Each non-HP GPU of the node gets a virtual id: idle GPUs first, then each whole-GPU spot holding,
then each spot-only shared GPU. A GPU is usable by the preemptor once every task on it is
evicted (a shared GPU may hold several fractional spot workers).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from services.core.ids import TaskId
from services.core.pool import PoolState


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
    for slot in pool.spot_slots_on_node(node):
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

"""What a victim selector answers (core/victims.py): a node, the spot tasks to evict there, the
cost, and the losing candidates it was compared with (explanations). Apart from the selectors so
the decisions a pass returns (decisions.py) can carry plans without depending on the pool."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from gfs.services.core.ids import TaskId

MAX_ALTERNATIVES = 5  # losing candidates kept with a plan for explanations (cheapest first)


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    node: int
    victims: tuple[TaskId, ...]
    cost: float
    slot: int = -1
    # GFS's node cost split into its terms (eviction rate after the preemption, weighted lost GPU
    # time), None for selectors whose cost is not that sum.
    terms: tuple[float, float] | None = None
    # Losing candidates the selector compared this plan with (at most MAX_ALTERNATIVES, cheapest
    # first) and how many candidates it compared in all (this plan included). Explanation only.
    alternatives: tuple[PreemptionPlan, ...] = ()
    considered: int = 1
    # Victims beyond their tenants' remaining eviction budgets (core/tenant_budget.py): 0 unless
    # every feasible set broke some budget and this one broke them least.
    over_budget: int = 0


def with_alternatives(best: PreemptionPlan, plans: list[PreemptionPlan]) -> PreemptionPlan:
    """`best` carrying the cheapest of the other `plans` as its losing candidates."""
    if len(plans) <= 1:
        return best
    losers = heapq.nsmallest(
        MAX_ALTERNATIVES, (p for p in plans if p is not best), key=lambda p: (p.cost, p.node, p.slot)
    )
    return replace(best, alternatives=tuple(losers), considered=len(plans))

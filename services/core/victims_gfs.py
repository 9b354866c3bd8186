"""GFS's victim selector (spec 5.2): best fit on preemptible capacity, two-pointer victims per node
(core/two_pointer.py), the minimum node cost (core/victims.py); a fractional worker tries the
fullest shared GPUs first. When the cheapest set would take a spot tenant over its eviction budget
(core/tenant_budget.py), every candidate is chosen again around the budgets."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np

from gfs.services.core.ids import TaskId, TenantId
from gfs.services.core.pool import PoolState
from gfs.services.core.preemption_plan import with_alternatives
from gfs.services.core.shared_gpus import spot_slots_on_node
from gfs.services.core.task import TaskSpec
from gfs.services.core.tenant_budget import overage
from gfs.services.core.two_pointer import fraction_two_pointer, two_pointer
from gfs.services.core.victims import (
    PreemptionContext,
    PreemptionPlan,
    lost_gpu_seconds,
    node_cost_terms,
    preemptible,
    within_budget,
)

_EPS = 1e-9


def _gfs_plan(
    node: int,
    victims: tuple[TaskId, ...],
    victim_cost: float,
    pool: PoolState,
    ctx: PreemptionContext,
    slot: int = -1,
) -> PreemptionPlan:
    rate, lost = node_cost_terms(victim_cost, len(victims), pool, ctx)
    return PreemptionPlan(node, victims, rate + lost, slot, terms=(rate, lost))


def _virtual_gpus(pool: PoolState, node: int) -> tuple[dict[TaskId, set[int]], int]:
    """Virtual GPU ids of the node's non-HP GPUs: idle GPUs, then each whole holding, then each
    spot-only shared GPU. Returns each spot task's ids and how many ids there are."""
    next_id = int(pool.free[node])
    holdings: dict[TaskId, set[int]] = {}
    for tid, n in pool.spot_whole[node].items():
        holdings.setdefault(tid, set()).update(range(next_id, next_id + n))
        next_id += n
    for slot in spot_slots_on_node(pool, node):
        for tid in pool.slot_tasks.get(slot, {}):
            holdings.setdefault(tid, set()).add(next_id)
        next_id += 1
    return holdings, next_id


def victims_over_budget(pool: PoolState, victims: tuple[TaskId, ...], left: Mapping[TenantId, int]) -> int:
    """Victims beyond their tenants' remaining budgets (0: the set respects every budget)."""
    counts: dict[TenantId, int] = {}
    for v in victims:
        tenant = pool.running[v].spec.tenant
        counts[tenant] = counts.get(tenant, 0) + 1
    return overage(counts, left)


def _respecting_budgets(
    pool: PoolState,
    left: Mapping[TenantId, int],
    now: float,
    choose: Callable[[frozenset[TaskId]], PreemptionPlan | None],
    exhausted: frozenset[TaskId],
) -> PreemptionPlan | None:
    """One node's (or shared GPU's) victims, chosen around the tenant budgets: first sparing
    every task of a tenant with no budget left (`exhausted`); while the set still takes a tenant over its
    budget, sparing that tenant's most expensive victims beyond it too (the cheaper ones may
    still go). Returns the plan with the fewest victims over budget (its `over_budget` set), None
    when even the first choice cannot free enough. Each round spares at least one more task, so
    it ends."""
    protected = exhausted
    best: PreemptionPlan | None = None
    while True:
        plan = choose(protected)
        if plan is None:
            return best
        by_tenant: dict[TenantId, list[TaskId]] = {}
        for v in plan.victims:
            by_tenant.setdefault(pool.running[v].spec.tenant, []).append(v)
        over = overage({t: len(vs) for t, vs in by_tenant.items()}, left)
        if best is None or over < best.over_budget:
            best = replace(plan, over_budget=over)
        if over == 0:
            return best
        spare: set[TaskId] = set()
        for tenant, vs in by_tenant.items():
            extra = len(vs) - left.get(tenant, len(vs))
            if extra > 0:
                vs.sort(key=lambda t: (-lost_gpu_seconds(pool, t, now), t))
                spare.update(vs[:extra])
        protected |= spare


class GfsVictims:
    """Best fit on preemptible capacity, two-pointer victims per node, minimum node cost."""

    name = "gfs-two-pointer"

    def plan(self, pool: PoolState, spec: TaskSpec, ctx: PreemptionContext) -> PreemptionPlan | None:
        first = self._plan(pool, spec, ctx)
        left = ctx.tenant_left
        if not left or first is None or victims_over_budget(pool, first.victims, left) == 0:
            return first  # no tenant budget binds: today's choice, unchanged
        return self._plan_for_budgets(pool, spec, ctx, left, first)

    def _plan(self, pool: PoolState, spec: TaskSpec, ctx: PreemptionContext) -> PreemptionPlan | None:
        if spec.is_fractional:
            frac = self._plan_fractional(pool, spec.gpus_per_worker, ctx)
            if frac is not None and within_budget(frac, ctx):
                return frac
            whole = self._plan_whole(pool, spec.whole_gpus_per_worker, ctx)
            if frac is None or (whole is not None and within_budget(whole, ctx)):
                return whole
            return frac  # over the budget: the cycle refuses it (EVICTION_BUDGET)
        return self._plan_whole(pool, spec.whole_gpus_per_worker, ctx)

    def _plan_for_budgets(
        self,
        pool: PoolState,
        spec: TaskSpec,
        ctx: PreemptionContext,
        left: Mapping[TenantId, int],
        first: PreemptionPlan,
    ) -> PreemptionPlan:
        """The unbudgeted choice `first` takes some tenant over its budget: every candidate again,
        each node's (or shared GPU's) victims chosen around the tenants it would take over. The
        winner: within the pool's eviction cap if any candidate is, then the fewest victims over
        budget, then best fit (whole GPUs: the fewest preemptible GPUs), then the node cost."""
        non_hp = preemptible(pool, ctx)
        out = {t for t, n in left.items() if n <= 0}
        exhausted = frozenset(tid for tid, rt in pool.running.items() if rt.spec.tenant in out)

        def level(p: PreemptionPlan) -> float:
            # A shared GPU's plan comes before any whole-GPU plan for a fractional worker, as in
            # `_plan`; whole GPUs: best fit, the node with the fewest preemptible GPUs first.
            return -1.0 if spec.is_fractional and p.slot >= 0 else float(non_hp[p.node])

        candidates = [replace(first, over_budget=victims_over_budget(pool, first.victims, left))]
        if spec.is_fractional:
            candidates += self._fractional_candidates(pool, spec.gpus_per_worker, ctx, left, exhausted)
        k = spec.whole_gpus_per_worker
        for node in np.flatnonzero(non_hp >= k).tolist():

            def choose(protected: frozenset[TaskId], n: int = int(node)) -> PreemptionPlan | None:
                return self._plan_node_around(pool, n, k, ctx, protected)

            plan = _respecting_budgets(pool, left, ctx.now, choose, exhausted)
            if plan is not None:
                candidates.append(plan)

        def rank(p: PreemptionPlan) -> tuple[bool, int, float, float, int, int]:
            return (not within_budget(p, ctx), p.over_budget, level(p), p.cost, p.node, p.slot)

        best = min(candidates, key=rank)
        return with_alternatives(best, candidates)

    def _fractional_candidates(
        self,
        pool: PoolState,
        g: float,
        ctx: PreemptionContext,
        left: Mapping[TenantId, int],
        exhausted: frozenset[TaskId],
    ) -> list[PreemptionPlan]:
        """Per shared GPU the fractional path would use, victims chosen around budgets."""
        out: list[PreemptionPlan] = []
        for slot in _fractional_slots(pool, g, ctx):
            occupants = pool.slot_tasks.get(slot, {})
            costs = {t: lost_gpu_seconds(pool, t, ctx.now) for t in occupants}
            room = 1.0 - float(pool.gpu_hp[slot])

            def choose(
                protected: frozenset[TaskId],
                occ: Mapping[TaskId, float] = occupants,
                c: Mapping[TaskId, float] = costs,
                r: float = room,
                s: int = slot,
            ) -> PreemptionPlan | None:
                # A protected task keeps its fraction: only the rest of the GPU can be freed.
                kept = sum(f for t, f in occ.items() if t in protected)
                free = {t: f for t, f in occ.items() if t not in protected}
                if r - kept < g - _EPS:
                    return None
                victims = fraction_two_pointer(free, r - kept, c, g)
                total = sum(c[t] for t in victims)
                return _gfs_plan(int(pool.gpu_node[s]), tuple(victims), total, pool, ctx, s)

            plan = _respecting_budgets(pool, left, ctx.now, choose, exhausted)
            if plan is not None:
                out.append(plan)
        return out

    def _plan_whole(self, pool: PoolState, k: int, ctx: PreemptionContext) -> PreemptionPlan | None:
        """Best fit on preemptible GPUs: the nodes with the fewest; the cheapest of them. Under an
        eviction budget, the first best-fit tier with a plan within it (else the unconstrained
        best, which the cycle refuses)."""
        non_hp = preemptible(pool, ctx)
        feasible = non_hp >= k
        if not feasible.any():
            return None
        least = int(non_hp[feasible].min())
        first = self._best_of(pool, np.flatnonzero(non_hp == least).tolist(), k, ctx)
        if first is None or within_budget(first, ctx):
            return first
        for level in np.unique(non_hp[feasible]).tolist():
            found = self._best_of(pool, np.flatnonzero(non_hp == level).tolist(), k, ctx, capped=True)
            if found is not None:
                return found
        return first

    def _best_of(
        self, pool: PoolState, nodes: list[int], k: int, ctx: PreemptionContext, *, capped: bool = False
    ) -> PreemptionPlan | None:
        best: PreemptionPlan | None = None
        plans: list[PreemptionPlan] = []
        for node in nodes:
            plan = self._plan_node(pool, int(node), k, ctx)
            plans.append(plan)
            if capped and not within_budget(plan, ctx):
                continue
            if best is None or plan.cost < best.cost:
                best = plan
        return None if best is None else with_alternatives(best, plans)

    def _plan_node(self, pool: PoolState, node: int, k: int, ctx: PreemptionContext) -> PreemptionPlan:
        whole = pool.spot_whole[node]
        if not spot_slots_on_node(pool, node) and len(whole) == 1 and int(pool.free[node]) < k:
            (tid,) = whole  # fast path: the only spot task must go
            return _gfs_plan(node, (tid,), lost_gpu_seconds(pool, tid, ctx.now), pool, ctx)
        holdings, n_ids = _virtual_gpus(pool, node)
        return self._two_pointer_plan(pool, node, k, ctx, holdings, frozenset(range(n_ids)))

    def _plan_node_around(
        self, pool: PoolState, node: int, k: int, ctx: PreemptionContext, protected: frozenset[TaskId]
    ) -> PreemptionPlan | None:
        """As `_plan_node`, but `protected` tasks (tenants out of budget) are never victims, so
        the GPUs they hold cannot be freed; None when too few GPUs are left to free."""
        holdings, n_ids = _virtual_gpus(pool, node)
        kept: set[int] = set()
        for t in protected:
            kept |= holdings.pop(t, set())
        ids = frozenset(range(n_ids)) - kept
        if len(ids) < k:
            return None
        return self._two_pointer_plan(pool, node, k, ctx, holdings, ids)

    @staticmethod
    def _two_pointer_plan(
        pool: PoolState,
        node: int,
        k: int,
        ctx: PreemptionContext,
        holdings: dict[TaskId, set[int]],
        ids: frozenset[int],
    ) -> PreemptionPlan:
        frozen = {t: frozenset(h) for t, h in holdings.items()}
        costs = {t: lost_gpu_seconds(pool, t, ctx.now) for t in frozen}
        victims, _ = two_pointer(frozen, ids, costs, k)
        total = sum(costs[t] for t in victims)
        return _gfs_plan(node, tuple(victims), total, pool, ctx)

    def _plan_fractional(self, pool: PoolState, g: float, ctx: PreemptionContext) -> PreemptionPlan | None:
        """Shared GPUs already holding some HP with room for g once their spot work is evicted;
        best fit on the HP fraction (the fullest wins), then two-pointer on fractions."""
        hp = pool.gpu_hp
        best: PreemptionPlan | None = None
        fitting: PreemptionPlan | None = None  # the cheapest within the eviction budget
        plans: list[PreemptionPlan] = []
        for slot in _fractional_slots(pool, g, ctx):
            occupants = pool.slot_tasks.get(int(slot), {})
            costs = {t: lost_gpu_seconds(pool, t, ctx.now) for t in occupants}
            victims = fraction_two_pointer(occupants, 1.0 - float(hp[slot]), costs, g)
            total = sum(costs[t] for t in victims)
            plan = _gfs_plan(int(pool.gpu_node[slot]), tuple(victims), total, pool, ctx, int(slot))
            plans.append(plan)
            if best is None or plan.cost < best.cost:
                best = plan
            if within_budget(plan, ctx) and (fitting is None or plan.cost < fitting.cost):
                fitting = plan
        chosen = fitting if fitting is not None else best
        return None if chosen is None else with_alternatives(chosen, plans)


def _fractional_slots(pool: PoolState, g: float, ctx: PreemptionContext) -> list[int]:
    """Shared GPUs already holding some HP with room for g once their spot work is evicted, the
    fullest of them (best fit on the HP fraction); none on excluded nodes."""
    hp = pool.gpu_hp
    ok = pool.gpu_shared & (hp > _EPS) & (hp <= 1.0 - g + _EPS) & (pool.gpu_spot > _EPS)
    if ctx.excluded:
        ok &= ~np.isin(pool.gpu_node, list(ctx.excluded))
    if not ok.any():
        return []
    fullest = float(hp[ok].max())
    return [int(s) for s in np.flatnonzero(ok & (hp >= fullest - _EPS)).tolist()]

"""Preemptive placement of one HP worker: which spot tasks to evict, on which node (spec 5.2).

A `VictimSelector` returns a `PreemptionPlan` (or None) and never changes the pool. After the
plan's victims are removed, the worker fits on `plan.node` (whole GPUs) or on `plan.slot` (a
shared GPU, fractional case; slot -1 with a fractional worker means "open a freed GPU").

The selectors: `GfsVictims` (core/victims_gfs.py, on core/two_pointer.py), `FirstNodeVictims`
(core/victims_first_node.py), the baselines' (victims_fgd, victims_k8s, victims_lease, victims_lyra).
This module holds what they share: the context and the node cost (the plan is preemption_plan.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol

import numpy as np

from gfs.services.core.ids import TaskId, TenantId
from gfs.services.core.pool import PoolState
from gfs.services.core.preemption_plan import PreemptionPlan as PreemptionPlan  # re-exported
from gfs.services.core.task import TaskSpec


class PreemptionContext(NamedTuple):
    """What the node cost needs besides the pool: time and the pool's guarantee history."""

    now: float
    failed_periods: int  # F_v: failed spot guarantee periods in the pool so far
    succeeded_periods: int  # S_v
    t_win_s: float  # T_win, the normalising window of the lost-GPU-time term (default 31 days)
    cost_weight: float = 5.0
    # Evictions this pass may still commit to (the pool's eviction cap), None = no cap. Selectors
    # should prefer a plan within it when one exists; the cycle refuses any plan above it.
    eviction_budget: int | None = None
    # Nodes no preemption may use in this pass: a head-of-queue reservation's (core/reservation.py).
    excluded: frozenset[int] = frozenset()
    # Evictions each budgeted spot tenant may still take (core/tenant_budget.py); tenants absent
    # are unlimited, None = no tenant budgets. GFS avoids a victim set over them when it can.
    tenant_left: Mapping[TenantId, int] | None = None


def preemptible(pool: PoolState, ctx: PreemptionContext) -> np.ndarray:
    """GPUs per node that preemption may free for this pass: non-HP GPUs, none on excluded nodes."""
    non_hp = pool.non_hp
    if not ctx.excluded:
        return non_hp
    out = non_hp.copy()
    out[list(ctx.excluded)] = 0
    return out


class VictimSelector(Protocol):
    name: str

    def plan(self, pool: PoolState, spec: TaskSpec, ctx: PreemptionContext) -> PreemptionPlan | None: ...


def within_budget(plan: PreemptionPlan, ctx: PreemptionContext) -> bool:
    """Does the plan stay within the pass's remaining eviction budget (always, without a cap)?"""
    return ctx.eviction_budget is None or len(plan.victims) <= ctx.eviction_budget


def lost_gpu_seconds(pool: PoolState, task_id: TaskId, now: float) -> float:
    """c_j = w_j * g_j * (now - start_j): GPU time since the victim (re)started."""
    rt = pool.running[task_id]
    return rt.spec.total_gpus * max(0.0, now - rt.start_s)


def node_cost_terms(
    victim_cost: float, n_victims: int, pool: PoolState, ctx: PreemptionContext
) -> tuple[float, float]:
    """The two terms of the node cost: (F + R) / (F + S + R), the pool's eviction rate after this
    preemption, and w * sum(c_j) / (C_v * T_win), the weighted lost GPU time."""
    f, s = ctx.failed_periods, ctx.succeeded_periods
    denominator = f + s + n_victims
    rate = (f + n_victims) / denominator if denominator > 0 else 0.0
    return rate, ctx.cost_weight * victim_cost / (pool.capacity * ctx.t_win_s)


def node_cost(victim_cost: float, n_victims: int, pool: PoolState, ctx: PreemptionContext) -> float:
    """Eviction rate after this preemption dominates; the lost GPU time breaks near-ties."""
    rate, lost = node_cost_terms(victim_cost, n_victims, pool, ctx)
    return rate + lost

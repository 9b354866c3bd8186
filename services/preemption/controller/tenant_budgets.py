"""Per-tenant eviction budgets on the live side (issue 27 item 3): the SRE control's value as the
core's `TenantBudget`s, put in force on a pool's runtime, and read back for the API/dashboard.

The budget is counted by the core (services/core/tenant_budget.py) per pool, from the evictions
the runtime applied (a replay of the journal rebuilds the count with the runtime)."""

from __future__ import annotations

from typing import Any

from gfs.services.core.ids import TenantId
from gfs.services.core.runtime import PoolRuntime
from gfs.services.core.tenant_budget import BudgetWindow, TenantBudget

Budgets = tuple[tuple[str, int, str], ...]  # (tenant, max evictions, "day" | "periods"), sorted


def budgets_from_dict(data: dict[str, Any] | None) -> Budgets:
    """{tenant: {"max_evictions": N, "per": "day"}} (a journaled `control` entry) as `Budgets`."""
    items = (data or {}).items()
    return tuple(sorted((str(t), int(b["max_evictions"]), str(b.get("per", "day"))) for t, b in items))


def budgets_as_dict(budgets: Budgets) -> dict[str, dict[str, Any]]:
    return {t: {"max_evictions": n, "per": per} for t, n, per in budgets}


def check_budgets(budgets: Budgets) -> None:
    """Raise ValueError on a negative count or an unknown window."""
    for _tenant, n, per in budgets:
        TenantBudget(n, BudgetWindow(per))


def apply_tenant_budgets(runtime: PoolRuntime, before: Budgets, wanted: Budgets) -> None:
    """Lift the budgets no longer wanted, set the new and changed ones."""
    kept = {t for t, _, _ in wanted}
    for tenant, _, _ in before:
        if tenant not in kept:
            runtime.tenant_evictions.set_budget(TenantId(tenant), None)
    for tenant, n, per in wanted:
        runtime.tenant_evictions.set_budget(TenantId(tenant), TenantBudget(n, BudgetWindow(per)))


def budgets_view(runtime: PoolRuntime, now: float) -> dict[str, dict[str, Any]]:
    """Per budgeted tenant: its budget, the evictions counted against it and what is left."""
    at = max(now, runtime.now)  # the runtime's clock never goes back
    counts = runtime.tenant_evictions
    out: dict[str, dict[str, Any]] = {}
    for tenant, budget in sorted(counts.budgets.items()):
        used = counts.used(tenant, at)
        out[str(tenant)] = {
            "max_evictions": budget.max_evictions,
            "per": budget.window.value,
            "used": used,
            "left": max(0, budget.max_evictions - used),
        }
    return out

"""Per-tenant eviction budgets (issue 27 item 3): how many more preemption evictions each spot
tenant may take before the victim choice steers away from it.

An operator sets, per tenant, the most evictions either per day (a rolling 24 h window) or per
100 guarantee periods (the tenant's last 100 closed spot guarantee periods, each a success or a
failure; its failures among them are its evictions). A tenant without a budget is unlimited.

The budget is soft, unlike the pool's eviction cap: the GFS victim selector avoids a victim set
that takes a tenant over its remaining budget when another feasible set exists, and otherwise
places the HP task anyway with the set that goes least over (docs/decisions.md: HP is the
guaranteed class; a spot tenant's budget is a fairness promise that yields to it).

Pure bookkeeping: time comes in as an argument, nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from gfs.services.core.ids import TenantId

DAY_S = 86400.0
PERIODS_WINDOW = 100  # "per 100 guarantee periods"


class BudgetWindow(enum.Enum):
    DAY = "day"  # evictions in the rolling last 24 h
    PERIODS = "periods"  # evictions among the tenant's last 100 closed guarantee periods


@dataclass(frozen=True, slots=True)
class TenantBudget:
    max_evictions: int
    window: BudgetWindow = BudgetWindow.DAY

    def __post_init__(self) -> None:
        if self.max_evictions < 0:
            raise ValueError("max_evictions must be >= 0")


class TenantEvictions:
    """What the budgets are measured on, per tenant: preemption eviction times (the last day) and
    the outcomes of the last 100 closed guarantee periods. Recorded for every tenant, budget or
    not, so a budget set later counts the evictions before it (as the pool cap does)."""

    def __init__(self) -> None:
        self.budgets: dict[TenantId, TenantBudget] = {}
        self._times: dict[TenantId, deque[float]] = {}
        self._periods: dict[TenantId, deque[bool]] = {}  # True: a failed period (an eviction)
        self._failed: dict[TenantId, int] = {}  # failures in each tenant's `_periods` (kept, not summed)

    def set_budget(self, tenant: TenantId, budget: TenantBudget | None) -> None:
        if budget is None:
            self.budgets.pop(tenant, None)
        else:
            self.budgets[tenant] = budget

    def evicted(self, tenant: TenantId, now: float) -> None:
        """One preemption eviction of the tenant's task at `now` (its failed period comes through
        `periods`)."""
        times = self._times.setdefault(tenant, deque())
        times.append(now)
        while times[0] <= now - DAY_S:
            times.popleft()

    def periods(self, tenant: TenantId, successes: int, failed: bool) -> None:
        """Guarantee periods of the tenant that closed: `successes` successes, then a failure if
        `failed` (a run's completed periods close before the one its eviction interrupts)."""
        n = min(max(0, successes), PERIODS_WINDOW)
        if n == 0 and not failed:
            return
        outcomes = self._periods.setdefault(tenant, deque(maxlen=PERIODS_WINDOW))
        failures = self._failed.get(tenant, 0)
        for outcome in [False] * n + ([True] if failed else []):
            if len(outcomes) == PERIODS_WINDOW:
                failures -= outcomes[0]  # the oldest period leaves the window
            outcomes.append(outcome)
            failures += outcome
        self._failed[tenant] = failures

    def used(self, tenant: TenantId, now: float) -> int:
        """Evictions that count against the tenant's budget at `now` (0 without a budget)."""
        budget = self.budgets.get(tenant)
        if budget is None:
            return 0
        if budget.window is BudgetWindow.PERIODS:
            return self._failed.get(tenant, 0)
        # A read changes nothing (an API may read ahead of the runtime's clock); `evicted` prunes.
        since = now - DAY_S
        return sum(1 for t in self._times.get(tenant, ()) if t > since)

    def left(self, now: float) -> dict[TenantId, int]:
        """Evictions each budgeted tenant may still take at `now` (tenants without one absent)."""
        return {t: max(0, b.max_evictions - self.used(t, now)) for t, b in self.budgets.items()}


def overage(victim_tenants: Mapping[TenantId, int], left: Mapping[TenantId, int]) -> int:
    """Victims beyond the tenants' remaining budgets: 0 when the set respects every budget."""
    return sum(max(0, n - left[t]) for t, n in victim_tenants.items() if t in left)

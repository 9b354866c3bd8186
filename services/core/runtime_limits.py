"""What bounds a pass: the head-of-queue reservation, the pool's eviction cap, the tenants' eviction
budgets, the quota and the nodes' eviction scores; a layer of `PoolRuntime` (runtime.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from services.core.eviction_log import DAY_S
from services.core.ids import TenantId
from services.core.placeable import reservation_growth
from services.core.quota import QuotaInputs, hp_floor
from services.core.reasons import Unschedulable
from services.core.reservation import Reservation, choose_nodes, nodes_online, pick_holder
from services.core.runtime_explain import Explaining
from services.core.servable import ServablePlan, plan_servable, servable_levels, servable_total
from services.core.tenant_budget import TenantBudget
from services.core.work_conservation import QuotaBasis, idle_while_work_fits

HOLDER_SCAN_S = 60.0  # after a scan found no reservation holder, the next scan waits this long
RESERVE_RELATIVE_WAIT = 2.0  # a reservation needs a wait of this many times the recent HP mean


class Limits(Explaining):
    # ----- reservation ----------------------------------------------------------------------------
    def _update_reservation(self, now: float) -> None:
        """Before a pass: drop a reservation whose holder left the queue, choose its nodes again if
        one went down, make one for the longest-waiting HP task past the policy's threshold.
        Every change is a new capacity version (what other tasks may use changed)."""
        after = self.policy.reserve_after_s
        if after is None:
            return
        res = self.reservation
        if res is not None:
            if res.task_id not in self.hp:
                self.reservation = None
                self.version += 1
            elif not nodes_online(self.state, res.nodes):
                nodes = choose_nodes(self.state, self.hp.specs[res.task_id])
                self.reservation = None if nodes is None else replace(res, nodes=nodes)
                self.version += 1
            return
        if now < self._next_holder_scan:
            return
        # Starvation is relative: a gang is starved when it waited well past what HP tasks that
        # started lately waited, not when the whole pool is overloaded (reservation.py).
        after = max(after, RESERVE_RELATIVE_WAIT * self._hp_waits.mean(now))
        holder = self.hp.oldest_gang(now, after) if self.indexed else pick_holder(self.hp, now, after)
        if holder is None:
            # Passes come with every event; a minute's delay in reserving costs nothing next to
            # the hour waited, and an overloaded queue's old single-worker tasks are not rescanned.
            self._next_holder_scan = now + HOLDER_SCAN_S
            return
        nodes = choose_nodes(self.state, holder)
        if nodes is None:
            return
        self.reservation = Reservation(holder.task_id, nodes, now, holder.total_gpus)
        self.version += 1

    def hp_placeable(self) -> float:
        """The servable HP demand now (core/servable.py: HP running plus the queued HP that fits
        now on the GPUs HP does not hold outside the reservation's nodes), plus the reservation's
        growth where the quota settings protect it (issue 21's floor): the HP usage the quota
        protects at least."""
        res = self.reservation
        plan = self.servable_plan()
        total = servable_total(self.state, plan)
        protect = self.policy.quota.settings.protect_reservation_growth
        if protect and res is not None and res.task_id in self.hp and not plan.holder_servable:
            total += reservation_growth(self.state, self.hp.specs[res.task_id], res.nodes)
        return float(total)

    def servable_plan(self) -> ServablePlan:
        """The servable demand's plan now (core/servable.py), memoised on what it reads: what runs
        where, the HP queue, the reservation and the chunks freed in the last period."""
        chunks = self.hp_releases.chunks(self.now)
        key = (self.state.mutations, self.hp.mutations, self.reservation, self.hp_releases.version)
        memo = self._plan_memo
        if memo is not None and memo[0] == key:
            return memo[1]
        plan = plan_servable(self.state, self.hp, self.reservation, chunks)
        self._plan_memo = (key, plan)
        return plan

    def idle_while_work_fits(self, *, quota_enabled: bool = True) -> dict[str, float]:
        """GPUs idle now while queued work would fit on them, per reason (core/work_conservation.py)."""
        claims = None
        if self.policy.spot_claims != "off" and self.hp.index and self.spot.index:
            claims = self.servable_plan().claims
        quota = self.quota if quota_enabled else None
        key = (
            self.state.mutations, self.hp.mutations, self.spot.mutations, self.reservation,
            self.hp_releases.version, None if quota is None else tuple(sorted(quota.items())),
            self.quota_basis,
        )  # fmt: skip
        memo = self._idle_fit_memo
        if memo is not None and memo[0] == key:
            return dict(memo[1])
        found = idle_while_work_fits(
            self.state, self.hp, self.spot, reservation=self.reservation, claims=claims, quota=quota,
            basis=self.quota_basis,
        )  # fmt: skip
        self._idle_fit_memo = (key, found)
        return dict(found)

    def servable_levels(self) -> dict[TenantId, float]:
        """The servable HP demand per tenant now (core/servable.py): the forecast's target series."""
        return servable_levels(self.state, self.servable_plan())

    # ----- eviction cap ---------------------------------------------------------------------------
    def set_eviction_cap(self, max_evictions: int | None, interval_s: float = 3600.0) -> None:
        """At most `max_evictions` preemption evictions in any `interval_s` (at most a day); None
        lifts the cap. Evictions before the call count."""
        if max_evictions is None:
            self.eviction_cap = None
        else:
            if max_evictions < 0 or not 0.0 < interval_s <= DAY_S:
                raise ValueError("max_evictions must be >= 0 and interval_s in (0, 86400]")
            self.eviction_cap = (int(max_evictions), float(interval_s))
        self.version += 1

    def eviction_budget(self, now: float) -> int | None:
        """Evictions a pass at `now` may still make under the cap (None: no cap)."""
        if self.eviction_cap is None:
            return None
        limit, interval = self.eviction_cap
        since = now - interval
        recent = sum(1 for t in self._evicted_times if t > since)
        return max(0, limit - recent)

    # ----- tenant eviction budgets -----------------------------------------------------------------
    def set_tenant_budget(self, tenant: TenantId, budget: TenantBudget | None) -> None:
        """Set (None: lift) a spot tenant's eviction budget; evictions before the call count."""
        self.tenant_evictions.set_budget(tenant, budget)

    def tenant_budgets_left(self, now: float) -> dict[TenantId, int]:
        """Evictions each budgeted tenant may still take at `now` (tenants without one absent)."""
        return self.tenant_evictions.left(now)

    # ----- quota and eviction scores --------------------------------------------------------------
    def quota_inputs(self, now: float, hp_quantile: np.ndarray | None) -> QuotaInputs:
        """What the quota policy needs at `now`: online capacity, idle GPUs, spot in use, the
        forecast quantile given, eta, and the outcomes inside the settings' feedback window."""
        if now < self.now:
            self._at(now)
        self.now = now
        failed, succeeded = self.ledger.recent(now)
        head = self.spot.head()
        return QuotaInputs(
            capacity=self.state.online_capacity,
            idle_gpus=int(self.state.free.sum()),
            spot_in_use=self.state.spot_in_use,
            hp_quantile=hp_quantile,
            eta=self.eta,
            failed_recent=failed,
            succeeded_recent=succeeded,
            head_wait_s=None if head is None else now - self.spot.entered_s[head],
            hp_observed=self.hp_observed,
            hp_placeable=self.hp_placeable() if self.policy.quota.settings.placeable_floor else None,
            # Eta grows only on this: the longest wait of a spot task the quota held back.
            quota_held_wait_s=self.spot.longest_blocked_wait(now, Unschedulable.OVER_QUOTA),
            failed_new=max(0, self.ledger.failed_total - self._failed_at_refresh),
            spot_smallest_gpus=self.spot.smallest_head_gpus(),
        )

    @property
    def hp_observed(self) -> float:
        """HP GPUs running plus queued here (g x w): the observed demand, lease-released included."""
        return self.state.hp_in_use + self.hp.gpus

    def update_quota(self, quota: Mapping[int, float], eta: float) -> bool:
        """Put a quota in force; True if it changed (a new capacity version)."""
        self.eta = eta
        if dict(quota) == self.quota:
            return False
        self.quota = dict(quota)
        self.version += 1
        return True

    def refresh_quota(self, now: float, hp_quantile: np.ndarray | None) -> bool:
        """The policy's quota from `quota_inputs`, put in force; then the eviction scores. True if
        the quota changed."""
        inputs = self.quota_inputs(now, hp_quantile)
        self.last_quota_inputs = inputs
        self._failed_at_refresh = self.ledger.failed_total
        out = self.policy.quota.refresh(inputs)
        settings = self.policy.quota.settings
        forecast = None if hp_quantile is None or len(hp_quantile) == 0 else float(hp_quantile[0])
        self.quota_basis = QuotaBasis(out.eta, hp_floor(inputs, settings), forecast)
        changed = self.update_quota(out.quota, out.eta)
        if self.policy.use_eviction_scores:
            self.refresh_eviction_scores(now)
        return changed

    def refresh_eviction_scores(self, now: float) -> None:
        """Node eviction scores from the last hour's and day's evictions (policies that use them)."""
        if not self.policy.use_eviction_scores:
            return
        scores = self.evictions.refresh(now, len(self.state.node_cap))
        if scores is not None:
            self.state.eviction_score = scores

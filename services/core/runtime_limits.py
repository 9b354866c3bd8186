"""What bounds a pass: the head-of-queue reservation, the pool's eviction cap, the tenants' eviction
budgets, the quota and the nodes' eviction scores; a layer of `PoolRuntime` (runtime.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from services.core.eviction_log import DAY_S
from services.core.ids import TenantId
from services.core.placeable import placeable_gpus, preemptible_capacity, reservation_growth
from services.core.queues import LargestFirst
from services.core.quota import QuotaInputs
from services.core.reasons import Unschedulable
from services.core.reservation import Reservation, choose_nodes, nodes_online, pick_holder
from services.core.runtime_explain import Explaining
from services.core.tenant_budget import TenantBudget

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
        """HP running, plus the queued HP that fits now on the GPUs HP does not hold outside the
        reservation's nodes, plus the reservation's growth (placeable.py): the HP usage the quota
        protects at least (issue 21)."""
        res = self.reservation
        excluded = () if res is None else res.nodes
        cap = preemptible_capacity(self.state, excluded)
        holder = None if res is None else res.task_id
        specs = self.hp.specs
        groups = ((specs[tid] for _, tid in entries if tid != holder) for _, entries in self.hp.buckets())
        uniform = isinstance(self.hp.order, LargestFirst)  # buckets share g per worker
        total = self.state.hp_in_use + placeable_gpus(cap, groups, uniform=uniform)
        if res is not None and res.task_id in self.hp:
            total += reservation_growth(self.state, self.hp.specs[res.task_id], res.nodes)
        return float(total)

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
        out = self.policy.quota.refresh(inputs)
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

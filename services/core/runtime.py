"""One pool at run time: the state both the simulator and the live preemption service drive.

A `PoolRuntime` holds the pool's allocation state, its HP and spot queues, the guarantee ledger,
the eviction log behind node scores, the quota in force, GPU device indices and what explanations
need. Drivers feed it events (submit, cancel, finish, period tick, node down/up, quota update,
lease renewal) and ask it to schedule; it returns what happened so the driver can record it
(simulator) or emit it (service). Time always comes in as an argument and never goes back; the
runtime reads no clock and does no I/O.

Rules the drivers rely on (docs/core-api.md):
- `schedule` runs one pass of the core's `schedule_pool` and applies its decisions in order:
  evictions requeue their victims at the back of the spot queue (a failed guarantee period each),
  starts bind device indices.
- The capacity `version` changes whenever GPUs are freed, the quota changes, or a node goes down
  or up: queue memos from an older version are retried.
- A node going down stops every task with a worker on it (a gang cannot run in part): HP tasks go
  back to the HP queue, spot tasks to the spot queue. Completed guarantee periods count as
  successes; the interrupted period counts as neither success nor failure, since the eviction
  feedback and the node cost measure preemptions, not hardware. The down node offers no GPUs to
  placement or preemption until it is up again.
- A cancelled task leaves its queue, or stops if running (completed periods count, the
  interrupted one is void, as for a node loss).
- Eviction cap (`set_eviction_cap(max_evictions, interval_s)`, off by default): each pass gets the
  budget max_evictions - (preemption evictions in the last interval_s) and the victim search
  respects it (`cycle.py`); a change of the budget is a new capacity version, so an HP task held by
  the cap is retried when the window slides.
- Tenant eviction budgets (`set_tenant_budget(tenant, budget)`, none by default): each pass gives
  the victim search what each budgeted tenant has left (core/tenant_budget.py); soft, so no HP
  task waits for them and no capacity version changes with them.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from services.core.cycle import CycleContext, schedule_pool
from services.core.decisions import EvictTask, StartTask
from services.core.devices import DeviceAllocator
from services.core.eviction_log import DAY_S, EvictionLog
from services.core.explain import (
    CandidateNode,
    EvictionRecord,
    Explanation,
    PreemptionRecord,
    QueueStatus,
)
from services.core.feasibility import PoolFeasibility
from services.core.guarantee import GUARANTEE_PERIOD_S, successes_before_eviction, successes_on_finish
from services.core.guarantee_ledger import GuaranteeLedger
from services.core.ids import TaskId, TenantId
from services.core.outcomes import Finished, Outcome, PassResult, RuntimeSettings, Started, Stopped
from services.core.placeable import placeable_gpus, preemptible_capacity, reservation_growth
from services.core.policies.protocols import SchedulingPolicy
from services.core.pool import PoolState, RunningTask
from services.core.queues import BucketQueue, LargestFirst
from services.core.quota import QuotaInputs
from services.core.reasons import EvictionReason, Rejection, Unschedulable
from services.core.reservation import RecentWaits, Reservation, choose_nodes, nodes_online, pick_holder
from services.core.task import TaskClass, TaskSpec
from services.core.tenant_budget import TenantBudget, TenantEvictions
from services.core.victims import PreemptionContext, PreemptionPlan

__all__ = ["Finished", "Outcome", "PassResult", "PoolRuntime", "RuntimeSettings", "Started", "Stopped"]

_EPS = 1e-9
HOLDER_SCAN_S = 60.0  # after a scan found no reservation holder, the next scan waits this long
RESERVE_RELATIVE_WAIT = 2.0  # a reservation needs a wait of this many times the recent HP mean


class PoolRuntime:
    def __init__(
        self,
        state: PoolState,
        policy: SchedulingPolicy,
        settings: RuntimeSettings | None = None,
    ) -> None:
        settings = settings or RuntimeSettings()
        self.state = state
        self.policy = policy
        self.settings = settings
        self.hp = BucketQueue(policy.hp_order)
        self.spot = BucketQueue(policy.spot_order)
        self.version = 0
        qs = policy.quota.settings
        self.quota: dict[int, float] = dict.fromkeys(
            range(1, qs.max_guarantee_hours + 1), float(state.capacity)
        )
        self.eta = 1.0
        self.ledger = GuaranteeLedger(qs.feedback_window_s)
        self.evictions = EvictionLog()
        # Preemption evictions' times (the eviction cap's window; the last day at most).
        self._evicted_times: deque[float] = deque()
        self.reservation: Reservation | None = None  # the head-of-queue reservation (reservation.py)
        self._next_holder_scan = -math.inf
        self._hp_waits = RecentWaits(DAY_S)  # waits of the HP tasks that started in the last day
        self.last_quota_inputs: QuotaInputs | None = None  # what the last `refresh_quota` saw
        self.eviction_cap: tuple[int, float] | None = None  # (max evictions, interval seconds)
        self._budget: int | None = None  # the budget of the last pass
        self.tenant_evictions = TenantEvictions()  # per-tenant eviction budgets and their usage
        self.devices = DeviceAllocator(tuple(int(g) for g in state.node_cap))
        self._track_devices = settings.device_indices
        self.feasibility = PoolFeasibility(tuple(int(g) for g in state.node_cap))
        self._verdicts: dict[tuple[float, int], Rejection | None] = {}  # by (gpus per worker, workers)
        self.passes = 0
        # Debug switch: False finds the reservation's holder by scanning the whole HP queue, as
        # before issue 23, instead of reading its gang list; decisions are the same either way
        # (tests/property/test_incremental_pass.py), only the cost differs (`gfs bench pass`).
        self.indexed = True
        self.now = -math.inf
        self.tasks: dict[TaskId, TaskSpec] = {}  # every task queued or running here
        # Guarantee periods already logged (period ticks) in a running task's current run; its start
        # is its RunningTask's (kept across lease renewals). Absent = 0: most tasks never tick.
        self._logged: dict[TaskId, int] = {}
        self._released: dict[TaskId, RunningTask] = {}  # lease released, not yet renewed or stopped
        self._skipped: tuple[tuple[TaskClass, tuple[float, ...]], ...] = ()
        self._skipped_pass = 0
        self._preemptions: dict[TaskId, tuple[float, tuple[PreemptionPlan, ...]]] = {}
        # Victim -> (time, node, reason, preemptor, the plan that chose it): its last stop.
        self._evicted: dict[
            TaskId, tuple[float, int, EvictionReason, TaskId | None, PreemptionPlan | None]
        ] = {}

    # ----- time -------------------------------------------------------------------------------
    def _at(self, now: float) -> None:
        if now < self.now:
            raise ValueError(f"time went back: {now} < {self.now}")
        self.now = now

    def _queue(self, cls: TaskClass) -> BucketQueue:
        return self.hp if cls is TaskClass.HP else self.spot

    # ----- submit / cancel ----------------------------------------------------------------------
    def check(self, spec: TaskSpec) -> Rejection | None:
        """Why `spec` could never run here, or None."""
        if spec.pool != self.state.pool:
            return Rejection.UNKNOWN_POOL
        shape = (spec.gpus_per_worker, spec.workers)
        try:
            return self._verdicts[shape]
        except KeyError:
            verdict = self._verdicts[shape] = self.feasibility.check(*shape)
            return verdict

    def submit(self, spec: TaskSpec, now: float) -> Rejection | None:
        """Queue a task, or return why it is rejected (nothing changes then). A task id already
        known (queued or running) raises: the driver deduplicates events before this."""
        if spec.pool != self.state.pool:
            return Rejection.UNKNOWN_POOL
        try:
            rejection = self._verdicts[(spec.gpus_per_worker, spec.workers)]
        except KeyError:  # a request shape seen for the first time
            rejection = self.check(spec)
        if rejection is not None:
            return rejection
        if now < self.now:
            self._at(now)
        self.now = now
        tid = spec.task_id
        if tid in self.tasks:
            raise ValueError(f"task {tid} is already known")
        self.tasks[tid] = spec
        (self.hp if spec.task_class is TaskClass.HP else self.spot).push(spec, now)
        return None

    def cancel(self, task_id: TaskId, now: float) -> Stopped | None:
        """Withdraw a task: out of its queue, or stopped if running. Returns the stop (None if it
        was queued); unknown ids raise KeyError."""
        self._at(now)
        spec = self.tasks[task_id]
        queue = self._queue(spec.task_class)
        if task_id in queue:
            queue.remove(task_id)
            if self._released.pop(task_id, None) is not None:
                self._logged.pop(task_id, None)
            self._forget(task_id)
            return None
        stop = self._stop(task_id, now, -1, EvictionReason.CANCELLED, None, void_partial=True, requeue=False)
        self._forget(task_id)
        self.version += 1
        return stop

    # ----- finishes and guarantee periods -----------------------------------------------------------
    def finish(self, task_id: TaskId, now: float) -> Finished:
        if now < self.now:
            self._at(now)
        self.now = now
        running = self.state.remove_task(task_id)
        if self._track_devices:
            self.devices.release(task_id)
        run_s = now - running.start_s
        logged = 0
        if running.spec.task_class is TaskClass.SPOT:
            before = self._logged.pop(task_id, 0) if self._logged else 0
            logged = self.ledger.success(now, successes_on_finish(run_s) - before)
            self.tenant_evictions.periods(running.spec.tenant, logged, failed=False)
        del self.tasks[task_id]
        if self._preemptions:
            self._preemptions.pop(task_id, None)
        if self._evicted:
            self._evicted.pop(task_id, None)
        self.version += 1
        return Finished(task_id, run_s, logged)

    def period_tick(self, task_id: TaskId, now: float) -> bool:
        """One guarantee period of a running spot task closed without eviction: one success.
        False (nothing logged) if the task no longer runs."""
        if now < self.now:
            self._at(now)
        self.now = now
        running = self.state.running.get(task_id) or self._released.get(task_id)
        if running is None or running.spec.task_class is not TaskClass.SPOT:
            return False
        self.ledger.success(now, 1)
        self.tenant_evictions.periods(running.spec.tenant, 1, failed=False)
        self._logged[task_id] = self._logged.get(task_id, 0) + 1
        return True

    def void_failure(self, at: float) -> bool:
        """A stop decided at `at` logged a failed period, but the run had already ended on its own
        (the live service learns it later, from the acks and exits: docs/attempts.md): withdraw
        the failure, so neither eta's feedback nor the node cost (F_v, spec 5.2) counts an eviction
        that evicted nothing. The interrupted period stays void (neither success nor failure), as
        the live service reports it. False if no failure was logged at `at`."""
        return self.ledger.retract_failure(at)

    def next_period_end(self, task_id: TaskId) -> float | None:
        """When the running task's next guarantee period closes (spot only)."""
        start = self.run_start(task_id)
        if start is None:
            return None
        return start + (self._logged.get(task_id, 0) + 1) * GUARANTEE_PERIOD_S

    # ----- scheduling ---------------------------------------------------------------------------
    def schedule(
        self, now: float, *, preemption_enabled: bool = True, quota_enabled: bool = True
    ) -> PassResult:
        """One scheduling pass with its decisions applied (a pool with empty queues is not passed)."""
        if now < self.now:
            raise ValueError(f"time went back: {now} < {self.now}")
        self.now = now
        if not self.hp.index and not self.spot.index:
            return PassResult(self.passes, now, tuple(self._stop_unrenewed(now)) if self._released else ())
        self.passes += 1
        ledger = self.ledger
        self._update_reservation(now)
        budget = self.eviction_budget(now)
        if budget != self._budget:  # the cap's window slid or changed: retry the memos
            self._budget = budget
            self.version += 1
        # Only HP preempts: without HP queued the pass needs no tenant budgets (cheaper passes).
        budgeted = self.tenant_evictions.budgets and self.hp.index
        tenant_left = self.tenant_evictions.left(now) if budgeted else None
        ctx = CycleContext(
            now=now,
            preemption_enabled=preemption_enabled,
            quota_enabled=quota_enabled,
            quota=self.quota,
            preemption=PreemptionContext(
                now=now,
                failed_periods=ledger.failed_total,
                succeeded_periods=ledger.succeeded_total,
                t_win_s=self.settings.t_win_s,
                cost_weight=self.settings.cost_weight,
                tenant_left=tenant_left,
            ),
            version=self.version,
            eviction_budget=budget,
            reservation=self.reservation,
        )
        outcome = schedule_pool(self.state, self.hp, self.spot, self.policy, ctx)
        outcomes: list[Outcome] = []
        for d in outcome.decisions:
            if isinstance(d, EvictTask):
                outcomes.append(self._evict(d, now))
            else:
                outcomes.append(self._start(d, now))
        for cls, bucket, memo in outcome.blocked:
            queue = self.hp if cls is TaskClass.HP else self.spot
            if memo.head in queue:
                queue.blocked[bucket] = memo
        self._skipped = outcome.skipped
        self._skipped_pass = self.passes
        if self._released:
            outcomes.extend(self._stop_unrenewed(now))
        return PassResult(self.passes, now, tuple(outcomes))

    def _start(self, d: StartTask, now: float) -> Started:
        tid = d.task_id
        if self._released:
            before = self._released.pop(tid, None)
            if before is not None:  # lease renewed: same run, possibly other GPUs
                self._queue(before.spec.task_class).remove(tid)
                self.state.add_task(RunningTask(before.spec, before.start_s, d.placements))
                devices = self.devices.assign(tid, d.placements) if self._track_devices else ()
                return Started(tid, d.placements, devices, False, renewed=True)
        queue = self.hp if self.tasks[tid].task_class is TaskClass.HP else self.spot
        if queue is self.hp:
            self._hp_waits.note(now, now - queue.entered_s[tid])
        spec = queue.remove(tid)
        self.state.add_task(RunningTask(spec, now, d.placements))
        if self.reservation is not None and self.reservation.task_id == tid:
            self.reservation = None  # its nodes are open to everyone again
            self.version += 1
        if d.plans:
            self._preemptions[tid] = (now, d.plans)
            for plan in d.plans:  # each victim remembers the plan that chose it (explanations)
                for victim in plan.victims:
                    at, node, reason, preemptor, _ = self._evicted[victim]
                    self._evicted[victim] = (at, node, reason, preemptor, plan)
        devices = self.devices.assign(tid, d.placements) if self._track_devices else ()
        return Started(tid, d.placements, devices, d.preempted)

    def _evict(self, d: EvictTask, now: float) -> Stopped:
        stop = self._stop(d.task_id, now, d.node, d.reason, d.preemptor, void_partial=False, requeue=True)
        self.tenant_evictions.evicted(self.tasks[d.task_id].tenant, now)
        if self.policy.use_eviction_scores:
            self.evictions.record(now, d.node)
        times = self._evicted_times
        times.append(now)
        while times[0] <= now - DAY_S:
            times.popleft()
        self.version += 1
        return stop

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
        groups = (
            (specs[tid] for _, tid in entries if tid != holder) for _, entries in self.hp.buckets()
        )
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

    def _stop(
        self,
        tid: TaskId,
        now: float,
        node: int,
        reason: EvictionReason,
        preemptor: TaskId | None,
        *,
        void_partial: bool,
        requeue: bool,
    ) -> Stopped:
        """Take a running task off its GPUs: completed periods are successes; the interrupted one
        is a failure unless `void_partial`."""
        running = self.state.remove_task(tid)
        if self._track_devices:
            self.devices.release(tid)
        stop = self._end_run(running, now, node, reason, preemptor, fails=not void_partial, inside_only=False)
        if requeue:
            self._queue(running.spec.task_class).push(running.spec, now)
        return stop

    def _end_run(
        self,
        running: RunningTask,
        now: float,
        node: int,
        reason: EvictionReason,
        preemptor: TaskId | None,
        *,
        fails: bool,
        inside_only: bool,
    ) -> Stopped:
        """The guarantee accounting of a run that stops (spec 4.2): its completed periods are
        successes; the interrupted one fails if `fails` (and, with `inside_only`, only when the
        stop really falls inside a period, as for a lease not renewed)."""
        tid, spec = running.spec.task_id, running.spec
        run_s = now - running.start_s
        logged, failed = 0, False
        if spec.task_class is TaskClass.SPOT:
            done = successes_before_eviction(run_s)
            logged = self.ledger.success(now, done - self._logged.pop(tid, 0))
            if fails and (not inside_only or run_s - done * GUARANTEE_PERIOD_S > _EPS):
                self.ledger.failure(now)
                failed = True
            self.tenant_evictions.periods(spec.tenant, logged, failed)
        self._evicted[tid] = (now, node, reason, preemptor, None)
        return Stopped(tid, spec.task_class, node, reason, preemptor, run_s, logged, failed)

    def _forget(self, tid: TaskId) -> None:
        """The task is done with this pool (finished or cancelled)."""
        del self.tasks[tid]
        if self._preemptions:
            self._preemptions.pop(tid, None)
        if self._evicted:
            self._evicted.pop(tid, None)

    def invalidate(self) -> None:
        """A new capacity version: the next pass retries every queue memo (the driver calls it when
        what a pass may do changes, e.g. preemption or the quota switched on or off)."""
        self.version += 1

    # ----- nodes ----------------------------------------------------------------------------------
    def node_down(self, node: int, now: float) -> list[Stopped]:
        """Stop every task with a worker on `node` and take the node out of service (module doc)."""
        self._at(now)
        if not self.state.is_online(node):
            return []
        hit = sorted(
            tid for tid, r in self.state.running.items() if any(p.node == node for p in r.placements)
        )
        stops = [
            self._stop(tid, now, node, EvictionReason.NODE_DOWN, None, void_partial=True, requeue=True)
            for tid in hit
        ]
        self.state.set_online(node, False)
        self.version += 1
        return stops

    def add_node(self, name: str, gpus: int, now: float) -> int:
        """A node that joins the pool (idle, online): its index. Shapes once rejected may fit now."""
        self._at(now)
        index = self.state.add_node(name, gpus)
        self.devices.add_node(gpus)
        self.feasibility = PoolFeasibility(tuple(int(g) for g in self.state.node_cap))
        self._verdicts.clear()
        self.version += 1
        return index

    def node_up(self, node: int, now: float) -> bool:
        self._at(now)
        if self.state.is_online(node):
            return False
        self.state.set_online(node, True)
        self.version += 1
        return True

    # ----- leases (lease-based policies: Chronus) --------------------------------------------------
    def release_leases(self, now: float, keep: frozenset[TaskId] = frozenset()) -> list[TaskId]:
        """Every running task except `keep` gives its GPUs back and is queued again; the next
        `schedule` renews the lease of those it places (same run) and stops the rest (work since
        the last checkpoint is the driver's to charge; a spot task stopped inside a guarantee period
        logs a failed period). `keep`: tasks finishing at this instant."""
        self._at(now)
        released = []
        for running in self.state.release_all(keep=keep):
            tid = running.spec.task_id
            if self._track_devices:
                self.devices.release(tid)
            self._released[tid] = running
            self._queue(running.spec.task_class).push(running.spec, now)
            released.append(tid)
        self.version += 1
        return released

    def _stop_unrenewed(self, now: float) -> list[Outcome]:
        if not self._released:
            return []
        out: list[Outcome] = []
        for tid, running in list(self._released.items()):
            del self._released[tid]
            reason = EvictionReason.LEASE_NOT_RENEWED
            out.append(self._end_run(running, now, -1, reason, None, fails=True, inside_only=True))
        return out

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

    # ----- explanations ---------------------------------------------------------------------------
    def explain(self, task_id: TaskId) -> Explanation:
        if task_id in self.state.running:
            state = "running"
        elif task_id in self.tasks:
            state = "queued"
        else:
            state = "unknown"
        queued = self._queue_status(task_id) if state == "queued" else None
        preemptions: tuple[PreemptionRecord, ...] = ()
        if task_id in self._preemptions:
            at, plans = self._preemptions[task_id]
            preemptions = tuple(self._record(at, task_id, p) for p in plans)
        last = None
        if task_id in self._evicted:
            at, node, reason, preemptor, plan = self._evicted[task_id]
            record = None if plan is None or preemptor is None else self._record(at, preemptor, plan)
            name = self.state.node_names[node] if node >= 0 else "(pool)"
            last = EvictionRecord(at, task_id, name, reason, preemptor, record)
        return Explanation(task_id, state, queued, preemptions, last)

    def _candidate(self, p: PreemptionPlan) -> CandidateNode:
        rate, lost = p.terms if p.terms is not None else (None, None)
        return CandidateNode(self.state.node_names[p.node], p.victims, p.cost, rate, lost, p.slot)

    def _record(self, at: float, preemptor: TaskId, p: PreemptionPlan) -> PreemptionRecord:
        losers = tuple(self._candidate(a) for a in p.alternatives)
        return PreemptionRecord(at, preemptor, self._candidate(p), losers, p.considered)

    def _queue_status(self, task_id: TaskId) -> QueueStatus:
        cls = self.tasks[task_id].task_class
        queue = self._queue(cls)
        bucket = queue.bucket_of(task_id)
        memo = queue.blocked.get(bucket)
        if memo is not None and memo.head in queue:
            if memo.head == task_id:
                return QueueStatus(memo.reason, None, self._skipped_pass)
            if _behind(queue, bucket, memo.head, task_id):
                return QueueStatus(Unschedulable.HEAD_OF_LINE, memo.head, self._skipped_pass)
        if (cls, bucket) in self._skipped:
            return QueueStatus(Unschedulable.THRESHOLD, None, self._skipped_pass)
        return QueueStatus(Unschedulable.NOT_YET_CONSIDERED, None, self._skipped_pass)

    # ----- views ------------------------------------------------------------------------------------
    def spot_head_reason(self) -> Unschedulable | None:
        """Why the spot queue's head did not start in the last pass (None: no spot task waits)."""
        head = self.spot.head()
        return None if head is None else self._queue_status(head).reason

    def run_start(self, task_id: TaskId) -> float | None:
        """When the task's current run started (a lease renewal keeps it), None if not running."""
        running = self.state.running.get(task_id) or self._released.get(task_id)
        return None if running is None else running.start_s

    def queued_ids(self) -> list[TaskId]:
        return self.hp.task_ids() + self.spot.task_ids()


def _behind(queue: BucketQueue, bucket: tuple[float, ...], head: TaskId, task_id: TaskId) -> bool:
    """Is `task_id` after `head` in its bucket's order?"""
    for _, tid in next(entries for b, entries in queue.buckets() if b == bucket):
        if tid == head:
            return True
        if tid == task_id:
            return False
    return False

"""`PoolRuntime`: one pool at run time, composed of the collaborators beside it in this package
(the package's docstring has the rules the drivers rely on)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from gfs.services.core.cycle import CycleContext, schedule_pool
from gfs.services.core.decisions import EvictTask, StartTask
from gfs.services.core.devices import DeviceAllocator
from gfs.services.core.eviction_log import EvictionLog
from gfs.services.core.explain import Explanation
from gfs.services.core.feasibility import PoolFeasibility
from gfs.services.core.guarantee import GUARANTEE_PERIOD_S
from gfs.services.core.guarantee_ledger import GuaranteeLedger
from gfs.services.core.ids import TaskId, TenantId
from gfs.services.core.outcomes import Finished, Outcome, PassResult, RuntimeSettings, Started, Stopped
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.pool import PoolState, RunningTask
from gfs.services.core.queues import BucketQueue
from gfs.services.core.quota import QuotaInputs
from gfs.services.core.reasons import EvictionReason, Rejection, Unschedulable
from gfs.services.core.reservation import Reservation
from gfs.services.core.runtime.eviction_cap import EvictionCap
from gfs.services.core.runtime.guarantee_book import GuaranteeBook
from gfs.services.core.runtime.quota_keeper import QuotaKeeper
from gfs.services.core.runtime.reservations import ReservationKeeper
from gfs.services.core.runtime.run_records import RunRecords
from gfs.services.core.runtime.servable_view import ServableView
from gfs.services.core.runtime.stops import RunStops
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.core.tenant_budget import TenantEvictions
from gfs.services.core.victims import PreemptionContext

__all__ = ["Finished", "Outcome", "PassResult", "PoolRuntime", "RuntimeSettings", "Started", "Stopped"]


class PoolRuntime:
    def __init__(
        self, state: PoolState, policy: SchedulingPolicy, settings: RuntimeSettings | None = None
    ) -> None:
        settings = settings or RuntimeSettings()
        self.state = state
        self.policy = policy
        self.settings = settings
        self.hp = BucketQueue(policy.hp_order)
        self.spot = BucketQueue(policy.spot_order)
        self.version = 0
        self.now = -math.inf
        self.passes = 0
        self.tasks: dict[TaskId, TaskSpec] = {}  # every task queued or running here
        qs = policy.quota.settings
        self.ledger = GuaranteeLedger(qs.feedback_window_s)
        self.evictions = EvictionLog()  # spec 5.5's node scores
        self.tenant_evictions = TenantEvictions()  # per-tenant eviction budgets and their usage
        self.devices = DeviceAllocator(tuple(int(g) for g in state.node_cap))
        self._track_devices = settings.device_indices
        self.feasibility = PoolFeasibility(tuple(int(g) for g in state.node_cap))
        # Debug switch: False finds the reservation's holder by scanning the whole HP queue, as
        # before issue 23, instead of reading its gang list; decisions are the same either way
        # (tests/property/test_incremental_pass.py), only the cost differs (`gfs bench pass`).
        self.indexed = True
        # The collaborators (this package), each owning its own state.
        self.periods = GuaranteeBook(self.ledger, self.tenant_evictions)
        self.records = RunRecords()
        self.reservations = ReservationKeeper()
        self.cap = EvictionCap()
        self.quota_keeper = QuotaKeeper(state.capacity, qs.max_guarantee_hours)
        self.servable = ServableView()
        self.stops = RunStops(
            state, self._queue, self.devices if self._track_devices else None, self.periods, self.records
        )

    # ----- what the collaborators hold, as the drivers read it ---------------------------------------
    @property
    def reservation(self) -> Reservation | None:
        return self.reservations.current

    @property
    def quota(self) -> dict[int, float]:
        return self.quota_keeper.quota

    @property
    def eta(self) -> float:
        return self.quota_keeper.eta

    @property
    def last_quota_inputs(self) -> QuotaInputs | None:
        return self.quota_keeper.last_inputs

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
        return self.feasibility.check(spec.gpus_per_worker, spec.workers)

    def submit(self, spec: TaskSpec, now: float) -> Rejection | None:
        """Queue a task, or return why it is rejected (nothing changes then). A task id already
        known (queued or running) raises: the driver deduplicates events before this."""
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
        self._queue(spec.task_class).push(spec, now)
        return None

    def cancel(self, task_id: TaskId, now: float) -> Stopped | None:
        """Withdraw a task: out of its queue, or stopped if running. Returns the stop (None if it
        was queued); unknown ids raise KeyError."""
        self._at(now)
        spec = self.tasks[task_id]
        queue = self._queue(spec.task_class)
        if task_id in queue:
            queue.remove(task_id)
            if self.stops.released.pop(task_id, None) is not None:
                self.periods.forget(task_id)
            del self.tasks[task_id]
            self.records.forget(task_id)
            return None
        running = self.state.running.get(task_id)
        if running is not None:
            self.servable.releases.note(now, running)
        stop = self._stop(task_id, now, -1, EvictionReason.CANCELLED, None, void_partial=True, requeue=False)
        del self.tasks[task_id]
        self.records.forget(task_id)
        self.version += 1
        return stop

    # ----- finishes and guarantee periods -----------------------------------------------------------
    def finish(self, task_id: TaskId, now: float) -> Finished:
        if now < self.now:
            self._at(now)
        self.now = now
        running = self.state.remove_task(task_id)
        self.servable.releases.note(now, running)
        if self._track_devices:
            self.devices.release(task_id)
        run_s = now - running.start_s
        logged = self.periods.finished(running.spec, run_s, now)
        del self.tasks[task_id]
        self.records.forget(task_id)
        self.version += 1
        return Finished(task_id, run_s, logged)

    def period_tick(self, task_id: TaskId, now: float) -> bool:
        """One guarantee period of a running spot task closed without eviction: one success.
        False (nothing logged) if the task no longer runs."""
        if now < self.now:
            self._at(now)
        self.now = now
        running = self.state.running.get(task_id) or self.stops.released.get(task_id)
        if running is None or running.spec.task_class is not TaskClass.SPOT:
            return False
        self.periods.tick(running.spec, now)
        return True

    def stop_was_finish(self, at: float | None, *, cut_short: bool) -> bool:
        """A stop decided at `at` (None: it logged no failure) met a run that had finished on its
        own (docs/attempts.md): its failed period is withdrawn (eta's feedback and F_v, spec 5.2,
        count no eviction that evicted nothing), the period it cut short is a success, as any
        finished run's last one. False if no failure was logged at `at`."""
        self.ledger.success(self.now, 1 if cut_short else 0)
        return at is not None and self.ledger.retract_failure(at)

    def next_period_end(self, task_id: TaskId) -> float | None:
        """When the running task's next guarantee period closes (spot only)."""
        start = self.run_start(task_id)
        if start is None:
            return None
        return start + (self.periods.logged(task_id) + 1) * GUARANTEE_PERIOD_S

    # ----- scheduling ---------------------------------------------------------------------------
    def schedule(
        self, now: float, *, preemption_enabled: bool = True, quota_enabled: bool = True
    ) -> PassResult:
        """One scheduling pass with its decisions applied (a pool with empty queues is not passed)."""
        if now < self.now:
            raise ValueError(f"time went back: {now} < {self.now}")
        self.now = now
        if not self.hp.index and not self.spot.index:
            return PassResult(
                self.passes, now, tuple(self.stops.stop_unrenewed(now)) if self.stops.released else ()
            )
        self.passes += 1
        ledger = self.ledger
        if self.reservations.update(
            now, self.state, self.hp, self.policy.reserve_after_s, indexed=self.indexed
        ):
            self.version += 1
        budget = self.cap.budget(now)
        if self.cap.take(budget):  # the cap's window slid or changed: retry the memos
            self.version += 1
        # Only HP preempts: without HP queued the pass needs no tenant budgets (cheaper passes).
        budgeted = self.tenant_evictions.budgets and self.hp.index
        tenant_left = self.tenant_evictions.left(now) if budgeted else None
        preemption = PreemptionContext(
            now, ledger.failed_total, ledger.succeeded_total, self.settings.t_win_s,
            self.settings.cost_weight, tenant_left=tenant_left,
        )  # fmt: skip
        ctx = CycleContext(
            now, preemption_enabled, quota_enabled, self.quota, preemption, self.version,
            eviction_budget=budget, reservation=self.reservation, freed=self.servable.freed(now),
            servable=self.servable.plan_before(self.state, self.hp, self.reservation),
        )  # fmt: skip
        outcome = schedule_pool(self.state, self.hp, self.spot, self.policy, ctx)
        outcomes: list[Outcome] = []
        for d in outcome.decisions:
            if isinstance(d, EvictTask):
                outcomes.append(self._evict(d, now))
            else:
                outcomes.append(self._start(d, now))
        for cls, bucket, memo in outcome.blocked:
            queue = self._queue(cls)
            if memo.head in queue:
                queue.blocked[bucket] = memo
        self.records.passed(outcome.skipped, self.passes)
        if self.stops.released:
            outcomes.extend(self.stops.stop_unrenewed(now))
        return PassResult(self.passes, now, tuple(outcomes))

    def _start(self, d: StartTask, now: float) -> Started:
        tid = d.task_id
        if self.stops.released:
            before = self.stops.released.pop(tid, None)
            if before is not None:  # lease renewed: same run, possibly other GPUs
                self._queue(before.spec.task_class).remove(tid)
                self.state.add_task(RunningTask(before.spec, before.start_s, d.placements))
                devices = self.devices.assign(tid, d.placements) if self._track_devices else ()
                return Started(tid, d.placements, devices, False, renewed=True)
        queue = self._queue(self.tasks[tid].task_class)
        wait_s = now - queue.entered_s[tid]
        spec = queue.remove(tid)
        self.state.add_task(RunningTask(spec, now, d.placements))
        if queue is self.hp and self.reservations.hp_started(tid, now, wait_s):
            self.version += 1  # the holder started: its nodes are open to everyone again
        if d.plans:
            self.records.preempted(tid, now, d.plans)
        devices = self.devices.assign(tid, d.placements) if self._track_devices else ()
        return Started(tid, d.placements, devices, d.preempted)

    def _evict(self, d: EvictTask, now: float) -> Stopped:
        stop = self._stop(d.task_id, now, d.node, d.reason, d.preemptor, void_partial=False, requeue=True)
        self.tenant_evictions.evicted(self.tasks[d.task_id].tenant, now)
        if self.policy.use_eviction_scores:
            self.evictions.record(now, d.node)
        self.cap.evicted(now)
        self.version += 1
        return stop

    def _stop(
        self, tid: TaskId, now: float, node: int, reason: EvictionReason, preemptor: TaskId | None,
        *, void_partial: bool, requeue: bool,
    ) -> Stopped:  # fmt: skip
        return self.stops.stop(tid, now, node, reason, preemptor, void_partial=void_partial, requeue=requeue)

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
        stops = self.stops.stop_node(node, now)
        self.version += 1
        return stops

    def add_node(self, name: str, gpus: int, now: float) -> int:
        """A node that joins the pool (idle, online): its index. Shapes once rejected may fit now."""
        self._at(now)
        index = self.state.add_node(name, gpus)
        self.devices.add_node(gpus)
        self.feasibility = PoolFeasibility(tuple(int(g) for g in self.state.node_cap))
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
        released = self.stops.release_leases(now, keep)
        self.version += 1
        return released

    # ----- the eviction cap (tenant budgets: `tenant_evictions`) -----------------------------------
    def set_eviction_cap(self, max_evictions: int | None, interval_s: float = 3600.0) -> None:
        """At most `max_evictions` preemption evictions in any `interval_s` (at most a day); None
        lifts the cap. Evictions before the call count."""
        self.cap.set(max_evictions, interval_s)
        self.version += 1

    # ----- the quota and the eviction scores ----------------------------------------------------------
    def quota_inputs(self, now: float, hp_quantile: np.ndarray | None) -> QuotaInputs:
        """What the quota policy needs at `now` (quota_keeper.py)."""
        if now < self.now:
            self._at(now)
        self.now = now
        placeable = self.hp_placeable() if self.policy.quota.settings.placeable_floor else None
        return self.quota_keeper.inputs(
            now, self.state, self.ledger, self.spot, hp_quantile=hp_quantile, hp_observed=self.hp_observed,
            hp_placeable=placeable,
        )  # fmt: skip

    @property
    def hp_observed(self) -> float:
        """HP GPUs running plus queued here (g x w): the observed demand, lease-released included."""
        return self.state.hp_in_use + self.hp.gpus

    def update_quota(self, quota: Mapping[int, float], eta: float) -> bool:
        """Put a quota in force; True if it changed (a new capacity version)."""
        changed = self.quota_keeper.update(quota, eta)
        if changed:
            self.version += 1
        return changed

    def refresh_quota(self, now: float, hp_quantile: np.ndarray | None) -> bool:
        """The policy's quota from `quota_inputs`, put in force; then the eviction scores. True if
        the quota changed."""
        inputs = self.quota_inputs(now, hp_quantile)
        changed = self.quota_keeper.refresh(self.policy.quota, inputs, hp_quantile, self.ledger.failed_total)
        if changed:
            self.version += 1
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

    # ----- the servable demand (core/servable.py) and work conservation ---------------------------------
    def servable_levels(self) -> dict[TenantId, float]:
        """The servable HP demand per tenant now: the forecast's target series."""
        return self.servable.levels(self.state, self.hp, self.reservation, self.now)

    def hp_placeable(self) -> float:
        """The quota's floor (servable_view.py)."""
        growth = self.policy.quota.settings.protect_reservation_growth
        return self.servable.floor(self.state, self.hp, self.reservation, self.now, growth=growth)

    def idle_while_work_fits(self, *, quota_enabled: bool = True) -> dict[str, float]:
        """GPUs idle now while queued work would fit on them, per reason (core/work_conservation.py)."""
        return self.servable.idle_fit(
            self.state, self.hp, self.spot, self.reservation, self.now,
            claims=self.policy.spot_claims != "off", quota=self.quota if quota_enabled else None,
            basis=self.quota_keeper.basis,
        )  # fmt: skip

    # ----- views --------------------------------------------------------------------------------------
    def explain(self, task_id: TaskId) -> Explanation:
        return self.records.explain(task_id, self.state, self.tasks, self._queue)

    def spot_head_reason(self) -> Unschedulable | None:
        """Why the spot queue's head did not start in the last pass (None: no spot task waits)."""
        head = self.spot.head()
        return None if head is None else self.records.queue_status(head, self.tasks, self._queue).reason

    def run_start(self, task_id: TaskId) -> float | None:
        """When the task's current run started (a lease renewal keeps it), None if not running."""
        running = self.state.running.get(task_id) or self.stops.released.get(task_id)
        return None if running is None else running.start_s

    def queued_ids(self) -> list[TaskId]:
        return self.hp.task_ids() + self.spot.task_ids()

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

from services.core.cycle import CycleContext, schedule_pool
from services.core.decisions import EvictTask, StartTask
from services.core.eviction_log import DAY_S
from services.core.guarantee import GUARANTEE_PERIOD_S, successes_on_finish
from services.core.ids import TaskId
from services.core.outcomes import Finished, Outcome, PassResult, RuntimeSettings, Started, Stopped
from services.core.pool import RunningTask
from services.core.reasons import EvictionReason, Rejection
from services.core.runtime_stops import Stopping
from services.core.task import TaskClass, TaskSpec
from services.core.victims import PreemptionContext

__all__ = ["Finished", "Outcome", "PassResult", "PoolRuntime", "RuntimeSettings", "Started", "Stopped"]


class PoolRuntime(Stopping):
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
        running = self.state.running.get(task_id)
        if running is not None:
            self.hp_releases.note(now, running)
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
        self.hp_releases.note(now, running)
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
            freed=self.hp_releases.chunks(now),
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

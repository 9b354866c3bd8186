"""The state of a `PoolRuntime` (runtime.py), its clock and its queues: the first of the layers the
runtime is built from (base, explanations, limits, stops, then the runtime's own events and pass)."""

from __future__ import annotations

import math
from collections import deque

from services.core.devices import DeviceAllocator
from services.core.eviction_log import DAY_S, EvictionLog
from services.core.feasibility import PoolFeasibility
from services.core.guarantee import GUARANTEE_PERIOD_S
from services.core.guarantee_ledger import GuaranteeLedger
from services.core.ids import TaskId
from services.core.outcomes import RuntimeSettings
from services.core.policies.protocols import SchedulingPolicy
from services.core.pool import PoolState, RunningTask
from services.core.queues import BucketQueue
from services.core.quota import QuotaInputs
from services.core.reasons import EvictionReason, Rejection
from services.core.reservation import RecentWaits, Reservation
from services.core.servable import HpReleases, ServablePlan
from services.core.task import TaskClass, TaskSpec
from services.core.tenant_budget import TenantEvictions
from services.core.victims import PreemptionPlan
from services.core.work_conservation import QuotaBasis


class RuntimeBase:
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
        # What HP finishes freed in the last guarantee period: the servable demand's soon-freed
        # estimate (core/servable.py).
        self.hp_releases = HpReleases(GUARANTEE_PERIOD_S)
        self.last_quota_inputs: QuotaInputs | None = None  # what the last `refresh_quota` saw
        # What the quota in force was computed from (names what held spot back: work_conservation.py)
        self.quota_basis = QuotaBasis()
        self._failed_at_refresh = 0  # failed periods logged by the last `refresh_quota` (eta's new ones)
        # Memos of derived views, keyed on the counters of what they read (runtime_limits.py).
        self._plan_memo: tuple[tuple[object, ...], ServablePlan] | None = None
        self._idle_fit_memo: tuple[tuple[object, ...], dict[str, float]] | None = None
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

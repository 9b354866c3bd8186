"""The guarantee accounting of a pool's spot runs (spec 4.2): how many periods of each running
task were already logged, and what a tick, a finish or a stop adds to the pool's ledger and to its
tenants' eviction budgets."""

from __future__ import annotations

from gfs.services.core.guarantee import GUARANTEE_PERIOD_S, successes_before_eviction, successes_on_finish
from gfs.services.core.guarantee_ledger import GuaranteeLedger
from gfs.services.core.ids import TaskId
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.core.tenant_budget import TenantEvictions

_EPS = 1e-9


class GuaranteeBook:
    """Owns the periods already logged per running task (absent = 0: most tasks never tick); logs
    into the pool's ledger and tenant budgets it is given."""

    __slots__ = ("_logged", "ledger", "tenants")

    def __init__(self, ledger: GuaranteeLedger, tenants: TenantEvictions) -> None:
        self.ledger = ledger
        self.tenants = tenants
        self._logged: dict[TaskId, int] = {}

    def logged(self, task_id: TaskId) -> int:
        return self._logged.get(task_id, 0)

    def forget(self, task_id: TaskId) -> None:
        self._logged.pop(task_id, None)

    def tick(self, spec: TaskSpec, now: float) -> None:
        """One period of a running spot task closed without eviction: one success."""
        self.ledger.success(now, 1)
        self.tenants.periods(spec.tenant, 1, failed=False)
        self._logged[spec.task_id] = self._logged.get(spec.task_id, 0) + 1

    def finished(self, spec: TaskSpec, run_s: float, now: float) -> int:
        """A run finished its work: its periods not logged yet are successes (how many)."""
        if spec.task_class is not TaskClass.SPOT:
            return 0
        before = self._logged.pop(spec.task_id, 0) if self._logged else 0
        logged = self.ledger.success(now, successes_on_finish(run_s) - before)
        self.tenants.periods(spec.tenant, logged, failed=False)
        return logged

    def stopped(
        self, spec: TaskSpec, run_s: float, now: float, *, fails: bool, inside_only: bool
    ) -> tuple[int, bool]:
        """A run stopped: its completed periods are successes; the interrupted one fails if `fails`
        (and, with `inside_only`, only when the stop really falls inside a period, as for a lease
        not renewed). (successes logged, failed)."""
        if spec.task_class is not TaskClass.SPOT:
            return 0, False
        done = successes_before_eviction(run_s)
        logged = self.ledger.success(now, done - self._logged.pop(spec.task_id, 0))
        failed = False
        if fails and (not inside_only or run_s - done * GUARANTEE_PERIOD_S > _EPS):
            self.ledger.failure(now)
            failed = True
        self.tenants.periods(spec.tenant, logged, failed)
        return logged, failed

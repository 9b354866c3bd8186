"""Admission: a submission is accepted into the pool's task table, or rejected (a duplicate id, or
a request the pool cannot run); a cancel withdraws a queued task or stops a running one.

`Admission` owns `seen`: the task ids accepted or rejected here, until a window after their task
ended, so a redelivered or repeated submission is rejected as a duplicate (seen_tasks.py).
"""

from __future__ import annotations

import uuid

from gfs.schemas.tasks import (
    RejectionReason,
    TaskAccepted,
    TaskRejected,
    TaskSubmitted,
    TaskWithdrawn,
)
from gfs.schemas.tasks import TaskClass as WireClass
from gfs.services.core import reasons as core_reasons
from gfs.services.core.driver.pool_driver import PoolDriver
from gfs.services.core.feasibility import rejection_message
from gfs.services.core.ids import PoolId, TaskId, TenantId
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.preemption.controller.endings import Endings
from gfs.services.preemption.controller.quota import PoolQuota
from gfs.services.preemption.controller.seen_tasks import SeenTasks
from gfs.services.preemption.controller.settings import DEFAULT_CHECKPOINT_S, ControllerSettings
from gfs.services.preemption.controller.survival_quote import survival_on_accept
from gfs.services.preemption.controller.types import _REJECTIONS, Decision, Effects, _Task, utc


class Admission:
    """Owns `seen` (module doc). Adds accepted tasks to the pool's task table and removes withdrawn
    ones; a running task cancelled is stopped by the endings."""

    def __init__(
        self,
        pool: str,
        settings: ControllerSettings,
        driver: PoolDriver[uuid.UUID],
        tasks: dict[str, _Task],
        endings: Endings,
        quota: PoolQuota,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.driver = driver
        self.tasks = tasks
        self.endings = endings
        self.quota = quota  # the last SpotQuota received prices a spot task's survival quote
        self.seen = SeenTasks(settings.seen_window_s)

    def submit(self, task: TaskSubmitted, now: float, *, duplicate: bool = False) -> Effects:
        out = Effects()
        tid = task.task_id
        self.seen.expire(now, self.tasks, self.endings)  # at the entry's time: a replay forgets alike
        if duplicate or tid in self.seen:
            message = f"task id {tid} was already submitted; pick a new id"
            out.events.append(
                TaskRejected(task_id=tid, reason=RejectionReason.DUPLICATE_TASK_ID, message=message)
            )
            out.decisions.append(
                Decision(tid, "rejected", now, {"reason": "DUPLICATE_TASK_ID", "message": message})
            )
            return out
        self.seen.add(tid, now)
        cls = TaskClass.HP if task.task_class is WireClass.HP else TaskClass.SPOT
        spec = TaskSpec(
            task_id=TaskId(tid),
            tenant=TenantId(task.tenant),
            pool=PoolId(self.pool),
            task_class=cls,
            gpus_per_worker=task.gpus_per_worker,
            workers=task.workers,
            submit_s=now,
            duration_s=task.expected_duration_s or 0.0,
            guarantee_hours=task.guarantee_hours,
            checkpoint_interval_s=task.checkpoint_interval_s or DEFAULT_CHECKPOINT_S,
        )
        nodes = self.driver.nodes
        rejection = self.driver.submit(spec, now) if nodes else core_reasons.Rejection.UNKNOWN_POOL
        if rejection is not None:
            reason = _REJECTIONS[rejection]
            message = rejection_message(rejection, task.gpus_per_worker, task.workers, self.pool)
            out.events.append(TaskRejected(task_id=tid, reason=reason, message=message))
            out.decisions.append(Decision(tid, "rejected", now, {"reason": reason.value, "message": message}))
            return out
        self.tasks[tid] = _Task(task)
        # spot only (issue 27)
        survival = survival_on_accept(self.driver.runtime, spec, self.quota.last, now)
        out.events.append(
            TaskAccepted(task_id=tid, pool=self.pool, task_class=task.task_class, survival=survival)
        )
        quote = None if survival is None else survival.model_dump()  # the dashboard shows it
        detail = {"class": task.task_class.value, "survival": quote}
        out.decisions.append(Decision(tid, "accepted", now, detail))
        return out

    def cancel(self, task_id: str, tenant: str, reason: str, now: float) -> Effects:
        out = Effects()
        task = self.tasks.get(task_id)
        if task is None:
            out.decisions.append(
                Decision(task_id, "cancel_ignored", now, {"why": "not queued or running here"})
            )
            return out
        if task.submitted.tenant != tenant:
            why = f"tenant {tenant!r} does not own the task (owner {task.submitted.tenant!r})"
            out.decisions.append(Decision(task_id, "cancel_refused", now, {"why": why}))
            return out
        # Held binds are dropped by the endings' `stop`, which must see them to know nothing went out.
        stop = self.driver.cancel(TaskId(task_id), now)
        if stop is None:
            del self.tasks[task_id]
            self.endings.withdrawn(task_id)  # nothing to undo when its ending attempt ends
            out.events.append(
                TaskWithdrawn(task_id=task_id, pool=self.pool, withdrawn_at=utc(now), reason=reason)
            )
            out.decisions.append(Decision(task_id, "withdrawn", now, {"reason": reason}))
            return out
        out.extend(self.endings.stop(stop, now, grace_s=self.settings.grace_s))
        return out

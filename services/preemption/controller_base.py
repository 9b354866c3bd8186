"""The pool controller's state: the core's driver and runtime it steers, and the wire-side records it
keeps (tasks, the binds of held starts, issued binds and evictions, ending attempts, node reports,
controls), with
the few helpers every part uses (ids, the runtime's clock).

The base of the controller's parts (controller.py's module doc lists them), each a class over this
one; imports go one way, from `controller` down to here.
"""

from __future__ import annotations

import uuid

from schemas.commands import BindCommand
from schemas.quota import SpotQuota
from services.core.driver.held import Held
from services.core.driver.pool_driver import PoolDriver
from services.core.ids import PoolId, TaskId
from services.core.policies.registry import build_policy
from services.core.pool import PoolState
from services.core.runtime import PoolRuntime, RuntimeSettings
from services.preemption.controller_types import (
    ControllerSettings,
    Controls,
    _Bound,
    _Ending,
    _Eviction,
    _Task,
    command_id,
)
from services.preemption.reconcile import NodeReport, UnknownWork
from services.preemption.seen_tasks import SeenTasks


class ControllerBase:
    def __init__(self, pool: str, settings: ControllerSettings | None = None) -> None:
        self.pool = pool
        self.settings = settings or ControllerSettings()
        s = self.settings
        # The driver owns the runtime, the pass trigger (`dirty`), the guarantee-period timers and
        # the quota's expiry, the held starts and ending attempts with their deadlines (`held`);
        # the controller keeps the wire: ids, the binds it holds, acks, attempts.
        self.driver: PoolDriver[uuid.UUID] = PoolDriver(
            PoolRuntime(
                PoolState(PoolId(pool), (), ()),
                build_policy(s.policy),
                RuntimeSettings(t_win_s=s.t_win_s, cost_weight=s.cost_weight),
            )
        )
        self.runtime = self.driver.runtime
        # No spot task before the first quota (module doc).
        self.driver.hold_quota(dict.fromkeys(self.runtime.quota, 0.0), 1.0)
        self.nodes: dict[str, int] = self.driver.nodes  # the driver's: name -> runtime index
        self.down: set[str] = self.driver.down
        self.tasks: dict[str, _Task] = {}
        # task ids accepted or rejected here (duplicates), until a window after their task ended
        self.seen = SeenTasks(self.settings.seen_window_s)
        self.held_binds: dict[str, list[BindCommand]] = {}  # task -> the binds of its held start
        self.evictions: dict[uuid.UUID, _Eviction] = {}
        self.bound: dict[uuid.UUID, _Bound] = {}  # every bind issued (acks are checked against it)
        self.ending: dict[str, _Ending] = {}  # task -> its evicted attempt whose end is not known
        self.refused = 0  # acks refused (`refusal`)
        # Reconciliation (reconcile.py): each reporting node's last journaled report, the unknown
        # attempts seen there, and re-issued evictions -> the eviction they stand for.
        self.reports: dict[str, NodeReport] = {}
        self.unknown = UnknownWork(self.settings.unknown_after_s)
        self.aliases: dict[uuid.UUID, uuid.UUID] = {}
        self.quota_version = ""  # "<forecast_version>@<valid_from>" of the SpotQuota in force
        self.last_quota: SpotQuota | None = None  # the last SpotQuota received (in force or held)
        self.controls = Controls()
        self.counter = 0
        self.id_salt = ""  # set by the shell: "" derives the ids of journals written before salts
        self.decided = 0
        self.clock_sequence = -1  # the last controllable-clock tick applied (schemas/clock.py)

    @property
    def dirty(self) -> bool:
        """Something a pass could act on changed since the last pass (the driver's pass trigger:
        a task arrived, finished or was cancelled, the quota or the nodes changed). A PASS tick
        runs a pass only then, as the simulator does; wall-clock passes run on every batch."""
        return self.driver.dirty

    @property
    def pending(self) -> dict[TaskId, Held[uuid.UUID]]:
        """The held starts (task -> what it waits for and until when): the driver's."""
        return self.driver.held.held

    @property
    def quota_valid_until(self) -> float | None:
        return self.driver.quota_valid_until

    @property
    def quota_frozen(self) -> bool:
        return self.driver.quota_frozen

    def _id(self) -> uuid.UUID:
        self.counter += 1
        return command_id(self.pool, self.id_salt, self.counter)

    def _now(self, now: float) -> float:
        # The wall clock may step back a little (NTP); the runtime's time never does.
        return self.driver.at(now)

    def _drop_pending(self, task_id: str) -> None:
        self.driver.held.drop(TaskId(task_id))
        self.held_binds.pop(task_id, None)

"""The journal of one scheduling pass over a pool (core/pool.py): what to undo, and whether undoing
it gives back the very state the pass began on.

Why the second part: the pool's `mutations` count keys the memos of its derived views (the
servable plan, the idle-fit walk; core/runtime/servable_view.py). A pass changes the pool only
tentatively and rolls back, so the state after it is the state before it; counting its changes as
mutations threw every memo away after every pass, and the simulator recomputed those views on
every event (issue 37). A rolled-back pass that only added tasks gives back the state exactly,
dict order included, so the pool takes back its count from before the pass. One that removed a
task that ran before it (a tentative eviction) re-adds it at the end of the pool's dicts: the
same allocation in another order, so that pass keeps its count moving. (The float counters, HP
GPUs per tenant and in use, may come back from an add and its undo off by a last bit; the memos
kept are those of the values before the pass, the exact ones.)
"""

from __future__ import annotations

from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import numpy as np

from gfs.services.core.ids import TaskId, TenantId

Task = TypeVar("Task")  # the pool's running task (core/pool.py's RunningTask)


class Hold(NamedTuple):
    """Idle whole GPUs held for HP inside a pass (core/placeholders.py): `gpus[i]` on `nodes[i]`
    (distinct nodes), `total` in all, counted as HP of `tenant` while held."""

    name: str
    tenant: TenantId
    nodes: np.ndarray
    gpus: np.ndarray
    total: float


class Undoable(Protocol):
    """What a journal's changes are taken back on (core/pool.py's PoolState)."""

    def undo(self, op: str, item: Any) -> None: ...


class PassJournal(Generic[Task]):
    __slots__ = ("added", "begun_at", "ops", "order_kept")

    def __init__(self, begun_at: int) -> None:
        self.begun_at = begun_at  # the pool's `mutations` when the pass began
        # ("add" | "remove", task) and ("hold" | "unhold", hold), in order
        self.ops: list[tuple[str, Task | Hold]] = []
        self.added: set[TaskId] = set()  # tasks the pass added (removing them again keeps order)
        self.order_kept = True  # False once the pass removed a task that ran before it

    def added_task(self, task_id: TaskId, task: Task) -> None:
        self.ops.append(("add", task))
        self.added.add(task_id)

    def removed_task(self, task_id: TaskId, task: Task) -> None:
        self.ops.append(("remove", task))
        if task_id not in self.added:
            self.order_kept = False

    def held(self, hold: Hold) -> None:
        """Holds exist only inside a pass: taking them back never reorders anything."""
        self.ops.append(("hold", hold))

    def unheld(self, hold: Hold) -> None:
        self.ops.append(("unhold", hold))

    def undo(self, target: Undoable, mark: int = 0) -> None:
        """Take back the changes after the first `mark`, newest first."""
        ops = self.ops
        while len(ops) > mark:
            target.undo(*ops.pop())

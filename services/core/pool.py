"""One GPU pool (one GPU model): per-node numpy arrays plus the running tasks.

Why arrays: best-fit scoring and victim-candidate filtering are vectorised over all nodes of a
pool (the A10 pool has 2,494 one-GPU nodes), so the hot path has no per-node Python loop.

GPU classes (spec 5.1): a GPU is HP if it holds any HP allocation, else SPOT if non-empty, else
free. Whole-GPU workers are counted per node; GPUs shared by fractional workers are tracked per
GPU (`slot` = pool-wide GPU index, node_offset[node] + i) with their HP and spot fractions.

Mutation contract: `add_task` / `remove_task` are the only state changes; with `journal=True`
they are recorded so `rollback()` restores the exact previous state. A scheduling pass decides
on a journaled state and rolls back, so deciding never changes the caller's state.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from gfs.services.core.decisions import WorkerPlacement
from gfs.services.core.fit_keys import FitKeys
from gfs.services.core.ids import PoolId, TaskId, TenantId
from gfs.services.core.pool_journal import Hold, PassJournal
from gfs.services.core.task import TaskClass, TaskSpec

_EPS = 1e-9


class RunningTask(NamedTuple):
    spec: TaskSpec
    start_s: float
    placements: tuple[WorkerPlacement, ...]


class PoolState:
    """Mutable allocation state of one pool. Time never enters here."""

    def __init__(self, pool: PoolId, node_names: tuple[str, ...], node_gpus: tuple[int, ...]) -> None:
        self.pool = pool
        self.node_names = node_names
        n = len(node_gpus)
        self.node_cap = np.asarray(node_gpus, dtype=np.int64)
        self.capacity = int(self.node_cap.sum())
        self.node_offset = np.concatenate(([0], np.cumsum(self.node_cap)[:-1])).astype(np.int64)
        self.node_index = np.arange(n, dtype=np.int64)
        self.fit = FitKeys(n)  # the eviction scores and the best-fit keys (fit_keys.py)
        self.gpu_node = np.repeat(self.node_index, self.node_cap)
        # Whole-GPU spot holdings per node (victim selection needs them): task -> GPUs there.
        self.spot_whole: list[dict[TaskId, int]] = [{} for _ in range(n)]
        self.spot_gpus = np.zeros(n, dtype=np.int64)
        # GPUs per node that can be used at all: node_cap, or 0 while the node is down. A down node
        # has no free GPUs and nothing preemptible, so neither placement nor preemption picks it.
        self.online_cap = self.node_cap.copy()
        self.online_capacity = self.capacity  # GPUs on nodes that are up (`capacity`: installed)
        # Moved by every change of what runs where or of the nodes, and given back by a rollback
        # that restores the exact state (pool_journal.py): derived views are memoised on it.
        self.mutations = 0
        self._stamps = 0  # the last `mutations` value given out (a rollback may take one back)
        self._empty()
        self._journal: PassJournal[RunningTask] | None = None

    def _empty(self) -> None:
        """Every GPU free, no task running."""
        n = len(self.node_cap)
        for node in np.flatnonzero(self.spot_gpus):  # a node with spot holdings has spot GPUs
            self.spot_whole[node].clear()
        self.free = self.online_cap.copy()
        self.hp_gpus = np.zeros(n, dtype=np.int64)
        self.spot_gpus = np.zeros(n, dtype=np.int64)
        self.fit.forget_keys()
        # Per-GPU state for shared (fractional) GPUs.
        self.gpu_shared = np.zeros(self.capacity, dtype=bool)
        self.gpu_hp = np.zeros(self.capacity, dtype=np.float64)
        self.gpu_spot = np.zeros(self.capacity, dtype=np.float64)
        self.shared_on_node = np.zeros(n, dtype=np.int64)
        self.slot_tasks: dict[int, dict[TaskId, float]] = {}
        self.running: dict[TaskId, RunningTask] = {}
        self.spot_in_use = 0.0  # S_v: GPUs held by running spot tasks (g x w)
        self.hp_in_use = 0.0
        # HP GPUs running per tenant (g x w): the running part of the servable demand series
        # (core/servable.py). A tenant whose last HP task left has no entry.
        self.hp_by_tenant: dict[TenantId, float] = {}
        self.holds: dict[str, Hold] = {}  # inside a pass only (core/placeholders.py)

    def release_all(self, keep: frozenset[TaskId] = frozenset()) -> list[RunningTask]:
        """Remove every running task except `keep` and return the removed ones (in task-id order).

        Why not `remove_task` in a loop: a lease renewal releases the whole pool at once, and
        starting from the empty state and re-adding the few kept tasks is far cheaper than undoing
        thousands of placements one by one. Not journaled: call it outside a scheduling pass.
        """
        if self._journal is not None:
            raise RuntimeError("release_all inside a journaled pass")
        running = self.running
        self._mutated()
        self._empty()
        released = []
        for tid in sorted(running):
            if tid in keep:
                self._add(running[tid])
            else:
                released.append(running[tid])
        return released

    def add_node(self, name: str, gpus: int) -> int:
        """Append an idle, online node (a live cluster grows: a node agent that appears later
        joins its pool). Existing node indices and GPU slots keep their numbers; the new node's
        slots follow the last one. Returns its index. Not journaled: call it between passes."""
        if self._journal is not None:
            raise RuntimeError("add_node inside a journaled pass")
        if gpus < 1:
            raise ValueError(f"a node needs at least one GPU (got {gpus} for {name})")
        if name in self.node_names:
            raise ValueError(f"node {name} is already in pool {self.pool}")
        index = len(self.node_cap)
        n = index + 1
        self._mutated()
        self.node_names = (*self.node_names, name)
        self.node_cap = np.append(self.node_cap, np.int64(gpus))
        self.node_offset = np.append(self.node_offset[:index], np.int64(self.capacity))
        self.capacity += gpus
        self.node_index = np.arange(n, dtype=np.int64)
        self.fit.grow()
        self.gpu_node = np.append(self.gpu_node, np.full(gpus, index, dtype=np.int64))
        self.spot_whole.append({})
        self.spot_gpus = np.append(self.spot_gpus, np.int64(0))
        self.hp_gpus = np.append(self.hp_gpus, np.int64(0))
        self.online_cap = np.append(self.online_cap, np.int64(gpus))
        self.online_capacity += gpus
        self.free = np.append(self.free, np.int64(gpus))
        self.shared_on_node = np.append(self.shared_on_node, np.int64(0))
        self.gpu_shared = np.append(self.gpu_shared, np.zeros(gpus, dtype=bool))
        self.gpu_hp = np.append(self.gpu_hp, np.zeros(gpus, dtype=np.float64))
        self.gpu_spot = np.append(self.gpu_spot, np.zeros(gpus, dtype=np.float64))
        return index

    # ----- journal -------------------------------------------------------------------------
    def _mutated(self) -> None:
        """A change of what runs where or of the nodes: a `mutations` value never given out
        before (a rolled-back pass may take its count back, pool_journal.py)."""
        self._stamps += 1
        self.mutations = self._stamps

    def begin(self) -> None:
        self._journal = PassJournal(self.mutations)

    def rollback(self) -> None:
        journal, self._journal = self._journal, None
        if journal is not None:
            journal.undo(self)
            if journal.order_kept:
                self.mutations = journal.begun_at  # the exact state the pass began on

    def mark(self) -> int:
        return len(self._journal.ops) if self._journal is not None else 0

    def rollback_to(self, mark: int) -> None:
        if self._journal is not None:
            self._journal.undo(self, mark)

    def undo(self, op: str, item: RunningTask | Hold) -> None:
        """One journaled change taken back (pool_journal.py calls it, newest first)."""
        if isinstance(item, Hold):
            if op == "hold":
                self._unhold(item.name)
            else:
                self._hold(item)
        elif op == "add":
            self._remove(item.spec.task_id)
        else:
            self._add(item)

    # ----- eviction score (spec 5.5) and the placement tie-break derived from it (fit_keys.py) ------
    @property
    def eviction_score(self) -> np.ndarray:
        return self.fit.scores

    @eviction_score.setter
    def eviction_score(self, scores: np.ndarray) -> None:
        self.fit.set_scores(scores)

    def tie_key(self, *, prefer_high_score: bool) -> np.ndarray:
        return self.fit.tie_key(self.node_index, prefer_high_score=prefer_high_score)

    def best_fit_key(self, cls: TaskClass) -> np.ndarray:
        """Per node: the best-fit composite key (spec 5.1, `placement.BestFit`). Read it, do not
        change it."""
        return self.fit.best_fit_key(cls, self.free, self.hp_gpus, self.spot_gpus, self.node_index)

    # ----- queries -------------------------------------------------------------------------
    @property
    def non_hp(self) -> np.ndarray:
        """GPUs per node with no HP allocation (idle or spot only): what preemption can free."""
        return self.online_cap - self.hp_gpus

    def is_online(self, node: int) -> bool:
        return bool(self.online_cap[node] == self.node_cap[node])

    def set_online(self, node: int, online: bool) -> None:
        """Take an empty node out of service, or bring it back. Its tasks must have been removed
        first (the runtime stops them): a down node holds nothing."""
        if self._journal is not None:
            raise RuntimeError("set_online inside a journaled pass")
        cap = int(self.node_cap[node])
        if online == (int(self.online_cap[node]) == cap):
            return
        if int(self.free[node]) != int(self.online_cap[node]) or self.shared_on_node[node]:
            raise ValueError(f"node {self.node_names[node]} still holds tasks")
        delta = cap if online else -cap
        self._mutated()
        self.online_cap[node] = cap if online else 0
        self.online_capacity += delta
        self.free[node] += delta
        if self.fit.keys:
            self.fit.shift(node, delta, None, 0)

    def allocated_gpus(self) -> int:
        return int(self.hp_gpus.sum() + self.spot_gpus.sum())

    def slot_class(self, slot: int) -> TaskClass | None:
        if self.gpu_hp[slot] > _EPS:
            return TaskClass.HP
        if self.gpu_spot[slot] > _EPS:
            return TaskClass.SPOT
        return None

    # ----- low-level GPU accounting (also used for tentative per-worker reservations) --------
    def take_whole(self, node: int, gpus: int, cls: TaskClass) -> None:
        self.free[node] -= gpus
        if cls is TaskClass.HP:
            self.hp_gpus[node] += gpus
        else:
            self.spot_gpus[node] += gpus
        if self.fit.keys:
            self.fit.shift(node, -gpus, cls, gpus)

    def give_whole(self, node: int, gpus: int, cls: TaskClass) -> None:
        self.take_whole(node, -gpus, cls)

    def add_fraction(self, slot: int, fraction: float, cls: TaskClass) -> None:
        node = int(self.gpu_node[slot])
        before = self.slot_class(slot)
        if not self.gpu_shared[slot]:
            self.gpu_shared[slot] = True
            self.shared_on_node[node] += 1
            self.free[node] -= 1
            if self.fit.keys:
                self.fit.shift(node, -1, None, 0)
        if cls is TaskClass.HP:
            self.gpu_hp[slot] += fraction
        else:
            self.gpu_spot[slot] += fraction
        self._reclassify(node, before, self.slot_class(slot))

    def remove_fraction(self, slot: int, fraction: float, cls: TaskClass) -> None:
        node = int(self.gpu_node[slot])
        before = self.slot_class(slot)
        if cls is TaskClass.HP:
            self.gpu_hp[slot] = max(0.0, self.gpu_hp[slot] - fraction)
        else:
            self.gpu_spot[slot] = max(0.0, self.gpu_spot[slot] - fraction)
        after = self.slot_class(slot)
        self._reclassify(node, before, after)
        if after is None:
            self.gpu_hp[slot] = 0.0
            self.gpu_spot[slot] = 0.0
            self.gpu_shared[slot] = False
            self.shared_on_node[node] -= 1
            self.free[node] += 1
            if self.fit.keys:
                self.fit.shift(node, 1, None, 0)

    def _reclassify(self, node: int, before: TaskClass | None, after: TaskClass | None) -> None:
        if before is after:
            return
        if before is TaskClass.HP:
            self.hp_gpus[node] -= 1
        elif before is TaskClass.SPOT:
            self.spot_gpus[node] -= 1
        if after is TaskClass.HP:
            self.hp_gpus[node] += 1
        elif after is TaskClass.SPOT:
            self.spot_gpus[node] += 1
        if self.fit.keys:
            if before is not None:
                self.fit.shift(node, 0, before, -1)
            if after is not None:
                self.fit.shift(node, 0, after, 1)

    # ----- task-level changes ----------------------------------------------------------------
    def add_task(self, rt: RunningTask) -> None:
        self._add(rt)
        if self._journal is not None:
            self._journal.added_task(rt.spec.task_id, rt)

    def remove_task(self, task_id: TaskId) -> RunningTask:
        rt = self._remove(task_id)
        if self._journal is not None:
            self._journal.removed_task(task_id, rt)
        return rt

    # ----- holds (core/placeholders.py): idle GPUs kept for HP inside a pass --------------------
    def hold(self, held: Hold) -> None:
        """Hold idle whole GPUs inside a journaled pass; they count as HP of `held.tenant`, like a
        running HP task, until `unhold` or the rollback."""
        if self._journal is None or held.name in self.holds:
            raise RuntimeError(f"a hold outside a pass, or {held.name} held twice")
        self._hold(held)
        self._journal.held(held)

    def unhold(self, name: str) -> None:
        if self._journal is None:
            raise RuntimeError("an unhold outside a journaled pass")
        self._journal.unheld(self._unhold(name))

    def _hold(self, held: Hold) -> None:
        self._mutated()
        self._spread(held.nodes, held.gpus)
        self.holds[held.name] = held
        self._count_hp(held.tenant, held.total)

    def _unhold(self, name: str) -> Hold:
        self._mutated()
        held = self.holds.pop(name)
        self._spread(held.nodes, -held.gpus)
        self._count_hp(held.tenant, -held.total)
        return held

    def _spread(self, nodes: np.ndarray, gpus: np.ndarray) -> None:
        """`take_whole(node, gpus, HP)` on many distinct nodes in one numpy step: the same
        arithmetic, so the arrays and the cached keys end identical."""
        self.free[nodes] -= gpus
        self.hp_gpus[nodes] += gpus
        self.fit.shift_hp(nodes, gpus)

    def _count_hp(self, tenant: TenantId, gpus: float) -> None:
        self.hp_in_use += gpus
        tenants = self.hp_by_tenant
        left = tenants.get(tenant, 0.0) + gpus
        if gpus > 0 or left > _EPS:
            tenants[tenant] = left
        else:
            del tenants[tenant]

    def _add(self, rt: RunningTask) -> None:
        self._mutated()
        spec = rt.spec
        cls = spec.task_class
        for p in rt.placements:
            if p.slot >= 0:
                self.add_fraction(p.slot, p.fraction, cls)
                if cls is TaskClass.SPOT:
                    occupants = self.slot_tasks.setdefault(p.slot, {})
                    occupants[spec.task_id] = occupants.get(spec.task_id, 0.0) + p.fraction
            else:
                self.take_whole(p.node, p.gpus, cls)
                if cls is TaskClass.SPOT:
                    held = self.spot_whole[p.node]
                    held[spec.task_id] = held.get(spec.task_id, 0) + p.gpus
        self.running[spec.task_id] = rt
        if cls is TaskClass.SPOT:
            self.spot_in_use += spec.total_gpus
        else:
            self._count_hp(spec.tenant, spec.total_gpus)

    def _remove(self, task_id: TaskId) -> RunningTask:
        self._mutated()
        rt = self.running.pop(task_id)
        spec = rt.spec
        cls = spec.task_class
        for p in rt.placements:
            if p.slot >= 0:
                if cls is TaskClass.SPOT:
                    occupants = self.slot_tasks[p.slot]
                    left = occupants.pop(task_id) - p.fraction
                    if left > _EPS:
                        occupants[task_id] = left
                    if not occupants:
                        del self.slot_tasks[p.slot]
                self.remove_fraction(p.slot, p.fraction, cls)
            else:
                self.give_whole(p.node, p.gpus, cls)
                if cls is TaskClass.SPOT:
                    held = self.spot_whole[p.node]
                    left_whole = held.pop(task_id) - p.gpus
                    if left_whole > 0:
                        held[task_id] = left_whole
        if cls is TaskClass.SPOT:
            self.spot_in_use -= spec.total_gpus
        else:
            self._count_hp(spec.tenant, -spec.total_gpus)
        return rt

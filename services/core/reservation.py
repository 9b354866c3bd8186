"""Head-of-queue reservations: wide HP gangs never starve (issue 21, EASY backfill in Slurm's sense).

Why: the GFS HP order is largest first with the `failed` threshold (spec 5.3): once a wide gang
fails, every smaller HP task behind it may still start. That is backfill, and without a
reservation it is unbounded: each GPU an HP task frees is taken by a smaller HP task before the
gang ever sees enough free nodes, so an 8 x 11 gang can wait for days in a half-empty pool.

Rule (one reservation per pool at a time, like EASY's single shadow reservation):
- Holder: the queued whole-GPU HP gang (two workers or more) that has waited longest, once it has
  waited at least the policy's `reserve_after_s` and at least twice the mean wait of the HP tasks
  that started in the pool over the last day (its wait since it last entered the queue). Ties:
  task id. The relative part keeps an overloaded pool, where every task waits long, from draining
  nodes for one gang after another (HP load 1.1, development family: mean HP wait 78.6 h with the
  absolute threshold alone, 56.7 h with it; factors 2, 4 and 8 gave the same within noise).
  A single-worker task needs one node, and the first node that frees up is one; only a
  gang needs several nodes free at once, which unbounded backfill can prevent for ever. (Reserving
  for every long waiter was tried on the development family: at HP load 1.1 it doubled the mean
  HP wait, since drained nodes idle while an overloaded queue always has a long waiter.)
- Nodes: enough nodes to hold every worker (at most `online_cap // k` workers per node), taken in
  descending order of the GPUs HP does not hold there (idle + spot), then node index: those need
  the fewest HP finishes before the gang fits. Chosen once and kept while the holder waits, so the
  nodes drain instead of the choice wandering; chosen again if one of them goes down.
- Each pass tries the holder first (normal placement, else preemption, anywhere in the pool).
  If it does not start, the rest of the pass sees the reserved nodes as taken: their idle GPUs are
  held and neither placement nor preemption uses them, so no other HP task and no spot task
  starts there. Backfill goes on everywhere else, including the tasks of the holder's own bucket
  behind it: a waiting holder neither blocks its bucket nor lowers the `failed` threshold, since
  its nodes are already held for it (without a reservation, spec 5.3's bucket rule stands).
- Spot does not borrow reserved GPUs. EASY lets a job borrow a reservation's nodes if it ends
  before the reservation starts; here no task declares how long it runs (the scheduler never reads
  durations), so the start of a reservation is unknown and no guarantee could be shown to end
  before it. The reservation ends when the holder starts, leaves the queue, or is cancelled.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from gfs.services.core.ids import TaskId
from gfs.services.core.placeholders import hold
from gfs.services.core.pool import PoolState
from gfs.services.core.queues import BucketQueue
from gfs.services.core.task import TaskSpec

HOLD_PREFIX = "reservation-hold:"  # ids of the placeholders that hold reserved idle GPUs in a pass


@dataclass(frozen=True, slots=True)
class Reservation:
    task_id: TaskId
    nodes: tuple[int, ...]
    since_s: float  # when it was made
    gpus: float  # the holder's g x w


def pick_holder(queue: BucketQueue, now: float, after_s: float) -> TaskSpec | None:
    """The longest-waiting queued whole-GPU gang that has waited at least `after_s`.

    `entered_s` keeps insertion order and a queue only ever appends at the driver's current time,
    so its items are in entering order: the scan stops at the first task too young to qualify."""
    best: tuple[float, str] | None = None
    for tid, entered in queue.entered_s.items():
        if now - entered < after_s or (best is not None and entered > best[0]):
            break
        spec = queue.specs[tid]
        if spec.workers < 2 or spec.is_fractional:
            continue  # not a gang: any node that frees up can take it, nothing to drain for
        if best is None or (entered, tid) < best:
            best = (entered, tid)
    return None if best is None else queue.specs[TaskId(best[1])]


def choose_nodes(pool: PoolState, spec: TaskSpec) -> tuple[int, ...] | None:
    """The nodes that hold every worker of `spec` soonest (module doc); None if the online nodes
    cannot hold the gang even when empty."""
    k = spec.whole_gpus_per_worker
    per_node = pool.online_cap // k
    if int(per_node.sum()) < spec.workers:
        return None
    # Descending preemptible GPUs, then ascending node index (lexsort: last key is primary).
    order = np.lexsort((pool.node_index, -pool.non_hp))
    chosen: list[int] = []
    left = spec.workers
    for node in order.tolist():
        take = int(per_node[node])
        if take <= 0:
            continue
        chosen.append(node)
        left -= take
        if left <= 0:
            break
    return tuple(sorted(chosen))


def hold_reserved(pool: PoolState, reservation: Reservation) -> np.ndarray:
    """Inside a journaled pass: take every idle whole GPU on the reserved nodes with one HP
    placeholder (core/placeholders.py; rolled back with the pass), so no other task is placed
    there. Returns the GPUs held per node (explanations: what a task that found no room would have
    had without them)."""
    held = np.zeros(len(pool.node_cap), dtype=np.int64)
    nodes = list(reservation.nodes)
    held[nodes] = np.maximum(pool.free[nodes], 0)
    hold(pool, hold_id(reservation), "reservation", held)
    return held


def hold_id(reservation: Reservation) -> TaskId:
    """The placeholder that holds a reservation's idle GPUs inside a pass."""
    return TaskId(f"{HOLD_PREFIX}{reservation.task_id}")


class RecentWaits:
    """The queueing times of the tasks that started in the last `window_s` (a running mean)."""

    __slots__ = ("_items", "_sum", "window_s")

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._items: deque[tuple[float, float]] = deque()
        self._sum = 0.0

    def note(self, now: float, wait_s: float) -> None:
        self._items.append((now, wait_s))
        self._sum += wait_s

    def mean(self, now: float) -> float:
        items = self._items
        while items and items[0][0] <= now - self.window_s:
            self._sum -= items.popleft()[1]
        return self._sum / len(items) if items else 0.0


def nodes_online(pool: PoolState, nodes: Iterable[int]) -> bool:
    at = list(nodes)
    return bool((pool.online_cap[at] == pool.node_cap[at]).all())

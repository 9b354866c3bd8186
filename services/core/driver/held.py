"""Held starts and ending attempts: the bind/evict expectations of one pool, and their deadlines.

A pass frees an evicted run's GPUs when it decides the eviction, and may give them to another
task at once; the node still runs the evicted attempt until it acknowledges the eviction. So a
start placed on GPUs an attempt still holds is *held* (its binds do not go out) until:
- every eviction it waits for was acknowledged (`waiting`: its preemptor's victims, and any other
  task's ending attempt on a GPU it was given), and
- the task's own previous attempt ended (`own`: that attempt's eviction commands; an agent never
  holds two runs of one task), or
- its deadline passed: the grace period plus the ack margin from now, and no earlier than the
  deadline of every ending attempt it waits for (then the agents have killed them anyway).

An *ending* is an evicted attempt whose end is not known yet: its eviction commands (command ->
node), the GPUs it holds per node, the nodes that acknowledged, and its deadline (grace + margin
from the eviction, pushed back when the shell re-issues a lost eviction).

Generic over an opaque command id `C` (the live service uses uuid.UUID); pure: ids, task ids,
node names, GPU indices and times only. The shell keeps the wire objects (the binds to send, the
events to report) keyed by task id and maps the releases returned here onto them. What the nodes
report they still run is the shell's knowledge: `due` and the shell's use of `endings_due` ask it
through a predicate, so an entry a node says still runs stays due until it ends (`next_due` may
then name a time already past: the shell's next tick checks again).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Generic, TypeVar

from gfs.services.core.ids import TaskId

C = TypeVar("C", bound=Hashable)

# GPU indices a start or an attempt holds, per node.
Gpus = Mapping[str, frozenset[int]]


@dataclass(slots=True)
class Held(Generic[C]):
    """A start whose binds are held (module doc)."""

    task_id: TaskId
    waiting: set[C]
    deadline: float
    own: set[C] = field(default_factory=set)


@dataclass(slots=True)
class Ending(Generic[C]):
    """An evicted attempt whose end is not known yet (module doc)."""

    task_id: TaskId
    commands: dict[C, str]  # eviction command -> node
    gpus: dict[str, frozenset[int]]  # node -> the GPU indices the attempt holds there
    deadline: float
    acked: set[str] = field(default_factory=set)  # nodes that acknowledged its eviction


class HeldStarts(Generic[C]):
    """The pool's held starts and ending attempts (module doc). Both dicts keep insertion order,
    which is the order releases are reported in (the shells' decisions rest on it)."""

    def __init__(self) -> None:
        self.held: dict[TaskId, Held[C]] = {}
        self.endings: dict[TaskId, Ending[C]] = {}
        self._ending_of: dict[C, TaskId] = {}  # eviction command -> the ending it belongs to

    @property
    def idle(self) -> bool:
        return not self.held and not self.endings

    @property
    def next_due(self) -> float:
        """The earliest deadline of a held start or an ending (math.inf: none)."""
        if not self.held and not self.endings:
            return math.inf
        return min(
            min((h.deadline for h in self.held.values()), default=math.inf),
            min((e.deadline for e in self.endings.values()), default=math.inf),
        )

    def next_due_after(self, after: float) -> float:
        """The earliest deadline later than `after` (math.inf: none): a shell that acted on every
        deadline up to `after` skips the entries still waiting on a node past theirs."""
        due = math.inf
        for deadline in chain(
            (h.deadline for h in self.held.values()), (e.deadline for e in self.endings.values())
        ):
            if after < deadline < due:
                due = deadline
        return due

    # ----- ending attempts -----------------------------------------------------------------------
    def ending(
        self, task_id: TaskId, commands: Mapping[C, str], gpus: Gpus, *, now: float, grace_s: float,
        margin_s: float,
    ) -> Ending[C]:  # fmt: skip
        """An attempt of `task_id` was evicted by `commands`: it ends by its acks and exits, or at
        grace + margin from now. (A task has one ending at a time: a newer one replaces it.)"""
        self._forget_commands(task_id)
        ending = Ending(task_id, dict(commands), dict(gpus), now + grace_s + margin_s)
        self.endings[task_id] = ending
        for command in ending.commands:
            self._ending_of[command] = task_id
        return ending

    def extend(self, task_id: TaskId, *, now: float, grace_s: float, margin_s: float) -> None:
        """A lost eviction of the ending was issued again: it gets its own grace and margin."""
        self.endings[task_id].deadline = now + grace_s + margin_s

    def deadline(self, task_id: TaskId) -> float:
        return self.endings[task_id].deadline

    def endings_due(self, now: float) -> list[TaskId]:
        """The endings whose deadline passed by `now`, in the order they began."""
        return [t for t, e in self.endings.items() if e.deadline <= now]

    def end(self, task_id: TaskId, *, evicted: bool) -> TaskId | None:
        """The attempt's end is known. Evicted: the task's held next start stops waiting for it
        (returned if that released it). Finished on its own: the held start stays as it is (the
        shell withdraws the task and drops it)."""
        self._forget_commands(task_id)
        self.endings.pop(task_id, None)
        held = self.held.get(task_id)
        if not evicted or held is None:
            return None
        held.own.clear()
        if held.waiting:
            return None
        del self.held[task_id]
        return task_id

    def occupying(self, task_id: TaskId, gpus: Gpus) -> tuple[set[C], float]:
        """The eviction commands of other tasks' ending attempts on a GPU that `gpus` gives
        `task_id`, whose node has not acknowledged yet, and the latest of those endings'
        deadlines (-inf: none). A shared (fractional) GPU counts as occupied too."""
        found: set[C] = set()
        until = -math.inf
        for ending in self.endings.values():
            if ending.task_id == task_id:
                continue  # its own previous attempt: the `own` wait
            for command, node in ending.commands.items():
                wanted = gpus.get(node)
                if node in ending.acked or wanted is None:
                    continue
                if ending.gpus.get(node, frozenset()) & wanted:
                    found.add(command)
                    until = max(until, ending.deadline)
        return found, until

    # ----- held starts ---------------------------------------------------------------------------
    def place(
        self, task_id: TaskId, gpus: Gpus, victims: Iterable[C], *, now: float, grace_s: float,
        margin_s: float,
    ) -> Held[C] | None:  # fmt: skip
        """A pass started `task_id` on `gpus`, evicting `victims` for it: held (returned) while an
        evicted attempt still holds what it was given or its own previous attempt has not ended,
        None when its binds may go out now. The deadline rule is the module doc's."""
        occupied, occupied_until = self.occupying(task_id, gpus)
        waiting = set(victims) | occupied
        previous = self.endings.get(task_id)
        own = set() if previous is None else set(previous.commands)
        if not waiting and not own:
            return None
        deadline = max(now + grace_s + margin_s, occupied_until)
        if previous is not None:
            deadline = max(deadline, previous.deadline)
        return self.hold(task_id, waiting, own, deadline)

    def hold(self, task_id: TaskId, waiting: set[C], own: set[C], deadline: float) -> Held[C]:
        held = Held(task_id, waiting, deadline, own)
        self.held[task_id] = held
        return held

    def drop(self, task_id: TaskId) -> bool:
        """The held start is gone (stopped, finished, withdrawn): True if there was one."""
        return self.held.pop(task_id, None) is not None

    def ack(self, command: C) -> list[TaskId]:
        """Eviction `command` was acknowledged (the original's id, for a re-issued one): the held
        starts it released, in the order they were held. An id nobody waits for changes nothing."""
        released: list[TaskId] = []
        for held in list(self.held.values()):
            if command in held.waiting:
                held.waiting.discard(command)
                if not held.waiting and not held.own:
                    del self.held[held.task_id]
                    released.append(held.task_id)
        owner = self._ending_of.get(command)
        if owner is not None:
            ending = self.endings[owner]
            ending.acked.add(ending.commands[command])
        return released

    def due(self, now: float, still_running: Callable[[C], bool] = lambda _: False) -> list[TaskId]:
        """The held starts released by their deadline at `now`, in the order they were held; one
        waiting for an eviction whose node still reports the attempt (`still_running`) stays. Its
        own previous attempt counts the same: an agent never holds two runs of one task, so the
        next run's binds wait while a node still reports the previous one."""
        released: list[TaskId] = []
        for held in list(self.held.values()):
            if held.deadline > now:
                continue
            if not any(still_running(c) for c in chain(held.waiting, held.own)):
                del self.held[held.task_id]
                released.append(held.task_id)
        return released

    def _forget_commands(self, task_id: TaskId) -> None:
        ending = self.endings.get(task_id)
        if ending is not None:
            for command in ending.commands:
                self._ending_of.pop(command, None)

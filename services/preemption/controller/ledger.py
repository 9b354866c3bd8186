"""The command ledger: every command of this pool a node agent may answer, and the check that binds
an ack to the command it claims to answer (`refusal`).

An ack is applied only when it can be what it claims (the package doc, "acks"): the command must be
one this pool issued, and the ack's node, tasks, worker and attempt must be the command's. The
ledger is what the check reads, so it owns what was issued:
- `bound`: every BindCommand issued (first issue and re-issue alike), with the node, task, attempt
  and workers it addressed;
- `evictions`: every EvictCommand issued, with its node, tasks and attempt, and whether its ack (or,
  NODE_LOST, the command itself) was recorded;
- `aliases`: a re-issued eviction -> the eviction it stands for (its ack answers that one).
A late ack of an earlier attempt must still pass the check (it is then applied as a no-op), so the
entries of a task stay while it is in the pool; once it has left (finished, withdrawn, evicted for
good) they are dropped `keep_s` later (`sweep`, from the pool's tick: a journaled input, so a
replay rebuilds the same ledger), and a later ack of one is refused as unmatched. Without that the
ledger would grow by every command for as long as the service runs (issue 38).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from gfs.schemas.commands import EvictAck
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.preemption.controller.types import _Bound, _Eviction


class CommandLedger:
    """What this pool issued (module doc). The binder, the endings and the reconciler record into
    it; the ack handler reads it."""

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.bound: dict[uuid.UUID, _Bound] = {}
        self.evictions: dict[uuid.UUID, _Eviction] = {}
        self.aliases: dict[uuid.UUID, uuid.UUID] = {}
        self._gone: dict[str, float] = {}  # task -> when a sweep first found it out of the pool
        self._next_sweep = float("-inf")

    def bind_issued(self, command_id: uuid.UUID, bound: _Bound) -> None:
        self.bound[command_id] = bound

    def eviction_issued(
        self, command_id: uuid.UUID, eviction: _Eviction, *, replaces: uuid.UUID | None = None
    ) -> None:
        """Record an eviction; `replaces`: the eviction a re-issued one stands for."""
        self.evictions[command_id] = eviction
        if replaces is not None:
            self.aliases[command_id] = replaces

    def report(self, command_id: uuid.UUID) -> bool:
        """Record that the eviction was reported (its ack, or NODE_LOST the command itself): whether
        this was the first time."""
        eviction = self.evictions[command_id]
        first = not eviction.reported
        eviction.reported = True
        return first

    def original(self, command_id: uuid.UUID) -> uuid.UUID:
        """The eviction `command_id` answers for: itself, or the one a re-issued command replaced."""
        return self.aliases.get(command_id, command_id)

    def unanswered(self, command_id: uuid.UUID) -> _Eviction | None:
        """The eviction, while neither its ack nor (NODE_LOST) the command itself was recorded."""
        eviction = self.evictions.get(command_id)
        return None if eviction is None or eviction.reported else eviction

    def refusal(
        self, ack: EvictAck | WorkerStarted | WorkerExited, source_key: str | None = None
    ) -> str | None:
        """Why `ack` must not be applied (None: it may). An ack is bound to the command it answers:
        the command must be one this pool issued, and the ack's node, tasks, worker and attempt must
        be the command's; `source_key` (the Kafka key the agent published it under, when known)
        must be that node too. A legitimate late ack of an earlier attempt passes (it is applied as
        a no-op); only an ack that cannot be what it claims is refused."""
        if source_key is not None and source_key != ack.node:
            return f"published under key {source_key!r} but claims node {ack.node!r}"
        if isinstance(ack, EvictAck):
            eviction = self.evictions.get(ack.command_id)
            if eviction is None:
                return f"no eviction {ack.command_id} was issued in pool {self.pool!r}"
            if ack.node != eviction.node:
                return f"node {ack.node!r} answered eviction {ack.command_id}, addressed to {eviction.node!r}"
            if tuple(ack.task_ids) != eviction.task_ids:
                return f"tasks {list(ack.task_ids)} differ from the eviction's {list(eviction.task_ids)}"
            if ack.attempt is not None and ack.attempt != eviction.attempt:
                return f"attempt {ack.attempt} differs from the eviction's attempt {eviction.attempt}"
            return None
        bound = self.bound.get(ack.command_id)
        if bound is None:
            return f"no bind {ack.command_id} was issued in pool {self.pool!r}"
        if ack.node != bound.node:
            return f"node {ack.node!r} reported on bind {ack.command_id}, addressed to {bound.node!r}"
        if ack.task_id != bound.task_id:
            return f"task {ack.task_id!r} differs from the bind's {bound.task_id!r}"
        if ack.worker_index not in bound.workers:
            return f"worker {ack.worker_index} is not one of the bind's workers {sorted(bound.workers)}"
        if ack.attempt is not None and ack.attempt != bound.attempt:
            return f"attempt {ack.attempt} differs from the bind's attempt {bound.attempt}"
        return None

    def sweep(self, now: float, in_pool: Callable[[str], bool], keep_s: float) -> int:
        """Drop the commands whose tasks have all been out of the pool (`in_pool` false) for at
        least `keep_s`; returns how many. Runs at most every `keep_s / 24` (a task's commands go
        between `keep_s` and `keep_s` plus two sweeps after it left)."""
        if now < self._next_sweep:
            return 0
        self._next_sweep = now + keep_s / 24
        tasks = {b.task_id for b in self.bound.values()}
        tasks |= {t for e in self.evictions.values() for t in e.task_ids}
        for task in tasks:
            if in_pool(task):
                self._gone.pop(task, None)
            else:
                self._gone.setdefault(task, now)
        expired = {t for t, since in self._gone.items() if now - since >= keep_s}
        drop_binds = [c for c, b in self.bound.items() if b.task_id in expired]
        drop_evictions = [c for c, e in self.evictions.items() if set(e.task_ids) <= expired]
        for command_id in drop_binds:
            del self.bound[command_id]
        for command_id in drop_evictions:
            del self.evictions[command_id]
        self.aliases = {c: o for c, o in self.aliases.items() if c in self.evictions and o in self.evictions}
        self._gone = {t: since for t, since in self._gone.items() if t in tasks and t not in expired}
        return len(drop_binds) + len(drop_evictions)

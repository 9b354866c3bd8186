"""`PoolDriver`: one pool's runtime with what both shells need around it, written once.

It owns the pool's `PoolRuntime` (queues, allocation, the guarantee ledger), the pass trigger,
the guarantee-period timers and the quota's expiry, and a clock that never goes back (the live
wall clock may step back a little, NTP; the runtime's time does not). Every input is applied at
`max(now, the runtime's time)`.

It also keeps the pool's held starts and ending attempts (`held`: the bind/evict expectations
and their deadlines), generic over the shell's command id `C`; their earliest deadline is part of
`next_due`.

What it does not own: the simulator's event queue, actuation model (durations, finishes) and
metrics; the live service's wire mapping, command ids, the wire commands it holds, acks against
their commands and attempts, and node reports. Those stay in the shells (docs/decisions.md, "One
per-pool driver").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

import numpy as np

from gfs.services.core.driver.effects import (
    Accepted,
    Effect,
    NodeJoined,
    NodeLost,
    NodeUp,
    PeriodClosed,
    QuotaExpired,
    QuotaInForce,
    Rejected,
    Released,
    ReleaseWhy,
    Withdrawn,
)
from gfs.services.core.driver.held import HeldStarts
from gfs.services.core.driver.inputs import (
    Advance,
    AttemptEnded,
    Cancel,
    EvictAcked,
    Finish,
    Input,
    Invalidate,
    NodeDown,
    NodeSeen,
    Pass,
    QuotaApplied,
    Submit,
)
from gfs.services.core.driver.timers import PeriodTimers
from gfs.services.core.driver.trigger import PassTrigger
from gfs.services.core.guarantee_ledger import GuaranteeLedger
from gfs.services.core.ids import TaskId
from gfs.services.core.outcomes import Finished, PassResult, Started, Stopped
from gfs.services.core.reasons import Rejection
from gfs.services.core.runtime import PoolRuntime
from gfs.services.core.task import TaskClass, TaskSpec

# How long a started run will last, if the shell knows (the simulator does): no period past its end.
RunLength = Callable[[Started], float]

C = TypeVar("C", bound=Hashable)  # the shell's command id (held.py)


class PoolDriver(Generic[C]):
    def __init__(self, runtime: PoolRuntime, *, pass_pending: bool = True) -> None:
        self.runtime = runtime
        self.trigger = PassTrigger(pass_pending)
        self.periods = PeriodTimers()
        self.nodes: dict[str, int] = {}  # node name -> the runtime's index (nodes added here)
        self.down: set[str] = set()
        self.quota_valid_until: float | None = None
        self.quota_frozen = False
        self.held: HeldStarts[C] = HeldStarts()

    # ----- views --------------------------------------------------------------------------------
    @property
    def ledger(self) -> GuaranteeLedger:
        return self.runtime.ledger

    @property
    def dirty(self) -> bool:
        return self.trigger.pending

    @property
    def next_due(self) -> float:
        """The earliest time an `Advance` may have something to do (math.inf: none armed): a
        guarantee period's end, the quota's expiry, a held start's or an ending's deadline."""
        due = self.periods.next_due
        if self.quota_valid_until is not None and not self.quota_frozen:
            due = min(due, self.quota_valid_until)
        if not self.held.idle:
            due = min(due, self.held.next_due)
        return due

    def at(self, now: float) -> float:
        last = self.runtime.now  # -inf before the first input
        return last if now < last else now

    # ----- inputs -------------------------------------------------------------------------------
    def apply(self, event: Input) -> list[Effect]:
        """Apply one typed input; its effects in order (the shells' parity rests on this one path)."""
        match event:
            case Submit(spec, now):
                rejection = self.submit(spec, now)
                return [Accepted(spec.task_id) if rejection is None else Rejected(spec.task_id, rejection)]
            case Cancel(task_id, now):
                stop = self.cancel(task_id, now)
                return [Withdrawn(task_id) if stop is None else stop]
            case Finish(task_id, now):
                return [self.finish(task_id, now)]
            case NodeSeen(name, gpus, now):
                known = name in self.nodes
                if self.node_seen(name, gpus, now):
                    return [NodeUp(name) if known else NodeJoined(name, self.nodes[name])]
                return []
            case NodeDown(name, now):
                if name not in self.nodes or name in self.down:
                    return []
                stops = self.node_down(name, now)
                return [NodeLost(name, tuple(s.task_id for s in stops)), *stops]
            case QuotaApplied(quota, eta, now, valid_until):
                return [QuotaInForce(self.apply_quota(quota, eta, now, valid_until))]
            case Invalidate(now):
                self.invalidate()
                return []
            case Advance(now, expire_quota):
                effects: list[Effect] = [*self.advance(now)]
                effects += [Released(t, ReleaseWhy.DEADLINE) for t in self.held.due(self.at(now))]
                if expire_quota and (expired := self.expire_quota(now)) is not None:
                    effects.append(expired)
                return effects
            case EvictAcked(command, now):
                return [Released(t, ReleaseWhy.ACKED) for t in self.held.ack(command)]
            case AttemptEnded(task_id, now, evicted):
                released = self.held.end(task_id, evicted=evicted)
                return [] if released is None else [Released(released, ReleaseWhy.ENDED)]
            case Pass(now, preemption, quota, force):
                result = self.run_pass(now, preemption=preemption, quota=quota, force=force)
                return [] if result is None else list(result.outcomes)
        raise TypeError(f"not a driver input: {event!r}")

    def submit(self, spec: TaskSpec, now: float) -> Rejection | None:
        rejection = self.runtime.submit(spec, self.at(now))
        if rejection is None:
            self.trigger.pending = True
        return rejection

    def cancel(self, task_id: TaskId, now: float) -> Stopped | None:
        """Withdraw a queued task (None) or stop a running one for good (its stop)."""
        self.trigger.set()
        self.periods.disarm(task_id)
        return self.runtime.cancel(task_id, self.at(now))

    def finish(self, task_id: TaskId, now: float) -> Finished:
        self.trigger.pending = True
        self.periods.disarm(task_id)
        return self.runtime.finish(task_id, self.at(now))

    def node_seen(self, name: str, gpus: int, now: float) -> bool:
        """A node joins (unknown name) or comes back (a down one); True if either happened."""
        index = self.nodes.get(name)
        if index is None:
            self.nodes[name] = self.runtime.add_node(name, gpus, self.at(now))
        elif name in self.down:
            self.down.discard(name)
            self.runtime.node_up(index, self.at(now))
        else:
            return False
        self.trigger.set()
        return True

    def node_down(self, name: str, now: float) -> list[Stopped]:
        """The node's tasks stopped (requeued per the runtime's rule); [] if unknown or down."""
        index = self.nodes.get(name)
        if index is None or name in self.down:
            return []
        self.down.add(name)
        self.trigger.set()
        stops = self.runtime.node_down(index, self.at(now))
        for stop in stops:
            self.periods.disarm(stop.task_id)
        return stops

    def apply_quota(
        self, quota: Mapping[int, float], eta: float, now: float, valid_until: float | None = None
    ) -> bool:
        """Put a quota in force (True: it changed); `valid_until` arms its expiry."""
        changed = self.runtime.update_quota(quota, eta)
        self.trigger.set(changed)
        self.quota_valid_until = valid_until
        self.quota_frozen = False
        return changed

    def hold_quota(self, quota: Mapping[int, float], eta: float) -> bool:
        """Put a quota in force that does not expire and leaves the expiry timer as it is (an SRE
        override, the zero quota before the first one)."""
        changed = self.runtime.update_quota(quota, eta)
        self.trigger.set(changed)
        return changed

    def refresh_quota(self, now: float, hp_quantile: np.ndarray | None) -> bool:
        """The quota policy's own refresh (the simulator's quota period)."""
        changed = self.runtime.refresh_quota(self.at(now), hp_quantile)
        self.trigger.set(changed)
        return changed

    def invalidate(self) -> None:
        self.runtime.invalidate()
        self.trigger.set()

    def release_leases(self, now: float, keep: frozenset[TaskId] = frozenset()) -> list[TaskId]:
        """Lease-based policies: every running task but `keep` gives its GPUs back; the next pass
        renews or stops each (a renewal keeps the run and its timers)."""
        self.trigger.set()
        return self.runtime.release_leases(self.at(now), keep=keep)

    # ----- time ---------------------------------------------------------------------------------
    def advance(self, now: float) -> list[PeriodClosed]:
        """The guarantee periods that ended by `now`: each logged as a success in the ledger."""
        at = self.at(now)
        due = self.periods.pop_due(at)
        tick = self.runtime.period_tick
        closed = [c for c in due if tick(c.task_id, at)]
        if len(closed) != len(due):  # a run the runtime no longer holds (not while it is armed)
            for c in due:
                if c not in closed:
                    self.periods.disarm(c.task_id)
        return closed

    def expire_quota(self, now: float) -> QuotaExpired | None:
        """Past the quota's valid_until with no newer one: freeze it at the spot GPUs running."""
        until = self.quota_valid_until
        if until is None or self.quota_frozen or not self.at(now) > until:
            return None
        self.quota_frozen = True
        in_use = self.runtime.state.spot_in_use
        frozen = dict.fromkeys(self.runtime.quota, in_use)
        self.trigger.set(self.runtime.update_quota(frozen, self.runtime.eta))
        return QuotaExpired(in_use)

    # ----- passes -------------------------------------------------------------------------------
    def run_pass(
        self,
        now: float,
        *,
        preemption: bool = True,
        quota: bool = True,
        force: bool = False,
        run_length: RunLength | None = None,
    ) -> PassResult | None:
        """One scheduling pass if the trigger is set (or `force`); None when none ran. Spot runs it
        starts arm their periods, runs it stops are disarmed."""
        if not self.trigger.take() and not force:
            return None
        result = self.runtime.schedule(self.at(now), preemption_enabled=preemption, quota_enabled=quota)
        for o in result.outcomes:
            if isinstance(o, Stopped):
                self.periods.disarm(o.task_id)
            elif not o.renewed and self.runtime.tasks[o.task_id].task_class is TaskClass.SPOT:
                start = self.runtime.run_start(o.task_id)
                assert start is not None  # it was just started
                self.periods.arm(o.task_id, start, math.inf if run_length is None else run_length(o))
        return result

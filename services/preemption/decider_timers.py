"""The decider's timer: the controllers' periodic work (guarantee periods, held binds, an expired
quota, reconciliation, a pass), nodes whose heartbeat stopped marked down by the rules of
liveness.py (and what the service heard meanwhile), and each pool's PoolStatus for the quota
service; committed like a batch (decider_commit.py).

Part of the decider (service.py): a class over its transaction (decider_commit.py).
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Callable

from opentelemetry import context as otel_context

from schemas.envelope import wrap
from schemas.topics import POOL_STATUS_TOPIC
from services.platform.outbox import enqueue
from services.platform.timer import FailureCounter
from services.preemption import controls, liveness, store
from services.preemption.controller.pool import PoolController
from services.preemption.controller.types import Effects
from services.preemption.decider_base import (
    PRODUCER,
    PartitionState,
    _utc,
    log,
)
from services.preemption.decider_commit import Transaction
from services.preemption.inputs import apply
from services.preemption.journal_entries import Entry, NodeDownEntry, TickEntry


class Timers(Transaction):
    __slots__ = ()

    def note_heard(self, partition: int, caught_up_at: float | None) -> None:
        """After a fetch: the inbox partition was read to its end as of `caught_up_at` (None: it
        lags, so it was heard only up to the newest record read)."""
        state = self.partitions.get(partition)
        if state is None:
            return
        heard = caught_up_at if caught_up_at is not None else (state.newest or None)
        if heard is not None:
            state.heard = max(heard, state.heard or heard)

    def _heard(self, state: PartitionState) -> float | None:
        router = self.router_heard()
        if state.heard is None or router is None:
            return None
        return min(state.heard, router)

    def _lost_nodes(self, state: PartitionState, now: float) -> list[tuple[str, str]]:
        """(pool, node) to mark down now, by the liveness rules (liveness.py)."""
        heard = self._heard(state)
        if heard is None:
            return []  # not known yet what was heard: a fresh owner gives every node a full timeout
        deaf = state.heard_clock.advance(heard, now)
        if deaf > 0:
            log.warning("preemption: input resumed after %.0fs deaf: node timeouts restart", deaf)
            liveness.credit(state.last_seen, deaf, heard)
        out: list[tuple[str, str]] = []
        rules = self.settings.liveness_rules()
        for pool_name, controller in state.controllers.items():
            for node in controller.nodes:
                state.last_seen.setdefault(node, now)
            verdict = liveness.judge(
                controller.nodes, controller.down, state.last_seen, heard=heard, now=now, rules=rules,
                kill_switch=controller.controls.kill_switch,
            )  # fmt: skip
            self._note_hold(state, pool_name, verdict, now - heard)
            out += [(pool_name, node) for node in verdict.lost]
        return out

    def _note_hold(
        self, state: PartitionState, pool_name: str, verdict: liveness.Verdict, lag: float
    ) -> None:
        before = state.holding.get(pool_name)
        if verdict.held == before:
            return
        if verdict.held is None:
            state.holding.pop(pool_name, None)
            log.warning("preemption: pool %s: node-loss hold (%s) ended", pool_name, before)
            return
        state.holding[pool_name] = verdict.held
        self.stats.node_loss_held += 1
        if self.held_counter is not None:
            self.held_counter.add(1, {"reason": verdict.held, "pool": pool_name})
        log.warning(
            "preemption: pool %s: %d silent node(s) NOT declared lost (%s; input lag %.1fs): %s",
            pool_name, len(verdict.silent), verdict.held, lag, ", ".join(verdict.silent),
        )  # fmt: skip

    async def tick(self) -> None:
        async with self.lock:
            now = self.clock.now()
            wanted = await controls.load(self.pool)  # SRE controls in force (controls.py)
            for state in list(self.partitions.values()):
                rows: list[tuple[str, Entry, uuid.UUID | None]] = []
                effects: list[tuple[str, Effects, otel_context.Context | None]] = []
                for pool_name, control in controls.entries(state.controllers, wanted, now):
                    effects.append((pool_name, apply(state.controllers[pool_name], control), None))
                    rows.append((pool_name, control, None))
                for pool_name, node in self._lost_nodes(state, now):
                    down = NodeDownEntry(node=node, at=now)
                    effects.append((pool_name, apply(state.controllers[pool_name], down), None))
                    rows.append((pool_name, down, None))
                    silent = now - state.last_seen[node]
                    log.warning("preemption: node %s silent for %.0fs: marked down", node, silent)
                current = self._current(state, now)
                for pool_name, controller in state.controllers.items():
                    entry = TickEntry(reconcile=current, at=now)
                    out = apply(controller, entry)
                    if out:
                        effects.append((pool_name, out, None))
                        rows.append((pool_name, entry, None))
                if rows:
                    await self._commit(state, rows, effects, next_offset=None)
            if now - self.last_status >= self.settings.preemption_status_s:
                self.last_status = now
                await self._publish_status(now)

    def _current(self, state: PartitionState, now: float) -> bool:
        """Whether reconciliation may act: only while the input is current, since a lagging input
        holds acks and reports not read yet, so a command would look lost when it is not."""
        heard = self._heard(state)
        return heard is not None and now - heard <= self.settings.preemption_node_timeout_s

    def next_due(self, after: float) -> float:
        """The earliest time later than `after` at which an owned pool's timers have work (math.inf:
        none); `_due_after` says why not just the driver's `next_due`."""
        due = math.inf
        for state in self.partitions.values():
            for controller in state.controllers.values():
                due = min(due, _due_after(controller, after))
        return due

    async def wake(self, after: float) -> float:
        """The tick's path (a TickEntry per pool, journaled and committed like the tick's) for
        the pools whose driver has work due in (`after`, now]; returns that now. No controls, node
        liveness or status: those stay the periodic tick's."""
        async with self.lock:
            now = self.clock.now()
            for state in list(self.partitions.values()):
                rows: list[tuple[str, Entry, uuid.UUID | None]] = []
                effects: list[tuple[str, Effects, otel_context.Context | None]] = []
                current = self._current(state, now)
                for pool_name, controller in state.controllers.items():
                    if _due_after(controller, after) > now:
                        continue
                    entry = TickEntry(reconcile=current, at=now)
                    out = apply(controller, entry)
                    if out:
                        effects.append((pool_name, out, None))
                        rows.append((pool_name, entry, None))
                if rows:
                    await self._commit(state, rows, effects, next_offset=None)
            return now

    async def _publish_status(self, now: float) -> None:
        for state in list(self.partitions.values()):
            statuses = [c.status(now) for c in state.controllers.values() if c.nodes]
            if not statuses or self.settings.preemption_dry_run:
                continue
            try:
                async with self.pool.acquire() as connection, connection.transaction():
                    await store.check_epoch(connection, state.claim, None)
                    for status in statuses:
                        await enqueue(
                            connection,
                            POOL_STATUS_TOPIC,
                            wrap(status, producer=PRODUCER, occurred_at=_utc(now)),
                        )
            except store.FencedError:
                await self._fenced(state)
        self.on_committed()


def _due_after(controller: PoolController, after: float) -> float:
    """The driver's `next_due` (core/driver/pool_driver.py) taken part by part, each later than
    `after`, the time up to which everything due was acted on: a part acted on and still due (a held
    start or an ending waiting on a node that still reports its attempt; a quota an SRE freeze
    keeps from expiring) must not hide the pool's later due times, nor wake the decider again."""
    driver = controller.driver
    due = driver.held.next_due_after(after)
    if (period := driver.periods.next_due) > after:
        due = min(due, period)
    until = driver.quota_valid_until
    expires = not driver.quota_frozen and controller.controls.quota_mode is None  # controller.tick's rule
    if until is not None and until > after and expires:
        due = min(due, until)
    return due


class DueWake:
    """Wakes the decider at its pools' `next_due` (wall clock only: on the controllable clock the
    ticks drive time). One timer for all owned pools, armed at the earliest due time and moved
    when a commit (it is the decider's `on_committed`: every committed batch or tick) may have
    moved it; when it fires, `Timers.wake` runs the tick's path for the pools due, so a held
    start's or an ending's deadline, a guarantee period's end or the quota's expiry is acted on
    at its time, not up to `preemption_tick_s` later. The periodic tick stays the safety net (node
    liveness, reconciliation, controls, status, and whatever waits on a node past its due time)."""

    # Fire this much after the due time: the wall clock read at firing is then past it (the
    # quota's expiry is strict: `now > valid_until`).
    SLACK_S = 0.002
    # At most one wake per this long: deadlines that fall close together (every eviction of a
    # burst has its own ending deadline) are acted on in one wake, one pass and one commit per
    # pool instead of one each, since a wake holds the decider's lock through its commit. A held
    # start still goes out within 0.1 s of its deadline (the tick's period is 1 s).
    MIN_GAP_S = 0.1

    def __init__(
        self, decider: Timers, *, then: Callable[[], None] = lambda: None,
        failures: FailureCounter | None = None,
    ) -> None:  # fmt: skip
        self.decider = decider
        self.then = then  # the decider's commit hook before the wake (the outbox relay's wake)
        self.failures = failures
        self.acted = -math.inf  # every due time up to this one was acted on (a wake or a tick)
        self.last_wake = -math.inf  # the clock's time at the last wake
        self.changed = asyncio.Event()
        self.wakes = 0

    def __call__(self) -> None:
        """The decider's commit hook (`on_committed`): something was committed, so the earliest
        due time may have moved."""
        self.changed.set()
        self.then()

    async def tick(self) -> None:
        """The periodic tick: it acts on every pool, so what was due before it started is done."""
        started = self.decider.clock.now()
        await self.decider.tick()
        self.acted = max(self.acted, started)
        self.changed.set()

    async def run(self) -> None:
        """Until cancelled (the service cancels its jobs when it stops)."""
        while True:
            self.changed.clear()
            due = self.decider.next_due(self.acted)
            at = max(due + self.SLACK_S, self.last_wake + self.MIN_GAP_S)
            wait = at - self.decider.clock.now()
            if wait > 0:
                try:
                    # None when nothing is due: sleep until a commit arms something.
                    timeout = None if math.isinf(wait) else wait
                    await asyncio.wait_for(self.changed.wait(), timeout)
                    continue  # a commit: the earliest due time may be earlier now
                except TimeoutError:
                    pass
            try:
                self.last_wake = self.decider.clock.now()
                self.acted = await self.decider.wake(self.acted)
                self.wakes += 1
            except Exception:
                # As the periodic timer does (platform/timer.py): logged, counted, and the next
                # tick retries; this wake does not retry the same due time in a loop.
                log.exception("preemption: the wake at a due time failed; the next tick retries")
                if self.failures is not None:
                    self.failures.add(1, {"timer": "preemption.wake"})
                self.acted = max(self.acted, due)
                await asyncio.sleep(0)

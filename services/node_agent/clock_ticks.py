"""A node agent on the controllable clock (`agent_clock = "topic"`): ClockTick in, ClockAck out.

Only ADVANCE moves the agent's time (services/node_agent/sim_clock.py): its workers due by then
exit, the others take their checkpoints, and the agent answers once each of them is done, after
the exits' WorkerExited acks were delivered, with the earliest exit still ahead (the driver plays
that instant next).

`ClockTicks` owns nothing but the wait it allows (`clock_wait_s`); the sim clock itself (the time,
the last sequence handled) is the `SimClock` it is given. It asks the supervisor whether a worker
is gone, has the watcher reap and report exits (the watcher's lock keeps that one at a time) and
publishes the ClockAck through the agent's publisher.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from datetime import datetime

from opentelemetry.trace import Tracer

from gfs.schemas.clock import ClockAck, ClockPhase, ClockTick
from gfs.schemas.topics import CLOCK_ACK_TOPIC
from gfs.services.node_agent.journal import Journal, WorkerEntry
from gfs.services.node_agent.publisher import AckPublisher
from gfs.services.node_agent.sim_clock import SimClock, epoch_to_utc, read_seen
from gfs.services.node_agent.watcher import WorkerWatcher
from gfs.services.node_agent.workers import WorkerSupervisor

log = logging.getLogger("gfs.services.node_agent.agent")

_CLOCK_POLL_S = 0.01
_CLOCK_ACK_ATTEMPTS = 3


class ClockTicks:
    """Handles this node's ClockTicks (module doc). `sim_clock` None (wall mode): ticks mean
    nothing. `clock_wait_s`: how long an ADVANCE waits for the workers before answering anyway."""

    def __init__(
        self,
        *,
        node: str,
        journal: Journal,
        sim_clock: SimClock | None,
        supervisor: WorkerSupervisor,
        watcher: WorkerWatcher,
        publisher: AckPublisher,
        tracer: Tracer,
        clock_wait_s: float,
    ) -> None:
        self.node = node
        self.journal = journal
        self.sim_clock = sim_clock
        self.supervisor = supervisor
        self.watcher = watcher
        self.publisher = publisher
        self.tracer = tracer
        self.clock_wait_s = clock_wait_s

    async def on_tick(self, tick: ClockTick) -> ClockAck | None:
        """Handle a ClockTick (topic mode); returns the ClockAck published, if one was.

        Only ADVANCE moves time; STATUS and PASS are other services' phases (nothing to do, no
        answer). A tick at or below the last handled sequence is a repeat and is ignored, and so is
        a tick of another clock (another driver sharing the topic)."""
        clock = self.sim_clock
        if clock is None or tick.clock != clock.name or not clock.is_new(tick.sequence):
            if clock is not None and clock.last_sequence is not None and tick.sequence < clock.last_sequence:
                log.warning("clock tick %d ignored: %d handled already", tick.sequence, clock.last_sequence)
            return None
        clock.handled(tick.sequence)
        if tick.phase is not ClockPhase.ADVANCE:
            return None
        return await self.advance(tick)

    async def advance(self, tick: ClockTick) -> ClockAck:
        """Move to `tick.at`: workers due by then exit, the others take their checkpoints; answer
        once each one is done (module doc). The ack lists the workers that exited by themselves
        (their WorkerExited published before it) and the earliest exit still ahead."""
        assert self.sim_clock is not None
        # The workers to hear from: those running before the clock moves. A bind handled while we
        # wait starts its worker at the new time already.
        watched = [w for w in self.journal.live_workers() if w.pid is not None]
        at = self.sim_clock.move_to(tick.at)
        with self.tracer.start_as_current_span(
            "agent.clock_advance",
            attributes={
                "gfs.node": self.node,
                "gfs.clock.sequence": tick.sequence,
                "gfs.workers": len(watched),
            },
        ):
            deadline = asyncio.get_running_loop().time() + self.clock_wait_s
            await self._until_seen(watched, at, deadline)
            await self._reap_and_report(watched, deadline)
            exited = tuple(
                f"{w.task_id}/{w.worker_index}"
                for w in sorted(watched, key=lambda w: (w.task_id, w.worker_index))
                if not w.live and w.evicting_command is None
            )
            ack = ClockAck(
                clock=tick.clock,
                component=f"node-agent/{self.node}",
                sequence=tick.sequence,
                at=tick.at,
                exited=exited,
                next_exit_at=self._next_exit_at(),
            )
            for attempt in range(1, _CLOCK_ACK_ATTEMPTS + 1):
                try:
                    await self.publisher.publish(CLOCK_ACK_TOPIC, ack, None)
                    break
                except Exception as exc:
                    log.warning("ClockAck %d not published (attempt %d): %r", tick.sequence, attempt, exc)
                    if attempt == _CLOCK_ACK_ATTEMPTS:
                        raise
                    await asyncio.sleep(0.2 * 2 ** (attempt - 1))
        log.info("clock at %s (tick %d): exited %s", tick.at.isoformat(), tick.sequence, list(exited) or "-")
        return ack

    def _saw(self, worker: WorkerEntry, at: float) -> bool:
        assert self.sim_clock is not None
        seen = read_seen(self.sim_clock.seen_file(worker.command_id, worker.worker_index))
        return seen is not None and seen.seen >= at

    async def _until_seen(self, workers: Sequence[WorkerEntry], at: float, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        pending = list(workers)
        while True:
            pending = [w for w in pending if not self.supervisor.has_ended(w) and not self._saw(w, at)]
            if not pending:
                return
            if loop.time() >= deadline:
                log.error(
                    "clock at %r: %d worker(s) neither exited nor saw it within %.0f s (answered anyway): %s",
                    at,
                    len(pending),
                    self.clock_wait_s,
                    ", ".join(f"{w.task_id}/{w.worker_index} pid {w.pid}" for w in pending[:10]),
                )
                return
            await asyncio.sleep(_CLOCK_POLL_S)

    async def _reap_and_report(self, workers: Sequence[WorkerEntry], deadline: float) -> None:
        """Reap the workers that ended (the watcher's path: journal, then WorkerExited) and wait
        until each of their WorkerExited is delivered, so the ClockAck never overtakes one."""
        loop = asyncio.get_running_loop()
        while True:
            await self.watcher.poll_workers()
            unreported = [w for w in workers if not w.live and not w.exit_acked]
            if not unreported:
                return
            if loop.time() >= deadline:
                log.error(
                    "clock tick answered before the exits of %s were published", [w.key for w in unreported]
                )
                return
            await asyncio.sleep(_CLOCK_POLL_S)

    def _next_exit_at(self) -> datetime | None:
        assert self.sim_clock is not None
        due: list[float] = []
        for worker in self.journal.live_workers():
            if worker.pid is None:
                continue
            seen = read_seen(self.sim_clock.seen_file(worker.command_id, worker.worker_index))
            if seen is not None and seen.exit_at is not None and math.isfinite(seen.exit_at):
                due.append(seen.exit_at)
        return epoch_to_utc(min(due)) if due else None
